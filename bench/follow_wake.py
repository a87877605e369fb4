#!/usr/bin/env python3
"""What waking the follower on every append costs, against timer polls, at a given write rate.

    python bench/follow_wake.py [--rate 1000] [--seconds 20] [--poll-interval 0.25] [--min-interval 0.1]

For each configuration, in a fresh child process: a writer subprocess appends SGLang-like lines to a file
at --rate lines/s (one write() per line, in 10 ms batches, as SGLang's logging does) and renames the file
away and re-creates it halfway (logrotate `create`, writer reopening 100 ms later); the child runs
`Follower.run` for --seconds and reports its own CPU time (all its threads: watchdog's observer included),
the number of polls, and whether every line arrived exactly once. Configurations:

  timer        wake_on_append=False, poll every --poll-interval (what `serve` runs)
  inotify      wake_on_append=True: woken by each modify event, polls at least --min-interval apart

Prints one line per configuration; exits non-zero only if lines were lost or repeated.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time

WRITER = r"""
import os, sys, time
path, rate, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
n = int(rate * seconds)
fh = open(path, "ab", buffering=0)
start = time.monotonic()
reopen_at = None
for i in range(n):
    if i == n // 2:
        os.rename(path, path + ".1")
        open(path, "ab").close()
        reopen_at = i + int(rate * 0.1)
    if reopen_at is not None and i >= reopen_at:
        fh.close(); fh = open(path, "ab", buffering=0); reopen_at = None
    fh.write(b"[2025-08-11 17:17:03 TP0] Decode batch. #running-req: 12, #token: 3456, token usage: 0.42, "
             b"cuda graph: True, gen throughput (token/s): 987.65, #queue-req: %d\n" % i)
    if i % max(1, int(rate / 100)) == 0:
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
print(n)
"""


def child(args) -> None:
    from exporter.ingest.follower import Follower

    d = tempfile.mkdtemp()
    path = os.path.join(d, "sglang.log")
    open(path, "ab").close()
    f = Follower([path])
    f.join()
    polls = [0]
    real_poll = f.poll_blocks

    def counting():
        polls[0] += 1
        return real_poll()

    f.poll_blocks = counting
    got: list[int] = []

    def on_lines(blocks):
        for b in blocks:
            got.extend(int(t.rsplit(" ", 1)[1]) for t in b.texts)

    stop = threading.Event()
    t = threading.Thread(target=f.run, args=(on_lines, stop, args.poll_interval),
                         kwargs={"min_interval": args.min_interval, "wake_on_append": args.mode == "inotify",
                                 "blocks": True})
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t.start()
    w = subprocess.run([sys.executable, "-c", WRITER, path, str(args.rate), str(args.seconds)],
                       capture_output=True, text=True, check=True)
    n = int(w.stdout)
    deadline = time.monotonic() + 10
    while len(got) < n and time.monotonic() < deadline:
        stop.wait(0.05)
    stop.set()
    t.join()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(json.dumps({"mode": args.mode, "follower_mode": f.mode, "cpu_s": cpu, "lines": n,
                      "polls": polls[0], "exact": got == list(range(n))}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=1000)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--poll-interval", type=float, default=0.25)
    ap.add_argument("--min-interval", type=float, default=0.1)
    ap.add_argument("--mode", choices=("timer", "inotify"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.mode:
        child(args)
        return 0
    ok = True
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for mode in ("timer", "inotify"):
        out = subprocess.run([sys.executable, __file__, "--mode", mode, "--rate", str(args.rate),
                              "--seconds", str(args.seconds), "--poll-interval", str(args.poll_interval),
                              "--min-interval", str(args.min_interval)],
                             capture_output=True, text=True, cwd=root, env={**os.environ, "PYTHONPATH": root})
        if out.returncode:
            print(out.stderr, file=sys.stderr)
            return 1
        r = json.loads(out.stdout)
        ok &= r["exact"]
        print(f"{mode:8s} ({r['follower_mode']}): {r['cpu_s']:.2f} s CPU for {args.seconds:g} s "
              f"= {100 * r['cpu_s'] / args.seconds:.2f} % of a core, {r['polls']} polls, "
              f"{r['lines']} lines, every line once: {r['exact']}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
