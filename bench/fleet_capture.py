"""Capture one real sidecar's /metrics and its simulated SGLang's /metrics for a tp x dp layout (the fleet
benchmark's input, and the series budget of docs/metrics.md).

    python bench/fleet_capture.py --tp 1 --dp 1 --out bench/out/fleet/tp1
    python bench/fleet_capture.py --tp 8 --dp 8 --out bench/out/fleet/dp8tp8 [--no-per-rank]

Runs `sglang-exporter simulate` (the retraction storm scenario with the layout replaced, whole log at once,
its /metrics served on 127.0.0.1) and `sglang-exporter serve` on that log and URL, waits (with a deadline) until
the sidecar has judged the signals and scraped SGLang, writes sidecar.prom and sglang.prom, prints the series
counts per family, and stops both processes.
"""
from __future__ import annotations

import argparse
import collections
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXE = [sys.executable, "-m", "exporter"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def series_by_family(text: str) -> collections.Counter:
    """Series per family of an exposition (histogram parts counted under the family)."""
    types = {}
    counts: collections.Counter = collections.Counter()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            base = next((name[: -len(s)] for s in ("_bucket", "_sum", "_count", "_total", "_created")
                         if name.endswith(s) and name[: -len(s)] in types), name)
            if not name.endswith("_created"):
                counts[base] += 1
    return counts


def wait_until(predicate, deadline_s: float, what: str):
    end = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < end:
        try:
            last = predicate()
            if last:
                return last
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}" + (f"; last: {last!r:.300}" if last is not None else ""))


def capture(tp: int, dp: int, out: Path, per_rank: bool) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    scenario = yaml.safe_load((ROOT / "exporter/scenarios/retraction_storm.yaml").read_text())
    scenario["layout"] = {"tp": tp, "dp": dp}
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        sc = Path(tmp) / "scenario.yaml"
        sc.write_text(yaml.safe_dump(scenario))
        log = Path(tmp) / "sglang.log"
        sim_port, side_port = free_port(), free_port()
        cfg = Path(tmp) / "config.yaml"
        cfg.write_text(f"per_rank_series: {'true' if per_rank else 'false'}\n")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        try:
            procs.append(subprocess.Popen([*EXE, "simulate", "--scenario", str(sc), "--instant", "--log-file",
                                           str(log), "--metrics-listen", f"127.0.0.1:{sim_port}"],
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            wait_until(lambda: "sglang:" in get(f"http://127.0.0.1:{sim_port}/metrics"), 60, "the simulator")
            procs.append(subprocess.Popen([*EXE, "serve", "--log-file", str(log), "--from-start", "--config",
                                           str(cfg), "--sglang-url", f"http://127.0.0.1:{sim_port}",
                                           "--listen", f"127.0.0.1:{side_port}"],
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            url = f"http://127.0.0.1:{side_port}/metrics"

            def judged():
                text = get(url)
                storm = 'signal_firing{severity="critical",signal="retraction_storm"} 1.0' in text
                return text if storm and 'source_up{source="sglang_metrics"} 1.0' in text else None
            text = wait_until(judged, 40, "the sidecar's verdict")
            (out / "sidecar.prom").write_text(text)
            (out / "sglang.prom").write_text(get(f"http://127.0.0.1:{sim_port}/metrics"))
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
    side = series_by_family((out / "sidecar.prom").read_text())
    sglang = series_by_family((out / "sglang.prom").read_text())
    return {"sidecar": side, "sglang": sglang}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True, help="directory for sidecar.prom and sglang.prom")
    ap.add_argument("--no-per-rank", action="store_true", help="capture with per_rank_series: false")
    args = ap.parse_args()
    counts = capture(args.tp, args.dp, args.out, not args.no_per_rank)
    for source, c in counts.items():
        print(f"{source}: {sum(c.values())} series")
        for name, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {n:5d}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
