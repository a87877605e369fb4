"""Physical lines from log files that are being written, losing none.

`Follower` tails files named by paths and globs: it survives rename rotation, copytruncate, truncation,
same-size rewrites, deletion and re-creation, files that do not exist yet and symlinks whose target changes
(kubelet's ``/var/log/containers`` links). A rotated-away file is drained until quiet (and reported stale
when the writer never leaves it); a copytruncated file's unread rest is read from the copy. `Follower.join`
opens every file at its join point before anything is read; `Follower.positions` says where the handed-out
lines end, and a follower built from saved positions resumes there (exporter/ingest/positions.py: the file
format; exporter/ingest/rotation.py: finding rotated files again). `Follower.poll` is one deterministic,
non-blocking pass; `Follower.run` loops it, woken by inotify (watchdog) with a polling fallback. The line
splitting is in exporter/ingest/lines.py (with `read_lines`, re-exported here, for whole files). What is
guaranteed in each case, and the known limits: docs/tailing.md.
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
from dataclasses import dataclass
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
from exporter.ingest.positions import FINGERPRINT_BYTES, validate_positions
from exporter.ingest.rotation import find_copy, find_inode, head_matches
from exporter.ingest.watch import Watcher

log = logging.getLogger(__name__)

COUNT_EXISTING_MAX = 1 << 30      # line numbers of a file joined at its end: newlines counted up to this size
_MAGIC = re.compile(r"[*?[]")


@dataclass
class FollowStats:
    """Per source path (the exporter exports these as self-metrics)."""

    lines_read: int = 0
    rotations: int = 0       # the path now names another file (rename, delete + re-create, symlink switch)
    truncations: int = 0     # the same file shrank or its head was rewritten (copytruncate, truncate)
    lines_cut: int = 0       # lines longer than max_line_bytes, emitted cut
    up: bool = False         # the file is open and being read
    last_error: str | None = None
    stale: bool = False      # a file rotated away is still written to after rotate_grace: the writer never reopens
    rotated_writes: int = 0  # lines read from a rotated-away file after rotate_grace (all delivered)
    rotated_unread: int = 0  # files gone (compressed, deleted) before they could be read on from a saved
                             # position or a copytruncate offset: their unread lines, if any, are lost


# ---------------------------------------------------------------------------------------------------------
# Follower


class _File:
    """One open file of a followed path: the one the path names now, or one rotated away and being drained.

    ``offset`` is where reading continues; the splitter may hold the start of an unfinished line read before
    it, so the boundary of what was handed out is ``offset - len(split.buf)`` (`entry`)."""

    __slots__ = ("dev", "fd", "fp", "grew_at", "ino", "last_mtime", "last_size", "name", "offset", "once",
                 "since", "split", "stale")

    def __init__(self, fd: int, fst: os.stat_result, name: str, split: _Splitter) -> None:
        self.fd, self.dev, self.ino, self.name, self.split = fd, fst.st_dev, fst.st_ino, name, split
        self.offset = 0
        self.fp = b""                 # the file's first bytes (up to FINGERPRINT_BYTES) once read
        self.last_size = self.last_mtime = -1
        self.grew_at = float("-inf")  # clock time of the last read that found new bytes
        self.since = 0.0              # clock time it was rotated away (drained files)
        self.once = False             # a copytruncate copy: read to its end, then close
        self.stale = False            # still written to well after it was rotated away

    def seek(self, offset: int, lineno: int = 0, skip: bool = False) -> None:
        os.lseek(self.fd, offset, os.SEEK_SET)
        self.offset = offset
        self.split.reset(lineno)
        self.split.discard = skip

    def take_fp(self) -> None:
        # The head as far as it exists, read or not: a copy or a rotated file is recognised by it even when
        # the position is at 0 with an unfinished first line.
        if len(self.fp) < FINGERPRINT_BYTES:
            head = os.pread(self.fd, FINGERPRINT_BYTES, 0)
            if head.startswith(self.fp):      # else rewritten: the next poll's head check sees it
                self.fp = head

    def entry(self) -> dict:
        return {"dev": self.dev, "ino": self.ino, "offset": self.offset - len(self.split.buf),
                "lineno": self.split.lineno, "skip": self.split.discard, "fp": self.fp.hex(),
                "fp_len": len(self.fp), "name": self.name}

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


_NO_FILE = {"dev": 0, "ino": 0, "offset": 0, "lineno": 0, "skip": False, "fp": "", "fp_len": 0, "name": ""}


class _Tail:
    """One followed path: the file it names (``cur``) and rotated-away files still drained (``old``)."""

    __slots__ = ("cur", "had_file", "literal", "old", "path", "stats", "warned")

    def __init__(self, path: str, literal: bool, stats: FollowStats) -> None:
        self.path = path
        self.literal = literal
        self.cur: _File | None = None
        self.old: list[_File] = []
        self.stats = stats
        self.warned: str | None = None
        self.had_file = False   # a file was open for this path before (its re-creation counts as a rotation)


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
        self._tails: dict[str, _Tail] = {}
        self._started = False
        self._closed = False
        self._watcher: Watcher | None = None

    # -- discovery --------------------------------------------------------------------------------------

    def _expand(self) -> None:
        for pat in self.patterns:
            if _MAGIC.search(pat):
                for path in sorted(glob.glob(pat, recursive=True)):
                    if path not in self._tails and not os.path.isdir(path):
                        self._add(path, literal=False)
            elif pat not in self._tails:
                self._add(pat, literal=True)

    def _add(self, path: str, literal: bool) -> None:
        st = self.stats.get(path)
        if st is None:
            st = self.stats[path] = FollowStats()
        self._tails[path] = _Tail(path, literal, st)

    # -- join and positions -----------------------------------------------------------------------------

    def join(self) -> dict[str, str]:
        """Open every followed file at its join point, reading no line; returns `join_status()`.

        After it, nothing written to a followed file can be taken for old content: the sidecar calls it
        before it starts listening. Idempotent; the first `poll` calls it when nobody did."""
        if not self._started and not self._closed:
            self._expand()
            now = self.clock()
            for t in self._tails.values():
                saved = self._saved.pop(t.path, None)
                try:
                    if saved is not None:
                        self._restore(t, saved, now)
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
        for path, t in self._tails.items():
            if t.cur is not None or t.old:
                out[path] = "open"
            elif t.stats.last_error:
                out[path] = f"error: {t.stats.last_error}"
            else:
                out[path] = "missing"
        for pat in self.patterns:
            if _MAGIC.search(pat) and not any(not t.literal and fnmatchcase(p, pat) for p, t in self._tails.items()):
                out[pat] = "missing"
        return out

    def positions(self) -> dict:
        """Per followed path, where the handed-out lines end (see the class docstring for the contract):
        ``{path: {dev, ino, offset, lineno, skip, fp, fp_len, name, draining: [same without draining]}}``.
        ``ino`` 0: no file was open (what appears is read from its start); ``skip``: the offset is inside the
        rest of a cut line, dropped up to its newline; ``fp``: hex of the first ``fp_len`` bytes; ``name``:
        the file's real path when opened. checkpoint.py writes it, with the counters, to the positions file."""
        return self._positions

    def _snapshot(self) -> None:
        pos = {}
        for path, t in self._tails.items():
            e = t.cur.entry() if t.cur is not None else dict(_NO_FILE)
            e["draining"] = [f.entry() for f in t.old]
            pos[path] = e
        self._positions = pos

    def _restore(self, t: _Tail, e: dict, now: float) -> bool:
        """Open ``t`` at a saved position; True when the path's file is open. The rules: docs/tailing.md."""
        for d in e.get("draining", ()):
            self._drain_saved(t, d, now)
        if e["ino"] == 0:                            # nothing was there: what is there now is new
            return self._open(t, at_end=False)
        try:
            st = os.stat(t.path)
        except OSError:
            st = None
        if st is not None and (st.st_dev, st.st_ino) == (e["dev"], e["ino"]):
            if not self._open(t, at_end=False):
                # unreadable right now, or renamed since the stat: apply the position at a later poll
                self._saved[t.path] = dict(e, draining=[])
                return False
            cur = t.cur
            assert cur is not None                       # _open returned True: the file is open
            fp = bytes.fromhex(e["fp"])
            if os.fstat(cur.fd).st_size >= e["offset"] and head_matches(cur.fd, fp):
                cur.seek(e["offset"], e["lineno"], e["skip"])
                cur.fp = fp
                return True
            # truncated (or rewritten) while we were down: the rest may be in the rotated copy
            copy = find_copy(os.path.realpath(t.path), fp, e["offset"])
            f = self._reopen_at(t, copy, e, fp) if copy else None
            if f is None:
                self._lost(t, e)
            else:
                f.once = True
                t.old.append(f)
            t.stats.truncations += 1
            return True
        # the path names another file (or none): ours was rotated away while we were down
        self._drain_saved(t, e, now)
        if st is None:
            return False
        t.stats.rotations += 1
        return self._open(t, at_end=False)

    def _drain_saved(self, t: _Tail, e: dict, now: float) -> None:
        """A saved file the path no longer names: drained from its offset when found, else counted lost."""
        f = self._reopen_saved(t, e)
        if f is None:
            self._lost(t, e)
        else:
            f.since = now
            t.old.append(f)

    def _reopen_saved(self, t: _Tail, e: dict) -> _File | None:
        """The saved file, found by device + inode in the path's directory or the one it points into now.
        (Not in the directory the saved ``name`` says: a damaged or foreign positions file must not make us
        read files elsewhere.)"""
        dirs = [os.path.dirname(os.path.realpath(t.path)), os.path.dirname(os.path.abspath(t.path))]
        p = find_inode(dirs, e["dev"], e["ino"])
        return self._reopen_at(t, p, e, bytes.fromhex(e["fp"]), same_inode=True) if p else None

    def _reopen_at(self, t: _Tail, path: str, e: dict, fp: bytes, same_inode: bool = False) -> _File | None:
        """``path`` (a rotated file of ``t``) opened at the position ``e``, if it still has ``fp`` as its head
        and at least ``e["offset"]`` bytes. Its lines are the followed path's."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        try:
            fst = os.fstat(fd)
            ok = (fst.st_size >= e["offset"] and head_matches(fd, fp)
                  and (not same_inode or (fst.st_dev, fst.st_ino) == (e["dev"], e["ino"])))
            if ok:
                f = _File(fd, fst, path, _Splitter(t.path, self.max_line_bytes))
                f.seek(e["offset"], e["lineno"], e["skip"])
                f.fp = fp
                return f
        except OSError:
            pass
        os.close(fd)
        return None

    def _lost(self, t: _Tail, e: dict) -> None:
        t.stats.rotated_unread += 1
        log.warning("log source %s: the file last read at byte %d (%s, inode %d) is gone or changed and no "
                    "rotated copy was found (compressed or deleted?); lines written to it after that byte, "
                    "if any, are lost", t.path, e["offset"], e["name"] or t.path, e["ino"])

    # -- the pass ---------------------------------------------------------------------------------------

    def poll(self) -> list[Line]:
        """One non-blocking pass over every followed file; the complete lines appended since the last one."""
        return expand(self.poll_blocks())

    def poll_blocks(self) -> list[Block]:
        """`poll` in `Block`s."""
        if self._closed:
            return []
        if not self._started:
            self.join()
        self._expand()
        now = self.clock()
        out: list[Block] = []
        self.backlog = False
        for tail in list(self._tails.values()):
            n0 = len(out)
            try:
                self._poll_tail(tail, out, now)
            except OSError as exc:  # e.g. EIO: keep what we have, retry next poll
                self._problem(tail, f"{type(exc).__name__}: {exc}")
            new = out[n0:]
            tail.stats.lines_read += sum(len(b.texts) for b in new)
            tail.stats.lines_cut += sum(b.cuts for b in new)
            tail.stats.stale = any(f.stale for f in tail.old)
            if tail.cur is None and not tail.old and not tail.literal and not os.path.lexists(tail.path):
                # A glob match that went away: forget it (stats stay); if it comes back it is a new file.
                del self._tails[tail.path]
        self._snapshot()
        self.last_poll = time.monotonic()
        return out

    def _problem(self, tail: _Tail, msg: str) -> None:
        tail.stats.last_error = msg
        if tail.warned != msg:
            tail.warned = msg
            log.warning("log source %s: %s", tail.path, msg)

    def _poll_tail(self, t: _Tail, out: list[Block], now: float) -> None:
        behind = False
        for f in list(t.old):                           # older lines first
            behind |= self._drain(t, f, out, now)
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
                self._retire(t, out, now)               # deleted: drained like a renamed file
            elif not behind:
                self._read(cur, out, self.poll_budget, now)   # renamed, nothing at the path yet
            return
        if not stat.S_ISREG(st.st_mode):
            if cur is not None:
                self._retire(t, out, now)
            t.stats.up = False
            self._problem(t, "not a regular file")
            return
        if cur is None:
            had = t.had_file
            saved = self._saved.pop(t.path, None)
            if not (self._restore(t, saved, now) if saved is not None else self._open(t, at_end=False)):
                return
            if had:
                t.stats.rotations += 1                  # deleted earlier, re-created now
        elif st.st_ino != cur.ino or st.st_dev != cur.dev:
            # The path names another file now; the old one is read first, and on until it goes quiet.
            self._retire(t, out, now)
            t.stats.rotations += 1
            if not self._open(t, at_end=False):
                return
        elif st.st_size < cur.offset or (
                (st.st_size != cur.last_size or st.st_mtime_ns != cur.last_mtime)
                and not head_matches(cur.fd, cur.fp)):
            self._truncated(t, out, now)                # copytruncate, > file, truncate -s, rewrite
        cur = t.cur
        assert cur is not None                          # opened above, or kept open (truncation reuses it)
        cur.last_size = st.st_size
        cur.last_mtime = st.st_mtime_ns
        if not behind and st.st_size > cur.offset:
            self._read(cur, out, self.poll_budget, now)

    def _drain(self, t: _Tail, f: _File, out: list[Block], now: float) -> bool:
        """Read a rotated-away file on; close it once quiet for the grace period. True: stopped at budget."""
        fst = os.fstat(f.fd)
        # written to since the last look (not merely a backlog read late because of the poll budget)
        grew = 0 <= f.last_size < fst.st_size
        f.last_size = fst.st_size
        behind = False
        if fst.st_size > f.offset:
            n0 = len(out)
            behind = self._read(f, out, self.poll_budget, now)
            if not f.once and now - f.since > self.rotate_grace:
                t.stats.rotated_writes += sum(len(b.texts) for b in out[n0:])
                if grew and not f.stale:
                    f.stale = True
                    log.warning("log source %s: the file rotated away from it (%s) is still written to %.0f s "
                                "after the rotation: the writer does not reopen its log file. Its lines are "
                                "still read, but rotation does not work: rotate with copytruncate or make "
                                "the writer reopen (runbook SGLangLogSourceStale)",
                                t.path, _fd_name(f), now - f.since)
        if behind:
            return True
        quiet = now - max(f.since, f.grew_at) >= self.rotate_grace
        # a stale file is let go only once the writer has moved on to the new file
        moved_on = not f.stale or (t.cur is not None and t.cur.grew_at >= f.grew_at)
        if f.once or fst.st_size < f.offset or (quiet and moved_on):
            f.split.flush(out)                          # its unfinished last line will never be finished
            f.close()
            t.old.remove(f)
        return False

    def _retire(self, t: _Tail, out: list[Block], now: float) -> None:
        f, t.cur = t.cur, None
        assert f is not None                            # only a path with an open file is retired
        f.since = now
        t.old.append(f)
        t.stats.up = False
        self._drain(t, f, out, now)

    def _truncated(self, t: _Tail, out: list[Block], now: float) -> None:
        cur = t.cur
        assert cur is not None                          # only an open file can shrink under us
        copy = find_copy(os.path.realpath(t.path), cur.fp, cur.offset)
        f = self._reopen_at(t, copy, {"offset": cur.offset, "lineno": 0, "skip": False}, cur.fp) if copy else None
        if f is not None:
            # copytruncate: the lines between our offset and the truncation point are in the copy; our
            # splitter goes with it, to finish the line it holds
            f.split = cur.split
            f.once = True
            t.old.append(f)
            self._drain(t, f, out, now)
        else:
            cur.split.flush(out)
        cur.split = _Splitter(t.path, self.max_line_bytes)
        cur.seek(0)
        cur.fp = b""
        t.stats.truncations += 1

    def _open(self, t: _Tail, at_end: bool) -> bool:
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
            f = _File(fd, fst, os.path.realpath(t.path), _Splitter(t.path, self.max_line_bytes))
            f.seek(*self._join_point(fd, fst.st_size)) if at_end else f.seek(0)
            f.take_fp()
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

    def _join_point(self, fd: int, size: int) -> tuple[int, int, bool]:
        """Where to start reading a file joined at its end, the number of the line before it, and whether
        reading starts inside a line to discard.

        Starts after the last newline, so an unfinished last line is read whole once it is finished; one longer
        than the limit is skipped (reading starts at the end, inside a line to discard)."""
        if size == 0:
            return 0, 0, False
        back = min(size, self.max_line_bytes + 1)
        tail = os.pread(fd, back, size - back)
        j = tail.rfind(b"\n")
        if j >= 0:
            start = size - back + j + 1
        elif back == size:
            start = 0                               # one unfinished line, short enough: read it all
        else:
            start = -1                              # inside a too-long line
        lineno = 0
        if start != 0:
            counted_to = start if start > 0 else size
            if counted_to <= COUNT_EXISTING_MAX:
                pos = 0
                while pos < counted_to:
                    block = os.pread(fd, min(1 << 22, counted_to - pos), pos)
                    if not block:
                        break
                    lineno += block.count(b"\n")
                    pos += len(block)
        if start < 0:
            return size, lineno + 1, True       # the too-long line we are inside counts as line lineno + 1
        return start, lineno, False

    def _read(self, f: _File, out: list[Block], budget: int, now: float) -> bool:
        """Read what was appended to ``f``, at most ``budget`` bytes; True when it stopped at the budget."""
        fd = f.fd
        chunk = self.read_chunk
        split = f.split
        got = 0
        hit = False
        while True:
            data = os.read(fd, chunk)
            if not data:
                break
            f.offset += len(data)
            got += len(data)
            split.feed(data, out)
            if got >= budget:
                self.backlog = hit = True
                break
            if len(data) < chunk:
                break  # short read of a regular file: at its end (for now)
        if got:
            f.grew_at = now
            f.take_fp()
        return hit

    # -- the loop ---------------------------------------------------------------------------------------

    def watch_dirs(self) -> dict[str, bool]:
        """Directories whose changes should wake `run`, each with whether to watch it recursively."""
        dirs: dict[str, bool] = {}
        for pat in self.patterns:
            d = os.path.dirname(os.path.abspath(pat))
            recursive = False
            while _MAGIC.search(d):
                d = os.path.dirname(d)
                recursive = True
            if os.path.isdir(d):
                dirs[d] = dirs.get(d, False) or recursive
        for t in self._tails.values():
            if t.cur is not None:
                real = os.path.dirname(os.path.realpath(t.path))
                if real not in dirs and os.path.isdir(real):
                    dirs[real] = False
        return dirs

    def _interesting(self) -> tuple[tuple[str, ...], frozenset[str]]:
        names = set()
        for t in self._tails.values():
            names.add(os.path.abspath(t.path))
            if t.cur is not None:
                names.add(os.path.realpath(t.path))
        return tuple(os.path.abspath(p) for p in self.patterns), frozenset(names)

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
        wake = threading.Event()
        watcher = self._watcher = Watcher(wake, appends=wake_on_append)
        self.mode = watcher.mode
        refresh_watches = True
        had_lines = False
        try:
            while not stop.is_set() and not self._closed:
                polled_at = time.monotonic()
                lines = self.poll_blocks() if blocks else self.poll()
                if lines or had_lines:
                    # one empty call when the logs go quiet: the consumer emits what it holds (a traceback
                    # is often the last thing a crashing server prints; nothing follows to complete it)
                    try:
                        on_lines(lines)
                    except Exception:
                        log.exception("log line consumer failed")
                had_lines = bool(lines)
                if self.backlog:
                    continue
                if refresh_watches:      # directories only change on rotation or new files: the timer catches them
                    watcher.update(self.watch_dirs(), *self._interesting())
                    self.mode = watcher.mode
                deadline = polled_at + poll_interval
                woken = False
                while not stop.is_set():
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    if wake.wait(min(remaining, 0.5)):
                        woken = True
                        break
                wake.clear()
                refresh_watches = not woken
                if woken:
                    stop.wait(max(0.0, polled_at + min_interval - time.monotonic()))
        finally:
            watcher.stop()
            self._watcher = None

    def close(self) -> None:
        self._closed = True
        for t in self._tails.values():
            for f in ([t.cur] if t.cur is not None else []) + t.old:
                f.close()
            t.cur, t.old = None, []
            t.stats.up = False

    def __enter__(self):  # -> Self
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _fd_name(f: _File) -> str:
    """The rotated file's current name, for a log line (Linux), else its name when it was opened."""
    try:
        return os.readlink(f"/proc/self/fd/{f.fd}")
    except OSError:
        return f.name
