"""Property tests of the SGLang grammar: it never raises, and SGLang-formatted numbers round-trip exactly."""
from __future__ import annotations

import json

from helpers import assert_block_path_is_generic, assert_same_event
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.ingest import grammar
from exporter.ingest.events import KINDS, RANK_KEYS, as_event
from exporter.ingest.grammar import Parser, parse_batch_body, parse_server_args, value_of

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PREFIXES = ["", "[", "]", "[2025-08-11 17:17:03", "[2025-08-11 17:17:03 TP0] ", "[17:17:03] ", "[99:99:99 DP9] ",
            "[2025-13-45 25:61:61.999 TP0] ", "[0000-00-00 00:00:00] ", "(SchedulerActor pid=1) [", "\x1b[31m",
            "[2025-08-11 17:17:03.12 DP1 PP2 ATTN_CP3 MOE_DP4 TP5 EP6] "]
MESSAGES = ["Decode batch, ", "Prefill batch(mixed #running-req: ", "Decode batch [", "KV cache pool is full. ",
            "max_total_num_tokens=", "server_args=ServerArgs(", "server_args={", "Scheduler hit an exception: ",
            "Watchdog timeout (", "Subprocess ", "Load weight end. ", "Capture ", "KV Cache is allocated. ",
            "INFO:     ", "Receive: obj=", "Decode out of memory. Try to lower your batch size.",
            "CUDA out of memory. Tried to allocate ", "LONG GARBAGE COLLECTION DETECTED | Duration: "]
junk = st.text(alphabet=st.characters(codec="utf-8"), max_size=200)
sglangish = st.builds(lambda p, m, j: p + m + j, st.sampled_from(PREFIXES), st.sampled_from(MESSAGES), junk)
texts = st.one_of(junk, sglangish, st.text(alphabet="[]()#:,.= -0123456789TPDx\t\r\x0b\x0c\x1b\x7f", max_size=300))


def _json_ok(events) -> None:
    for ev in events:
        assert ev.kind in KINDS
        assert set(ev.rank) == set(RANK_KEYS)
        json.dumps(ev.to_json(), allow_nan=False)       # no NaN / Infinity: strict JSON


@SETTINGS
@given(st.lists(texts, max_size=30))
def test_never_raises_on_arbitrary_text(lines):
    p = Parser("prop")
    for i, line in enumerate(lines, 1):
        _json_ok(p.feed(line, i))
        _json_ok(p.feed(line, i, "2025-08-11T17:17:03.123456789Z"))
    _json_ok(p.flush())
    _json_ok(p.flush())


@SETTINGS
@given(st.lists(st.binary(max_size=300), max_size=20))
def test_never_raises_on_arbitrary_bytes(chunks):
    p = Parser("bytes")
    for i, chunk in enumerate(chunks, 1):
        for line in chunk.decode("utf-8", errors="replace").splitlines() or [""]:
            _json_ok(p.feed(line, i))
    _json_ok(p.flush())


@SETTINGS
@given(texts)
def test_helpers_never_raise(text):
    """The pieces the parser's safety net would otherwise hide."""
    fields: dict = {}
    parse_batch_body(text, fields)
    json.dumps(fields, allow_nan=False)
    json.dumps(parse_server_args(text), allow_nan=False)
    json.dumps(parse_server_args("ServerArgs(" + text + ")"), allow_nan=False)
    json.dumps(value_of(text), allow_nan=False)


