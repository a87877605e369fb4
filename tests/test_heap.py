"""The bulk commands' C heap settings (cli/heap.py): set for big inputs and standard input where the C library
has mallopt (glibc), never for small files, and harmless where there is none. What they buy is measured by
the benchmarks (bench/README.md), not here."""
from __future__ import annotations

import json
import platform
import subprocess
import sys

from exporter.cli.heap import WORTH_BYTES, keep_freed_heap

GLIBC = platform.libc_ver()[0] == "glibc"

PROBE = """import json, sys
from exporter.cli.heap import keep_freed_heap
print(json.dumps([keep_freed_heap(sys.argv[1:]), "ctypes" in sys.modules]))
"""


def probe(*paths: str) -> tuple[bool, bool]:
    """keep_freed_heap(paths) in a fresh interpreter: (its answer, whether ctypes got imported)."""
    out = subprocess.run([sys.executable, "-c", PROBE, *paths], capture_output=True, text=True, timeout=60,
                         check=True)
    answer, loaded = json.loads(out.stdout)
    return answer, loaded


def test_a_small_log_leaves_the_heap_alone_and_loads_nothing(tmp_path):
    log = tmp_path / "small.log"
    log.write_bytes(b"x" * (WORTH_BYTES - 1))
    assert probe(str(log)) == (False, False)
    assert keep_freed_heap([str(tmp_path / "missing.log")]) is False     # (the command reports a missing file)


def test_a_big_log_and_standard_input_set_it_where_glibc_runs(tmp_path):
    big = tmp_path / "big.log"
    with open(big, "wb") as fh:
        fh.truncate(WORTH_BYTES)         # sparse: only the size is read
    assert probe(str(big)) == (GLIBC, True)
    assert probe("-") == (GLIBC, True)
    # two files count together
    half = tmp_path / "half.log"
    with open(half, "wb") as fh:
        fh.truncate(WORTH_BYTES // 2)
    assert probe(str(half), str(half))[0] is GLIBC
