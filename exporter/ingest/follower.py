"""Physical lines from log files that are being written, losing none.

`Follower` tails files named by paths and globs: it survives rename rotation, copytruncate, truncation,
same-size rewrites, deletion and re-creation, files that do not exist yet and symlinks whose target changes
(kubelet's ``/var/log/containers`` links). `Follower.poll` is one deterministic, non-blocking pass;
`Follower.run` loops it, woken by inotify (watchdog) with a polling fallback. `read_lines` reads one whole file
(or stdin) with the same line splitting. What is guaranteed in each case, and the known limits:
docs/tailing.md.
"""
from __future__ import annotations

import glob
import logging
import os
import re
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase

log = logging.getLogger(__name__)

FINGERPRINT_BYTES = 1024          # head of the file compared each poll to detect rewrites
COUNT_EXISTING_MAX = 1 << 30      # line numbers of a file joined at its end: newlines counted up to this size
_MAGIC = re.compile(r"[*?[]")


@dataclass(slots=True)
class Line:
    """One physical line: ``text`` without its line ending; ``cut`` when it was longer than the limit and
    only its first ``max_line_bytes`` bytes are kept. ``lineno`` is 1-based within the current file."""

    source: str
    lineno: int
    text: str
    cut: bool = False


@dataclass(slots=True)
class Block:
    """Consecutive physical lines of one source: ``texts[i]`` is line ``first + i``. ``cuts`` of them were
    longer than the limit and cut. The splitter hands lines on in blocks so that the hot path (plain-text
    files, the common case) creates no object per line; `lines()` gives them one by one."""

    source: str
    first: int
    texts: list
    cuts: int = 0

    def lines(self) -> list[Line]:
        if self.cuts:
            # only single-line blocks carry a cut line
            return [Line(self.source, self.first, t, True) for t in self.texts]
        src = self.source
        return [Line(src, k, t) for k, t in enumerate(self.texts, self.first)]


def expand(blocks: list[Block]) -> list[Line]:
    out: list[Line] = []
    for b in blocks:
        out += b.lines()
    return out


@dataclass
class FollowStats:
    """Per source path (the exporter exports these as self-metrics)."""

    lines_read: int = 0
    rotations: int = 0       # the path now names another file (rename, delete + re-create, symlink switch)
    truncations: int = 0     # the same file shrank or its head was rewritten (copytruncate, truncate)
    lines_cut: int = 0       # lines longer than max_line_bytes, emitted cut
    up: bool = False         # the file is open and being read
    last_error: str | None = None


# ---------------------------------------------------------------------------------------------------------
# Line splitting, shared by the follower and read_lines


def _cut_point(data: bytes, limit: int) -> int:
    """Largest n <= limit such that data[:n] does not end inside a UTF-8 sequence."""
    n = limit
    # data[n] is the first byte left out; if it continues a character, back off to that character's start.
    while n > 0 and limit - n < 4 and (data[n] & 0xC0) == 0x80:
        n -= 1
    return n if limit - n < 4 else limit


class _Splitter:
    """Bytes chunks in, `Block`s of lines out. Holds at most ``max_line_bytes`` of an unfinished line."""

    __slots__ = ("buf", "cuts", "discard", "lineno", "max", "source")

    def __init__(self, source: str, max_line_bytes: int) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be >= 1")
        self.source = source
        self.max = max_line_bytes
        self.lineno = 0          # number of the last line emitted (or skipped)
        self.buf = bytearray()   # the unfinished last line
        self.discard = False     # inside the unkept rest of a cut line: drop bytes up to the next newline
        self.cuts = 0

    def reset(self, lineno: int = 0) -> None:
        self.lineno = lineno
        self.buf.clear()
        self.discard = False

    @property
    def holding(self) -> bool:
        return bool(self.buf)

    def _emit(self, out: list, raw: bytes) -> None:
        self.lineno += 1
        text = raw.decode("utf-8", "replace")
        text = text.removesuffix("\r")
        out.append(Block(self.source, self.lineno, [text]))

    def _emit_cut(self, out: list, raw: bytes) -> None:
        """raw is longer than the limit: keep its head, drop the rest of the line."""
        self.lineno += 1
        self.cuts += 1
        n = _cut_point(raw, self.max) if len(raw) > self.max else len(raw)
        out.append(Block(self.source, self.lineno, [raw[:n].decode("utf-8", "replace")], 1))

    def feed(self, data: bytes, out: list) -> None:
        mx = self.max
        if self.discard:
            i = data.find(b"\n")
            if i < 0:
                return
            data = data[i + 1:]
            self.discard = False
        buf = self.buf
        if buf:
            i = data.find(b"\n")
            if i < 0:
                if len(buf) + len(data) > mx:
                    buf += data[: mx + 1 - len(buf)]
                    self._emit_cut(out, bytes(buf))
                    buf.clear()
                    self.discard = True
                else:
                    buf += data
                return
            if len(buf) + i > mx:
                buf += data[: mx + 1 - len(buf)]
                self._emit_cut(out, bytes(buf))
            else:
                buf += data[:i]
                self._emit(out, bytes(buf))
            buf.clear()
            data = data[i + 1:]
        j = data.rfind(b"\n")
        if j >= 0:
            body = data[:j]
            tail = data[j + 1:]
            if len(body) > mx:
                # Some line in here may be too long: look at each.
                for raw in body.split(b"\n"):
                    if len(raw) > mx:
                        self._emit_cut(out, raw)
                    else:
                        self._emit(out, raw)
            else:
                # Fast path: no line here can exceed the limit. Decoding the whole body at once is safe:
                # an invalid UTF-8 sequence never swallows a b"\n", so lines map one to one.
                text = body.decode("utf-8", "replace")
                parts = text.split("\n")
                if "\r" in text:
                    parts = [p.removesuffix("\r") for p in parts]
                out.append(Block(self.source, self.lineno + 1, parts))
                self.lineno += len(parts)
        else:
            tail = data
        if tail:
            if len(tail) > mx:
                self._emit_cut(out, tail[: mx + 1])
                self.discard = True
            else:
                buf += tail

    def flush(self, out: list) -> None:
        """Emit the unfinished last line (end of input, or the file it belonged to is gone)."""
        if self.buf:
            self._emit(out, bytes(self.buf))
            self.buf.clear()
        self.discard = False


