"""History at start-up: where a log's latest SGLang start-up begins, and where the log's clock sits in real time.

A sidecar that (re)starts next to a running SGLang has missed the start-up lines (server_args, capacity,
headroom) that several signals need. `find_startup` searches back from the end of a log for the latest
`server_args` dump, so the sidecar can replay from there. Replayed lines must land where they happened, not
at the instant they were read (300 retractions over three hours are not a storm now): `clock_offset` maps the
log's own timestamps (local time, no zone, read as UTC by the grammar) to real time from the file's mtime, the
moment its last line was written.
"""
from __future__ import annotations

import os
import re
import time

from exporter.ingest.events import as_event
from exporter.ingest.lines import Block
from exporter.ingest.pipeline import SourceParser

DEFAULT_READBACK_BYTES = 256 << 20
_CHUNK = 1 << 20
_SERVER_ARGS = re.compile(rb"server_args=(?:ServerArgs\(|\{)")
_TAIL_BYTES = 64 << 10          # the end of a log read to find its last timestamp
_ZONE_STEP = 900.0              # UTC offsets are multiples of 15 minutes
_ZONE_SLACK = 120.0             # how far from such a multiple an estimate may be and still be taken as a zone


def _line_start(fd: int, pos: int, floor: int) -> int:
    """Offset of the start of the line holding byte `pos` (not before `floor`)."""
    while pos > floor:
        lo = max(floor, pos - 4096)
        chunk = os.pread(fd, pos - lo, lo)
        j = chunk.rfind(b"\n")
        if j >= 0:
            return lo + j + 1
        pos = lo
    return floor


def _is_server_args(path: str, fd: int, start: int, max_line_bytes: int) -> bool:
    """The line at `start` is SGLang's own server_args record (not a prompt that quotes one)."""
    raw = os.pread(fd, max_line_bytes, start)
    line = raw.split(b"\n", 1)[0].decode("utf-8", "replace")
    sp = SourceParser(path)
    items = sp.feed_block_items(Block(path, 1, [line])) + sp.flush()
    return any(as_event(it).kind == "server_args" for it in items)


def find_startup(path: str, end: int, max_bytes: int = DEFAULT_READBACK_BYTES,
                 max_line_bytes: int = 1 << 20) -> int | None:
    """Byte offset of the latest server_args line that starts before `end`, searching at most `max_bytes`
    back; None when there is none in reach (or the file cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        floor = max(0, end - max_bytes)
        hi = end
        overlap = 32
        while hi > floor:
            lo = max(floor, hi - _CHUNK)
            chunk = os.pread(fd, min(hi + overlap, end) - lo, lo)
            for m in reversed(list(_SERVER_ARGS.finditer(chunk))):
                start = _line_start(fd, lo + m.start(), floor)
                if start < end and _is_server_args(path, fd, start, max_line_bytes):
                    return start
            hi = lo
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


def rotated_siblings(path: str) -> list[str]:
    """Files rotated away from `path` by rename (`x.log.1`, `x.log-20250101`, kubelet's `0.log.20250101-...`),
    newest first; compressed ones are skipped (their bytes are not lines)."""
    directory, base = os.path.split(os.path.abspath(path))
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return []
    out = []
    for name in names:
        if name == base or not name.startswith(base) or name[len(base)] not in ".-_":
            continue
        if name.endswith((".gz", ".bz2", ".xz", ".zst", ".zip", ".tmp")):
            continue
        full = os.path.join(directory, name)
        try:
            st = os.stat(full)
        except OSError:
            continue
        if os.path.isfile(full):
            out.append((st.st_mtime_ns, full))
    return [p for _, p in sorted(out, reverse=True)]


def history(path: str, end: int, max_bytes: int = DEFAULT_READBACK_BYTES,
            max_line_bytes: int = 1 << 20) -> list[tuple[str, int, int]]:
    """The byte ranges to replay, oldest first, from SGLang's latest start-up up to `end` of `path`: within
    `path` when the start-up is there, else reaching back into the files rotated away from it (a start-up
    followed by more than one file's worth of lines), never more than `max_bytes` in all. With no start-up in
    reach (a log that lost its head, a logging set-up that drops the server_args line), the whole of `path`
    when it fits in `max_bytes`: its per-rank start-up lines (capacity, memory) and recent windows are still
    worth having, and replayed on the log's clock they cannot raise a page. Empty otherwise."""
    first = find_startup(path, end, max_bytes, max_line_bytes)
    if first is not None:
        return [(path, first, end)]
    ranges = [(path, 0, end)]
    budget = max_bytes - end
    for sib in rotated_siblings(path):
        if budget <= 0:
            break
        try:
            size = os.path.getsize(sib)
        except OSError:
            break
        first = find_startup(sib, size, budget, max_line_bytes)
        if first is not None:
            return [(sib, first, size), *ranges]
        ranges.insert(0, (sib, 0, size))
        budget -= size
    return [(path, 0, end)] if 0 < end <= max_bytes else []


def last_timestamp(path: str, end: int) -> float | None:
    """The latest log timestamp among the lines that end before `end` (read from the file's last 64 KiB)."""
    try:
        with open(path, "rb") as fh:
            lo = max(0, end - _TAIL_BYTES)
            fh.seek(lo)
            data = fh.read(end - lo)
    except OSError:
        return None
    if lo > 0:
        data = data[data.find(b"\n") + 1:]          # skip the partial first line
    latest = None
    sp = SourceParser(path)
    texts = data.decode("utf-8", "replace").split("\n")
    for it in sp.feed_block_items(Block(path, 1, texts)) + sp.flush():
        ts = it[2] if it.__class__ is tuple else it.ts
        if ts is not None and (latest is None or ts > latest):
            latest = ts
    return latest


def clock_offset(path: str, end: int, now: float | None = None) -> float | None:
    """Seconds to add to the log's timestamps to get the reader's time; None when the log has no timestamps.

    The file's mtime is when its last line was written. The difference to that line's own timestamp is the
    log clock's zone (plus a few seconds of delay): snapped to the nearest quarter hour when it is that close
    to one, taken as measured otherwise (a clock that is simply off). `now` is the reader's clock reading:
    the file's age is measured in real time and counted back from it (a reader whose clock is not the wall
    clock, such as a test's, gets offsets on its own clock)."""
    ts = last_timestamp(path, end)
    if ts is None:
        return None
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    if now is not None:
        mtime = now - (time.time() - mtime)
    diff = mtime - ts
    zone = round(diff / _ZONE_STEP) * _ZONE_STEP
    return zone if abs(diff - zone) <= _ZONE_SLACK else diff


def complete_end(path: str) -> tuple[int, int, int] | None:
    """(size, dev, ino) of a file with size cut back to just after its last newline: where history ends and
    following starts (an unfinished last line is read whole once it is finished)."""
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            size = st.st_size
            back = min(size, 1 << 20)
            fh.seek(size - back)
            tail = fh.read(back)
    except OSError:
        return None
    j = tail.rfind(b"\n")
    end = size - back + j + 1 if j >= 0 else (0 if back == size else size)
    return end, st.st_dev, st.st_ino
