"""Physical lines from log files that are being written, losing none.

`Follower` tails files named by paths and globs: it survives rename rotation, copytruncate, truncation,
same-size rewrites, deletion and re-creation, files that do not exist yet and symlinks whose target changes
(kubelet's ``/var/log/containers`` links). A rotated-away file is drained until quiet (and reported stale
when the writer never leaves it); a copytruncated file's unread rest is read from the copy. `Follower.join`
opens every file at its join point before anything is read; `Follower.positions` says where the handed-out
lines end, and a follower built from saved positions resumes there (exporter/ingest/positions.py: the file
format; exporter/ingest/rotation.py: finding rotated files again; exporter/ingest/tailfile.py: the open files
of a path). `Follower.poll` is one deterministic, non-blocking pass; `Follower.run` loops it, woken by inotify
(watchdog) with a polling fallback (exporter/ingest/watch.py). The line splitting is in
exporter/ingest/lines.py (with `read_lines`, re-exported here, for whole files). What is guaranteed in each
case, and the known limits: docs/tailing.md.
"""
from __future__ import annotations

import glob
import logging
import os
import re
import stat
import threading
import time
from collections.abc import Callable
from fnmatch import fnmatchcase

from exporter.ingest.lines import (  # noqa: F401 - Line, read_lines, _cut_point: re-exported for callers
    Block,
    Line,
    _cut_point,
    _Splitter,
    expand,
    read_blocks,
    read_lines,
)
from exporter.ingest.positions import validate_positions
from exporter.ingest.recover import copied_while_empty, read_between, restore, truncated
from exporter.ingest.rotation import head_matches, newest_mtime, rotated_copies
from exporter.ingest.tailfile import (  # noqa: F401 - FollowStats: re-exported for callers
    NO_FILE,
    FollowStats,
    OpenFile,
    Tail,
    fd_name,
    join_point,
    open_at,
)
from exporter.ingest.watch import run_loop

log = logging.getLogger(__name__)

_MAGIC = re.compile(r"[*?[]")