# ---------------------------------------------------------------------------------------------------------
# Whole-file reader


def read_lines(path: str, max_line_bytes: int = 1 << 20, chunk: int = 1 << 16) -> Iterator[Line]:
    """All lines of a file (``"-"``: stdin), last one included even without a newline.

    Opening happens now, so a missing file raises `FileNotFoundError` (or `PermissionError`,
    `IsADirectoryError`) from this call, not from the first iteration.
    """
    blocks = read_blocks(path, max_line_bytes, chunk)
    return (line for b in blocks for line in b.lines())


def read_blocks(path: str, max_line_bytes: int = 1 << 20, chunk: int = 1 << 18) -> Iterator[Block]:
    """`read_lines` in `Block`s (no object per line). Opens now, as `read_lines` does."""
    if path == "-":
        return _iter_stream(sys.stdin.buffer, "-", max_line_bytes, chunk, close=False)
    if os.path.isdir(path):
        raise IsADirectoryError(21, "Is a directory", path)
    f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by the generator
    return _iter_stream(f, path, max_line_bytes, chunk, close=True)


def _iter_stream(f, source: str, max_line_bytes: int, chunk: int, close: bool) -> Iterator[Block]:
    split = _Splitter(source, max_line_bytes)
    read = getattr(f, "read1", None) or f.read
    out: list[Block] = []
    try:
        while True:
            data = read(chunk)
            if not data:
                break
            split.feed(data, out)
            if out:
                yield from out
                out.clear()
        split.flush(out)
        yield from out
    finally:
        if close:
            f.close()


# ---------------------------------------------------------------------------------------------------------
# Follower


class _Tail:
    """One followed path and the file currently open for it."""

    __slots__ = (
        "dev",
        "fd",
        "fp",
        "had_file",
        "ino",
        "last_mtime",
        "last_size",
        "literal",
        "offset",
        "path",
        "split",
        "stats",
        "warned",
    )

    def __init__(self, path: str, literal: bool, stats: FollowStats, max_line_bytes: int) -> None:
        self.path = path
        self.literal = literal
        self.fd: int | None = None
        self.dev = self.ino = 0
        self.offset = 0
        self.split = _Splitter(path, max_line_bytes)
        self.fp = b""
        self.last_size = -1
        self.last_mtime = -1
        self.stats = stats
        self.warned: str | None = None
        self.had_file = False   # a file was open for this path before (its re-creation counts as a rotation)


