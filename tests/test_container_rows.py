"""Container records (CRI, docker json-file) go through the parser's block path, a run of records on consecutive
lines at a time: the Events are what feeding each record to the parser on its own gives, container times
included (a line without a date of its own takes its record's time)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import assert_same_event

from exporter.ingest.containers import ContainerDecoder
from exporter.ingest.events import as_event
from exporter.ingest.grammar import Parser
from exporter.ingest.lines import Block
from exporter.ingest.pipeline import SourceParser

ROOT = Path(__file__).resolve().parent.parent
LAYOUTS = ROOT / "tests" / "fixtures" / "layouts"
sys.path.insert(0, str(ROOT / "bench"))
import genlog  # noqa: E402  (bench/ is not a package)

DECODE = ("Decode batch, #running-req: 12, #token: 1000, token usage: 0.50, cuda graph: True, "
          "gen throughput (token/s): 100.25, #queue-req: 0")
# what a container time changes: time-only prefixes (0.3.0-0.3.3), lines without a prefix, a learned layout's
# line whose date is none, a traceback's lines
EDGES = [f"[2025-08-11 17:17:0{s} TP0] {DECODE}" for s in range(3)] + [
    f"[17:17:05 TP0] {DECODE}", f"[17:17:06 TP1] {DECODE}",
    f"[2025-13-45 17:17:07 TP0] {DECODE}", f"[2025-08-11 17:17:08 TP0] {DECODE}",
    "[2025-08-11 17:17:09] Error in request: boom", "Traceback (most recent call last):",
    '  File "/x/y.py", line 3, in f', "ValueError: boom",
    "bare line", f"[2025-08-11 17:17:10 TP0] {DECODE}"] * 3


def _wrap(lines: list[str], fmt: str, split_every: int = 5) -> list[str]:
    """`lines` as a container runtime writes them, every time a different one, every `split_every`th line in two
    pieces (0: none)."""
    out = []
    for i, text in enumerate(lines):
        ts = f"2025-08-12T09:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}000000Z"
        split = split_every and i % split_every == split_every - 1 and len(text) > 1
        pieces = [text[:len(text) // 2], text[len(text) // 2:]] if split else [text]
        for k, piece in enumerate(pieces):
            last = k == len(pieces) - 1
            if fmt == "cri":
                out.append(f"{ts} stderr {'F' if last else 'P'} {piece}")
            else:
                out.append(json.dumps({"log": piece + ("\n" if last else ""), "stream": "stderr", "time": ts}))
    return out


def _one_by_one(lines: list[str]):
    """What the pipeline gave before: each container record fed to the parser on its own."""
    dec, parser = ContainerDecoder("auto"), Parser("src")
    out = []
    for n, text in enumerate(lines, 1):
        rec = dec.feed(n, text)
        if rec is not None:
            out += parser.feed(rec.text, rec.lineno, rec.time)
    while (rec := dec.flush()) is not None:
        out += parser.feed(rec.text, rec.lineno, rec.time)
    return out + parser.flush(), parser


def _logs() -> list[tuple[str, list[str]]]:
    return [(p.name, p.read_text().splitlines()) for p in sorted(LAYOUTS.glob("*.log"))
            if not p.name.startswith(("cri_", "docker_"))] + [("edges", EDGES)]


def _check(name: str, wrapped: list[str]) -> None:
    want, ref = _one_by_one(wrapped)
    for block in (1, 7, len(wrapped)):
        sp = SourceParser("src")
        got = []
        for i in range(0, len(wrapped), block):
            got += map(as_event, sp.feed_block_items(Block("src", i + 1, wrapped[i:i + block])))
        got += map(as_event, sp.flush())
        assert len(got) == len(want), (name, block)
        for a, b in zip(want, got):
            assert_same_event(a, b)
        p = sp.parser
        assert (p.kinds, p.recognised, p.unparsed) == (ref.kinds, ref.recognised, ref.unparsed), (name, block)


@pytest.mark.parametrize("fmt", ["cri", "docker"])
@pytest.mark.parametrize("name,lines", _logs(), ids=[name for name, _ in _logs()])
def test_container_records_in_runs_give_what_each_record_alone_gives(name, lines, fmt):
    _check(name, _wrap(lines, fmt))


@pytest.mark.parametrize("fmt", ["cri", "docker"])
@pytest.mark.parametrize("name,lines", _logs(), ids=[name for name, _ in _logs()])
def test_whole_records_a_block_at_a_time_give_what_each_record_alone_gives(name, lines, fmt):
    """No line in pieces: blocks are unwrapped at once (ContainerDecoder.whole_records)."""
    _check(name, _wrap(lines, fmt, split_every=0))


# CRI lines the block decoder must read as `feed` does, or leave to it: tags with more flags, no message, spaces
# kept in the message, a partial piece, other streams, short or odd times, a plain line, an empty one
TS = "2025-08-12T09:00:01.123456789Z"
CRI_LINES = [f"{TS} stderr F [2025-08-11 17:17:03 TP0] {DECODE}", f"{TS} stdout F x", f"{TS} stderr F:more y",
             f"{TS} stderr F", f"{TS} stderr F ", f"{TS} stderr F   three spaces", f"{TS} stderr F:a:b  z",
             f"{TS} stderr P half a line", f"{TS} stdin F x", f"{TS} stderr FP x", f"{TS} stderr Fx x",
             "2025-08-12T09:00:01Z stderr F shortest time", "2025-08-12T09:00:1Z stderr F too short",
             "2025-08-12X09:00:01.5Z stderr F no T", "２０２５-08-12T09:00:01.5Z stderr F wide digits",
             "2025-08-12T09:00:01.5Z\tstderr F tab", "2025-08-12T09:00:01.5Z  stderr F two spaces",
             "[2025-08-11 17:17:03 TP0] plain", "", f"{TS} stderr F \x0b\u2028 other breaks"]


def _assert_block_decoder_reads_what_feed_reads(fmt: str, lines: list[str], start: int) -> None:
    """The block decoder of `fmt` on `lines` from `start` (alone, to the end, rotated): what `feed` gives, or
    None (then `feed` reads them, whatever they are)."""
    for texts in ([lines[start]], lines[start:], lines[start:] + lines[:start]):
        dec = ContainerDecoder(fmt)
        whole = dec.whole_records(texts)
        records = [dec.feed(n, text) for n, text in enumerate(texts, 1)]
        if whole is not None:
            assert (dec.passthrough, dec.partials) == (0, 0)
            assert whole == ([r.text for r in records], [r.time for r in records])


@pytest.mark.parametrize("start", range(len(CRI_LINES)))
def test_the_cri_block_decoder_reads_what_feed_reads_or_leaves_it(start):
    _assert_block_decoder_reads_what_feed_reads("cri", CRI_LINES, start)
    # what runtimes write is read a block at a time: the whole records above but the oddly timed ones
    whole = ContainerDecoder("cri").whole_records(CRI_LINES[:7] + CRI_LINES[11:12] + CRI_LINES[19:])
    assert whole is not None and whole[0][3] == "" and whole[0][5] == "  three spaces"
    # with a partial record pending, blocks are left to feed (its next piece may come in them)
    dec = ContainerDecoder("cri")
    assert dec.feed(1, f"{TS} stderr P begun") is None
    assert dec.whole_records([f"{TS} stderr F ended"]) is None


@pytest.mark.parametrize("fmt", ["cri", "docker"])
def test_a_realistic_log_in_a_container_gives_what_each_record_alone_gives(tmp_path, fmt):
    log = tmp_path / "realistic.log"
    genlog.write(4000, str(log), seed=1, profile="realistic")
    _check("realistic", _wrap(log.read_text().splitlines(), fmt))


@pytest.mark.parametrize("name", ["cri_custom.log", "docker_custom.log"])
def test_the_wrapped_fixtures_give_what_each_record_alone_gives(name):
    _check(name, (LAYOUTS / name).read_text().splitlines())


def _docker(log, **more) -> str:
    return json.dumps({"log": log, "stream": "stderr", "time": "2025-08-12T09:00:01.5Z", **more})


# docker lines the block decoder must read as `feed` does, or leave to it: CRLF, an escape (JSON's \u001b), no
# time or an odd one, no stream, a piece (no newline), a log that is no string, no log, JSON that is no object,
# an object after a space, no JSON, an empty line, a log with a newline inside, JSON nested past the interpreter's
# limit (it crashed `analyze` with a RecursionError)
DOCKER_LINES = [_docker(f"[2025-08-11 17:17:03 TP0] {DECODE}\n"), _docker("x\r\n"), _docker("\x1b[31mred\x1b[0m\n"),
                json.dumps({"log": "no time\n"}), _docker("odd time\n", time=5), _docker("\n", stream=None),
                _docker("half a line"), _docker(7), json.dumps({"stream": "stderr"}), '["log"]',
                " " + _docker("after a space\n"), "{not json", "", _docker("a\nb\n"),
                '{"log": ' + "[" * 100000 + "]" * 100000 + "}"]


@pytest.mark.parametrize("start", range(len(DOCKER_LINES)))
def test_the_docker_block_decoder_reads_what_feed_reads_or_leaves_it(start):
    _assert_block_decoder_reads_what_feed_reads("docker", DOCKER_LINES, start)
    whole = ContainerDecoder("docker").whole_records(DOCKER_LINES[:6] + DOCKER_LINES[13:14])
    assert whole is not None and whole[0][2] == "red" and whole[1][3:5] == [None, None]
    dec = ContainerDecoder("docker")
    assert dec.feed(1, _docker("begun")) is None
    assert dec.whole_records([_docker("ended\n")]) is None