def test_huge_and_pathological_lines():
    p = Parser("big")
    big_digits = "9" * 10000
    lines = [
        "[2025-08-11 17:17:03 TP0] Decode batch, #running-req: " + big_digits + ", #token: 1",
        "[2025-08-11 17:17:03 TP0] Decode batch, " + "#x: 1, " * 200000,
        "[2025-08-11 17:17:03] server_args=ServerArgs(a=" + "[" * 5000 + "]" * 5000 + ")",
        "[2025-08-11 17:17:03] server_args={'a': 1e999, 'b': float('nan')}",
        "[2025-08-11 17:17:03 TP0] Decode batch, #running-req: 1, token usage: nan, x: inf, y: 1_000, z: ²",
        "[2025-08-11 17:17:03] Subprocess a (pid=" + big_digits + ") crashed with exit code 1.",
        "[2025-08-11 17:17:03] Load weight begin. avail mem=.. GB",
        "[" * 100000, "]" * 100000, "[2025-08-11 17:17:03" * 10000, "x" * (10 << 20),
    ]
    for i, line in enumerate(lines, 1):
        _json_ok(p.feed(line, i))
    _json_ok(p.flush())
    assert value_of("nan") == "nan" and value_of("inf") == "inf" and value_of("1_000") == "1_000"
    assert value_of("²") == "²" and value_of("١٢") == "١٢"


# -- round trips: lines formatted exactly as SGLang does ------------------------------------------------------
counts = st.integers(min_value=0, max_value=10 ** 9 - 1)     # catalog.FIELD_RANGES: a count is below 10**9
ratios = st.floats(min_value=0, max_value=1, allow_nan=False)
rates = st.floats(min_value=0, max_value=1e7, allow_nan=False)
ranks = st.sampled_from([("", {}), (" TP3", {"tp": 3}), (" DP1 TP0", {"dp": 1, "tp": 0}),
                         (" DP2 PP1 TP7 EP7", {"dp": 2, "pp": 1, "tp": 7, "ep": 7})])


@SETTINGS
@given(counts, counts, ratios, st.booleans(), rates, counts, ranks,
       st.sampled_from(["Decode batch. ", "Decode batch, ", "Decode batch [12], "]), st.sampled_from(["", ", "]),
       st.integers(0, 999))
def test_decode_round_trip(running, tokens, usage, graph, gen, queue, rank, head, trailing, ms):
    line = (f"[2025-08-11 17:17:03.{ms:03d}{rank[0]}] {head}"
            f"#running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, cuda graph: {graph}, "
            f"gen throughput (token/s): {gen:.2f}, #queue-req: {queue}{trailing}")
    parser = Parser("rt")
    (ev,) = parser.feed(line, 1)
    (learned,) = parser.feed(line, 2)          # the second line of a shape takes the learned regex
    assert learned.fields == ev.fields and (learned.time, learned.ts, learned.rank) == (ev.time, ev.ts, ev.rank)
    want = {"running_req": running, "num_tokens": tokens, "token_usage": float(f"{usage:.2f}"), "cuda_graph": graph,
            "graph_backend": "cuda", "gen_throughput": float(f"{gen:.2f}"), "queue_req": queue}
    if "[12]" in head:
        want["forward_iter"] = 12
    assert ev.kind == "decode_batch" and ev.fields == want
    assert ev.ts == 1754932623 + ms / 1000 and ev.time == f"2025-08-11T17:17:03.{ms:03d}"
    assert {k: v for k, v in ev.rank.items() if v is not None} == rank[1]


@SETTINGS
@given(counts, counts, counts, ratios, counts, counts, counts, st.booleans(), rates, st.booleans(), ratios)
def test_prefill_round_trip(new_seq, new_tok, cached, usage, running, queue, pending, graph, tput, hit, hit_rate):
    rate = f"cache hit rate: {100.0 * hit_rate:.2f}%, " if hit else ""
    line = (f"[2025-08-11 17:17:03 TP0] Prefill batch, #new-seq: {new_seq}, #new-token: {new_tok}, "
            f"#cached-token: {cached}, {rate}token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue}, "
            f"#pending-token: {pending}, cuda graph: {graph}, input throughput (token/s): {tput:.2f}")
    parser = Parser("rt")
    (ev,) = parser.feed(line, 1)
    (learned,) = parser.feed(line, 2)
    assert learned.fields == ev.fields
    want = {"new_seq": new_seq, "new_token": new_tok, "cached_token": cached, "token_usage": float(f"{usage:.2f}"),
            "running_req": running, "queue_req": queue, "pending_token": pending, "cuda_graph": graph,
            "graph_backend": "cuda", "input_throughput": float(f"{tput:.2f}")}
    if hit:
        want["cache_hit_rate"] = float(f"{100.0 * hit_rate:.2f}") / 100.0
    assert ev.kind == "prefill_batch" and ev.fields == want


