"""A followed path's open files: the one it names now and rotated-away ones still drained, each with where
reading goes on (and where the lines handed out end), plus the join point of a file joined at its end.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from exporter.ingest.lines import _Splitter
from exporter.ingest.positions import FINGERPRINT_BYTES
from exporter.ingest.rotation import head_matches

COUNT_EXISTING_MAX = 1 << 30      # line numbers of a file joined at its end: newlines counted up to this size


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


class OpenFile:
    """One open file of a followed path: the one the path names now, or one rotated away and being drained.

    ``offset`` is where reading continues; the splitter may hold the start of an unfinished line read before
    it, so the boundary of what was handed out is ``offset - len(split.buf)`` (`entry`)."""

    __slots__ = ("copy_after", "dev", "fd", "fp", "grew_at", "ino", "last_mtime", "last_size", "name", "offset", "once",
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
        # seen empty at offset 0 (no head yet): the newest mtime (ns) of it and its rotated siblings then; a
        # sibling written later is the copy, should it be copytruncated before we read a byte (recover.py)
        self.copy_after: int | None = None

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
            if self.fp:
                self.copy_after = None

    def read(self, out: list, chunk: int, budget: int, now: float) -> bool:
        """Read what was appended, in ``chunk``-sized reads, at most ``budget`` bytes, its lines into ``out``;
        True when it stopped at the budget."""
        fd, split = self.fd, self.split
        got = 0
        hit = False
        while True:
            data = os.read(fd, chunk)
            if not data:
                break
            self.offset += len(data)
            got += len(data)
            split.feed(data, out)
            if got >= budget:
                hit = True
                break
            if len(data) < chunk:
                break  # short read of a regular file: at its end (for now)
        if got:
            self.grew_at = now
            self.take_fp()
        return hit

    def entry(self) -> dict:
        e = {"dev": self.dev, "ino": self.ino, "offset": self.offset - len(self.split.buf),
             "lineno": self.split.lineno, "skip": self.split.discard, "fp": self.fp.hex(),
             "fp_len": len(self.fp), "name": self.name}
        if self.copy_after is not None and not self.fp and e["offset"] == 0:
            e["copy_after_ns"] = self.copy_after
        return e

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass


NO_FILE = {"dev": 0, "ino": 0, "offset": 0, "lineno": 0, "skip": False, "fp": "", "fp_len": 0, "name": ""}


class Tail:
    """One followed path: the file it names (``cur``) and rotated-away files still drained (``old``)."""

    __slots__ = ("cur", "had_file", "literal", "old", "path", "real", "stats", "warned")

    def __init__(self, path: str, literal: bool, stats: FollowStats) -> None:
        self.path = path
        self.real = os.path.realpath(path)   # what it named when first followed: another name for it is an alias
        self.literal = literal
        self.cur: OpenFile | None = None
        self.old: list[OpenFile] = []
        self.stats = stats
        self.warned: str | None = None
        self.had_file = False   # a file was open for this path before (its re-creation counts as a rotation)


def join_point(fd: int, size: int, max_line_bytes: int) -> tuple[int, int, bool]:
    """Where to start reading a file joined at its end, the number of the line before it, and whether
    reading starts inside a line to discard.

    Starts after the last newline, so an unfinished last line is read whole once it is finished; one longer
    than the limit is skipped (reading starts at the end, inside a line to discard)."""
    if size == 0:
        return 0, 0, False
    back = min(size, max_line_bytes + 1)
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


def open_at(path: str, e: dict, fp: bytes, split: _Splitter, same_inode: bool = False) -> OpenFile | None:
    """``path`` (a rotated file of a followed path) opened at the position ``e``, if it still has ``fp`` as its
    head and at least ``e["offset"]`` bytes; its lines go through ``split`` (the followed path's)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        fst = os.fstat(fd)
        ok = (fst.st_size >= e["offset"] and head_matches(fd, fp)
              and (not same_inode or (fst.st_dev, fst.st_ino) == (e["dev"], e["ino"])))
        if ok:
            f = OpenFile(fd, fst, path, split)
            f.seek(e["offset"], e["lineno"], e["skip"])
            f.fp = fp
            return f
    except OSError:
        pass
    os.close(fd)
    return None


def fd_name(f: OpenFile) -> str:
    """The rotated file's current name, for a log line (Linux), else its name when it was opened."""
    try:
        return os.readlink(f"/proc/self/fd/{f.fd}")
    except OSError:
        return f.name

