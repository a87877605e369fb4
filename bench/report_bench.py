#!/usr/bin/env python3
"""Time, peak memory and size of `analyze --format html` on a large generated log (issue 8's figure).

    python bench/report_bench.py [--lines 1000000] [--seed 1]

Prints one table row; exits non-zero only if the report cannot be produced.
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="report-bench-") as tmp:
        log, out = Path(tmp) / "sglang.log", Path(tmp) / "report.html"
        subprocess.run([sys.executable, str(HERE / "genlog.py"), str(a.lines), str(log), "--seed", str(a.seed)],
                       check=True, stdout=subprocess.DEVNULL)
        cmd = [sys.executable, "-m", "exporter", "analyze", str(log), "--format", "html", "-o", str(out), "-q"]
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=HERE.parent, stderr=subprocess.PIPE, text=True)
        _, status, usage = os.wait4(proc.pid, 0)     # this child's own peak RSS, not genlog's
        seconds = time.monotonic() - start
        if os.waitstatus_to_exitcode(status) != 0:
            print(proc.stderr.read(), file=sys.stderr)
            return 1
        peak_mb = usage.ru_maxrss / 1024   # Linux reports KiB
        size_mb = log.stat().st_size / 1e6
        print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
              f"Python {platform.python_version()}")
        print("| log lines | log MB | seconds | lines/s | peak RSS MB | report KB |")
        print("|---|---|---|---|---|---|")
        print(f"| {a.lines:,} | {size_mb:.1f} | {seconds:.1f} | {a.lines / seconds:,.0f} | {peak_mb:.1f} | "
              f"{out.stat().st_size / 1024:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