batch_keys = st.sampled_from(sorted(grammar._BATCH_KEYS) + ["cuda graph", "cpu graph"])


_same_event = assert_same_event


@SETTINGS
@given(st.sampled_from(["Decode", "Prefill"]), st.lists(st.tuples(batch_keys, st.one_of(counts, ratios, st.booleans())),
                                                       min_size=1, max_size=12), st.sampled_from(["", ", ", " "]),
       st.sampled_from(["[2025-08-11 17:17:03] ", "[2025-08-11 17:17:03.5 DP1 TP3] ", "[17:17:03 TP0] "]),
       st.sampled_from(["", "1", "0.5", "-1", "12%", "nan", "True"]))
def test_learned_shape_equals_generic_splitter(which, items, trailing, prefix, odd):
    """A batch line read by a learned shape gives exactly what the generic splitter gives (values, types, key
    order, time, rank, format family); a line whose values leave the learned classes still parses right."""
    items = [("#running-req", 5), ("#new-seq", 1)] + items
    def line(values_from: int, odd_value: str = "") -> str:
        parts = []
        for i, (k, v) in enumerate(items):
            if odd_value and i == len(items) - 1:
                parts.append(f"{k}: {odd_value}")
                continue
            v = v if isinstance(v, bool) else v + values_from if isinstance(v, int) else v * (1 + values_from)
            parts.append(f"{k}: {v if isinstance(v, (bool, int)) else f'{v:.2f}'}")
        return f"{prefix}{which} batch, " + ", ".join(parts) + trailing
    learning, generic = Parser("eq"), Parser("eq")
    generic.learning = False
    for n, text in enumerate([line(0), line(1), line(2), line(3, odd), line(4)], 1):
        got, want = learning.feed(text, n), generic.feed(text, n)
        assert len(got) == len(want)
        for a, b in zip(want, got):
            _same_event(a, b)
        assert learning.format_family == generic.format_family
    assert learning.kinds == generic.kinds and learning.recognised == generic.recognised
    assert learning.unparsed == generic.unparsed
    body_only: dict = {}
    parse_batch_body(line(4).split(" batch, ", 1)[1], body_only)
    if generic.recognised:
        again = generic.feed(line(4), 9)
        if again:
            assert again[0].fields == body_only
        else:                   # (a value out of its catalog range: "cache hit rate: 4" is 400 %)
            assert not grammar.fields_in_range(body_only)


def test_learned_shapes_match_generic_on_golden_lines():
    """Every golden file read twice by one parser (the second pass all learned where shapes allow) gives the
    generic path's events, counts and format family."""
    from test_grammar_versions import FAMILIES
    learned_lines = 0
    for fam in FAMILIES.values():
        learning, generic = Parser("g"), Parser("g")
        generic.learning = False
        for _ in range(2):
            got = learning.feed_lines(fam.lines, 1) + learning.flush()
            want = generic.feed_lines(fam.lines, 1) + generic.flush()
            assert len(got) == len(want)
            for a, b in zip(want, got):
                _same_event(a, b)
            assert learning.format_family == generic.format_family
        assert learning.kinds == generic.kinds and learning.unparsed == generic.unparsed
        learned_lines += sum(s.count for s in learning._shapes)
    assert learned_lines > 15      # shapes are learned per prefix layout; time-only prefixes (0.3.0-0.3.3) never


