"""The live sidecar's start-up, before its HTTP listener opens: every log joined at a fixed point and what came
before it that matters (the latest SGLang start-up, or what was written while no sidecar ran) replayed on the
log's own clock, so history lands where it happened and never raises a page.
"""
from __future__ import annotations

import glob
import logging
import os

from exporter.ingest.follower import Follower
from exporter.ingest.lines import read_range
from exporter.ingest.positions import FINGERPRINT_BYTES
from exporter.ingest.rotation import in_log_order, newer_copies, newest_mtime, plain, rotated_copies
from exporter.sidecar import checkpoint, readback

log = logging.getLogger(__name__)

# a backlog (a burst appended at once) is read LOG_POLL_BUDGET bytes per file per poll, the next poll right away:
# what one poll reads is held as text until parsed, so this bounds memory (bench/README.md)
LOG_POLL_BUDGET = 1 << 20     # bytes per file per poll
LOG_READ_CHUNK = 1 << 16      # bytes per read()


def join_and_replay(sc) -> None:
    """`Sidecar.prepare` for a sidecar ``sc`` that follows logs: load the positions file, replay each log's
    history, build and join ``sc.follower``, read what was written while no sidecar ran, save positions."""
    cfg = sc.config
    saved = checkpoint.load(cfg.positions_file) if cfg.positions_file else None
    foreign = checkpoint.written_for(saved, cfg.log_files) if saved is not None else None
    if foreign:
        # another sidecar's file (or this one's before its logs changed): continuing its counters would add
        # another server's counts to ours
        log.warning("positions file %s: %s, not for %s; its positions and counters are not used (starting "
                    "fresh)", cfg.positions_file, foreign, ", ".join(cfg.log_files))
        saved = None
    history = History(sc)
    start_at: dict = {}
    counted: list = []           # (path, ranges, placer): replayed after the saved counters are restored
    files, copies = _existing(cfg.log_files)
    for path in files:
        end = readback.complete_end(path)
        if end is None:
            continue
        size, dev, ino = end
        pos = (saved.positions.get(path) if saved else None)
        if pos is not None and _same_file(pos, dev, ino):
            # resuming: the lines before our position were counted (their counts are in the file); replay
            # the start-up before it only for its facts and windows, then count from the position on (the
            # clock is mapped over both: what the follower reads next belongs to the same log clock)
            offset = min(int(pos.get("offset", 0)), size)
            ranges = readback.history(path, offset, cfg.readback_bytes, cfg.max_line_bytes)
            placer = history.clock_for(path, [*ranges, (path, offset, size)])
            for file, first, last in ranges:
                history.replay(file, first, last, placer)
            continue
        if pos is not None and pos["ino"]:
            continue                  # rotated or truncated while we were down: the follower sorts it out
        if saved is not None:
            # not there (or not matched yet) at the last save: all of it was written while no sidecar ran,
            # after what the copies it has been rotated to since then hold (oldest first)
            since = newer_copies(os.path.realpath(path), "", int(saved.written * 1e9), {(dev, ino)}) \
                if saved.written > 0 else []      # (a file from before "written" was recorded: no time to go by)
            ranges = [(c, 0, os.path.getsize(c)) for c in since] + [(path, 0, size)]
        elif cfg.from_end:
            ranges = []
        elif cfg.from_start:
            # all of it: the rotated copies the patterns named first, oldest first, then the file itself
            ranges = [(c, 0, os.path.getsize(c)) for c in copies.get(path, ())] + [(path, 0, size)]
        else:
            ranges = readback.history(path, size, cfg.readback_bytes, cfg.max_line_bytes)
            if not ranges and size:
                log.info("log %s: no SGLang start-up in its last %d bytes and the file is larger; joining "
                         "at the end (start-up facts unknown until SGLang prints them)", path,
                         cfg.readback_bytes)
        if ranges:
            counted.append((path, ranges, history.clock_for(path, ranges)))
        start_at[path] = position_at(path, size, dev, ino)
    if saved is not None:
        # the facts-only replays above counted lines the saved counters already hold: those win
        with sc.lock:
            sc.engine.state.restore_counters(saved.counters)
    replayed: dict[str, int] = {}
    for path, ranges, placer in counted:
        for file, first, last in ranges:
            replayed[path] = replayed.get(path, 0) + history.replay(file, first, last, placer)
    positions = dict(saved.positions) if saved else {}
    positions.update(start_at)
    # every file that exists now has a position: the follower's own from-start rule only concerns files
    # that appear later (always read whole)
    sc.follower = Follower(list(cfg.log_files), max_line_bytes=cfg.max_line_bytes, positions=positions,
                           poll_budget=LOG_POLL_BUDGET, read_chunk=LOG_READ_CHUNK)
    sc.follower.join()
    for path, n in replayed.items():          # lines read is lines read, whoever read them
        if path in sc.follower.stats:
            sc.follower.stats[path].lines_read += n
    # what was written while we were down (resumed sources) is history too: read it now, on its clock (a
    # source resumed in a file rotated since, or whose map saw no timestamp, gets one from the current file's
    # tail, once)
    tails: set[str] = set()
    while True:
        for block in sc.follower.poll_blocks():
            placer = history.placers.get(block.source)
            if placer is None and block.source not in tails:
                tails.add(block.source)
                placer = history.clock_for(block.source, _tail(block.source, readback.TAIL_BYTES))
            history.ingest(sc.log_sources.feed_blocks([block]), placer)
        if not sc.follower.backlog:
            break
    history.report()
    with sc.lock:
        sc.engine.evaluate(sc.clock())
    sc.save_positions(force=True)


