#!/usr/bin/env python3
"""`analyze` of two checkouts against mtail, in interleaved rounds: for a VM whose CPU time moves by a third.

    python bench/rounds.py --file F [--profile realistic] [--rounds 6] [--python /usr/bin/python3] BEFORE AFTER

BEFORE and AFTER are checkouts (a `git archive REV | tar -x -C DIR` will do). Each round runs mtail, then
`python -m exporter analyze --format json F` from each checkout, back to back on one pinned core, so the three
share whatever the machine did that minute; the figure is the median over the rounds of mtail's CPU seconds
divided by each checkout's, next to the minimum and median CPU seconds of every contestant. Each checkout's
package is copied and compiled first (as installed: no run compiles a module). parse_bench.py measures one
checkout with the floor and the other readers; this compares two where only their ratio can be trusted.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from parse_bench import compiled_copy, mtail_program  # noqa: E402  (bench/ is not a package)


def cpu_seconds(argv: list[str], env: dict | None = None, cwd: Path | None = None) -> float:
    """user + sys CPU seconds of running argv to completion (stdout and stderr discarded)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--file", required=True, help="the log (genlog.py 1000000 F --seed 1 [--profile realistic])")
    ap.add_argument("--profile", choices=("bench", "realistic"), default="bench", help="picks the mtail program")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--python", default=sys.executable, help="the interpreter that runs the exporter")
    ap.add_argument("--cpu", default="0", help="the core every command is pinned to (taskset -c)")
    a = ap.parse_args(argv)
    if not shutil.which("mtail") or not shutil.which("taskset"):
        print("needs mtail and taskset (apt-get install mtail util-linux)", file=sys.stderr)
        return 2
    pin = ["taskset", "-c", a.cpu]
    mtail = [*pin, "mtail", "--one_shot", "--progs", str(mtail_program(a.profile)), "--logs", a.file,
             "--logtostderr"]
    cpu: dict[str, list[float]] = {"mtail": [], "before": [], "after": []}
    with tempfile.TemporaryDirectory(prefix="rounds_") as td:
        trees = {name: compiled_copy(Path(path), Path(td) / name, a.python)
                 for name, path in (("before", a.before), ("after", a.after))}
        for r in range(1, a.rounds + 1):
            cpu["mtail"].append(cpu_seconds(mtail))
            for name, tree in trees.items():
                env = {**os.environ, "PYTHONPATH": str(tree)}
                # run in the copy: `python -m` puts the working directory first on sys.path, so from a checkout's
                # root both contestants would import that checkout's exporter/
                cpu[name].append(cpu_seconds([*pin, a.python, "-m", "exporter", "analyze", "--format", "json",
                                              str(Path(a.file).resolve())], env, cwd=tree))
            print(f"round {r}: mtail {cpu['mtail'][-1]:.2f} s, before {cpu['before'][-1]:.2f} s, "
                  f"after {cpu['after'][-1]:.2f} s", file=sys.stderr)
    print(f"{a.file}, {a.rounds} rounds, {a.python}, pinned to CPU {a.cpu}; CPU s (user+sys):\n")
    print("| contestant | min CPU s | median CPU s | median of the rounds' mtail / it |")
    print("|---|---|---|---|")
    for name, xs in cpu.items():
        ratio = "" if name == "mtail" else \
            f"{statistics.median(m / x for m, x in zip(cpu['mtail'], xs)):.2f}x"
        print(f"| {name} | {min(xs):.2f} | {statistics.median(xs):.2f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
