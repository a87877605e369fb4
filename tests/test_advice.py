"""Advice reconciliation: one recommendation per flag, current values from server_args, suggested values."""
from __future__ import annotations

import pytest
from test_signals import T0, decode, engine, memory_config, oom, retraction, server_args

from exporter.catalog import GIB, SIGNALS, SIGNALS_BY_ID
from exporter.signals.advice import reconcile
from exporter.signals.judgement import Judgement


def fired(*ids, value=1.0) -> dict:
    return {sid: Judgement(sid, SIGNALS_BY_ID[sid].severity, True, value) for sid in ids}


def by_flag(recs) -> dict:
    flags = [r.flag for r in recs]
    assert len(flags) == len(set(flags)), f"a flag advised twice: {flags}"
    return {r.flag: r for r in recs}


def test_retractions_and_underuse_reconcile_to_one_increase_via_engine():
    eng = engine()
    eng.ingest(server_args(schedule_conservativeness=1.0), T0 - 700)
    now = T0
    for i in range(15):                                   # 1.5 retractions per minute
        eng.ingest(retraction(), now - 590 + i * 39)
    for i in range(5):                                    # queue with spare KV cache
        eng.ingest(decode(queue=300, usage=0.5), now - 10 + i)
    snap = eng.evaluate(now)
    assert snap.judgements["retractions_frequent"].firing and snap.judgements["kv_cache_underused"].firing
    recs = [r for r in snap.advice if r.flag == "--schedule-conservativeness"]
    assert len(recs) == 1
    r = recs[0]
    assert r.action == "increase"
    assert r.current == 1.0
    assert r.suggested == 1.3
    assert "retractions_frequent" in r.reason and "kv_cache_underused" in r.reason
    assert r.signals == ("retractions_frequent",)


def test_oom_decode_beats_concurrency_capped():
    recs = by_flag(reconcile(fired("oom_decode", "concurrency_capped"), {"max_running_requests": 200}, {}))
    r = recs["--max-running-requests"]
    assert r.action == "decrease"
    assert r.current == 200 and r.suggested == 150
    assert r.severity == "critical"
    assert "concurrency_capped" in r.reason and "more severe" in r.reason


def test_pressure_wins_a_tie_of_severity():
    # both warnings: retractions (relieves pressure) beats under-use
    r = by_flag(reconcile(fired("kv_cache_underused", "retractions_frequent"),
                          {"schedule_conservativeness": 0.5}, {}))["--schedule-conservativeness"]
    assert r.action == "increase" and r.suggested == pytest.approx(1.3)
    assert "memory pressure" in r.reason


def test_current_value_falls_back_to_memory_config():
    # server_args prints max_running_requests=None when SGLang picks it; the capacity line has the value
    r = by_flag(reconcile(fired("concurrency_capped"), {"max_running_requests": None},
                          {"max_running_requests": 4096}))["--max-running-requests"]
    assert r.action == "increase" and r.current == 4096 and r.suggested == 6144


@pytest.mark.parametrize("cur,action,sid,expected", [
    (1.0, "decrease", "kv_cache_underused", 0.3),
    (0.4, "decrease", "kv_cache_underused", 0.2),
    (None, "decrease", "kv_cache_underused", 0.3),
    (1.0, "increase", "retractions_frequent", 1.3),
    (1.5, "increase", "retractions_frequent", 1.8),
])
def test_conservativeness_suggestions(cur, action, sid, expected):
    args = {} if cur is None else {"schedule_conservativeness": cur}
    r = by_flag(reconcile(fired(sid), args, {}))["--schedule-conservativeness"]
    assert r.action == action and r.current == cur and r.suggested == pytest.approx(expected)


def test_chunked_prefill_suggestions():
    r = by_flag(reconcile(fired("oom_prefill"), {"chunked_prefill_size": 8192}, {}))["--chunked-prefill-size"]
    assert (r.action, r.current, r.suggested) == ("decrease", 8192, 4096)
    r = by_flag(reconcile(fired("oom_prefill"), {"chunked_prefill_size": 4096}, {}))["--chunked-prefill-size"]
    assert r.suggested == 2048


def test_mem_fraction_from_headroom():
    total = 80 * GIB
    r = by_flag(reconcile(fired("gpu_headroom_high"), {"mem_fraction_static": 0.8}, {}, 14.5 * GIB, total)
                )["--mem-fraction-static"]
    assert r.action == "increase" and r.suggested == 0.9           # 0.8 + 8 GiB / 80 GiB
    r = by_flag(reconcile(fired("gpu_headroom_low"), {"mem_fraction_static": 0.9}, {}, 2.5 * GIB, total)
                )["--mem-fraction-static"]
    assert r.action == "decrease" and r.suggested == 0.85          # 0.9 - 4 GiB / 80 GiB


