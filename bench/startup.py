#!/usr/bin/env python3
"""Instructions of a CLI command's start-up, counted by valgrind: `analyze` (and `parse`) of a one-line log.

    python bench/startup.py [--root DIR] [--commands analyze,parse]

Each command runs under callgrind on a one-line generated log, and so does a bare interpreter (`python -c
pass`); the difference is what the command costs before and around its first line: imports, argument
parsing, building the engine, writing the report. Instructions, not seconds (see instructions.py). For where
it goes, `python -X importtime -m exporter analyze LOG --format json`.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from instructions import callgrind  # noqa: E402  (bench/ is not a package)

COMMANDS = {"analyze": ["analyze", "{log}", "--format", "json"], "parse": ["parse", "{log}"]}


def instructions(root: str, args: list[str], tmp: str) -> int:
    env = dict(os.environ, PYTHONPATH=root)
    env.pop("PYTHONDONTWRITEBYTECODE", None)    # an installed package has its bytecode compiled
    # once without valgrind first: bytecode caches written by this run would count otherwise
    subprocess.run([sys.executable, *args], capture_output=True, check=False, env=env, cwd=root)
    return callgrind(args, tmp, env=env, cwd=root)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=str(HERE.parent), help="the checkout to measure (default: this one)")
    ap.add_argument("--commands", default="analyze,parse", help="comma-separated: " + ", ".join(COMMANDS))
    a = ap.parse_args(argv)
    if not shutil.which("valgrind"):
        print("valgrind not installed (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(HERE))
    import genlog
    with tempfile.TemporaryDirectory(prefix="startup-") as tmp:
        log = Path(tmp) / "one.log"
        genlog.write(1, str(log), seed=1)
        bare = instructions(a.root, ["-c", "pass"], tmp)
        print(f"root: {a.root}; a bare interpreter: {bare:,} instructions")
        print("| command | instructions beyond a bare interpreter |")
        print("|---|---|")
        for name in a.commands.split(","):
            args = ["-m", "exporter", *(x.format(log=log) for x in COMMANDS[name])]
            print(f"| {name} | {instructions(a.root, args, tmp) - bare:,} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