class Follower:
    """Follows files named by ``patterns`` (paths or globs).

    `join` opens every file at its join point without reading: at the saved position (``positions``, see
    below), else at its end (``from_start=True``: at its start). Files that appear later are read from their
    start. `poll` returns the complete lines appended since the last poll, per file in order (a rotated-away
    file's lines before its successor's); the first poll joins if `join` was not called.

    Rotation: a file the path no longer names (renamed, deleted, symlink switched) is kept open and read on
    every poll until it has been quiet for ``rotate_grace`` seconds (``clock``), so a writer that reopens
    late loses nothing. One still growing after that is *stale* (the writer never reopens): it is read on,
    and `FollowStats.stale` says so. On truncation (copytruncate) the unread rest is read from the rotated
    copy (a sibling with the same head), when one is there.

    Positions contract: `positions()` describes exactly the lines handed out by all polls so far: per file,
    the offset just after the last complete line returned (never inside an unfinished line the splitter
    holds) and that line's number. Saved together with what the caller made of those lines, and passed back
    as ``positions`` after a restart (even a SIGKILL), every complete line is handed out exactly once. The
    snapshot is replaced at the end of each poll (and of `join`); take it after consuming the poll's lines,
    in the thread that polls (in `run`: inside ``on_lines``).
    """

    def __init__(self, patterns: list[str], from_start: bool = False, max_line_bytes: int = 1 << 20,
                 read_chunk: int = 1 << 16, poll_budget: int = 1 << 24, positions: dict | None = None,
                 rotate_grace: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        if isinstance(patterns, str):
            patterns = [patterns]
        self.patterns = list(dict.fromkeys(patterns))
        self.from_start = from_start
        self.max_line_bytes = max_line_bytes
        self.read_chunk = read_chunk
        self.poll_budget = poll_budget       # bytes read per file per poll; the rest waits for the next poll
        self.rotate_grace = rotate_grace
        self.clock = clock
        self.stats: dict[str, FollowStats] = {}
        self.mode: str | None = None         # "inotify" or "poll" once run() has started
        self.backlog = False                 # the last poll stopped at poll_budget with data left
        self.last_poll: float | None = None  # time.monotonic() at the end of the last poll (liveness)
        self._saved = dict(validate_positions(positions)) if positions else {}
        self._positions: dict = {}
        self.tails: dict[str, Tail] = {}
        self._started = False
        self.closed = False                  # close() was called: polls return nothing, run() ends
        self._watcher = None                 # the running loop's Watcher (exporter/ingest/watch.py)
        self.not_followed: dict[str, str] = {}   # named but not followed (a rotated copy, an alias) -> why
        self._names: set[str] = set()        # the names _expand last saw, and the copies among them
        self._copies: dict[str, str] = {}
        self._parents: set[str] = set()      # followed files that have rotated copies among the matches

    # -- discovery --------------------------------------------------------------------------------------

    def _expand(self) -> None:
        found = [(pat, [p for p in sorted(glob.glob(pat, recursive=True)) if not os.path.isdir(p)])
                 if _MAGIC.search(pat) else (pat, None) for pat in self.patterns]
        # a glob match rotated from another followed file is read as part of that file's rotation, never on
        # its own (its lines would count twice); one followed before the file it came from appeared is let go
        names = {*self.tails, *(p for pat, paths in found for p in (paths if paths is not None else [pat]))}
        if names != self._names:            # (the names change on rotations and new files, not per poll)
            self._names, self._copies = names, rotated_copies(names)
            self._parents = set(self._copies.values())
        copies = self._copies
        for path in [p for p, t in self.tails.items() if not t.literal and p in copies]:
            self._let_go(path)
        reals = {t.real: p for p, t in self.tails.items()}
        for pat, paths in found:
            for path in [pat] if paths is None else paths:
                if path in self.tails:
                    continue
                if paths is not None and path in copies:
                    why = f"a rotated copy of {copies[path]} (read as part of its rotation)"
                elif (real := os.path.realpath(path)) in reals:
                    # `a.log` and `./a.log`, a path and a glob matching it, a symlink and its target
                    why = f"the same file as {reals[real]} (read once, as that)"
                else:
                    self._add(path, literal=paths is None)
                    reals[real] = path
                    continue
                if self.not_followed.get(path) != why:
                    self.not_followed[path] = why
                    log.info("log %s (from --log-file %s) is not followed on its own: it is %s", path, pat, why)

    def _let_go(self, path: str) -> None:
        t = self.tails.pop(path)
        for f in ([t.cur] if t.cur is not None else []) + t.old:
            f.close()
        del self.stats[path]

    def _add(self, path: str, literal: bool) -> None:
        st = self.stats.get(path)
        if st is None:
            st = self.stats[path] = FollowStats()
        self.tails[path] = Tail(path, literal, st)

    # -- join and positions -----------------------------------------------------------------------------

    def join(self) -> dict[str, str]:
        """Open every followed file at its join point, reading no line; returns `join_status()`.

        After it, nothing written to a followed file can be taken for old content: the sidecar calls it
        before it starts listening. Idempotent; the first `poll` calls it when nobody did."""
        if not self._started and not self.closed:
            self._expand()
            now = self.clock()
            for t in self.tails.values():
                saved = self._saved.pop(t.path, None)
                try:
                    if saved is not None:
                        restore(self, t, saved, now)
                    else:
                        self._open(t, at_end=not self.from_start)
                except OSError as exc:
                    self._problem(t, f"{type(exc).__name__}: {exc}")
            self._started = True
            self._snapshot()
        return self.join_status()

    def join_status(self) -> dict[str, str]:
        """Per followed path: ``"open"`` (a file is open at its join point), ``"missing"`` (nothing there
        yet; it is read from its start when it appears) or ``"error: ..."`` (there but unreadable). A glob
        that matches nothing is listed by its pattern as ``"missing"``."""
        out = {}
        for path, t in self.tails.items():
            if t.cur is not None or t.old:
                out[path] = "open"
            elif t.stats.last_error:
                out[path] = f"error: {t.stats.last_error}"
            else:
                out[path] = "missing"
        for pat in self.patterns:
            if _MAGIC.search(pat) and not any(fnmatchcase(p, pat) for p in [*self.tails, *self.not_followed]):
                out[pat] = "missing"
        return out

    def positions(self) -> dict:
        """Per followed path, where the handed-out lines end (see the class docstring for the contract):
        ``{path: {dev, ino, offset, lineno, skip, fp, fp_len, name, [copy_after_ns,] draining: [same without
        draining]}}``.
        ``ino`` 0: no file was open (what appears is read from its start); ``skip``: the offset is inside the
        rest of a cut line, dropped up to its newline; ``fp``: hex of the first ``fp_len`` bytes; ``name``:
        the file's real path when opened. checkpoint.py writes it, with the counters, to the positions file."""
        return self._positions

    def _snapshot(self) -> None:
        pos = {}
        for path, t in self.tails.items():
            e = t.cur.entry() if t.cur is not None else dict(NO_FILE)
            e["draining"] = [f.entry() for f in t.old]
            pos[path] = e
        self._positions = pos

    # -- the pass ---------------------------------------------------------------------------------------

    def poll(self) -> list[Line]:
        """One non-blocking pass over every followed file; the complete lines appended since the last one."""
        return expand(self.poll_blocks())

    def poll_blocks(self) -> list[Block]:
        """`poll` in `Block`s."""
        if self.closed:
            return []
        if not self._started:
            self.join()
        self._expand()
        now = self.clock()
        out: list[Block] = []
        self.backlog = False
        for tail in list(self.tails.values()):
            n0 = len(out)
            try:
                self._poll_tail(tail, out, now)
            except OSError as exc:  # e.g. EIO: keep what we have, retry next poll
                self._problem(tail, f"{type(exc).__name__}: {exc}")
            new = out[n0:]
            tail.stats.lines_read += sum(len(b.texts) for b in new)
            tail.stats.lines_cut += sum(b.cuts for b in new)
            tail.stats.stale = any(f.stale for f in tail.old)
            if tail.cur is None and not tail.old and not tail.literal and not os.path.lexists(tail.path) \
                    and tail.path not in self._parents:
                # A glob match that went away: forget it (stats stay); if it comes back it is a new file. Not
                # while its rotated copies are there: forgotten, it would no longer keep them from being read
                # as files of their own, twice.
                del self.tails[tail.path]
        self._snapshot()
        self.last_poll = time.monotonic()
        return out

    def _splitter(self, t: Tail) -> _Splitter:
        return _Splitter(t.path, self.max_line_bytes)

    def _problem(self, tail: Tail, msg: str) -> None:
        tail.stats.last_error = msg
        if tail.warned != msg:
            tail.warned = msg
            log.warning("log source %s: %s", tail.path, msg)

    def _poll_tail(self, t: Tail, out: list[Block], now: float) -> None:
        behind = False
        for f in list(t.old):                           # older lines first: a file stopped at the budget
            if self._drain(t, f, out, now):             # holds the newer ones back
                behind = True
                break
        try:
            st = os.stat(t.path)
        except (FileNotFoundError, NotADirectoryError):
            st = None
        except OSError as exc:
            self._problem(t, f"cannot stat: {exc.strerror or exc}")
            st = None
        cur = t.cur
        if st is None:
            if cur is None:
                t.stats.up = False
            elif os.fstat(cur.fd).st_nlink == 0:
                self._retire(t, out, now, behind)       # deleted: drained like a renamed file
            elif not behind:
                self._read(cur, out, now)   # renamed, nothing at the path yet
            return
        if not stat.S_ISREG(st.st_mode):
            if cur is not None:
                self._retire(t, out, now, behind)
            t.stats.up = False
            self._problem(t, "not a regular file")
            return
        if cur is None:
            had = t.had_file
            saved = self._saved.pop(t.path, None)
            if saved is None and t.old:                 # back after a rename: first what it was rotated to meanwhile
                behind = self._between(t, t.old[-1], st, out, now, behind)
            if not (restore(self, t, saved, now) if saved is not None else self._open(t, at_end=False)):
                return
            if had:
                t.stats.rotations += 1                  # deleted earlier, re-created now
        elif st.st_ino != cur.ino or st.st_dev != cur.dev:
            # The path names another file now; the old one is read first, and on until it goes quiet, then
            # any the path was rotated through since (two rotations between polls).
            behind = self._retire(t, out, now, behind)
            if cur in t.old:                            # (not closed at once: truncated after the rename)
                behind = self._between(t, cur, st, out, now, behind)
            t.stats.rotations += 1
            if not self._open(t, at_end=False):
                return
        elif st.st_size < cur.offset or (
                (st.st_size != cur.last_size or st.st_mtime_ns != cur.last_mtime)
                and not head_matches(cur.fd, cur.fp)):
            behind = truncated(self, t, out, now, behind)   # copytruncate, > file, truncate -s, rewrite
        cur = t.cur
        assert cur is not None                          # the path's file is open (reopened if it changed)
        cur.last_size = st.st_size
        cur.last_mtime = st.st_mtime_ns
        if cur.copy_after is not None and st.st_size > 0 and not behind:
            behind = copied_while_empty(self, t, out, now)
        if not behind and st.st_size > cur.offset:
            self._read(cur, out, now)

    def _drain(self, t: Tail, f: OpenFile, out: list[Block], now: float) -> bool:
        """Read a rotated-away file on; close it once quiet for the grace period. True: stopped at budget."""
        fst = os.fstat(f.fd)
        # Truncated since it was rotated away: judged before reading, as the writer may append while we read
        # (a late reopen) and take the offset past this size, which is no truncation.
        shrunk = fst.st_size < f.offset
        # written to since the last look (not merely a backlog read late because of the poll budget)
        grew = 0 <= f.last_size < fst.st_size
        f.last_size = fst.st_size
        behind = False
        if fst.st_size > f.offset:
            n0 = len(out)
            behind = self._read(f, out, now)
            if not f.once and now - f.since > self.rotate_grace:
                t.stats.rotated_writes += sum(len(b.texts) for b in out[n0:])
                if grew and not f.stale:
                    f.stale = True
                    log.warning("log source %s: the file rotated away from it (%s) is still written to %.0f s "
                                "after the rotation: the writer does not reopen its log file. Its lines are "
                                "still read, but rotation does not work: rotate with copytruncate or make "
                                "the writer reopen (runbook SGLangLogSourceStale)",
                                t.path, fd_name(f), now - f.since)
        if behind:
            return True
        quiet = now - max(f.since, f.grew_at) >= self.rotate_grace
        # a stale file is let go only once the writer has moved on to the new file
        moved_on = not f.stale or (t.cur is not None and t.cur.grew_at >= f.grew_at)
        if f.once or shrunk or (quiet and moved_on):
            f.split.flush(out)                          # its unfinished last line will never be finished
            if t.cur is not None and t.cur.copy_after is not None:
                # written after the path's file was seen empty, but ours: not a copy of that file
                t.cur.copy_after = max(t.cur.copy_after, fst.st_mtime_ns)
            f.close()
            t.old.remove(f)
        return False

    def _between(self, t: Tail, left: OpenFile, st: os.stat_result, out: list[Block], now: float,
                 behind: bool) -> bool:
        """Read the files ``t``'s path was rotated to after ``left`` and before the file ``st`` (recover.py)."""
        for f in read_between(self, t, left, now, {(st.st_dev, st.st_ino)}):
            behind = behind or self._drain(t, f, out, now)
        return behind

    def _retire(self, t: Tail, out: list[Block], now: float, behind: bool) -> bool:
        """Move the path's file to the drained ones, read on unless older ones are ``behind``; True when
        anything of ``t`` stopped at the poll budget."""
        f, t.cur = t.cur, None
        assert f is not None                            # only an open file is retired
        f.since = now
        t.old.append(f)
        t.stats.up = False
        return behind or self._drain(t, f, out, now)

    def _open(self, t: Tail, at_end: bool) -> bool:
        try:
            fd = os.open(t.path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            t.stats.up = False
            if not isinstance(exc, (FileNotFoundError, NotADirectoryError)):
                self._problem(t, f"cannot open: {exc.strerror or exc}")
            return False
        try:
            fst = os.fstat(fd)
            if not stat.S_ISREG(fst.st_mode):
                os.close(fd)
                t.stats.up = False
                self._problem(t, "not a regular file")
                return False
            f = OpenFile(fd, fst, os.path.realpath(t.path), self._splitter(t))
            f.seek(*join_point(fd, fst.st_size, self.max_line_bytes)) if at_end else f.seek(0)
            f.take_fp()
            if not f.fp and f.offset == 0:
                f.copy_after = newest_mtime(f.name)     # empty: a copy made before we read a byte is told by its time
        except OSError as exc:
            os.close(fd)
            self._problem(t, f"cannot read: {exc.strerror or exc}")
            return False
        t.cur = f
        t.had_file = True
        t.stats.up = True
        t.stats.last_error = None
        t.warned = None
        return True

    def _read(self, f: OpenFile, out: list[Block], now: float) -> bool:
        """`OpenFile.read` within the poll budget; True (and `backlog`) when it stopped at the budget."""
        hit = f.read(out, self.read_chunk, self.poll_budget, now)
        self.backlog |= hit
        return hit

    # -- the loop ---------------------------------------------------------------------------------------

    def run(self, on_lines: Callable[[list], None], stop: threading.Event,
            poll_interval: float = 1.0, min_interval: float = 0.1, wake_on_append: bool = True,
            blocks: bool = False) -> None:
        """Poll until ``stop`` is set: when inotify reports a change in a watched directory, and at least
        every ``poll_interval`` seconds. Without inotify (observer cannot start, watch limits reached) it
        polls every ``poll_interval`` seconds.

        Wake-ups are coalesced: polls are at least ``min_interval`` apart, so a writer that flushes every few
        milliseconds costs one poll per ``min_interval``, not one per write (each poll stats and resolves
        every followed path); lines wait at most that long.

        ``wake_on_append=False`` subscribes to structural changes only (rotation, creation, deletion) and leaves
        appends to the ``poll_interval`` timer: inotify delivers one event per write, and watchdog's Python
        threads spend far more handling a flood of them than a few timed polls cost.

        ``blocks=True`` hands ``on_lines`` `Block`s instead of `Line`s. After a poll that found lines, the
        next one that finds none calls ``on_lines([])`` once."""
        run_loop(self, on_lines, stop, poll_interval, min_interval, wake_on_append, blocks)

    def close(self) -> None:
        self.closed = True
        for t in self.tails.values():
            for f in ([t.cur] if t.cur is not None else []) + t.old:
                f.close()
            t.cur, t.old = None, []
            t.stats.up = False

    def __enter__(self):  # -> Self
        return self

    def __exit__(self, *exc) -> None:
        self.close()