def test_oom_and_headroom_high_disagree_on_mem_fraction():
    r = by_flag(reconcile(fired("gpu_headroom_high", "oom_decode"), {"mem_fraction_static": 0.8}, {})
                )["--mem-fraction-static"]
    assert r.action == "decrease" and r.suggested == 0.75


def test_cuda_graph_advice_when_the_limit_is_unknown():
    # no server_args line: the limit was assumed, and batches above the real one may fall back to eager mode
    recs = by_flag(reconcile(fired("cuda_graph_off_small_batch"), {}, {}, facts={"graph_off_peak": 120}))
    assert (recs["--cuda-graph-max-bs"].action, recs["--cuda-graph-max-bs"].suggested) == ("increase", 256)
    assert recs["--disable-cuda-graph"].action == "check"


def test_small_batches_without_graph_never_raise_the_limit():
    """Seen in the wild: "raise 512 -> 768" for batches of 3-17. Batches under the limit ran eagerly: CUDA graph
    is disabled or does not apply; raising the limit cannot help, and the advice says so."""
    recs = by_flag(reconcile(fired("cuda_graph_off_small_batch"),
                             {"cuda_graph_max_bs": 512, "disable_cuda_graph": False,
                              "attention_backend": "triton"}, {}, facts={"graph_off_peak": 17}))
    keep = recs["--cuda-graph-max-bs"]
    assert (keep.action, keep.current, keep.suggested) == ("keep", 512, None)
    assert "up to 17" in keep.reason and "cannot help" in keep.reason
    assert recs["--disable-cuda-graph"].action == "check" and recs["--disable-cuda-graph"].current is False
    assert recs["--attention-backend"].action == "check" and recs["--attention-backend"].current == "triton"
    assert not any(r.action == "increase" for r in recs.values())


def test_disabled_cuda_graph_is_named():
    recs = by_flag(reconcile(fired("cuda_graph_off_small_batch"), {"cuda_graph_max_bs": 160,
                                                                   "disable_cuda_graph": True}, {},
                             facts={"graph_off_peak": 8}))
    assert recs["--disable-cuda-graph"].current is True and recs["--disable-cuda-graph"].suggested is False
    assert "remove --disable-cuda-graph" in recs["--disable-cuda-graph"].reason
    assert "--attention-backend" not in recs


def test_graph_peak_reaches_advice_through_the_engine():
    eng = engine()
    eng.ingest(server_args(cuda_graph_max_bs=512), T0 - 100)
    for i, bs in enumerate((3, 9, 17)):
        eng.ingest(decode(running=bs, graph=False), T0 + i)
    recs = by_flag(eng.evaluate(T0 + 5).advice)
    assert recs["--cuda-graph-max-bs"].action == "keep" and "up to 17" in recs["--cuda-graph-max-bs"].reason


@pytest.mark.parametrize("pressure", ["retraction_storm", "retractions_frequent", "oom_decode", "oom_prefill",
                                      "server_crashed"])
def test_no_more_requests_while_memory_is_short(pressure):
    recs = by_flag(reconcile(fired("queue_below_range", pressure), {}, {}))
    hold = recs["request-rate"]
    assert hold.action == "hold" and hold.suggested is None
    assert set(hold.signals) == {"queue_below_range", pressure}
    assert f"{pressure} wins" in hold.reason


def test_no_more_requests_while_the_kv_cache_is_full():
    recs = by_flag(reconcile(fired("queue_below_range"), {}, {}, facts={"kv_full": True}))
    assert recs["request-rate"].action == "hold" and "KV cache is full" in recs["request-rate"].reason
    recs = by_flag(reconcile(fired("queue_below_range"), {}, {}, facts={"kv_full": False}))
    assert recs["request-rate"].action == "increase"


def test_a_full_kv_cache_reaches_advice_through_the_engine():
    eng = engine()
    for i in range(5):                                    # a short queue, and the KV cache full
        eng.ingest(decode(queue=0, usage=0.97), T0 + i)
    recs = by_flag(eng.evaluate(T0 + 5).advice)
    assert recs["request-rate"].action == "hold"
    eng2 = engine()
    for i in range(5):
        eng2.ingest(decode(queue=0, usage=0.4), T0 + i)
    assert by_flag(eng2.evaluate(T0 + 5).advice)["request-rate"].action == "increase"