def test_shapes_are_bounded_and_learning_stops_when_fruitless():
    p = Parser("b")
    for i in range(grammar.MAX_SHAPES + 5):      # a new shape each time: an extra key from the known set
        keys = sorted(grammar._BATCH_KEYS)[:i + 1]
        body = ", ".join(f"{k}: {j}" for j, k in enumerate(keys) if k != "#running-req")
        p.feed(f"[2025-08-11 17:17:03] Decode batch, #running-req: 1, {body}", i + 1)
    assert len(p._shapes) == grammar.MAX_SHAPES
    assert p.kinds["decode_batch"] == p.recognised == grammar.MAX_SHAPES + 5
    q = Parser("f")
    for i in range(grammar.MAX_FRUITLESS_LEARNING + 10):      # hybrid "a=1, b=2" values: never learnable
        q.feed(f"[2025-08-11 17:17:03] Decode batch, #running-req: 1, #token: full={i}, swa=2, #queue-req: 0", i)
    assert q._fruitless == grammar.MAX_FRUITLESS_LEARNING and not q._shapes
    assert q.kinds["decode_batch"] == grammar.MAX_FRUITLESS_LEARNING + 10


@SETTINGS
@given(st.lists(texts, max_size=10), st.sampled_from(["[2025-08-11 17:17:03 TP0] Scheduler hit an exception: x",
                                                      "[2025-08-11 17:17:03] Prefill out of memory. Try to lower",
                                                      "[17:17:03] Exception in ModelTpServer:"]))
def test_flush_after_arbitrary_input_never_raises(lines, opener):
    p = Parser("flush")
    p.feed(opener, 1)
    for i, line in enumerate(lines, 2):
        p.feed(line, i)
    _json_ok(p.flush())
    assert p.flush() == []


@SETTINGS
@given(st.lists(texts, max_size=20))
def test_json_lines_writer_equals_json_dumps(lines):
    """parse's writer reuses encoded parts; its output is byte for byte json.dumps of to_json()."""
    import json

    from test_grammar_versions import FAMILIES

    from exporter.ingest.events import JsonLines
    write = JsonLines()
    dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode
    p = Parser('src "quoted" é')
    events = p.feed_lines(lines + [ln for fam in FAMILIES.values() for ln in fam.lines[:40]], 1) + p.flush()
    assert events
    for ev in events:
        assert write(ev) == dumps(ev.to_json())


# The block path (feed_items): learned shapes, skeletons, rows. Lines built to share skeletons (same widths,
# other digits), to change rank tags within a skeleton, and to leave the learned classes now and then.
# Custom prefixes (docs/log-events.md, "Custom log formats") are read by layouts of their own once learned: with a
# level and pid, a 9-digit fraction, one starting with "[", an ISO time, and ones the fast path leaves to the
# generic path (2024's [gpu=N] tag, a time-only prefix, rank tags apart).
_CUSTOM_PREFIXES = ["2025-08-11 17:17:03,123 INFO 4242 [TP0 scheduler.py:1234] ",
                    "2025-08-11 17:17:04,567 INFO 4242 [DP1 TP3 scheduler.py:1234] ",
                    "2025-08-11 17:17:03.123456789 WARNING 77 [DP1 TP2 EP0 scheduler.py:88] ",
                    "[2025-08-11 17:17:03][scheduler.py:1234][INFO]: ", "2025-08-11T17:17:03Z [TP1] ",
                    "2025-08-11 17:17:03 [gpu=0] ", "17:17:03 INFO [TP0] ", "2025-08-11 17:17:03 TP0 x EP1 | "]