class History:
    """Feeds a log's past into the sidecar's engine, each line at its log time moved to real time, stretch by
    stretch of the log's clock (readback.clock_map)."""

    def __init__(self, sc) -> None:
        self.sc = sc
        self.last_t: float | None = None      # the time given to the last replayed line
        self.placers: dict[str, readback.Placer | None] = {}   # log path -> its clock (None: no timestamps)
        self.steps: dict[str, int] = {}       # log path -> clock steps back in what is replayed of it
        self.aged_out = 0                     # lines that could not be placed before now

    def clock_for(self, path: str, ranges: list[tuple[str, int, int]]) -> readback.Placer | None:
        """The clock of log `path` over `ranges` (oldest first, ending at its last complete line), kept for
        the lines of `path` read from here on."""
        cmap = readback.clock_map(ranges, path, self.sc.clock(), self.sc.config.max_line_bytes)
        placer = cmap.placer() if cmap is not None else None
        self.placers[path] = placer
        if cmap is not None and cmap.steps:
            self.steps[path] = cmap.steps
        return placer

    def replay(self, path: str, start: int, end: int, placer: readback.Placer | None) -> int:
        """Lines [start, end) of a log, through its parser, into the engine on the log's clock (`placer`; None:
        the log has no timestamps); returns how many."""
        feed = self.sc.log_sources.feed_blocks
        lines = 0
        for block in read_range(path, start, end, self.sc.config.max_line_bytes):
            lines += len(block.texts)
            self.ingest(feed([block]), placer)
        self.ingest(self.sc.log_sources.flush(), placer)
        return lines

    def ingest(self, items, placer: readback.Placer | None) -> None:
        """Items stamped at their log time placed in real time by `placer` (never before the previous item).
        An item that would land after now cannot be placed: it is aged out (given the previous item's time,
        or put out of every window when it comes first), never pinned to now. Items of a log without
        timestamps are placed out of every window too."""
        now = self.sc.clock()
        undated = now - HISTORY_UNDATED_AGE
        engine = self.sc.engine
        last = self.last_t
        first_t = None
        with self.sc.lock:
            for item in items:
                row = item.__class__ is tuple
                ts = item[2] if row else item.ts
                t = placer.place(ts) if ts is not None and placer is not None else None
                if t is None or t > now:
                    if t is not None:
                        self.aged_out += 1
                    t = last if last is not None else undated
                elif last is not None and t < last:
                    t = last
                else:
                    last = t
                if first_t is None:
                    first_t = t
                if row:
                    engine.ingest_row(item, t)
                else:
                    engine.ingest(item, t)
            if first_t is not None:
                # observation began where the history does: a rate over a short watch is taken over the span the
                # history covers, not over the instant it was read in
                seen = engine.state.observed_from
                engine.state.observed_from = first_t if seen is None else min(seen, first_t)
        self.last_t = last

    def report(self) -> None:
        """One log line for what the replay had to make of the logs' clocks."""
        for path, n in sorted(self.steps.items()):
            log.info("log %s: its clock steps back %d time(s) in the history replayed (DST fall-back or NTP "
                     "step); each stretch is placed in real time by itself", path, n)
        if self.aged_out:
            log.info("history: %d line(s) stamped after now could not be placed in real time; aged out",
                     self.aged_out)


