"""Property tests of the SGLang grammar: it never raises, and SGLang-formatted numbers round-trip exactly."""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.ingest import grammar
from exporter.ingest.events import KINDS, RANK_KEYS
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
counts = st.integers(min_value=0, max_value=10 ** 9)
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
    (ev,) = Parser("rt").feed(line, 1)
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
    (ev,) = Parser("rt").feed(line, 1)
    want = {"new_seq": new_seq, "new_token": new_tok, "cached_token": cached, "token_usage": float(f"{usage:.2f}"),
            "running_req": running, "queue_req": queue, "pending_token": pending, "cuda_graph": graph,
            "graph_backend": "cuda", "input_throughput": float(f"{tput:.2f}")}
    if hit:
        want["cache_hit_rate"] = float(f"{100.0 * hit_rate:.2f}") / 100.0
    assert ev.kind == "prefill_batch" and ev.fields == want


batch_keys = st.sampled_from(sorted(grammar._BATCH_KEYS) + ["cuda graph", "cpu graph"])


@SETTINGS
@given(st.sampled_from(["Decode", "Prefill"]), st.lists(st.tuples(batch_keys, st.one_of(counts, ratios, st.booleans())),
                                                       min_size=1, max_size=12), st.sampled_from(["", ", ", " "]))
def test_fast_path_equals_generic_splitter(which, items, trailing):
    """Whatever the regex fast path accepts, the generic splitter reads identically (values, types, order)."""
    items = [("#running-req", 5), ("#new-seq", 1)] + items
    body = ", ".join(f"{k}: {v if isinstance(v, (bool, int)) else f'{v:.2f}'}" for k, v in items) + trailing
    p = Parser("eq")
    evs = p.feed(f"[2025-08-11 17:17:03] {which} batch, {body}", 1)
    generic: dict = {}
    parse_batch_body(body, generic)
    assert len(evs) == 1
    assert evs[0].fields == generic and list(evs[0].fields) == list(generic)
    for k, v in generic.items():
        assert type(evs[0].fields[k]) is type(v)


def test_fast_path_shapes_match_generic_on_golden_lines():
    """Every golden batch line: the parser's result (fast path where it applies) == the generic splitter's."""
    from test_grammar_versions import FAMILIES
    n = 0
    for fam in FAMILIES.values():
        for line in fam.lines:
            m = grammar._PREFIX.search(line)
            msg = line[m.end():] if m else ""
            if not msg.startswith(("Decode batch", "Prefill batch")):
                continue
            (ev,) = Parser("g").feed(line, 1)
            slow = Parser("g")._batch(msg, m.group(1) is None)
            assert ev.fields == slow.fields and list(ev.fields) == list(slow.fields), line
            n += 1
    assert n > 40


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
