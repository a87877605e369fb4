"""Lines counted against lines written when the log hand-off rotates fast and `serve` is killed meanwhile.

The hand-off (exporter/ingest/handoff.py) runs a writer of N retraction lines and rotates its file by rename
every --max-bytes, keeping --backups copies; `serve --log-file 'DIR/sglang.log*' --positions-file` follows it.
With --kill-after, serve is SIGKILLed that many seconds after the writer started and started again --down
seconds later. At the end the script prints how many retractions `sglang_exporter_retractions_total` counts.
Counted < written means lines lost (files rotated away unread, or deleted by the hand-off before anyone
could read them); counted > written would be lines read twice.

    python bench/rotation_loss.py --lines 3000 --max-bytes 64KiB --kill-after 7.5 --down 3
    python bench/rotation_loss.py --lines 30000 --max-bytes 32KiB --pace 0       # no kill, full speed
    python bench/rotation_loss.py --root OLD_TREE ...                             # another checkout

Real processes on 127.0.0.1; every one is killed at the end.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WRITER = """import sys, time
from datetime import datetime, timezone
pace = float(sys.argv[2])
for i in range(int(sys.argv[1])):
    t = datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M:%S')
    print(f'[{t} TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, '
          '#new_token_ratio: 0.7000 -> 0.8000 ' + 'x' * 100, flush=True)
    if pace:
        time.sleep(pace)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def counted(port: int) -> float | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("sglang_exporter_retractions_total "):
                    return float(line.split()[1])
    except OSError:
        return None
    return None


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while (value := predicate()) is None or value is False:
        if time.monotonic() > deadline:
            raise SystemExit(f"rotation_loss: timed out waiting for {what}")
        time.sleep(0.1)
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=3000, help="retraction lines the writer prints")
    ap.add_argument("--pace", type=float, default=0.005, help="seconds between two lines (0: full speed)")
    ap.add_argument("--max-bytes", default="64KiB", help="the hand-off's rotation size")
    ap.add_argument("--backups", type=int, default=9, help="rotated copies the hand-off keeps")
    ap.add_argument("--kill-after", type=float, default=-1, help="SIGKILL serve this many seconds in (< 0: never)")
    ap.add_argument("--down", type=float, default=3.0, help="seconds serve stays down after the kill")
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose exporter runs")
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="rotation-loss-"))
    logs = d / "logs"
    logs.mkdir()
    (d / "writer.py").write_text(WRITER)
    port = free_port()
    err = open(d / "serve.err", "ab")  # noqa: SIM115 - both serve processes append to it

    def serve() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "exporter", "serve", "--log-file", f"{logs}/sglang.log*",
                                 "--positions-file", str(d / "positions.json"), "--listen", f"127.0.0.1:{port}"],
                                cwd=args.root, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)

    procs: list[subprocess.Popen] = []
    try:
        procs.append(serve())
        wait_for(lambda: counted(port), 60, "serve to answer")
        handoff = subprocess.Popen([sys.executable, f"{args.root}/exporter/ingest/handoff.py",
                                    f"--file={logs}/sglang.log", f"--max-bytes={args.max_bytes}",
                                    f"--backups={args.backups}", "--no-copy", "--", sys.executable,
                                    str(d / "writer.py"), str(args.lines), str(args.pace)], start_new_session=True)
        procs.append(handoff)
        if args.kill_after >= 0:
            time.sleep(args.kill_after)             # the schedule of the measurement, not a wait for a condition
            os.killpg(procs[0].pid, signal.SIGKILL)
            procs[0].wait()
            time.sleep(args.down)
            procs[0] = serve()
        handoff.wait(timeout=600)
        last, same = None, 0
        while same < 4:                             # settled: four equal readings half a second apart
            value = counted(port)
            same = same + 1 if value == last and value is not None else 0
            last = value
            time.sleep(0.5)
        print(f"written {args.lines}, counted {last:.0f} ({args.max_bytes} files, {args.backups} backups, "
              f"pace {args.pace} s, kill after {args.kill_after} s, down {args.down} s; root {args.root})")
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        err.close()


if __name__ == "__main__":
    main()
