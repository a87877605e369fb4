"""Container envelopes (CRI, docker json-file, plain) → records."""
from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.ingest.containers import ContainerDecoder, Record

TS = "2025-08-11T17:17:03.123456789Z"
DECODE = "[2025-08-11 17:17:03 TP0] Decode batch. #running-req: 233, #token: 370959, token usage: 0.82"


def feed_all(dec: ContainerDecoder, lines: list[str]) -> list[Record]:
    out = [r for n, text in enumerate(lines, 1) if (r := dec.feed(n, text)) is not None]
    return out + dec.flush_all()


def cri(stream: str, tag: str, msg: str, ts: str = TS) -> str:
    return f"{ts} {stream} {tag} {msg}"


def docker(log: str, stream: str = "stderr", time: str = TS) -> str:
    return json.dumps({"log": log, "stream": stream, "time": time})


# -- detection ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("first", "fmt"),
    [
        (DECODE, "plain"),
        (cri("stderr", "F", DECODE), "cri"),
        (docker(DECODE + "\n"), "docker"),
        ('{"level": "info", "msg": "not docker"}', "plain"),   # JSON, but no "log" string
        ("2025-08-11T17:17:03Z stdout X hello", "plain"),       # bad tag
        ("2025-08-11T17:17:03Z stdlog F hello", "plain"),       # bad stream
    ],
)
def test_auto_detects_from_first_non_empty_line(first, fmt):
    dec = ContainerDecoder()
    assert dec.format is None
    assert dec.feed(1, "") == Record(1, "", None, None)   # blank lines before: passed through, undecided
    assert dec.format is None
    rec = dec.feed(2, first)
    assert dec.format == fmt
    assert rec is not None and rec.lineno == 2


def test_explicit_format_and_bad_format():
    assert ContainerDecoder("cri").format == "cri"
    assert ContainerDecoder("plain").feed(7, "x") == Record(7, "x", None, None)
    with pytest.raises(ValueError, match="container format"):
        ContainerDecoder("journald")


def test_plain_is_as_is():
    dec = ContainerDecoder()
    recs = feed_all(dec, [DECODE, "  indented", "", "{not json"])
    assert [(r.lineno, r.text, r.time, r.stream) for r in recs] == [
        (1, DECODE, None, None), (2, "  indented", None, None), (3, "", None, None), (4, "{not json", None, None)]
    assert dec.passthrough == 0


# -- CRI ------------------------------------------------------------------------------------------------

def test_cri_full_lines():
    dec = ContainerDecoder()
    recs = feed_all(dec, [cri("stderr", "F", DECODE), cri("stdout", "F", "hello world")])
    assert recs == [Record(1, DECODE, TS, "stderr"), Record(2, "hello world", TS, "stdout")]


def test_cri_partials_joined_until_full_with_first_lineno_and_time():
    t1, t2, t3 = (f"2025-08-11T17:17:0{i}.000000001Z" for i in (3, 4, 5))
    lines = [cri("stderr", "P", "[2025-08-11 17:17:03 TP0] Decode ", t1),
             cri("stderr", "P", "batch. #running-req: 233, ", t2),
             cri("stderr", "F", "#token: 370959, token usage: 0.82", t3)]
    dec = ContainerDecoder()
    assert dec.feed(1, lines[0]) is None
    assert dec.feed(2, lines[1]) is None
    rec = dec.feed(3, lines[2])
    assert rec == Record(1, DECODE, t1, "stderr")
    assert dec.flush() is None


def test_cri_mixed_streams_join_per_stream():
    lines = [cri("stdout", "P", "out-a "), cri("stderr", "P", "err-a "), cri("stderr", "F", "err-b"),
             cri("stdout", "F", "out-b"), cri("stdout", "F", "out-c")]
    recs = feed_all(ContainerDecoder(), lines)
    assert [(r.lineno, r.stream, r.text) for r in recs] == [
        (2, "stderr", "err-a err-b"), (1, "stdout", "out-a out-b"), (5, "stdout", "out-c")]


def test_cri_empty_message_and_flag_suffix_and_spaces_kept():
    recs = feed_all(ContainerDecoder("cri"), [cri("stdout", "F", ""), f"{TS} stdout F", cri("stdout", "F:x", "a  b ")])
    assert [r.text for r in recs] == ["", "", "a  b "]