_BATCH_LINE = st.builds(
    lambda prefix, which, running, queue, usage, graph, tput, trailing: (
        f"{prefix}{which} batch, #running-req: {running}, #queue-req: {queue}, token usage: {usage}, "
        + (f"cuda graph: {graph}, " if graph is not None else "")
        + (f"gen throughput (token/s): {tput}" if which == "Decode" else f"input throughput (token/s): {tput}")
        + trailing),
    st.sampled_from(["[2025-08-11 17:17:03 TP0] ", "[2025-08-11 17:17:03 TP3] ", "[2025-08-11 17:17:09 DP1 TP2] ",
                     "[2025-08-12 00:00:00.25 TP1] ", "[2025-08-11 17:17:03] ", "[2025-08-11 17:17:03]",
                     "[2025-13-45 17:17:03 TP0] ", "pod-1 | [2025-08-11 17:17:03 TP0] "] + _CUSTOM_PREFIXES),
    st.sampled_from(["Decode", "Prefill"]), st.integers(0, 99),
    st.sampled_from(["0", "7", "12", "-1", "x", "999999999", "1000000000", "9" * 400]),
    st.sampled_from(["0.50", "0.93", "1.00", "1.99", "2.00", "7.50", "12%", "199%", "200%", "nan", "1e400"]), st.sampled_from([None, "True", "False"]),
    st.sampled_from(["10.00", "2133.20", "0.5"]), st.sampled_from(["", ", "]))


# Access lines and request logs (read by the skeleton of the whole line / of its head once one was seen):
# same widths with other digits, a rid near and past the head, quotes and NUL bytes after the head, a prefix
# too long for the head, time-only prefixes (not read by layout).
_LINE_PREFIX = st.sampled_from(["[2025-08-11 17:17:03] ", "[2025-08-11 17:17:04] ", "[2025-08-11 17:17:03.25] ",
                                "[2025-08-11 17:17:03 DP1] ", "[2025-13-45 17:17:03] ", "[17:17:03] ",
                                "[2025-08-11 17:17:03 DP1 PP2 ATTN_CP3 MOE_DP4 TP5 EP6] ", "[2025-08-11 17:17:03]"]
                               + _CUSTOM_PREFIXES)
_ACCESS_LINE = st.builds(
    lambda prefix, port, method, path, status, tail: (
        f'{prefix}INFO:     127.0.0.1:{port} - "{method} {path} HTTP/1.1" {status} {tail}'),
    _LINE_PREFIX, st.integers(1000, 65535), st.sampled_from(["GET", "POST", "G\x00T"]),
    st.sampled_from(["/metrics", "/generate", "/v1/chat/completions", "/a b"]), st.sampled_from([200, 404, 503]),
    st.sampled_from(["OK", "Not Found", "", "é"]))
_REQUEST_LINE = st.builds(
    lambda prefix, phase, rid, pad, tail: (
        f"{prefix}{phase}: obj=GenerateReqInput({pad}rid={rid}, text='hi'){tail}"),
    _LINE_PREFIX, st.sampled_from(["Receive", "Finish", "Receiv"]),
    st.sampled_from(["'cc22af58be65'", "'0'", "abc-12", "''", "'x\\'y'"]),
    st.sampled_from(["", "received_time=1754932237.587228, ", "x" * 700, "y" * 4100]),
    st.sampled_from(["", " \x00", " 'q'", " ¤\ud800"]))


@SETTINGS
@given(st.lists(st.one_of(_BATCH_LINE, _BATCH_LINE, _BATCH_LINE, _ACCESS_LINE, _REQUEST_LINE, texts),
                min_size=1, max_size=60),
       st.integers(1, 25))
def test_block_path_equals_the_generic_path(lines, block):
    """feed_items in blocks (rows read by skeletons, turned into Events) gives exactly what the generic path
    gives line by line: events, values and their types, key order, time, rank, counts, format family."""
    lines = lines * 2          # the second time round every shape and skeleton is known
    fast, generic = assert_block_path_is_generic(lines, block, "blk")
    assert fast.format_family == generic.format_family
    assert fast.layouts == generic.layouts and fast.skipped == generic.skipped and fast.untimed == generic.untimed


