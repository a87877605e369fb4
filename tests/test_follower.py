"""The file follower: rotation matrix, partial and long lines, odd bytes, discovery, the inotify loop.

No sleeps as waits: the follower is driven by calling poll() directly; the one threaded test polls with a
deadline (helpers.wait_until).
"""
from __future__ import annotations

import io
import json
import os
import shutil
import sys
import threading
import tracemalloc
from pathlib import Path

import pytest
from helpers import wait_until
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.ingest import follower as follower_mod
from exporter.ingest import watch as watch_mod
from exporter.ingest.containers import ContainerDecoder
from exporter.ingest.follower import Follower, FollowStats, Line, _cut_point, _Splitter, expand, read_lines
from exporter.ingest.lines import strip_ansi
from exporter.ingest.positions import PositionsError
from exporter.sidecar import checkpoint
from exporter.sidecar.checkpoint import CheckpointError


def texts(lines: list[Line]) -> list[str]:
    return [ln.text for ln in lines]


def numbered(i: int) -> str:
    # Varying widths, so segments never line up byte for byte by accident.
    return f"line {i:05d} " + "x" * (i % 7)


# ---------------------------------------------------------------------------------------------------------
# Rotation matrix


class LogWriter:
    """A program writing numbered lines to a log, and the rotation that `mode` describes.

    `starts` records the index of the first line of each file, so the expected line numbers follow.
    `on_write` is called after every write() (the driver polls on its own cadence); `poll` is called at the
    moments a scenario wants the follower to look (between a rename and the re-creation, before a truncation).
    """

    def __init__(self, d: Path, mode: str, pieces: int, on_write, poll) -> None:
        self.d, self.mode, self.pieces, self.on_write, self.poll = d, mode, pieces, on_write, poll
        self.nrot = 0
        if mode == "symlink":
            self.path = d / "current.log"
            target = d / "seg0.log"
            target.touch()
            os.symlink(target, self.path)
        else:
            self.path = d / "app.log"
            target = self.path
        self.fh = open(target, "ab", buffering=0)  # noqa: SIM115
        self.starts = [0]
        self.next = 0
        self.lag = 0

    def line(self, i: int) -> None:
        data = (numbered(i) + "\n").encode()
        k = max(1, len(data) // self.pieces)
        cuts = [data[j:j + k] for j in range(0, k * (self.pieces - 1), k)] + [data[k * (self.pieces - 1):]]
        for piece in cuts:
            self.fh.write(piece)
            self.on_write()
        self.next = i + 1
        if self.lag:
            self.lag -= 1
            if not self.lag:
                self._recreate()

    def _recreate(self) -> None:
        if self.mode == "rename_poll_between":
            self.poll()               # path still missing; the old file has the lag lines
        self.fh.close()
        self.fh = open(self.path, "ab", buffering=0)  # noqa: SIM115
        self.starts.append(self.next)

    def rotate(self) -> None:
        self.nrot += 1
        m = self.mode
        if m in ("rename", "rename_poll_between"):
            os.rename(self.path, f"{self.path}.{self.nrot}")
            if m == "rename_poll_between":
                self.poll()
            self.lag = 3              # the program keeps writing to the renamed file for a while
        elif m == "copytruncate":
            self.poll()               # caught up: the guarantee is "no loss when the follower has caught up"
            shutil.copyfile(self.path, f"{self.path}.{self.nrot}")
            os.truncate(self.path, 0)  # the program's O_APPEND fd now writes at 0
            self.starts.append(self.next)
        elif m == "truncate":
            self.poll()               # truncation destroys unread data: drain first
            self.fh.close()
            self.fh = open(self.path, "wb", buffering=0)  # noqa: SIM115
            self.starts.append(self.next)
        elif m in ("delete_recreate", "delete_poll_between"):
            os.unlink(self.path)      # the follower's open fd keeps the unread rest readable
            if m == "delete_poll_between":
                self.poll()
            self.fh.close()
            self.fh = open(self.path, "ab", buffering=0)  # noqa: SIM115
            self.starts.append(self.next)
        elif m == "symlink":
            new = self.d / f"seg{self.nrot}.log"
            new.touch()
            tmp = self.d / "link.tmp"
            os.symlink(new, tmp)
            os.replace(tmp, self.path)  # atomic switch, as kubelet does for a restarted container
            self.fh.close()
            self.fh = open(new, "ab", buffering=0)  # noqa: SIM115
            self.starts.append(self.next)
        else:
            raise AssertionError(m)

    def expected_linenos(self, n: int) -> list[int]:
        out = []
        for i in range(n):
            start = max(s for s in self.starts if s <= i)
            out.append(i - start + 1)
        return out


MODES = ["rename", "rename_poll_between", "copytruncate", "truncate", "delete_recreate", "delete_poll_between",
         "symlink"]
ROTATE_AT = (70, 140)   # segments of 70, 70 and 60 lines: the second has the first's size (fingerprint case)


def _poll_every(poll_every: int):
    """(lines got, box for the follower under test, poll(), on_write()): on_write polls every poll_every-th
    write, so a matrix case polls between the pieces of a rotation as often or as seldom as it says."""
    got: list[Line] = []
    box: dict = {}
    writes = [0]

    def poll():
        got.extend(box["f"].poll())

    def on_write():
        writes[0] += 1
        if writes[0] % poll_every == 0:
            poll()

    return got, box, poll, on_write


# poll-every-61: many writes (and a rotation) between two polls, but at most one rotation per poll interval;
# two rotations without a poll in between skip the middle file (test_two_rotations_between_polls_...).
# named by a glob (`app.log*`): the rotated copies (app.log.1, ...) match too, and are read once, as part of
# app.log's rotation (the symlink layout's targets are other files by name, so it has no glob case)
NAMED = [(mode, named) for mode in MODES for named in ("path", "glob") if (mode, named) != ("symlink", "glob")]


@pytest.mark.parametrize("poll_every", [1, 4, 61], ids=["poll-each-write", "poll-every-4", "poll-every-61"])
@pytest.mark.parametrize("pieces", [1, 3], ids=["whole-lines", "lines-in-3-writes"])
@pytest.mark.parametrize(("mode", "named"), NAMED)
def test_rotation_matrix_every_line_once_in_order(tmp_path, mode, named, pieces, poll_every):
    n = 200
    got, box, poll, on_write = _poll_every(poll_every)
    w = LogWriter(tmp_path, mode, pieces, on_write, poll)
    f = box["f"] = Follower([str(w.path) + ("*" if named == "glob" else "")], from_start=True)
    poll()
    for i in range(n):
        if i in ROTATE_AT:
            w.rotate()
        w.line(i)
    poll()
    w.fh.close()

    assert texts(got) == [numbered(i) for i in range(n)]
    assert [ln.lineno for ln in got] == w.expected_linenos(n)
    assert not any(ln.cut for ln in got)
    assert {ln.source for ln in got} == {str(w.path)} and set(f.stats) == {str(w.path)}
    stats = f.stats[str(w.path)]
    if mode in ("copytruncate", "truncate"):
        assert (stats.rotations, stats.truncations) == (0, 2)
    else:
        assert (stats.rotations, stats.truncations) == (2, 0)
    assert stats.lines_read == n and stats.up
    f.close()


@pytest.mark.parametrize("poll_every", [1, 3, 100])
@pytest.mark.parametrize("pieces", [1, 2])
def test_rotation_matrix_cri_partials_through_decoder(tmp_path, pieces, poll_every):
    """CRI logical lines split into P/P/F physical lines, with rename rotations between them."""
    got, box, poll, on_write = _poll_every(poll_every)
    w = LogWriter(tmp_path, "rename", pieces, on_write, poll)
    f = box["f"] = Follower([str(w.path)], from_start=True)
    poll()
    messages = []
    for i in range(60):
        if i in (20, 40):
            w.rotate()
            w.lag = 0
            w._recreate()
        msg = f"[2025-08-11 17:17:03 TP{i % 2}] Decode batch. #running-req: {i}, #queue-req: {i * 3}"
        messages.append(msg)
        a, b = msg[:15], msg[15:30]
        stream = "stderr" if i % 3 else "stdout"
        for tag, part in (("P", a), ("P", b), ("F", msg[30:])):
            data = f"2025-08-11T17:17:03.{i:09d}Z {stream} {tag} {part}\n".encode()
            k = max(1, len(data) // pieces)
            for j in range(0, len(data), k):
                w.fh.write(data[j:j + k])
                on_write()
    poll()
    dec = ContainerDecoder()
    recs = [r for ln in got if (r := dec.feed(ln.lineno, ln.text)) is not None] + dec.flush_all()
    assert dec.format == "cri"
    assert [r.text for r in recs] == messages
    assert recs[0].time == "2025-08-11T17:17:03.000000000Z" and recs[0].stream == "stdout"
    assert [r.lineno for r in recs[:3]] == [1, 4, 7]
    assert recs[20].lineno == 1                     # first record of the second file
    f.close()


def test_copytruncate_unread_tail_is_read_from_the_copy(tmp_path):
    """Lines written after the follower's last poll and before the truncation are gone from the file, but
    the copy holds them: they are read from it (from our offset), then the file from 0."""
    p = tmp_path / "app.log"
    p.write_text("".join(f"{numbered(i)}\n" for i in range(10)))
    f = Follower([str(p)], from_start=True)
    assert len(f.poll()) == 10
    with open(p, "a") as fh:
        fh.write("".join(f"{numbered(i)}\n" for i in range(10, 15)) + "half of 15")   # not yet read ...
    (tmp_path / "app.log.2").write_text(numbered(0) + "\n")    # an older copy: its head differs
    shutil.copyfile(p, tmp_path / "app.log.1")
    os.truncate(p, 0)                                                  # ... and gone from the file
    with open(p, "a") as fh:
        fh.write("".join(f"{numbered(i)}\n" for i in range(16, 20)))
    lines = f.poll()
    assert texts(lines) == [numbered(i) for i in range(10, 15)] + ["half of 15"] + [numbered(i) for i in range(16, 20)]
    assert [ln.lineno for ln in lines] == [11, 12, 13, 14, 15, 16, 1, 2, 3, 4]
    assert f.stats[str(p)].truncations == 1 and f.stats[str(p)].rotated_unread == 0
    assert {ln.source for ln in lines} == {str(p)}


def test_copytruncate_without_a_copy_restarts_at_zero(tmp_path):
    """The copy compressed away before the poll (no delaycompress): what was unread is lost, the rest is
    read from 0."""
    p = tmp_path / "app.log"
    p.write_text("".join(f"{numbered(i)}\n" for i in range(10)))
    f = Follower([str(p)], from_start=True)
    assert len(f.poll()) == 10
    with open(p, "a") as fh:
        fh.write(numbered(10) + "\n")
    shutil.copyfile(p, tmp_path / "app.log.1.gz")                      # compressed: not readable
    os.truncate(p, 0)
    with open(p, "a") as fh:
        fh.write(numbered(11) + "\n")
    assert texts(f.poll()) == [numbered(11)]
    assert f.stats[str(p)].truncations == 1


def test_two_rotations_between_polls_read_the_middle_file(tmp_path):
    """A file created and rotated away again between two polls is read between the two: found among the
    rotated siblings, newer than the file read before by its name and its modification time."""
    p = tmp_path / "app.log"
    p.write_text("first\n")
    f = Follower([str(p)], from_start=True)
    assert texts(f.poll()) == ["first"]
    with open(p, "a") as fh:
        fh.write("first, after the poll\n")
    os.rename(p, tmp_path / "app.log.1")
    p.write_text("middle\n")
    os.rename(tmp_path / "app.log.1", tmp_path / "app.log.2")
    os.rename(p, tmp_path / "app.log.1")
    p.write_text("last\n")
    assert texts(f.poll()) == ["first, after the poll", "middle", "last"]
    assert f.stats[str(p)].rotations == 2


def test_larger_rewrite_detected_by_head_fingerprint(tmp_path):
    p = tmp_path / "app.log"
    p.write_text("alpha 1\nalpha 2\n")
    f = Follower([str(p)], from_start=True)
    assert texts(f.poll()) == ["alpha 1", "alpha 2"]
    p.write_text("bravo 1\nbravo 2\nbravo 3\n")   # truncated and rewritten larger between two polls
    lines = f.poll()
    assert texts(lines) == ["bravo 1", "bravo 2", "bravo 3"] and [ln.lineno for ln in lines] == [1, 2, 3]
    assert f.stats[str(p)].truncations == 1


def test_held_partial_emitted_when_file_truncated_or_rotated(tmp_path):
    p = tmp_path / "app.log"
    p.write_bytes(b"done\nhalf a li")
    now = [0.0]
    f = Follower([str(p)], from_start=True, rotate_grace=5.0, clock=lambda: now[0])
    assert texts(f.poll()) == ["done"]
    p.write_bytes(b"")                           # truncated: "half a li" will never be finished
    assert texts(f.poll()) == ["half a li"]
    with open(p, "ab") as fh:
        fh.write(b"new\nagain half")
    assert texts(f.poll()) == ["new"]
    os.rename(p, tmp_path / "app.log.1")
    p.write_bytes(b"fresh\n")
    assert [(ln.text, ln.lineno) for ln in f.poll()] == [("fresh", 1)]
    with open(tmp_path / "app.log.1", "ab") as fh:
        fh.write(b" done\nlate half")            # the writer reopens late: the renamed file is read on
    assert [(ln.text, ln.lineno) for ln in f.poll()] == [("again half done", 2)]
    now[0] += 5.0                                # quiet for the grace period: let go, held half emitted
    assert [(ln.text, ln.lineno) for ln in f.poll()] == [("late half", 3)]
    assert f.tails[str(p)].old == [] and not f.stats[str(p)].stale


def test_deleted_file_is_released_and_read_again_when_recreated(tmp_path):
    p = tmp_path / "app.log"
    p.write_text("a\n")
    f = Follower([str(p)], from_start=True)
    assert texts(f.poll()) == ["a"]
    with open(p, "a") as fh:
        fh.write("b\n")
    os.unlink(p)
    assert texts(f.poll()) == ["b"]               # drained from the open fd ...
    assert f.stats[str(p)].up is False            # ... then let go
    assert f.poll() == []
    p.write_text("c\n")
    assert texts(f.poll()) == ["c"] and f.stats[str(p)].up and f.stats[str(p)].rotations == 1


# ---------------------------------------------------------------------------------------------------------
# Lines: partial, long, odd bytes


def test_partial_line_held_until_newline(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"")
    f = Follower([str(p)])
    assert f.poll() == []
    for piece in (b"[2025", b"-08-11 17:17:03] Deco", b"de batch.", b"\nnext"):
        with open(p, "ab") as fh:
            fh.write(piece)
        lines = f.poll()
        if piece.startswith(b"\n"):
            assert texts(lines) == ["[2025-08-11 17:17:03] Decode batch."] and lines[0].lineno == 1
        else:
            assert lines == []


def test_long_line_cut_and_counted(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"short\n" + b"A" * 1000 + b"\nok\n" + b"B" * 250)
    f = Follower([str(p)], from_start=True, max_line_bytes=100, read_chunk=64)
    lines = f.poll()
    assert [(ln.lineno, ln.text, ln.cut) for ln in lines] == [
        (1, "short", False), (2, "A" * 100, True), (3, "ok", False), (4, "B" * 100, True)]
    with open(p, "ab") as fh:
        fh.write(b"B" * 300 + b"\nafter\n")        # rest of the cut line: discarded up to its newline
    assert [(ln.lineno, ln.text) for ln in f.poll()] == [(5, "after")]
    assert f.stats[str(p)].lines_cut == 2 and f.stats[str(p)].lines_read == 5


def test_cut_does_not_split_a_utf8_character():
    out: list[Line] = []
    s = _Splitter("x", 5)
    s.feed("abcdé€xyz\n".encode(), out)          # 'é' spans bytes 4-5: cut before it
    assert expand(out) == [Line("x", 1, "abcd", True)]
    assert _cut_point("€€".encode(), 4) == 3


@pytest.mark.parametrize(("max_line_bytes", "peak_limit"), [(1 << 16, 1 << 20), (1 << 20, 6 << 20)])
def test_ten_megabyte_line_without_newline_keeps_memory_bounded(tmp_path, max_line_bytes, peak_limit):
    p = tmp_path / "a.log"
    p.write_bytes(b"")
    f = Follower([str(p)], max_line_bytes=max_line_bytes)
    f.poll()
    with open(p, "ab") as fh:
        fh.writelines(b"Z" * (1 << 20) for _ in range(10))
    tracemalloc.start()
    try:
        lines = f.poll()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(len(ln.text), ln.cut) for ln in lines] == [(max_line_bytes, True)]
    assert peak < peak_limit, f"peak {peak} bytes while reading a 10 MiB line"
    assert len(f.tails[str(p)].cur.split.buf) == 0
    with open(p, "ab") as fh:
        fh.write(b"Z" * 1000 + b"\nnext line\n")
    assert [(ln.lineno, ln.text) for ln in f.poll()] == [(2, "next line")]


def test_invalid_utf8_replaced_and_crlf_stripped(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"caf\xe9 \xff\xfe\nwindows\r\n\xe2\x82\n")
    f = Follower([str(p)], from_start=True)
    assert texts(f.poll()) == ["caf\ufffd \ufffd\ufffd", "windows", "\ufffd"]


def test_binary_junk_does_not_crash(tmp_path):
    import random

    rnd = random.Random(7)
    junk = bytes(rnd.getrandbits(8) for _ in range(300_000))
    p = tmp_path / "a.bin"
    p.write_bytes(b"")
    f = Follower([str(p)], max_line_bytes=4096)
    f.poll()
    with open(p, "ab") as fh:
        fh.write(junk + b"\n")
    lines = f.poll()
    assert len(lines) == junk.count(b"\n") + 1
    assert all(isinstance(ln.text, str) for ln in lines)
    assert [ln.lineno for ln in lines] == list(range(1, len(lines) + 1))


def _reference_lines(data: bytes, mx: int) -> list[tuple[int, str, bool]]:
    raw_lines = data.split(b"\n")
    if raw_lines[-1] == b"":
        raw_lines.pop()
    out = []
    for n, raw in enumerate(raw_lines, 1):
        if len(raw) > mx:
            out.append((n, raw[:_cut_point(raw, mx)].decode("utf-8", "replace"), True))
        else:
            text = raw.decode("utf-8", "replace")
            out.append((n, text.removesuffix("\r"), False))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"\n", b"a", b"bc", b"\xc3\xa9", b"\xc3", b"\xa9", b"\r", b"\xe2\x82\xac", b"zzzzz"]),
                max_size=80),
       st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=30),
       st.integers(min_value=1, max_value=9))
