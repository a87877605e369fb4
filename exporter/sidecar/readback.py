"""History at start-up: where a log's latest SGLang start-up begins, and where the log's clock sits in real time.

A sidecar that (re)starts next to a running SGLang has missed the start-up lines (server_args, capacity,
headroom) that several signals need. `find_startup` searches back from the end of a log for the latest
`server_args` dump, so the sidecar can replay from there. Replayed lines must land where they happened, not
at the instant they were read (300 retractions over three hours are not a storm now): `clock_map` maps the
log's own timestamps (local time, no zone, read as UTC by the grammar) to real time from the file's mtime, the
moment its last line was written. A log's clock can step (a DST fall-back, an NTP correction): the history is
cut into stretches where the clock goes back, and each stretch is placed by itself, ending where the next one
begins, so an hour replayed twice on the log's clock is not an hour of events piled onto "now".
"""
from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable

from exporter.ingest.events import as_event
from exporter.ingest.lines import Block, read_range
from exporter.ingest.pipeline import SourceParser
from exporter.ingest.rotation import copies_of

DEFAULT_READBACK_BYTES = 256 << 20
_CHUNK = 1 << 20
_SERVER_ARGS = re.compile(rb"server_args=(?:ServerArgs\(|\{)")
TAIL_BYTES = 64 << 10          # the end of a log a clock is mapped over when nothing else of it is replayed
_ZONE_STEP = 900.0              # UTC offsets are multiples of 15 minutes
_ZONE_SLACK = 120.0             # how far from such a multiple an estimate may be and still be taken as a zone
# how far a log's clock may go back between two lines before it is a clock step (DST fall-back, NTP step) and
# not lines of several ranks or processes written a little out of order
CLOCK_STEP = 60.0


def line_start(fd: int, pos: int, floor: int) -> int:
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
                start = line_start(fd, lo + m.start(), floor)
                if start < end and _is_server_args(path, fd, start, max_line_bytes):
                    return start
            hi = lo
        return None
    except OSError:
        return None
    finally:
        os.close(fd)


def rotated_away(path: str) -> list[str]:
    """Files rotated away from `path` by rename (`x.log.1`, `x.log-20250101`, kubelet's `0.log.20250101-...`),
    newest first: rotation.copies_of without temporary files. Compressed ones are left out there (their bytes
    are not lines)."""
    return [p for p in copies_of(path) if not p.endswith(".tmp")]


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
    for sib in rotated_away(path):
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


def _zone_offset(diff: float) -> float:
    """A measured log-to-real-time difference: snapped to the nearest quarter hour when it is that close to one
    (the log's zone plus a few seconds of delay), taken as measured otherwise (a clock that is simply off)."""
    zone = round(diff / _ZONE_STEP) * _ZONE_STEP
    return zone if abs(diff - zone) <= _ZONE_SLACK else diff


def _mtime_on(path: str, now: float | None) -> float | None:
    """When `path` was last written, on the reader's clock `now` (its age is measured in real time and counted
    back from `now`, so a reader whose clock is not the wall clock, such as a test's, gets its own)."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    return mtime if now is None else now - (time.time() - mtime)


class ClockSteps:
    """Cuts a log's timestamps into stretches of one clock: `step(ts)` is True when `ts` lies more than
    CLOCK_STEP before the latest timestamp of the stretch so far (the clock went back: a new stretch begins).
    A jump forward is not a step: from timestamps alone it cannot be told from a pause in logging (an idle
    night), and taking it for a pause can only put older lines further back, never nearer now."""
    __slots__ = ("top",)

    def __init__(self) -> None:
        self.top: float | None = None

    def step(self, ts: float) -> bool:
        top = self.top
        if top is not None and top - ts > CLOCK_STEP:
            self.top = ts
            return True
        if top is None or ts > top:
            self.top = ts
        return False


class ClockMap:
    """Where each stretch of a log's clock lies in real time: `offsets[k]` seconds added to a timestamp of
    stretch k (oldest first) give the reader's time. Read in order with a `Placer`."""

    def __init__(self, offsets: list[float]):
        self.offsets = offsets

    @property
    def steps(self) -> int:
        return len(self.offsets) - 1

    def placer(self) -> Placer:
        return Placer(self.offsets)


class Placer:
    """Places the timestamps of the lines a ClockMap was made from, read again in the same order: it finds the
    same clock steps and moves each stretch by its own offset. More steps than the map knows (lines it did not
    see) stay on the newest stretch's offset."""
    __slots__ = ("offsets", "k", "clock")

    def __init__(self, offsets: list[float]):
        self.offsets = offsets
        self.k = 0
        self.clock = ClockSteps()

    def place(self, ts: float) -> float:
        if self.clock.step(ts) and self.k + 1 < len(self.offsets):
            self.k += 1
        return ts + self.offsets[self.k]


def _timestamps(ranges: Iterable[tuple[str, int, int]], max_line_bytes: int) -> Iterable[float]:
    """Every timestamp of the lines in `ranges` (oldest first), as the grammar reads them."""
    for file, start, end in ranges:
        sp = SourceParser(file)
        for block in read_range(file, start, end, max_line_bytes):
            yield from _stamps(sp.feed_block_items(block))
        yield from _stamps(sp.flush())


def _stamps(items: list) -> Iterable[float]:
    for it in items:
        ts = it[2] if it.__class__ is tuple else it.ts     # a batch row (a tuple) or an Event
        if ts is not None:
            yield ts


def clock_map(ranges: list[tuple[str, int, int]], path: str, now: float | None = None,
              max_line_bytes: int = 1 << 20) -> ClockMap | None:
    """The log clock's stretches over `ranges` (oldest first, the last one ending at the end of `path`, the
    log's last complete line) and where each lies in real time; None when they hold no timestamp.

    The newest stretch is placed by the file's mtime (`_zone_offset`), never after `now`. Each older stretch
    ends where the one after it begins: a step back is taken to have happened between two lines, the gap
    between them as none (a DST fall-back is an hour less 1 s of batch-line spacing; a sparse log's gap is
    lost, which puts that stretch nearer the next, never after it). `now` is the reader's clock reading."""
    stretches: list[list[float]] = []          # [first, last] timestamp of each stretch
    clock = ClockSteps()
    for ts in _timestamps(ranges, max_line_bytes):
        if clock.step(ts) or not stretches:
            stretches.append([ts, ts])
        else:
            stretches[-1][1] = ts
    mtime = _mtime_on(path, now)
    if not stretches or mtime is None:
        return None
    newest = stretches[-1][1]
    offset = _zone_offset(mtime - newest)
    if now is not None:
        offset = min(offset, now - newest)
    offsets = [offset]
    for k in range(len(stretches) - 2, -1, -1):
        offset += stretches[k + 1][0] - stretches[k][1]
        offsets.append(offset)
    offsets.reverse()
    return ClockMap(offsets)


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
