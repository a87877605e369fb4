"""Unit tests of exporter/ingest/grammar/: unparsed reasons, multi-line records, time handling, the doc sync."""
from __future__ import annotations

import re
from pathlib import Path

from exporter.ingest import grammar
from exporter.ingest.events import KINDS, UNPARSED_REASONS
from exporter.ingest.grammar import Parser, parse_server_args, value_of

DOC = (Path(__file__).resolve().parents[1] / "docs" / "log-events.md").read_text()
D = "[2025-08-11 17:17:03 TP0] "


def feed_all(p: Parser, lines, container_time=None):
    out = []
    for i, line in enumerate(lines, 1):
        out += p.feed(line, i, container_time)
    return out + p.flush()


def test_doc_lists_every_field_name_kind_and_reason():
    for name in set(grammar._BATCH_KEYS.values()) | {"cuda_graph", "graph_backend", "forward_iter",
                                                       "mixed_running_req"}:
        assert f"`{name}`" in DOC, name
    for name in grammar._RETRACT_KEYS.values():
        assert f"`{name}`" in DOC, name
    for kind in KINDS:
        assert f"`{kind}`" in DOC, kind
    for reason in UNPARSED_REASONS:
        assert f"`{reason}`" in DOC, reason
    for printed in grammar._BATCH_KEYS:
        assert f"`{printed}`" in DOC, printed


def test_unparsed_reasons():
    p = Parser()
    feed_all(p, ["", "   ", "a\x00b", "plain text", D + "Something SGLang never says",
                 D + "Decode batch, nothing: here", D + "KV cache pool is full. Retract requests. no numbers"])
    assert p.unparsed == {"empty": 2, "binary": 1, "no_sglang_prefix": 1, "unknown_message": 1, "malformed": 2}
    assert p.recognised == 0


def test_kv_oom_logged_then_raised_counts_once_and_blank_lines_belong_to_it():
    p = Parser()
    evs = feed_all(p, [D + "Prefill out of memory. Try to lower your batch size.", "Try to allocate 9 tokens.",
                       "Available tokens: 2 (available_size=2 + evictable_size=0)", "",
                       D + "Scheduler hit an exception: Traceback (most recent call last):",
                       '  File "x.py", line 1, in prepare_for_extend',
                       "RuntimeError: Prefill out of memory. Try to lower your batch size."])
    assert [(e.kind, e.line) for e in evs] == [("oom", 1), ("scheduler_exception", 5)]
    assert evs[0].fields == {"phase": "prefill", "source": "kv_pool", "requested_tokens": 9, "available_tokens": 2}
    assert "empty" not in p.unparsed


def test_multiline_record_ends_at_next_record_and_is_bounded():
    p = Parser()
    lines = [D + "Scheduler hit an exception: Traceback (most recent call last):"]
    lines += [f'  File "f.py", line {i}, in forward_decode' for i in range(5000)]
    lines += ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 ...", D + "Decode batch, "
              "#running-req: 1, #token: 1, token usage: 0.01, cuda graph: True, gen throughput (token/s): 1.00, "
              "#queue-req: 0"]
    evs = []
    for i, line in enumerate(lines, 1):
        evs += p.feed(line, i)
    # the OOM text came after _MAX_RECORD_LINES continuation lines: absorbed, not scanned
    assert [e.kind for e in evs] == ["scheduler_exception", "decode_batch"]
    assert p.flush() == []


def test_bare_cuda_oom_and_nccl_use_container_time():
    p = Parser()
    evs = feed_all(p, ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB.",
                       "[rank1]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught "
                       "collective operation timeout: WorkNCCL(SeqNum=1)"], container_time="2025-08-11T17:17:03.5Z")
    assert [e.kind for e in evs] == ["oom", "nccl_timeout"]
    assert evs[0].fields == {"phase": "unknown", "source": "cuda", "requested_bytes": 512 << 20}
    assert evs[0].time == "2025-08-11T17:17:03.5Z" and evs[0].ts == 1754932623.5


def test_time_only_prefix_prefers_the_container_date():
    p = Parser()
    (ev,) = p.feed("[17:17:03 TP0] Decode batch. #running-req: 1, #token: 1, token usage: 0.01, "
                   "gen throughput (token/s): 1.00, #queue-req: 0", 1, "2025-08-11T17:17:03.250000000Z")
    assert ev.time == "2025-08-11T17:17:03.250000000Z" and ev.ts == 1754932623.25


def test_time_only_prefix_wraps_midnight():
    p = Parser()
    a = p.feed("[23:59:59] The server is fired up and ready to roll!", 1)[0]
    b = p.feed("[00:00:01] The server is fired up and ready to roll!", 2)[0]
    assert (a.ts, b.ts) == (86399.0, 86401.0) and b.time == "00:00:01"