def test_any_chunking_gives_the_same_lines(tokens, sizes, mx):
    data = b"".join(tokens)
    out: list[Line] = []
    s = _Splitter("x", mx)
    pos = k = 0
    while pos < len(data):
        step = sizes[k % len(sizes)]
        s.feed(data[pos:pos + step], out)
        pos += step
        k += 1
    s.flush(out)
    assert [(ln.lineno, ln.text, ln.cut) for ln in expand(out)] == _reference_lines(data, mx)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"\n", b"ab", b"\r", b"\x1b[31m", b"\x1b[0m", b"\x1b[", b"\xc3\xa9", b"\xc3",
                                 b"\xe4\xb8\xad", b"\xf0\x9f\x99\x82", b"\xf0\x9f", b"\xa9"]), max_size=120),
       st.integers(min_value=1, max_value=64))
def test_a_block_gives_the_lines_each_line_decoded_alone_gives(tokens, chunk):
    """The splitter decodes an ASCII block at once and any other line by line (a wide character would widen
    the whole block): either way each line is what decoding it alone gives, escapes stripped, \\r dropped."""
    data = b"".join(tokens)
    out: list = []
    s = _Splitter("x", 1 << 20)
    for pos in range(0, len(data), chunk):
        s.feed(data[pos:pos + chunk], out)
    s.flush(out)
    raw_lines = data.split(b"\n")
    if raw_lines[-1] == b"":
        raw_lines.pop()
    want = [strip_ansi(raw.decode("utf-8", "replace")).removesuffix("\r") for raw in raw_lines]
    assert [ln.text for ln in expand(out)] == want


