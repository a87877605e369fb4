"""Bytes to physical lines: the splitter the follower feeds, and `read_lines` / `read_blocks` for whole files
(gzip, bzip2 and xz ones decompressed: rotated logs are often compressed).

A line is cut at ``max_line_bytes`` (never inside a UTF-8 character) and the rest dropped up to its newline;
invalid UTF-8 is replaced; one trailing ``\r`` is removed. Lines travel in `Block`s, so the hot path creates
no object per line.
"""
from __future__ import annotations

import importlib
import io
import logging
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass

log = logging.getLogger(__name__)

# the first bytes of the compressed files Python's standard library reads, and its module for each
COMPRESSED_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bz2", b"\xfd7zXZ\x00": "lzma"}
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"          # read by no standard module: named in the error

# A terminal's control sequences (colours, cursor moves): uvicorn colours its level names and status codes
# when its output is a terminal (`docker run -t`, `tty: true` in a pod), and tqdm moves the cursor. They are
# no part of what a line says, and `INFO` wrapped in colour codes would not read as a log level.
ANSI_SEQUENCE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


# Bytes per read of a whole file, and so per Block: small enough that a block's bytes, their decoded text and
# its lines' strings (about three times the block) stay in a core's 512 KiB L2 cache while the parser walks
# them, and that glibc keeps the heap a block frees for the next one. With 256 KiB blocks the heap grew by about
# 1 MiB and was handed back to the kernel at every block: `analyze` of a 1M-line realistic log made 152,000 page
# faults (0.9 s of system time) and 6-8 % more CPU besides; with 64 KiB it makes 4,400 (0.13 s). The per-block
# work is ~220 lines' worth either way. The follower reads as much (follower.py).
BLOCK_BYTES = 1 << 16


def strip_ansi(text: str) -> str:
    return ANSI_SEQUENCE.sub("", text) if "\x1b" in text else text


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
        text = strip_ansi(raw.decode("utf-8", "replace"))
        text = text.removesuffix("\r")
        out.append(Block(self.source, self.lineno, [text]))

    def _emit_cut(self, out: list, raw: bytes) -> None:
        """raw is longer than the limit: keep its head, drop the rest of the line."""
        self.lineno += 1
        self.cuts += 1
        n = _cut_point(raw, self.max) if len(raw) > self.max else len(raw)
        out.append(Block(self.source, self.lineno, [strip_ansi(raw[:n].decode("utf-8", "replace"))], 1))

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
                # Fast path: no line here can exceed the limit. An invalid UTF-8 sequence never swallows a
                # b"\n", so decoding the body at once or line by line gives the same lines.
                if body.isascii():
                    parts = strip_ansi(body.decode()).split("\n")     # one look per chunk for an escape
                else:
                    # line by line: one character past Latin-1 (a prompt's CJK, an emoji, a curly quote)
                    # makes the whole decoded body 2 or 4 bytes a character, and splitting it then copies
                    # every ASCII line through that width (reading such a block: -40 %, bench/README). The
                    # lines are found by readlines, which looks for each newline with memchr, where
                    # bytes.split compares every byte: a third less to read a log of request logs
                    lines = io.BytesIO(data).readlines()
                    if tail:
                        lines.pop()      # (the unfinished last line, kept below)
                    parts = [raw[:-1].decode("utf-8", "replace") for raw in lines]
                    if b"\x1b" in body:         # (one look per chunk here too: decoding makes no escape)
                        parts = [strip_ansi(part) for part in parts]
                if b"\r" in body:
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


def read_lines(path: str, max_line_bytes: int = 1 << 20, chunk: int = BLOCK_BYTES) -> Iterator[Line]:
    """All lines of a file (``"-"``: stdin), last one included even without a newline.

    Opening happens now, so a missing file raises `FileNotFoundError` (or `PermissionError`,
    `IsADirectoryError`) from this call, not from the first iteration.
    """
    blocks = read_blocks(path, max_line_bytes, chunk)
    return (line for b in blocks for line in b.lines())


def read_blocks(path: str, max_line_bytes: int = 1 << 20, chunk: int = BLOCK_BYTES) -> Iterator[Block]:
    """`read_lines` in `Block`s (no object per line). Opens now, as `read_lines` does."""
    if path == "-":
        stdin = sys.stdin.buffer
        kind = compression(stdin.peek(8)[:8]) if hasattr(stdin, "peek") else None
        if kind is None:
            return _iter_stream(stdin, "-", max_line_bytes, chunk, close=False)
        return _decompressed(kind, stdin, "-", max_line_bytes, chunk)
    if os.path.isdir(path):
        raise IsADirectoryError(21, "Is a directory", path)
    f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by the generator
    kind = compression(f.read(8))
    if kind is None:
        f.seek(0)
        return _iter_stream(f, path, max_line_bytes, chunk, close=True)
    f.close()
    return _decompressed(kind, path, path, max_line_bytes, chunk)


def _decompressed(kind: str, file, source: str, max_line_bytes: int, chunk: int) -> Iterator[Block]:
    """`_iter_stream` of ``file`` (a path, or a stream left open) decompressed by the standard module ``kind``."""
    module = importlib.import_module(kind)        # imported when met: most logs are plain
    damaged = (EOFError, OSError) + ((module.LZMAError,) if kind == "lzma" else ())
    return _iter_stream(module.open(file, "rb"), source, max_line_bytes, chunk, close=True, damaged=damaged)


def compression(head: bytes) -> str | None:
    """The standard module that decompresses a file starting with ``head`` (``gzip``, ``bz2``, ``lzma``), or
    None for a file read as it is."""
    return next((kind for magic, kind in COMPRESSED_MAGIC.items() if head.startswith(magic)), None)


def read_range(path: str, start: int, end: int, max_line_bytes: int = 1 << 20,
               chunk: int = BLOCK_BYTES) -> Iterator[Block]:
    """`read_blocks` of bytes [start, end) of a file (line numbers count from 1 at `start`). Opens now."""
    return _iter_stream(_Range(path, start, end), path, max_line_bytes, chunk, close=True)


class _Range:
    """A file object that reads only bytes [start, end) of a file."""

    def __init__(self, path: str, start: int, end: int):
        self._fh = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by _iter_stream
        self._fh.seek(start)
        self._left = max(0, end - start)

    def read(self, n: int) -> bytes:
        if self._left <= 0:
            return b""
        data = self._fh.read(min(n, self._left))
        self._left -= len(data)
        return data

    def close(self) -> None:
        self._fh.close()


def _iter_stream(f, source: str, max_line_bytes: int, chunk: int, close: bool,
                 damaged: tuple = ()) -> Iterator[Block]:
    """Blocks of the lines of binary stream ``f``; ``damaged``: the errors that mean a compressed file is
    damaged or cut short (one still being compressed), after which what was read is kept, with a warning."""
    split = _Splitter(source, max_line_bytes)
    read = getattr(f, "read1", None) or f.read
    out: list[Block] = []
    try:
        while True:
            try:
                data = read(chunk)
            except damaged as exc:
                log.warning("%s: the compressed data is damaged or cut short (%s); its lines up to there are "
                            "read", source, exc)
                break
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