def test_block_path_reads_batch_lines_by_skeleton():
    """After the first line of a shape, lines of a known skeleton are rows read without the regex: the rows'
    values come from the right offsets even when the digits (and the rank) differ."""
    p = Parser("sk")
    lines = [f"[2025-08-11 17:17:0{i} TP{i % 4}] Decode batch, #running-req: {10 + i}, #token: {1000 + i}, "
             f"token usage: 0.{50 + i}, cuda graph: True, gen throughput (token/s): {100 + i}.25, #queue-req: {i}"
             for i in range(8)]
    p.feed_items(lines[:1], 1)                 # learns the shape
    rows = p.feed_items(lines[1:], 2)
    assert all(r.__class__ is tuple for r in rows) and len(p._layouts) == 1
    for i, row in enumerate(rows, 1):
        shape, groups = row[0], row[1]
        assert shape.values(groups) == (i, 10 + i, float(f"0.{50 + i}"), 100 + i + 0.25, True)
        assert row[4]["tp"] == i % 4 and row[5] == i + 1 and row[3] == f"2025-08-11T17:17:0{i}"


def test_block_path_reads_access_and_request_lines_by_layout():
    """Once an access line and a request log were read, lines of the same key are rows (no regex, no Event
    until asked for), with the rid, client and status of their own text; a NUL byte past the head still makes
    a request log binary, and a time-only prefix keeps the generic path."""
    p, generic = Parser("req"), Parser("req")
    generic.learning = False
    batch = "[2025-08-11 17:17:03 TP0] Decode batch, #running-req: 1, #queue-req: 0, token usage: 0.50"
    pad = "x" * 700

    def req(phase, rid, sec=3, tail=""):
        return f"[2025-08-11 17:17:0{sec}] {phase}: obj=GenerateReqInput({pad}, rid='{rid}'){tail}"

    def acc(port, status):
        return f'[2025-08-11 17:17:05] INFO:     127.0.0.1:{port} - "GET /metrics HTTP/1.1" {status} OK'
    first = [batch, req("Receive", "aa"), req("Finish", "aa"), acc(40000, 200)]
    later = [req("Receive", "bb", 4), req("Finish", "c9", 7), acc(51234, 503), req("Receive", "dd", tail=" \x00"),
             "[17:17:03] Receive: obj=x, rid='ee'", req("Receive", "ff" + "é" * 30)]
    got = p.feed_items(first[:1], 1) + p.feed_items(first[1:], 2) + p.feed_items(later, 5)   # learns, then reads
    rows = [item for item in got[4:] if item.__class__ is tuple]
    assert len(rows) == 4 and [r[0].kind for r in rows] == ["request_log"] * 2 + ["http_access", "request_log"]
    want = [ev for n, text in enumerate(first + later, 1) for ev in generic.feed(text, n)]
    assert len(got) == len(want) == 9 and generic.unparsed["binary"] == p.unparsed["binary"] == 1
    for a, b in zip(want, map(as_event, got)):
        _same_event(a, b)
    assert as_event(rows[1]).fields == {"phase": "finish", "rid": "c9"}
    assert as_event(rows[2]).fields == {"client": "127.0.0.1:51234", "method": "GET", "path": "/metrics",
                                        "status": 503}
    assert p.kinds == generic.kinds and p.recognised == generic.recognised


def test_block_path_survives_lines_no_splitter_makes():
    """Lines holding a newline or a lone surrogate (only a caller of the API can pass them) take the
    generic path and never raise."""
    p, generic = Parser("odd"), Parser("odd")
    generic.learning = False
    line = "[2025-08-11 17:17:03 TP0] Decode batch, #running-req: 1, #queue-req: 0, token usage: 0.50"
    odd = [line, line, line + "\ud800", "a\nb", line]
    got = p.feed_items(odd[:1], 1) + p.feed_items(odd[1:], 2)
    want = [ev for n, text in enumerate(odd, 1) for ev in generic.feed(text, n)]
    assert len(got) == len(want) == 4
    for a, b in zip(want, map(as_event, got)):
        _same_event(a, b)
    assert p.unparsed == generic.unparsed and p.unparsed["no_sglang_prefix"] == 1