# ---------------------------------------------------------------------------------------------------------
# Discovery and start position


def test_missing_at_start_then_created(tmp_path):
    p = tmp_path / "later.log"
    f = Follower([str(p)])
    assert f.poll() == []
    assert f.stats[str(p)] == FollowStats(up=False)
    p.write_text("first\nsecond\n")               # appeared after start: read from its start
    lines = f.poll()
    assert [(ln.lineno, ln.text) for ln in lines] == [(1, "first"), (2, "second")]
    assert f.stats[str(p)].up is True and f.stats[str(p)].rotations == 0


def test_missing_directory_and_non_regular_paths(tmp_path):
    f = Follower([str(tmp_path / "nodir" / "x.log"), str(tmp_path)])
    assert f.poll() == []
    assert not f.stats[str(tmp_path / "nodir" / "x.log")].up
    assert not f.stats[str(tmp_path)].up and "regular" in f.stats[str(tmp_path)].last_error


def test_glob_picks_up_a_second_file(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("old a\n")
    (tmp_path / "a.log.1").write_text("rotated copy, not matched\n")
    f = Follower([str(tmp_path / "*.log")])
    assert f.poll() == []                          # existing files: joined at their end
    with open(a, "a") as fh:
        fh.write("new a\n")
    b.write_text("b one\nb two\n")                 # discovered later: read from its start
    lines = f.poll()
    assert sorted((ln.source, ln.lineno, ln.text) for ln in lines) == [
        (str(a), 2, "new a"), (str(b), 1, "b one"), (str(b), 2, "b two")]
    assert set(f.stats) == {str(a), str(b)}


def test_glob_match_that_disappears_and_comes_back_is_a_new_file(tmp_path):
    a = tmp_path / "a.log"
    a.write_text("1\n")
    f = Follower([str(tmp_path / "*.log")], from_start=True)
    assert texts(f.poll()) == ["1"]
    a.unlink()
    assert f.poll() == [] and not f.stats[str(a)].up
    a.write_text("2\n")
    assert [(ln.lineno, ln.text) for ln in f.poll()] == [(1, "2")]


def test_from_start_vs_end(tmp_path):
    p = tmp_path / "a.log"
    p.write_text("one\ntwo\nthree\n")
    f_end, f_start = Follower([str(p)]), Follower([str(p)], from_start=True)
    assert f_end.poll() == []
    assert [(ln.lineno, ln.text) for ln in f_start.poll()] == [(1, "one"), (2, "two"), (3, "three")]
    with open(p, "a") as fh:
        fh.write("four\n")
    assert [(ln.lineno, ln.text) for ln in f_end.poll()] == [(4, "four")]   # numbers count existing lines
    assert [(ln.lineno, ln.text) for ln in f_start.poll()] == [(4, "four")]


def test_join_at_end_keeps_an_unfinished_last_line_whole(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"one\ntw")
    f = Follower([str(p)])
    assert f.poll() == []
    with open(p, "ab") as fh:
        fh.write(b"o\nthree\n")
    assert [(ln.lineno, ln.text) for ln in f.poll()] == [(2, "two"), (3, "three")]


def test_join_at_end_inside_a_too_long_line_skips_it(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"one\n" + b"L" * 500)
    f = Follower([str(p)], max_line_bytes=100)
    assert f.poll() == []
    with open(p, "ab") as fh:
        fh.write(b"LLL\nnext\n")
    assert [(ln.lineno, ln.text) for ln in f.poll()] == [(3, "next")]


def test_poll_budget_spreads_a_backlog_over_polls(tmp_path):
    p = tmp_path / "a.log"
    p.write_text("".join(f"{i}\n" for i in range(5000)))
    f = Follower([str(p)], from_start=True, read_chunk=1024, poll_budget=4096)
    got = []
    for _ in range(100):
        got += f.poll()
        if not f.backlog:
            break
    assert texts(got) == [str(i) for i in range(5000)]


def test_close_releases_files(tmp_path):
    p = tmp_path / "a.log"
    p.write_text("x\n")
    f = Follower([str(p)])
    f.poll()
    fd = f.tails[str(p)].cur.fd
    f.close()
    with pytest.raises(OSError):
        os.fstat(fd)
    assert f.poll() == [] and not f.stats[str(p)].up


# ---------------------------------------------------------------------------------------------------------
# run(): the watchdog loop


def _run_in_thread(f: Follower, poll_interval: float):
    got: list[Line] = []
    lock = threading.Lock()
    stop = threading.Event()

    def on_lines(lines):
        with lock:
            got.extend(lines)

    t = threading.Thread(target=f.run, args=(on_lines, stop), kwargs={"poll_interval": poll_interval},
                         daemon=True)
    t.start()
    return got, stop, t


def test_run_with_real_watchdog_observer_delivers_appended_lines(tmp_path):
    p = tmp_path / "a.log"
    p.write_text("before\n")
    f = Follower([str(p)])
    # A long poll interval: delivery within the deadline below comes from the inotify wake-up.
    got, stop, t = _run_in_thread(f, poll_interval=60.0)
    try:
        wait_until(lambda: f.mode is not None and f.stats.get(str(p), FollowStats()).up, what="follower started")
        if f.mode != "inotify":
            pytest.skip("inotify observer cannot start on this host")
        wait_until(lambda: f._watcher is not None and f._watcher.watches, what="directory watched")
        with open(p, "a") as fh:
            fh.write("after 1\nafter 2\n")
        wait_until(lambda: len(got) >= 2, timeout=10, what="lines delivered")
        os.rename(p, tmp_path / "a.log.1")
        p.write_text("rotated 1\n")
        wait_until(lambda: len(got) >= 3, timeout=10, what="line after rotation delivered")
        assert texts(got) == ["after 1", "after 2", "rotated 1"]
    finally:
        stop.set()
        t.join(timeout=10)
    assert not t.is_alive()
    f.close()


def test_run_falls_back_to_polling_when_observer_cannot_start(tmp_path, monkeypatch):
    def broken():
        raise OSError(24, "inotify instance limit reached")

    monkeypatch.setattr(watch_mod, "_make_observer", broken)
    p = tmp_path / "a.log"
    p.write_text("")
    f = Follower([str(p)])
    got, stop, t = _run_in_thread(f, poll_interval=0.02)
    try:
        wait_until(lambda: f.mode == "poll" and f.stats.get(str(p), FollowStats()).up, what="polling started")
        with open(p, "a") as fh:
            fh.write("polled\n")
        wait_until(lambda: texts(got) == ["polled"], timeout=10, what="line delivered by polling")
    finally:
        stop.set()
        t.join(timeout=10)
    assert not t.is_alive()


def test_run_signals_once_when_logs_go_quiet(tmp_path):
    """After lines, the first empty poll calls the consumer with [] (so it can emit a held traceback); further
    idle polls do not call it."""
    p = tmp_path / "a.log"
    p.write_text("")
    f = Follower([str(p)])
    calls: list[list[str]] = []
    polls = []
    real_poll = f.poll_blocks

    def counting_poll():
        polls.append(1)
        return real_poll()

    f.poll_blocks = counting_poll
    stop = threading.Event()
    t = threading.Thread(target=f.run, args=(lambda b: calls.append([ln.text for x in b for ln in x.lines()]), stop),
                         kwargs={"poll_interval": 0.01, "blocks": True}, daemon=True)
    t.start()
    try:
        wait_until(lambda: f.stats.get(str(p), FollowStats()).up, what="started")
        with open(p, "a") as fh:
            fh.write("Traceback (most recent call last):\n")
        wait_until(lambda: len(calls) >= 2, what="lines, then the went-quiet call")
        n = len(polls)
        wait_until(lambda: len(polls) >= n + 5, what="more idle polls")
        assert calls == [["Traceback (most recent call last):"], []]
    finally:
        stop.set()
        t.join(timeout=10)


def test_run_survives_a_failing_consumer(tmp_path):
    p = tmp_path / "a.log"
    p.write_text("")
    f = Follower([str(p)])
    calls: list[list[str]] = []
    stop = threading.Event()

    def on_lines(lines):
        if not lines:
            return                     # the went-quiet call (see test_run_signals_once_when_logs_go_quiet)
        calls.append(texts(lines))
        if len(calls) == 1:
            raise RuntimeError("consumer bug")

    t = threading.Thread(target=f.run, args=(on_lines, stop), kwargs={"poll_interval": 0.02}, daemon=True)
    t.start()
    try:
        wait_until(lambda: f.stats.get(str(p), FollowStats()).up, what="started")
        with open(p, "a") as fh:
            fh.write("one\n")
        wait_until(lambda: len(calls) == 1, what="first delivery")
        with open(p, "a") as fh:
            fh.write("two\n")
        wait_until(lambda: len(calls) == 2, what="second delivery")
        assert calls == [["one"], ["two"]]
    finally:
        stop.set()
        t.join(timeout=10)


# ---------------------------------------------------------------------------------------------------------
# read_lines


def test_read_lines_whole_file(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"one\r\ntwo\n\nlast without newline")
    assert [(ln.source, ln.lineno, ln.text) for ln in read_lines(str(p))] == [
        (str(p), 1, "one"), (str(p), 2, "two"), (str(p), 3, ""), (str(p), 4, "last without newline")]


def test_read_lines_cuts_long_lines(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"x" * 5000 + b"\ny\n")
    lines = list(read_lines(str(p), max_line_bytes=1000))
    assert [(len(ln.text), ln.cut) for ln in lines] == [(1000, True), (1, False)]


def test_read_lines_stdin(monkeypatch):
    fake = io.TextIOWrapper(io.BytesIO(b"a\nb\xff\n"))
    monkeypatch.setattr(sys, "stdin", fake)
    assert [(ln.source, ln.text) for ln in read_lines("-")] == [("-", "a"), ("-", "b\ufffd")]


def test_read_lines_errors_raised_at_call(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_lines(str(tmp_path / "missing.log"))
    with pytest.raises(IsADirectoryError):
        read_lines(str(tmp_path))
    p = tmp_path / "secret.log"
    p.write_text("x\n")
    p.chmod(0)
    if os.geteuid() == 0:
        pytest.skip("root reads anything")
    with pytest.raises(PermissionError):
        read_lines(str(p))


def test_read_lines_many_lines(tmp_path):
    p = tmp_path / "a.log"
    n = 50_000
    p.write_text("".join(f"{i}\n" for i in range(n)))
    lines = list(read_lines(str(p)))
    assert len(lines) == n and lines[-1] == Line(str(p), n, str(n - 1))


def test_unreadable_file_is_down_with_error_then_recovers(tmp_path, monkeypatch):
    p = tmp_path / "a.log"
    p.write_text("one\n")
    real_open = os.open

    def deny(path, *a, **kw):
        if str(path) == str(p):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **kw)

    monkeypatch.setattr(follower_mod.os, "open", deny)
    f = Follower([str(p)])
    assert f.poll() == []
    assert not f.stats[str(p)].up and "Permission denied" in f.stats[str(p)].last_error
    monkeypatch.setattr(follower_mod.os, "open", real_open)
    assert texts(f.poll()) == ["one"]           # opened after start: read from its start
    assert f.stats[str(p)].up and f.stats[str(p)].last_error is None


# ---------------------------------------------------------------------------------------------------------
# join() and positions: restarting where the last run stopped


def _append(p: Path, data: bytes) -> None:
    with open(p, "ab") as fh:
        fh.write(data)


def _restart(f: Follower, patterns: list[str], **kw) -> Follower:
    """What a restart sees: the positions saved (through their on-disk form), a new follower."""
    return Follower(patterns, positions=roundtrip(f.positions()), **kw)


def test_join_opens_at_the_end_reading_nothing(tmp_path, monkeypatch):
    a, missing, secret = tmp_path / "a.log", tmp_path / "later.log", tmp_path / "secret.log"
    a.write_text("old 1\nold 2\n")
    secret.write_text("x\n")
    real_open = os.open
    monkeypatch.setattr(follower_mod.os, "open", lambda path, *a, **kw: (_ for _ in ()).throw(
        PermissionError(13, "Permission denied")) if str(path) == str(secret) else real_open(path, *a, **kw))
    f = Follower([str(a), str(missing), str(secret), str(tmp_path / "none" / "*.log")])
    status = f.join()
    assert status == {str(a): "open", str(missing): "missing", str(secret): "error: cannot open: Permission denied",
                      str(tmp_path / "none" / "*.log"): "missing"}
    _append(a, b"new\n")                          # written after join: never taken for old content
    assert [(ln.lineno, ln.text) for ln in f.poll()] == [(3, "new")]
    assert f.join() == f.join_status()             # idempotent


def test_positions_end_before_a_held_unfinished_line(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"one\ntwo\nhal")
    f = Follower([str(p)], from_start=True)
    assert texts(f.poll()) == ["one", "two"]
    e = f.positions()[str(p)]
    st = os.stat(p)
    assert (e["dev"], e["ino"], e["offset"], e["lineno"], e["skip"]) == (st.st_dev, st.st_ino, 8, 2, False)
    assert bytes.fromhex(e["fp"]) == p.read_bytes() and e["fp_len"] == 11 and e["draining"] == []
    _append(p, b"f\n")
    g = _restart(f, [str(p)])
    assert g.join() == {str(p): "open"}
    assert [(ln.lineno, ln.text) for ln in g.poll()] == [(3, "half")]


def test_positions_inside_the_cut_rest_of_a_long_line(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"ok\n" + b"L" * 50)
    f = Follower([str(p)], from_start=True, max_line_bytes=10)
    assert [(ln.text, ln.cut) for ln in f.poll()] == [("ok", False), ("L" * 10, True)]
    assert f.positions()[str(p)]["skip"] is True
    _append(p, b"LLL\nnext\n")
    g = _restart(f, [str(p)], max_line_bytes=10)
    assert [(ln.lineno, ln.text) for ln in g.poll()] == [(3, "next")]


def test_restart_same_file_resumes_at_the_saved_offset(tmp_path):
    p = tmp_path / "a.log"
    p.write_text("1\n2\n")
    f = Follower([str(p)], from_start=True)
    assert texts(f.poll()) == ["1", "2"]
    _append(p, b"3\n4\n")                          # written while the exporter was down
    g = _restart(f, [str(p)])                      # joined at the saved offset, not at the end
    assert [(ln.lineno, ln.text) for ln in g.poll()] == [(3, "3"), (4, "4")]
    assert g.stats[str(p)] == FollowStats(lines_read=2, up=True)


def test_restart_after_a_rename_rotation_finishes_the_rotated_file_first(tmp_path):
    p = tmp_path / "a.log"
    p.write_text("1\n")
    f = Follower([str(p)], from_start=True)
    assert texts(f.poll()) == ["1"]
    _append(p, b"2\n")
    os.rename(p, tmp_path / "a.log-20250811")      # logrotate dateext, while down
    p.write_text("3\n")
    g = _restart(f, [str(p)])
    assert g.join() == {str(p): "open"}
    lines = g.poll()
    assert [(ln.source, ln.lineno, ln.text) for ln in lines] == [(str(p), 2, "2"), (str(p), 1, "3")]
    assert g.stats[str(p)].rotations == 1 and g.stats[str(p)].rotated_unread == 0


def test_restart_after_truncation_reads_from_zero(tmp_path):
    p = tmp_path / "a.log"
    p.write_text("first content 1\nfirst content 2\n")
    f = Follower([str(p)], from_start=True)
    assert len(f.poll()) == 2
    p.write_text("second\n")                       # truncated and rewritten (no copy): same inode
    g = _restart(f, [str(p)])
    assert [(ln.lineno, ln.text) for ln in g.poll()] == [(1, "second")]
    assert g.stats[str(p)].truncations == 1


def test_restart_after_copytruncate_reads_the_rest_from_the_copy(tmp_path):
    p = tmp_path / "a.log"
    p.write_text("2025-08-11 cycle one 1\n")
    f = Follower([str(p)], from_start=True)
    assert len(f.poll()) == 1
    _append(p, b"2025-08-11 cycle one 2\n")
    shutil.copyfile(p, tmp_path / "a.log.1")
    os.truncate(p, 0)
    _append(p, b"2025-08-12 cycle two 1\n")
    g = _restart(f, [str(p)])
    assert texts(g.poll()) == ["2025-08-11 cycle one 2", "2025-08-12 cycle two 1"]


def test_restart_when_the_rotated_file_is_gone_counts_it(tmp_path, caplog):
    p = tmp_path / "a.log"
    p.write_text("1\n")
    f = Follower([str(p)], from_start=True)
    f.poll()
    _append(p, b"2, never read\n")
    os.rename(p, tmp_path / "a.log.1")
    (tmp_path / "a.log.1.gz").write_bytes((tmp_path / "a.log.1").read_bytes())   # compressed ...
    os.unlink(tmp_path / "a.log.1")                                             # ... and removed
    p.write_text("3\n")
    with caplog.at_level("WARNING"):
        g = _restart(f, [str(p)])
        assert texts(g.poll()) == ["3"]
    assert g.stats[str(p)].rotated_unread == 1
    assert any("are lost" in r.getMessage() for r in caplog.records)


def test_restart_with_a_missing_file_reads_it_whole_when_it_appears(tmp_path):
    p = tmp_path / "a.log"
    f = Follower([str(p)])
    assert f.join() == {str(p): "missing"} and f.positions()[str(p)]["ino"] == 0
    p.write_text("written while down\n")
    g = _restart(f, [str(p)])                      # not joined at its end: it is new since the save
    assert texts(g.poll()) == ["written while down"]


def test_cri_layout_rotation_while_down_through_the_container_symlink(tmp_path):
    """kubelet: /var/log/containers/<x>.log -> /var/log/pods/<ns>_<pod>_<uid>/<c>/0.log, rotated by rename
    to 0.log.<time>; older rotated files are gzipped."""
    pod = tmp_path / "pods" / "ns_sglang-0_0f0e" / "sglang"
    pod.mkdir(parents=True)
    (tmp_path / "containers").mkdir()
    link = tmp_path / "containers" / "sglang-0_ns_sglang-abc.log"
    cur = pod / "0.log"
    cur.write_text("2025-08-11T17:17:03.1Z stdout F one\n")
    os.symlink(os.path.relpath(cur, link.parent), link)
    f = Follower([str(link)], from_start=True)
    assert texts(f.poll()) == ["2025-08-11T17:17:03.1Z stdout F one"]
    assert f.positions()[str(link)]["name"] == str(cur)
    _append(cur, b"2025-08-11T17:17:03.2Z stdout F two\n")
    (pod / "0.log.20250811-100000.gz").write_bytes(b"\x1f\x8b old")
    os.rename(cur, pod / "0.log.20250811-171703")
    cur.write_text("2025-08-11T17:17:04.1Z stdout F three\n")
    g = _restart(f, [str(link)])
    lines = g.poll()
    assert [(ln.lineno, ln.text.split()[-1]) for ln in lines] == [(2, "two"), (1, "three")]
    assert g.stats[str(link)].rotations == 1 and g.stats[str(link)].rotated_unread == 0
    # live: the next kubelet rotation is drained through the held descriptor as well
    _append(cur, b"2025-08-11T17:17:04.2Z stdout F four\n")
    os.rename(cur, pod / "0.log.20250811-171704")
    cur.write_text("2025-08-11T17:17:05.1Z stdout F five\n")
    assert [ln.text.split()[-1] for ln in g.poll()] == ["four", "five"]


@pytest.mark.parametrize(("data", "names"), [
    (b"", "not JSON"),
    (b"positions:\n  /var/log/a.log: 1234\n", "not JSON"),                 # Promtail's YAML
    (b'{"positions": {}}', "format"),
    (b'{"format": "sglang-exporter-positions", "version": 2, "positions": {}, "counters": {}}', "version 2"),
    (b'{"format": "sglang-exporter-positions", "version": 1, "positions": [], "counters": {}}', "positions"),
])
def test_load_positions_rejects_foreign_files(data, names):
    with pytest.raises(CheckpointError, match=names):
        checkpoint.parse(data, "positions.json")


GOOD = {"dev": 1, "ino": 2, "offset": 3, "lineno": 1, "skip": False, "fp": "610a62", "fp_len": 3, "name": "/l/a.log"}


@pytest.mark.parametrize(("change", "names"), [
    ({"offset": "3"}, '"offset" must be int'),
    ({"lineno": True}, '"lineno" must be int'),
    ({"offset": -1}, "out of range"),
    ({"fp": "zz"}, "not hex"),
    ({"fp_len": 2}, '"fp_len" says 2'),
    ({"fp": "61" * 1025, "fp_len": 1025}, "out of range"),
    ({"skip": 0}, '"skip" must be bool'),
    ({"extra": 1}, "unknown key 'extra'"),
    ({"draining": [dict(GOOD, ino="x")]}, r"draining\[0\]: \"ino\""),
    ({"ino": 0}, "no file"),
])
def test_load_positions_names_the_damaged_key(change, names):
    entry = dict(GOOD, **change)
    data = json.dumps({"format": "sglang-exporter-positions", "version": 1, "counters": {},
                       "positions": {"/l/a.log": entry}}).encode()
    with pytest.raises(CheckpointError, match=names):
        checkpoint.parse(data, "positions.json")
    with pytest.raises(PositionsError):
        Follower(["/l/a.log"], positions={"/l/a.log": entry})
    with pytest.raises(PositionsError):
        checkpoint.Checkpoint({"/l/a.log": entry}).to_bytes()


def test_positions_round_trip(tmp_path):
    p = tmp_path / "a.log"
    p.write_text("x\n")
    f = Follower([str(p)], from_start=True)
    f.poll()
    assert roundtrip(f.positions()) == f.positions()


def test_restart_when_the_saved_file_cannot_be_opened_yet_keeps_its_position(tmp_path, monkeypatch):
    p = tmp_path / "a.log"
    p.write_text("1\n")
    f = Follower([str(p)], from_start=True)
    f.poll()
    _append(p, b"2\n")
    real_open = os.open
    monkeypatch.setattr(follower_mod.os, "open", lambda path, *a, **kw: (_ for _ in ()).throw(
        PermissionError(13, "Permission denied")) if str(path) == str(p) else real_open(path, *a, **kw))
    g = _restart(f, [str(p)])
    assert g.join()[str(p)].startswith("error") and g.poll() == []
    monkeypatch.setattr(follower_mod.os, "open", real_open)
    assert [(ln.lineno, ln.text) for ln in g.poll()] == [(2, "2")]     # from the saved offset, not from 0


def roundtrip(positions: dict) -> dict:
    """Positions through the positions file's bytes, as a restarted sidecar reads them."""
    return checkpoint.parse(checkpoint.Checkpoint(positions).to_bytes(), "positions.json").positions
