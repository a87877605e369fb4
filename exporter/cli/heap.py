"""The C heap's settings for the commands that read whole files (`analyze`, `parse`): glibc keeps the memory
one block of lines frees for the next block instead of handing it back to the kernel each time.

A block (256 KiB read, decoded, split, parsed) takes about 1 MiB of C heap and frees it. glibc's defaults
return freed memory at the heap's top to the kernel once more than 128 KiB of it is free, so every block
grew the heap by 1 MiB and shrank it again: ~150 page faults a block, 150,000 on a 1,000,000-line log. With
the settings below a 1M-line log (`genlog.py --profile realistic`) makes 4,600 faults instead of 151,000, and
`analyze --format json` of it takes 4.0 CPU s instead of 4.7 (-15 %; Debian python3, best of 4 each,
interleaved; the sys time alone went from 0.5 s to 0.1 s). Reading smaller blocks (32 KiB) also avoids the
faults but costs more per line than it saves.

The values: freed memory up to 2 MiB stays with the process (twice a block's need), and allocations under
512 KiB come from the heap, not from a mapping of their own (a block's read buffer and its decoded text are
256 KiB each). Setting either turns off glibc's own adjustment of both, so both are set. `serve` does not
call this: it reads small appends, and its memory limit matters more than this cost.
"""
from __future__ import annotations

import os

M_TRIM_THRESHOLD = -1       # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
TRIM_BYTES = 2 << 20
MMAP_BYTES = 512 << 10
# below this many bytes on disk, the faults cost less than loading ctypes (~5 ms); a compressed file counts
# its compressed size, so it is worth it from a smaller log
WORTH_BYTES = 4 << 20


def keep_freed_heap(paths: list[str]) -> bool:
    """Set glibc's heap thresholds before `paths` are read whole ("-": standard input, of unknown size). True
    when they were set; False when the files are small or the C library has no mallopt (musl, macOS, Windows):
    nothing else changes then."""
    if "-" not in paths and sum(os.path.getsize(p) for p in paths if os.path.isfile(p)) < WORTH_BYTES:
        return False
    try:
        import ctypes
        mallopt = ctypes.CDLL(None).mallopt
    except (ImportError, OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_BYTES))