HISTORY_UNDATED_AGE = 86400.0     # replayed lines without any timestamp land this far back: outside every window


def _existing(patterns) -> tuple[list[str], dict[str, list[str]]]:
    """The files the patterns name now (globs expanded), in a stable order, like the follower: each file once
    (`a.log` and `./a.log` are one log) and without a glob match that is a rotated copy of another, whose
    history is read as part of that file's (`readback.history`). Also, per file, its rotated copies the globs
    matched, oldest first (what --from-start replays before it; compressed ones are skipped)."""
    out: list[str] = []
    literal: set[str] = set()
    reals: set[str] = set()
    for pat in patterns:
        if any(c in pat for c in "*?["):
            paths = sorted(glob.glob(pat, recursive=True))
        else:
            paths = [pat]
            literal.add(pat)
        for p in paths:
            real = os.path.realpath(p)
            if real not in reals and os.path.isfile(p):     # one file named twice is one log
                reals.add(real)
                out.append(p)
    copies = {c: live for c, live in rotated_copies([*out, *literal]).items() if c not in literal}
    by_file: dict[str, list[str]] = {}
    for p in in_log_order([p for p in out if p in copies or p in copies.values()]):
        if p in copies and plain(p):
            by_file.setdefault(copies[p], []).append(p)
    return [p for p in out if p not in copies], by_file


def _tail(path: str, budget: int) -> list[tuple[str, int, int]]:
    """The last `budget` bytes of `path` up to its last complete line, from a line start: the range a clock
    is mapped over when nothing else of the file is replayed."""
    end = readback.complete_end(path)
    if end is None:
        return []
    size = end[0]
    start = max(0, size - budget)
    if start:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return []
        try:
            start = readback.line_start(fd, start, 0)
        finally:
            os.close(fd)
    return [(path, start, size)]


def _same_file(pos: dict, dev: int, ino: int) -> bool:
    return pos.get("dev") == dev and pos.get("ino") == ino


def position_at(path: str, offset: int, dev: int, ino: int) -> dict:
    """A follower position (ingest/positions.py) that starts reading `path`, the file dev/ino, at byte
    `offset`, just after a newline: the end of the history replayed from it."""
    fp, lineno, empty = b"", 0, False
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            if (st.st_dev, st.st_ino) == (dev, ino):     # else rotated since: nothing known of its head
                fp = fh.read(min(FINGERPRINT_BYTES, offset))
                lineno = _count_lines(fh, offset)
                empty = st.st_size == 0
    except OSError:
        pass
    pos = {"dev": dev, "ino": ino, "offset": offset, "lineno": lineno, "skip": False, "fp": fp.hex(),
           "fp_len": len(fp), "name": os.path.realpath(path), "draining": []}
    if empty:
        # no head to recognise a copytruncate copy by, should the file be filled and copied before it is read
        pos["copy_after_ns"] = newest_mtime(os.path.realpath(path))
    return pos


def _count_lines(fh, end: int) -> int:
    """Newlines before byte `end` (so the lines read after it keep their numbers in the file); 0 past 1 GiB,
    where counting would cost the start-up more than line numbers are worth to a sidecar."""
    if end > 1 << 30:
        return 0
    fh.seek(0)
    n = 0
    while end > 0:
        block = fh.read(min(1 << 22, end))
        if not block:
            break
        n += block.count(b"\n")
        end -= len(block)
    return n