class Follower:
    """Follows files named by ``patterns`` (paths or globs).

    Existing files are joined at their end (``from_start=True``: read whole); files that appear later are read
    from their start. `poll` returns the lines appended since the last poll, per file in order.
    """

    def __init__(self, patterns: list[str], from_start: bool = False, max_line_bytes: int = 1 << 20,
                 read_chunk: int = 1 << 16, poll_budget: int = 1 << 24) -> None:
        if isinstance(patterns, str):
            patterns = [patterns]
        self.patterns = list(dict.fromkeys(patterns))
        self.from_start = from_start
        self.max_line_bytes = max_line_bytes
        self.read_chunk = read_chunk
        self.poll_budget = poll_budget       # bytes read per file per poll; the rest waits for the next poll
        self.stats: dict[str, FollowStats] = {}
        self.mode: str | None = None         # "inotify" or "poll" once run() has started
        self.backlog = False                 # the last poll stopped at poll_budget with data left
        self._tails: dict[str, _Tail] = {}
        self._started = False
        self._closed = False
        self._watcher: _Watcher | None = None

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
        self._tails[path] = _Tail(path, literal, st, self.max_line_bytes)

    # -- the pass ---------------------------------------------------------------------------------------

    def poll(self) -> list[Line]:
        """One non-blocking pass over every followed file; the complete lines appended since the last one."""
        return expand(self.poll_blocks())

    def poll_blocks(self) -> list[Block]:
        """`poll` in `Block`s."""
        if self._closed:
            return []
        self._expand()
        out: list[Block] = []
        initial = not self._started
        self.backlog = False
        for tail in list(self._tails.values()):
            n0 = len(out)
            cuts0 = tail.split.cuts
            try:
                self._poll_tail(tail, out, initial)
            except OSError as exc:  # e.g. EIO: keep what we have, retry next poll
                self._problem(tail, f"{type(exc).__name__}: {exc}")
            tail.stats.lines_read += sum(len(b.texts) for b in out[n0:])
            tail.stats.lines_cut += tail.split.cuts - cuts0
            if tail.fd is None and not tail.literal and not os.path.lexists(tail.path):
                # A glob match that went away: forget it (stats stay); if it comes back it is a new file.
                del self._tails[tail.path]
        self._started = True
        return out

    def _problem(self, tail: _Tail, msg: str) -> None:
        tail.stats.last_error = msg
        if tail.warned != msg:
            tail.warned = msg
            log.warning("log source %s: %s", tail.path, msg)

    def _poll_tail(self, t: _Tail, out: list[Block], initial: bool) -> None:
        try:
            st = os.stat(t.path)
        except (FileNotFoundError, NotADirectoryError):
            st = None
        except OSError as exc:
            self._problem(t, f"cannot stat: {exc.strerror or exc}")
            st = None
        if st is None:
            if t.fd is not None:
                if os.fstat(t.fd).st_nlink == 0:
                    # Deleted: read what is left, then let go of it (holding it would pin its disk space).
                    self._read(t, out, None)
                    self._retire(t, out)
                else:
                    # Renamed away and nothing at the path yet: the writer may still append to it.
                    self._read(t, out, self.poll_budget)
            else:
                t.stats.up = False
            return
        if not stat.S_ISREG(st.st_mode):
            if t.fd is not None:
                self._read(t, out, None)
                self._retire(t, out)
            t.stats.up = False
            self._problem(t, "not a regular file")
            return
        if t.fd is None:
            had = t.had_file
            if not self._open(t, at_end=initial and not self.from_start):
                return
            if had:
                t.stats.rotations += 1                  # deleted earlier, re-created now
        elif st.st_ino != t.ino or st.st_dev != t.dev:
            # The path names another file now: finish the old one first, it will never be completed.
            self._read(t, out, None)
            self._retire(t, out)
            t.stats.rotations += 1
            if not self._open(t, at_end=False):
                return
        elif st.st_size < t.offset:
            self._restart(t, out)                       # truncated (copytruncate, > file, truncate -s)
        elif (st.st_size != t.last_size or st.st_mtime_ns != t.last_mtime) and not self._same_head(t):
            self._restart(t, out)                       # rewritten to the same size or larger
        t.last_size = st.st_size
        t.last_mtime = st.st_mtime_ns
        if st.st_size > t.offset:
            self._read(t, out, self.poll_budget)
        if len(t.fp) < FINGERPRINT_BYTES and t.offset > len(t.fp) and t.fd is not None:
            t.fp = os.pread(t.fd, min(FINGERPRINT_BYTES, t.offset), 0)

    def _same_head(self, t: _Tail) -> bool:
        n = len(t.fp)
        return n == 0 or os.pread(t.fd, n, 0) == t.fp

    def _restart(self, t: _Tail, out: list[Block]) -> None:
        t.split.flush(out)
        t.split.reset()
        os.lseek(t.fd, 0, os.SEEK_SET)
        t.offset = 0
        t.fp = b""
        t.stats.truncations += 1

    def _retire(self, t: _Tail, out: list[Block]) -> None:
        t.split.flush(out)
        t.split.reset()
        try:
            os.close(t.fd)
        except OSError:
            pass
        t.fd = None
        t.fp = b""
        t.stats.up = False

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
            start, lineno, discard = self._join_point(fd, fst.st_size) if at_end else (0, 0, False)
            os.lseek(fd, start, os.SEEK_SET)
        except OSError as exc:
            os.close(fd)
            self._problem(t, f"cannot read: {exc.strerror or exc}")
            return False
        t.fd, t.dev, t.ino = fd, fst.st_dev, fst.st_ino
        t.offset = start
        t.split.reset(lineno)
        t.split.discard = discard
        t.fp = b""
        t.last_size = t.last_mtime = -1
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

    def _read(self, t: _Tail, out: list[Block], budget: int | None) -> None:
        fd = t.fd
        chunk = self.read_chunk
        split = t.split
        got = 0
        while True:
            data = os.read(fd, chunk)
            if not data:
                break
            t.offset += len(data)
            got += len(data)
            split.feed(data, out)
            if budget is not None and got >= budget:
                self.backlog = True
                break
            if len(data) < chunk and budget is not None:
                break  # short read of a regular file: at its end (for now)

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
            if t.fd is not None:
                real = os.path.dirname(os.path.realpath(t.path))
                if real not in dirs and os.path.isdir(real):
                    dirs[real] = False
        return dirs

    def _interesting(self) -> tuple[tuple[str, ...], frozenset[str]]:
        names = set()
        for t in self._tails.values():
            names.add(os.path.abspath(t.path))
            if t.fd is not None:
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
        watcher = self._watcher = _Watcher(wake, appends=wake_on_append)
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
            if t.fd is not None:
                try:
                    os.close(t.fd)
                except OSError:
                    pass
                t.fd = None
                t.stats.up = False

    def __enter__(self):  # -> Self
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _make_observer():
    from watchdog.observers import Observer

    return Observer()