def test_cri_line_not_fitting_is_passed_through_as_plain():
    dec = ContainerDecoder()
    recs = feed_all(dec, [cri("stderr", "F", "first"), "Traceback (most recent call last):", cri("stderr", "F", "x")])
    assert recs == [Record(1, "first", TS, "stderr"), Record(2, "Traceback (most recent call last):", None, None),
                    Record(3, "x", TS, "stderr")]
    assert dec.passthrough == 1 and dec.format == "cri"


def test_cri_unfinished_partial_flushed_at_end():
    dec = ContainerDecoder()
    assert dec.feed(1, cri("stdout", "P", "half ")) is None
    assert dec.feed(2, cri("stderr", "P", "other")) is None
    assert dec.flush() == Record(1, "half ", TS, "stdout")
    assert dec.flush() == Record(2, "other", TS, "stderr")
    assert dec.flush() is None


def test_cri_reassembly_is_bounded():
    dec = ContainerDecoder(max_record_bytes=100)
    piece = "x" * 40
    out = [dec.feed(n, cri("stdout", "P", piece)) for n in range(1, 7)] + [dec.feed(7, cri("stdout", "F", "end"))]
    recs = [r for r in out if r is not None]
    # 3 pieces (120 chars) reach the cap: emitted early; the next 3 too; then "end" alone.
    assert [(r.lineno, len(r.text)) for r in recs] == [(1, 120), (4, 120), (7, 3)]
    assert dec.overflows == 2


# -- docker json-file -----------------------------------------------------------------------------------

def test_docker_lines_and_newline_stripped():
    recs = feed_all(ContainerDecoder(), [docker(DECODE + "\n"), docker("out\r\n", stream="stdout"),
                                         docker("\n")])
    assert recs == [Record(1, DECODE, TS, "stderr"), Record(2, "out", TS, "stdout"), Record(3, "", TS, "stderr")]


def test_docker_split_partials_joined():
    big = "y" * 40000
    pieces = [big[:16384], big[16384:32768], big[32768:] + "\n"]
    lines = [docker(p, time=f"2025-01-01T00:00:0{i}Z") for i, p in enumerate(pieces)]
    lines.insert(1, docker("interleaved\n", stream="stdout"))
    recs = feed_all(ContainerDecoder(), lines)
    assert [(r.lineno, r.stream, r.text, r.time) for r in recs] == [
        (2, "stdout", "interleaved", TS),
        (1, "stderr", big, "2025-01-01T00:00:00Z")]


def test_docker_malformed_lines_pass_through():
    dec = ContainerDecoder()
    lines = [docker("ok\n"), '{"log": "trunc', "plain text", '{"log": 5}', "[1, 2]", docker("ok2\n")]
    recs = feed_all(dec, lines)
    assert [r.text for r in recs] == ["ok", '{"log": "trunc', "plain text", '{"log": 5}', "[1, 2]", "ok2"]
    assert [r.time for r in recs] == [TS, None, None, None, None, TS]
    assert dec.passthrough == 4


def test_docker_missing_fields_are_none():
    recs = feed_all(ContainerDecoder("docker"), ['{"log": "x\\n"}', '{"log": "y\\n", "time": 3, "stream": null}'])
    assert recs == [Record(1, "x", None, None), Record(2, "y", None, None)]


# -- properties -----------------------------------------------------------------------------------------

_msg = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"), max_size=30)


@given(st.lists(st.tuples(st.sampled_from(["stdout", "stderr"]), st.lists(_msg, min_size=1, max_size=4)),
                min_size=1, max_size=20))
def test_cri_split_any_way_rejoins(records):
    """Any line split into P pieces + an F piece comes back whole (per stream, in order of completion)."""
    lines, expected = [], []
    for stream, pieces in records:
        for p in pieces[:-1]:
            lines.append(cri(stream, "P", p))
        lines.append(cri(stream, "F", pieces[-1]))
        expected.append((stream, "".join(pieces)))
    recs = feed_all(ContainerDecoder("cri"), lines)
    assert [(r.stream, r.text) for r in recs] == expected


@given(st.lists(_msg, min_size=1, max_size=30))
def test_plain_never_changes_text(texts):
    dec = ContainerDecoder("plain")
    assert [dec.feed(i, t).text for i, t in enumerate(texts, 1)] == texts