@SETTINGS
@given(st.lists(st.one_of(_BATCH_LINE, _ACCESS_LINE, _REQUEST_LINE), min_size=1, max_size=30))
def test_json_lines_writer_of_rows_equals_json_dumps(lines):
    """parse writes a learned batch line straight from its row: byte for byte json.dumps of its Event."""
    import json

    from exporter.ingest.events import JsonLines
    write = JsonLines()
    dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode
    p = Parser('src "quoted" é')
    items = p.feed_items(lines, 1) + p.feed_items(lines, len(lines) + 1)
    for item in items:
        want = dumps(as_event(item).to_json())
        assert (write.row(item) if item.__class__ is tuple else write(item)) == want


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 9999), st.integers(0, 99), st.integers(0, 99), st.integers(0, 99),
                          st.integers(0, 99), st.integers(0, 99)), min_size=1, max_size=20))
def test_date_time_with_a_day_cache_equals_timegm(stamps):
    """The parser reads a date's midnight once per day; the times equal calendar.timegm's, invalid dates too."""
    import calendar
    p = Parser("t")
    for y, mo, d, h, mi, sec in stamps:
        date, tod = f"{y:04d}-{mo:02d}-{d:02d}", f"{h:02d}:{mi:02d}:{sec:02d}"
        try:
            want = float(calendar.timegm((y, mo, d, h, mi, sec, 0, 0, 0)))
        except (ValueError, OverflowError):
            want = None
        assert p._date_time(date, tod)[0] == want


# A layout's own `values(text)` (constant slices of only the groups it needs, generated per skeleton) must give
# what the shape's `values` of all the line's groups gives, and what the engine reads of the line's Event.
_VALUE_KEYS = ["#running-req", "#queue-req", "token usage", "gen throughput (token/s)", "cuda graph", "#token",
               "full token usage", "swa token usage", "mamba usage", "gpu token usage", "#new-seq",
               "input throughput (token/s)", "cache hit rate"]
_PRINTED = {"int": str, "float": "{:.2f}".format, "int%": "{:.0f}%".format, "float%": "{:.2f}%".format}


@SETTINGS
@given(st.sampled_from(["Decode", "Prefill"]),
       st.lists(st.tuples(st.sampled_from(_VALUE_KEYS), st.sampled_from(sorted(_PRINTED))), min_size=1, max_size=8,
                unique_by=lambda kc: kc[0]),
       st.lists(st.lists(st.integers(0, 10 ** 6), min_size=9, max_size=9), min_size=2, max_size=12),
       st.sampled_from(["[2025-08-11 17:17:03 TP0] ", "[2025-08-11 17:17:03.25 DP1 TP12] "]))
def test_layout_values_equal_the_shape_values_and_the_event(which, columns, rows, prefix):
    """Lines of one shape, numbers of any widths (so several skeletons): each row's layout values equal the
    shape's values of its groups and the values of its Event (state._FIELDS), types included."""
    from exporter.state import _FIELDS
    columns = [("#running-req", "int")] + [kc for kc in columns if kc[0] != "#running-req"]
    lines = []
    for numbers in rows:
        parts = [f"{k}: {('True' if n % 2 else 'False') if k == 'cuda graph' else _PRINTED[c](n if c == 'int' else n / 97)}"
                 for (k, c), n in zip(columns, numbers)]
        lines.append(f"{prefix}{which} batch, " + ", ".join(parts))
    p = Parser("values")
    items = p.feed_items(lines, 1) + p.feed_items(lines, len(lines) + 1)     # the second time: all learned
    rows_read = [item for item in items if item.__class__ is tuple]
    in_range = [line for line in lines if Parser("v").feed(line, 1)]    # (the others are out of range)
    assert len(rows_read) >= len(in_range)
    for item in rows_read:
        layout, text = item[0], item[1]
        got = layout.values(text)
        want = layout.shape.values(layout.groups(text))
        ev = as_event(item)
        of_event = _FIELDS[ev.kind].values(ev.fields)
        assert got == want == of_event
        assert [type(v) for v in got] == [type(v) for v in want] == [type(v) for v in of_event]
        assert layout.values(text) == got      # the generated function (the first call generated it) again
