#!/usr/bin/env python3
"""Instructions per log line of the exporter's bulk readers, counted by valgrind (callgrind).

    python bench/instructions.py [--lines 30000] [--seed 1] [--root DIR] [--layout sglang|custom]
                                 [--readers parser,analyze] [--profile bench|realistic] [--tp N] [--leaders-only]
                                 [--drop TEXT]

Wall-clock figures on a shared VM move by 20-50 % from run to run; instruction counts do not (the same input
gives the same count to a few parts in a thousand), so this is the figure to compare two commits with
(`--root` points at another checkout). Each reader runs twice, on the first `--lines` lines of a generated log
and on its first 1,000; the difference divided by the difference in lines takes out interpreter start-up and
imports. `--drop TEXT` also runs each reader on the big log without the lines that contain TEXT (say ': obj='
for request logs): the difference over those lines is what one of them costs, evaluations it changes included
(without access lines the error judges have nothing to sum). Needs valgrind (`apt-get install -y valgrind`).
Slow: callgrind runs ~50x slower than native.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import genlog  # noqa: E402  (bench/ is not a package)

SMALL = 1000

READERS = {
    "read_blocks (lines only)": "from exporter.ingest.follower import read_blocks\nfor _ in read_blocks(LOG): pass",
    "parser (iter_file_items)": "try:\n    from exporter.ingest.pipeline import iter_file_items as read\n"
                                "except ImportError:  # a checkout before it: the Event reader\n"
                                "    from exporter.ingest.pipeline import iter_file_events as read\n"
                                "for _ in read(LOG): pass",
    "parse (JSON Lines)": "import os, sys\nsys.stdout = open(os.devnull, 'w')\n"
                          "from exporter.cli import main\nmain(['parse', LOG])",
    "analyze (JSON)": "from exporter.report.analyze import analyze\nfrom exporter.config import Config\n"
                      "analyze([LOG], Config(), progress=False)",
}


def callgrind(args: list[str], tmp: str, env: dict | None = None, cwd: str | None = None) -> int:
    """Instructions of `python *args` under valgrind's callgrind (also used by startup.py)."""
    env = dict(os.environ if env is None else env)
    env.setdefault("PYTHONHASHSEED", "0")      # str hashes move dict and set costs by up to 10 % between runs
    out = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out", sys.executable,
                          *args], capture_output=True, text=True, check=False, env=env, cwd=cwd)
    m = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or m is None:
        raise SystemExit(f"callgrind failed:\n{out.stderr[-2000:]}")
    return int(m.group(1))


def instructions(root: str, code: str, log: Path, tmp: str) -> int:
    return callgrind(["-c", f"import sys\nsys.path.insert(0, {root!r})\nLOG = {str(log)!r}\n{code}\n"], tmp)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    genlog.add_log_arguments(ap, lines=30000)
    ap.add_argument("--root", default=str(HERE.parent), help="the checkout to measure (default: this one)")
    ap.add_argument("--readers", default="",
                    help="only the readers whose names hold one of these words (comma-separated)")
    ap.add_argument("--drop", default="", help="also: what one line containing this text costs (see above)")
    a = ap.parse_args(argv)
    if not shutil.which("valgrind"):
        print("valgrind not installed (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    if a.lines <= SMALL:
        ap.error(f"--lines must be more than {SMALL}")
    with tempfile.TemporaryDirectory(prefix="instructions-") as tmp:
        big, small = Path(tmp) / "big.log", Path(tmp) / "small.log"
        genlog.write_log(a, str(big))
        with open(big, encoding="utf-8") as src, open(small, "w", encoding="utf-8") as dst:
            dst.writelines(line for _, line in zip(range(SMALL), src))
        dropped = 0
        if a.drop:
            kept = Path(tmp) / "kept.log"
            with open(big, encoding="utf-8") as src, open(kept, "w", encoding="utf-8") as dst:
                for line in src:
                    if a.drop in line:
                        dropped += 1
                    else:
                        dst.write(line)
            if not dropped:
                ap.error(f"no line of the log contains {a.drop!r}")
        print(f"root: {a.root}; log: {genlog.log_description(a)}")
        print("| reader | instructions per line |")
        print("|---|---|")
        wanted = [w for w in a.readers.split(",") if w]
        for name, code in READERS.items():
            if wanted and not any(w in name for w in wanted):
                continue
            whole = instructions(a.root, code, big, tmp)
            per_line = (whole - instructions(a.root, code, small, tmp)) / (a.lines - SMALL)
            print(f"| {name} | {per_line:,.0f} |", flush=True)
            if dropped:
                each = (whole - instructions(a.root, code, kept, tmp)) / dropped
                print(f"|   of which each of the {dropped:,} lines containing {a.drop!r} | {each:,.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