@pytest.mark.parametrize("stage,want,unwanted", [
    ("weights", {("--tp-size", "increase"), ("--quantization", "check")}, {"--mem-fraction-static"}),
    ("kv_pool", {("--mem-fraction-static", "decrease"), ("--kv-cache-dtype", "check")}, {"--tp-size"}),
    ("cuda_graph", {("--cuda-graph-max-bs", "decrease"), ("--mem-fraction-static", "decrease")},
     {"--kv-cache-dtype"}),
    ("warmup", {("--chunked-prefill-size", "decrease"), ("--mem-fraction-static", "decrease")}, {"--tp-size"}),
    ("kv_pool_too_small", {("--mem-fraction-static", "increase"), ("--kv-cache-dtype", "check")},
     {"--cuda-graph-max-bs"}),
])
def test_startup_oom_advice_follows_the_stage(stage, want, unwanted):
    recs = reconcile(fired("startup_oom"), {"tp_size": 2, "cuda_graph_max_bs": 256, "mem_fraction_static": 0.9},
                     {}, facts={"startup_oom_stage": stage})
    got = {(r.flag, r.action) for r in recs}
    assert want <= got, recs
    assert not unwanted & {r.flag for r in recs}
    by_flag(recs)


def test_storm_advice_includes_check_of_mem_fraction():
    recs = by_flag(reconcile(fired("retraction_storm", "retractions_frequent"), {}, {}))
    assert recs["--schedule-conservativeness"].signals == ("retraction_storm", "retractions_frequent")
    assert recs["--max-running-requests"].action == "decrease"
    assert recs["--mem-fraction-static"].action == "check"


def test_client_knob_has_no_current_value():
    r = by_flag(reconcile(fired("queue_below_range"), {}, {}))["request-rate"]
    assert r.action == "increase" and r.current is None


def test_nothing_fired_no_advice():
    judgements = {s.id: Judgement(s.id, s.severity, False, 0.0) for s in SIGNALS}
    judgements["latency_high"] = Judgement("latency_high", "warning", None, None)
    assert reconcile(judgements, {}, {}) == []


def test_advice_sorted_by_severity_and_every_action_valid():
    recs = reconcile(fired(*[s.id for s in SIGNALS]), {}, {})
    ranks = [{"critical": 0, "warning": 1, "info": 2}[r.severity] for r in recs]
    assert ranks == sorted(ranks)
    assert all(r.action in ("increase", "decrease", "check", "hold", "keep") for r in recs)
    by_flag(recs)


def test_engine_advice_follows_oom_after_restart_current_values():
    eng = engine()
    eng.ingest(server_args(max_running_requests=256), T0)
    eng.ingest(memory_config(max_running=256), T0 + 1)
    eng.ingest(oom("decode"), T0 + 5)
    r = by_flag(eng.evaluate(T0 + 5).advice)["--max-running-requests"]
    assert (r.action, r.current, r.suggested) == ("decrease", 256, 192)


def test_reconciler_remembers_only_while_its_inputs_stay():
    from exporter.signals.advice import Reconciler
    rec = Reconciler()
    j = fired("retractions_frequent", "oom_decode")
    args = {"schedule_conservativeness": 1.0, "max_running_requests": 256}
    first = rec(j, args, {})
    assert first == reconcile(j, args, {})
    again = rec(j, args, {})
    assert again == first and again is not first              # a fresh list each time
    args["schedule_conservativeness"] = 1.5                   # same firing signals, another current value
    assert by_flag(rec(j, args, {}))["--schedule-conservativeness"].current == 1.5
    args["schedule_conservativeness"] = 1                     # equal to 1.0 but printed differently
    assert by_flag(rec(j, args, {}))["--schedule-conservativeness"].current.__class__ is int
    assert by_flag(rec(j, {"max_running_requests": 100}, {}))["--max-running-requests"].suggested == 75
    assert by_flag(rec(j, {}, {"max_running_requests": 64}))["--max-running-requests"].current == 64
    assert rec(fired("oom_decode"), {}, {}) == reconcile(fired("oom_decode"), {}, {})
    assert rec(fired("gpu_headroom_low"), {"mem_fraction_static": 0.9}, {}, 2 * GIB, 80 * GIB) \
        != rec(fired("gpu_headroom_low"), {"mem_fraction_static": 0.9}, {}, 3 * GIB, 80 * GIB)