_IGNORED_EVENTS = frozenset(("opened", "closed_no_write"))


def _structural_events() -> list:
    from watchdog.events import (
        DirCreatedEvent,
        DirDeletedEvent,
        DirMovedEvent,
        FileCreatedEvent,
        FileDeletedEvent,
        FileMovedEvent,
    )
    return [FileCreatedEvent, FileDeletedEvent, FileMovedEvent, DirCreatedEvent, DirDeletedEvent, DirMovedEvent]


class _Watcher:
    """watchdog observer over a changing set of directories; sets ``wake`` on relevant changes."""

    def __init__(self, wake: threading.Event, appends: bool = True) -> None:
        self.wake = wake
        self.appends = appends      # False: structural changes only (create, move, delete), no per-write events
        self.watches: dict[tuple[str, bool], object] = {}
        self.patterns: tuple[str, ...] = ()
        self.names: frozenset[str] = frozenset()
        self.observer = None
        self.mode = "poll"
        try:
            from watchdog.events import FileSystemEventHandler

            watcher = self

            class _Handler(FileSystemEventHandler):
                def on_any_event(self, event) -> None:
                    watcher._event(event)

            self.handler = _Handler()
            self.observer = _make_observer()
            self.observer.start()
            self.mode = "inotify"
        except Exception as exc:  # noqa: BLE001 - any failure here means: poll
            log.warning("file change notification unavailable (%s); polling instead", exc)
            self.observer = None

    def _event(self, event) -> None:
        if event.event_type in _IGNORED_EVENTS:
            return
        for p in (event.src_path, getattr(event, "dest_path", "")):
            if not p:
                continue
            if isinstance(p, bytes):
                p = os.fsdecode(p)
            if p in self.names or any(fnmatchcase(p, pat) for pat in self.patterns):
                self.wake.set()
                return

    def update(self, dirs: dict[str, bool], patterns: tuple[str, ...], names: frozenset[str]) -> None:
        self.patterns, self.names = patterns, names
        if self.observer is None:
            return
        wanted = set(dirs.items())
        for key in list(self.watches):
            if key not in wanted:
                try:
                    self.observer.unschedule(self.watches.pop(key))
                except Exception as exc:  # noqa: BLE001 - the directory may be gone already
                    log.debug("unwatch %s: %s", key[0], exc)
        for key in wanted:
            if key in self.watches:
                continue
            try:
                self.watches[key] = self.observer.schedule(self.handler, key[0], recursive=key[1],
                                                           event_filter=None if self.appends else _structural_events())
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            except Exception as exc:  # noqa: BLE001 - inotify limits: fall back to polling
                log.warning("cannot watch %s (%s); polling instead", key[0], exc)
                self.stop()
                self.mode = "poll"
                return

    def stop(self) -> None:
        obs, self.observer = self.observer, None
        if obs is not None:
            try:
                obs.stop()
                obs.join(timeout=5)
            except Exception as exc:  # noqa: BLE001 - stopping is best effort
                log.debug("stopping the file observer: %s", exc)
