"""`sglang-exporter demo`: a newcomer sees a signal change within a minute, and the demo stops cleanly."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import free_port, wait_until

from exporter.cli.demo import then_idle
from exporter.config import Config
from exporter.sidecar.run import Sidecar
from exporter.simulate import Simulator, load_scenario, serve_metrics

ROOT = Path(__file__).resolve().parents[1]


def test_demo_fires_retraction_storm_within_a_minute(tmp_path):
    port = free_port()
    out = open(tmp_path / "demo.out", "w")  # noqa: SIM115 - closed in finally
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "demo", "--listen", f"127.0.0.1:{port}",
                             "--speed", "30", "--duration", "60", "--scenario", "retraction_storm"],
                            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
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
    assert not list(tmp_path.glob("sglang-exporter-demo-*")), "the demo left its temporary folder behind"


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM])
def test_demo_removes_its_temporary_folder_when_stopped(tmp_path, how):
    """Ctrl-C (SIGINT) or SIGTERM while it runs: exit 0, and the folder holding the simulated log is gone."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "demo", "--listen", f"127.0.0.1:{port}"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        wait_until(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2).status == 200,
                   timeout=30, interval=0.1, what="the demo serving")
        assert list(tmp_path.glob("sglang-exporter-demo-*/sglang.log"))     # the folder exists while it runs
        proc.send_signal(how)
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 0, out
    assert not list(tmp_path.glob("sglang-exporter-demo-*")), out


def _stalled_after_the_scenario(tmp_path, scenario) -> bool | None:
    """Feed a sidecar everything the simulator writes and serves up to 5 s past the scenario's story, then
    judge `stalled` two minutes later (arrival time, the sidecar's injected clock)."""
    story = load_scenario("retraction_storm").duration
    sim = Simulator(scenario, seed=1)
    tmp_path.mkdir()
    log = tmp_path / "sglang.log"
    log.write_text("")
    metrics = serve_metrics(sim, "127.0.0.1", 0)
    now = [1_700_000_000.0]
    sc = Sidecar(Config(log_files=(str(log),), sglang_url=f"http://127.0.0.1:{metrics.server_address[1]}",
                        scrape_interval=15.0, scrape_timeout=5.0), clock=lambda: now[0])
    try:
        sc.poll_logs_once()
        with open(log, "a", encoding="utf-8") as fh:
            fh.writelines(line + "\n" for line in sim.lines_until(story + 5))
        sc.poll_logs_once()
        sc.scrape_once()
        now[0] += 120.0
        sc.scrape_once()
        sc.poll_logs_once()
        return sc.view().snapshot.judgements["stalled"].firing
    finally:
        sc.shutdown()
        metrics.shutdown()
        metrics.server_close()


def test_no_stalled_page_after_the_demo_scenario_ends(tmp_path):
    """The demo's simulated SGLang drains its queue when the scenario is over: an idle server, not a stalled
    one. The scenario as written ends with requests queued and then falls silent, which does page."""
    scenario = load_scenario("retraction_storm")
    assert _stalled_after_the_scenario(tmp_path / "plain", scenario) is True
    assert _stalled_after_the_scenario(tmp_path / "demo", then_idle(scenario)) is False


def test_setup_prints_no_warning_block_and_a_second_run_nothing(tmp_path):
    """scripts/setup, which scripts/demo runs first, in a fresh virtualenv: no setuptools warning block; run
    again, it prints nothing and installs nothing; the exporter it installed runs."""
    env = {**os.environ, "VENV_DIR": str(tmp_path / "venv")}
    first = subprocess.run(["bash", "scripts/setup"], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=600)
    assert first.returncode == 0, first.stderr
    for needle in ("BuildBackendWarning", "Editable installation", "********"):
        assert needle not in first.stdout + first.stderr, first.stderr
    again = subprocess.run(["bash", "scripts/setup"], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=60)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    version = subprocess.run([str(tmp_path / "venv" / "bin" / "sglang-exporter"), "--version"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("sglang-exporter "), version.stderr