def test_milliseconds_and_comma_fraction():
    p = Parser()
    (a,) = p.feed("[2025-08-11 17:17:03.007 DP0 TP1] The server is fired up and ready to roll!", 1)
    (b,) = p.feed("[2025-08-11 17:17:03,5] The server is fired up and ready to roll!", 2)
    assert a.time == "2025-08-11T17:17:03.007" and a.ts == 1754932623.007 and a.rank["dp"] == 0 and a.rank["tp"] == 1
    assert b.ts == 1754932623.5


def test_invalid_date_keeps_the_record_without_time():
    p = Parser()
    (ev,) = p.feed("[2025-13-45 17:17:03] The server is fired up and ready to roll!", 1)
    assert ev.time is None and ev.ts is None


def test_prefix_inside_message_is_not_a_new_record_when_it_starts_the_line():
    p = Parser()
    (ev,) = p.feed(D + "Receive: obj=GenerateReqInput(rid='a-b', text='[2025-08-11 17:17:04] x')", 1)
    assert ev.kind == "request_log" and ev.fields == {"phase": "receive", "rid": "a-b"}


def test_known_fields_keep_their_types():
    fields: dict = {}
    grammar.parse_batch_body("#running-req: many, token usage: nan, ( #queue-req: 5, #new thing (x/s): 1.50", fields)
    assert fields == {"new_thing_x_s": 1.5}


def test_value_of():
    assert value_of("12") == 12 and type(value_of("12")) is int
    assert value_of("-3") == -3 and value_of("0.82") == 0.82 and value_of("24.18%") == 24.18 / 100.0
    assert value_of("True") is True and value_of("False") is False
    for text in ("nan", "inf", "-inf", "1e999", "1_000", "²", "0x10", "", "auto"):
        assert value_of(text) == text


def test_server_args_never_evaluates_and_stays_json_safe():
    args = parse_server_args("ServerArgs(a=__import__('os').system('x'), b={1, 2}, c=(1, 'x'), d=1e999, "
                             "e='q, (r)', f=<Enum.X: 1>, g=None)")
    assert args == {"a": "__import__('os').system('x')", "b": "{1, 2}", "c": (1, "x"), "d": "1e999", "e": "q, (r)",
                    "f": "<Enum.X: 1>", "g": None}
    assert parse_server_args("nonsense") is None


def test_format_family_does_not_flip_between_prefill_and_decode():
    p = Parser()
    feed_all(p, [D + "Decode batch. #running-req: 1, #token: 1, token usage: 0.01, cuda graph: True, "
                     "gen throughput (token/s): 1.00, #queue-req: 0",
                 D + "Prefill batch. #new-seq: 1, #new-token: 1, #cached-token: 0, token usage: 0.01, "
                     "#running-req: 1, #queue-req: 0"])
    assert p.format_family == "0.4.7-0.5.3"
    q = Parser()
    q.feed(D + "Prefill batch. #new-seq: 1, #new-token: 1, #cached-token: 0, token usage: 0.01, "
               "#running-req: 1, #queue-req: 0", 1)
    assert q.format_family == "0.3.4-0.5.3"


def test_rank_dicts_are_complete_and_cached():
    p = Parser()
    a = p.feed("[2025-08-11 17:17:03 MOE_DP2 ATTN_CP1] The server is fired up and ready to roll!", 1)[0]
    b = p.feed("[2025-08-11 17:17:04 MOE_DP2 ATTN_CP1] The server is fired up and ready to roll!", 2)[0]
    assert a.rank == {"dp": None, "tp": None, "pp": None, "ep": None, "attn_cp": 1, "moe_dp": 2}
    assert a.rank is b.rank


def test_doc_family_names_match_the_parser():
    src = "".join(p.read_text() for p in Path(grammar.__file__).parent.glob("*.py"))
    for fam in set(re.findall(r'"(0\.[0-9.]+(?:-0\.[0-9.]+)?)"', src)):
        if fam.count(".") >= 2:
            assert f"`{fam}`" in DOC, fam


def test_every_batch_field_range_is_one_a_learned_shape_can_spell():
    """A learned shape spells each batch field's catalog range (catalog.FIELD_RANGES) as digit classes, which
    needs a low of 0 or below and a high of d * 10**k: a catalog change that breaks this fails here, not as
    lines silently left to the generic path."""
    from exporter.ingest.grammar.shapes import _value_class
    for name in set(grammar._BATCH_KEYS.values()) | {"forward_iter"}:
        for is_float in (False, True):
            for percent in (False, True):
                regex, _ = _value_class(name, is_float, percent)
                assert re.fullmatch(regex, "0" + (".0" if is_float else "")), name
