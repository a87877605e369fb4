"""`sglang-exporter demo`: a newcomer sees a signal change within a minute, and the demo stops cleanly."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from helpers import free_port, wait_until

ROOT = Path(__file__).resolve().parents[1]


def test_demo_fires_retraction_storm_within_a_minute(tmp_path):
    port = free_port()
    out = open(tmp_path / "demo.out", "w")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "demo", "--listen", f"127.0.0.1:{port}",
                             "--speed", "30", "--duration", "60", "--scenario", "retraction_storm"],
                            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/api/v1/signals"

    def storm_state():
        assert proc.poll() is None, (tmp_path / "demo.out").read_text()
        with urllib.request.urlopen(url, timeout=2) as r:
            doc = json.loads(r.read())
        return next((s for s in doc["signals"] if s["id"] == "retraction_storm"), None)

    try:
        t0 = time.monotonic()
        # the signal is judged (known) before it fires: the newcomer sees it change
        first = wait_until(storm_state, timeout=30, interval=0.2, what="the demo serving /api/v1/signals")
        assert first["state"] in ("ok", "unknown", "firing")
        fired = wait_until(lambda: (s := storm_state()) and s["state"] == "firing" and s,
                           timeout=max(1.0, 60 - (time.monotonic() - t0)), interval=0.5,
                           what="retraction_storm firing in the demo")
        assert time.monotonic() - t0 <= 60
        assert fired["value"] >= 10, fired
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, (tmp_path / "demo.out").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        out.close()
    text = (tmp_path / "demo.out").read_text()
    assert "Traceback" not in text, text
    assert "retraction_storm" in text    # the status line shows the change too
