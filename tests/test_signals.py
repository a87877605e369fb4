"""Every catalog signal at its boundaries, per profile, on synthetic Event streams with an injected clock.

Events are built directly (no parser) and fed through `Engine.ingest(ev, now)` / `Engine.evaluate(now)`.
"""
from __future__ import annotations

import pytest

from exporter.catalog import GIB, PROFILES, SIGNALS, SIGNALS_BY_ID, active_signals
from exporter.config import Config
from exporter.engine import Engine
from exporter.ingest.events import EMPTY_RANK, Event
from exporter.ingest.scrape import ScrapeResult

T0 = 1_700_000_000.0


# ---------------------------------------------------------------------------------------------- builders
def rank(tp=None, dp=None, pp=None) -> dict:
    return {**EMPTY_RANK, "tp": tp, "dp": dp, "pp": pp}


def decode(queue=0, running=10, usage=0.95, graph=True, tp=None, dp=None, pp=None) -> Event:
    f = {"running_req": running, "num_tokens": 1000, "token_usage": usage, "gen_throughput": 100.0,
         "queue_req": queue}
    if graph is not None:
        f["cuda_graph"] = graph
    return Event("decode_batch", f, rank=rank(tp, dp, pp))


def prefill(queue=0, running=10, usage=0.95, tp=None) -> Event:
    return Event("prefill_batch", {"new_seq": 1, "new_token": 100, "cached_token": 0, "token_usage": usage,
                                   "running_req": running, "queue_req": queue}, rank=rank(tp))


def retraction(n=1, tp=None, testing=False) -> Event:
    return Event("retraction", {"variant": "kv_cache_full", "testing": testing, "retracted_reqs": n,
                                "new_token_ratio_before": 0.9, "new_token_ratio_after": 1.0}, rank=rank(tp))


def memory_config(avail_gib=6.5, max_running=4096, tp=None) -> Event:
    return Event("memory_config", {"max_total_num_tokens": 100000, "chunked_prefill_size": 8192,
                                   "max_running_requests": max_running, "context_len": 8192,
                                   "available_gpu_mem_bytes": int(avail_gib * GIB) if avail_gib is not None
                                   else None}, rank=rank(tp))


def server_args(**kw) -> Event:
    return Event("server_args", {"model_path": "m", **kw})


def oom(phase) -> Event:
    return Event("oom", {"phase": phase, "source": "kv_pool"}, rank=rank(0))


def watchdog(soft=False) -> Event:
    return Event("watchdog_timeout", {"component": "Scheduler", "soft": soft, "timeout_seconds": 300},
                 rank=rank(0))


def engine(profile="offline", observed_from=T0 - 3600, **signals) -> Engine:
    """An engine that has watched for an hour before T0 (rates over whole windows; short observation: pass
    observed_from=None, and the first event starts it)."""
    eng = Engine(Config(profile=profile, signals=signals), log_fed=True)
    eng.state.observed_from = observed_from
    return eng


def feed(eng: Engine, events, start=T0, step=1.0) -> float:
    """Ingest events `step` seconds apart from `start`; returns the time of the last one."""
    t = start
    for i, ev in enumerate(events):
        t = start + i * step
        eng.ingest(ev, t)
    return t


def judge(eng: Engine, sid: str, now: float):
    return eng.evaluate(now).judgements[sid]


# ---------------------------------------------------------------------------------------------- profiles
@pytest.mark.parametrize("profile", list(PROFILES))
def test_inactive_signals_are_absent_per_profile(profile):
    eng = engine(profile)
    snap = eng.evaluate(T0)
    expected = {s.id for s in active_signals(profile)}
    assert set(snap.judgements) == expected
    assert set(eng.history) == expected
    for sig in SIGNALS:
        if sig.params(profile) is None:
            assert sig.id not in snap.judgements


def test_profile_expectations_match_design():
    # the design's table: queue depth judged only offline (below) / latency never offline
    assert "queue_below_range" not in {s.id for s in active_signals("online")}
    assert "latency_high" not in {s.id for s in active_signals("offline")}
    assert "latency_high" in {s.id for s in active_signals("online")}


def test_everything_unknown_without_live_source():
    eng = engine("online")
    eng.set_sources(log_up=False, metrics_up=False)
    for sid, j in eng.evaluate(T0).judgements.items():
        assert j.firing is None, sid


def test_a_live_log_is_evidence_of_no_oom_or_retraction_only_once_it_showed_sglang():
    # a followed log that has not shown one SGLang record may not be SGLang's: its silence proves nothing
    eng = engine("online")
    snap = eng.evaluate(T0)
    assert {sid for sid, j in snap.judgements.items() if j.firing is not None} == set()
    assert "no SGLang record read from the log yet" in snap.judgements["oom_decode"].detail
    # one batch line later, a live log with no retraction / OOM line is evidence of none; the rest needs samples
    eng.ingest(decode(queue=5), T0 + 1)
    snap = eng.evaluate(T0 + 2)
    counts = {"retractions_frequent", "retraction_storm", "oom_prefill", "oom_decode"}
    assert all(snap.judgements[sid].firing is False for sid in counts)


# ---------------------------------------------------------------------------------------------- queue
@pytest.mark.parametrize("queue,fires", [(0, True), (99, True), (100, False), (2000, False)])
def test_queue_below_range_boundary(queue, fires):
    eng = engine()
    t = feed(eng, [decode(queue=queue)] * 3)
    j = judge(eng, "queue_below_range", t)
    assert j.firing is fires
    assert j.value == (1.0 if fires else 0.0)


@pytest.mark.parametrize("queue,fires", [(100, False), (2000, False), (2001, True), (5000, True)])
def test_queue_above_range_boundary(queue, fires):
    eng = engine()
    t = feed(eng, [decode(queue=queue)] * 3)
    assert judge(eng, "queue_above_range", t).firing is fires


@pytest.mark.parametrize("profile", ["online", "long-context", "multi-turn"])
def test_queue_zero_is_healthy_outside_offline(profile):
    eng = engine(profile)
    t = feed(eng, [decode(queue=0)] * 10)
    snap = eng.evaluate(t)
    assert "queue_below_range" not in snap.judgements
    assert snap.judgements["queue_above_range"].firing is False


def test_fraction_boundary_half_of_samples_fires():
    eng = engine()
    t = feed(eng, [decode(queue=0), decode(queue=500), decode(queue=0), decode(queue=500)])
    j = judge(eng, "queue_below_range", t)
    assert j.value == 0.5 and j.firing is True          # ">= fraction"
    eng2 = engine()
    t = feed(eng2, [decode(queue=0), decode(queue=500), decode(queue=500)])
    assert judge(eng2, "queue_below_range", t).firing is False


def test_min_samples_gates_to_unknown():
    eng = engine()
    t = feed(eng, [decode(queue=0)] * 2)
    j = judge(eng, "queue_below_range", t)
    assert j.firing is None and j.value is None
    eng.ingest(decode(queue=0), t + 1)
    assert judge(eng, "queue_below_range", t + 1).firing is True


def test_fraction_window_expires():
    eng = engine()
    t = feed(eng, [decode(queue=0)] * 3)
    assert judge(eng, "queue_below_range", t).firing is True
    window = SIGNALS_BY_ID["queue_below_range"].window_seconds
    # the samples leave the window: unknown again, never "healthy" by default
    assert judge(eng, "queue_below_range", t + window + 10).firing is None


def test_prefill_lines_do_not_count_as_queue_samples():
    # the catalog's input is decode_batch.queue_req
    eng = engine()
    t = feed(eng, [prefill(queue=0)] * 5)
    assert judge(eng, "queue_below_range", t).firing is None


# ---------------------------------------------------------------------------------------------- KV cache
@pytest.mark.parametrize("usage,queue,fires", [(0.89, 1, True), (0.90, 1, False), (0.89, 0, False),
                                               (0.5, 300, True), (0.95, 300, False)])
def test_kv_cache_underused_boundary(usage, queue, fires):
    eng = engine()
    t = feed(eng, [decode(queue=queue, usage=usage)] * 3)
    assert judge(eng, "kv_cache_underused", t).firing is fires


def test_kv_cache_underused_uses_fullest_pool_of_hybrid_models():
    eng = engine()
    ev = Event("decode_batch", {"running_req": 5, "full_token_usage": 0.5, "swa_token_usage": 0.95,
                                "cuda_graph": True, "queue_req": 10}, rank=rank(0))
    t = feed(eng, [ev] * 3)
    assert judge(eng, "kv_cache_underused", t).firing is False


# ---------------------------------------------------------------------------------------------- retractions
def _retractions(eng, n, now, window):
    """n retraction events spread inside (now - window, now]."""
    for i in range(n):
        eng.ingest(retraction(), now - window + 1 + i * (window - 1) / n)


@pytest.mark.parametrize("n,rate,fires", [(10, 1.0, False), (11, 1.1, True), (0, 0.0, False)])
def test_retractions_frequent_boundary(n, rate, fires):
    # "> 1 per minute" over 10 minutes: exactly 10 events do not fire, 11 do
    eng = engine()
    now = T0 + 3600
    eng.ingest(decode(), T0)
    _retractions(eng, n, now, 600)
    j = judge(eng, "retractions_frequent", now)
    assert j.value == pytest.approx(rate)
    assert j.firing is fires


@pytest.mark.parametrize("n,fires", [(50, True), (49, False), (100, True)])
def test_retraction_storm_boundary(n, fires):
    # ">= 10 per minute" over 5 minutes: 50 events fire (10.0/min), 49 (9.8/min) do not
    eng = engine()
    now = T0 + 3600
    _retractions(eng, n, now, 300)
    j = judge(eng, "retraction_storm", now)
    assert j.value == pytest.approx(n / 5)
    assert j.firing is fires


def test_retraction_storm_exact_threshold_via_override():
    eng = engine(retraction_storm={"per_minute": 9.9})
    now = T0 + 3600
    _retractions(eng, 49, now, 300)            # 9.8/min < 9.9
    assert judge(eng, "retraction_storm", now).firing is False
    eng.ingest(retraction(), now)              # 50 -> 10.0/min >= 9.9
    assert judge(eng, "retraction_storm", now).firing is True


def test_retractions_leave_the_window():
    eng = engine()
    now = T0 + 3600
    _retractions(eng, 30, now, 600)
    assert judge(eng, "retractions_frequent", now).firing is True
    assert judge(eng, "retractions_frequent", now + 601).firing is False
    assert eng.state.retractions_total == 30         # the counter keeps counting


def test_tp_retraction_lines_counted_once():
    eng = engine()
    for tp in range(4):                               # TP=4 prints the same retraction 4 times
        eng.ingest(retraction(n=3, tp=tp), T0)
    assert eng.state.retractions_total == 1
    assert eng.state.retracted_requests_total == 3
    assert judge(eng, "retractions_frequent", T0).value == pytest.approx(0.1)


def test_testing_retractions_ignored():
    eng = engine()
    eng.ingest(retraction(testing=True), T0)
    assert eng.state.retractions_total == 0


def test_retractions_unknown_without_live_log():
    eng = engine()
    eng.set_sources(log_up=False)
    assert judge(eng, "retractions_frequent", T0).firing is None


# ---------------------------------------------------------------------------------------------- headroom
@pytest.mark.parametrize("gib,low,high", [(4.99, True, False), (5.0, False, False), (6.5, False, False),
                                          (8.0, False, False), (8.01, False, True), (13.5, False, True)])
def test_headroom_boundaries(gib, low, high):
    eng = engine()
    eng.ingest(memory_config(avail_gib=gib), T0)
    snap = eng.evaluate(T0)
    assert snap.judgements["gpu_headroom_low"].firing is low
    assert snap.judgements["gpu_headroom_high"].firing is high
    assert snap.judgements["gpu_headroom_low"].value == int(gib * GIB)


def test_headroom_is_min_over_tp_ranks():
    eng = engine()
    eng.ingest(memory_config(avail_gib=9.0, tp=0), T0)
    eng.ingest(memory_config(avail_gib=4.0, tp=1), T0)
    assert eng.state.headroom_bytes == int(4.0 * GIB)
    assert judge(eng, "gpu_headroom_low", T0).firing is True


def test_headroom_unknown_before_capacity_line():
    eng = engine()
    feed(eng, [decode()] * 3)
    assert judge(eng, "gpu_headroom_low", T0 + 5).firing is None


# ---------------------------------------------------------------------------------------------- CUDA graph
@pytest.mark.parametrize("max_bs,running,fires", [(None, 160, True), (None, 161, False), (None, 1, True),
                                                   (8, 8, True), (8, 9, False), (512, 400, True)])
def test_cuda_graph_off_small_batch(max_bs, running, fires):
    eng = engine()
    if max_bs is not None:
        eng.ingest(server_args(cuda_graph_max_bs=max_bs), T0 - 10)
    eng.ingest(decode(running=running, graph=False), T0)
    j = judge(eng, "cuda_graph_off_small_batch", T0)
    assert j.firing is fires
    assert j.value == (1.0 if fires else 0.0)


def test_cuda_graph_on_does_not_fire_and_none_max_bs_uses_default():
    eng = engine()
    eng.ingest(server_args(cuda_graph_max_bs=None), T0 - 10)    # printed as None: SGLang picks it
    eng.ingest(decode(running=10, graph=True), T0)
    assert judge(eng, "cuda_graph_off_small_batch", T0).firing is False
    eng.ingest(decode(running=100, graph=False), T0 + 1)
    assert judge(eng, "cuda_graph_off_small_batch", T0 + 1).firing is True


def test_cuda_graph_unknown_when_lines_do_not_report_it():
    eng = engine()
    feed(eng, [decode(graph=None)] * 3)
    assert judge(eng, "cuda_graph_off_small_batch", T0 + 3).firing is None


# ---------------------------------------------------------------------------------------------- OOM
@pytest.mark.parametrize("phase,prefill_fires,decode_fires,startup_fires", [
    ("prefill", True, False, False), ("decode", False, True, False), ("unknown", False, True, False),
    ("startup", False, False, True)])
def test_oom_phases(phase, prefill_fires, decode_fires, startup_fires):
    eng = engine()
    eng.ingest(decode(), T0 - 1)                      # a serving server: an OOM of unknown phase is decode's
    eng.ingest(oom(phase), T0)
    snap = eng.evaluate(T0 + 1)
    assert snap.judgements["oom_prefill"].firing is prefill_fires
    assert snap.judgements["oom_decode"].firing is decode_fires
    assert snap.judgements["startup_oom"].firing is startup_fires
    assert eng.state.oom_total[phase] == 1


@pytest.mark.parametrize("before,counted", [
    ([], "startup"),                                  # an OOM with nothing around it: start-up
    ([server_args()], "startup"),                     # start-up begun, not ready
    ([server_args(), decode()], "startup"),           # warm-up batches run before the ready line
    ([server_args(), Event("server_ready", {}), decode()], "unknown"),   # serving: judged as oom_decode
    ([decode()], "unknown"),                          # joined a serving server
])
def test_unknown_phase_oom_is_placed_by_what_came_before(before, counted):
    eng = engine()
    feed(eng, before, start=T0 - 10)
    eng.ingest(Event("oom", {"phase": "unknown", "source": "cuda"}), T0)
    assert eng.state.oom_total == {counted: 1}
    snap = eng.evaluate(T0 + 1)
    assert snap.judgements["startup_oom"].firing is (counted == "startup")
    assert snap.judgements["oom_decode"].firing is (counted == "unknown")


def test_oom_window_is_15_minutes():
    eng = engine()
    eng.ingest(oom("decode"), T0)
    assert judge(eng, "oom_decode", T0 + 899).firing is True
    assert judge(eng, "oom_decode", T0 + 901).firing is False


def test_oom_unknown_without_log_source():
    eng = Engine(Config(), log_fed=False)
    eng.set_sources(metrics_up=True)
    assert judge(eng, "oom_decode", T0).firing is None


# ---------------------------------------------------------------------------------------------- concurrency cap
@pytest.mark.parametrize("running,queue,usage,fires", [
    (3892, 5, 0.5, True),      # 0.95 x 4096 = 3891.2
    (3891, 5, 0.5, False),
    (4096, 0, 0.5, False),     # no queue
    (4096, 5, 0.9, False),     # KV cache full: memory, not the cap, limits
    (4096, 5, 0.89, True),
])
def test_concurrency_capped_boundary(running, queue, usage, fires):
    eng = engine()
    eng.ingest(memory_config(max_running=4096), T0 - 10)
    t = feed(eng, [decode(running=running, queue=queue, usage=usage)] * 3, start=T0)
    assert judge(eng, "concurrency_capped", t).firing is fires


def test_concurrency_capped_unknown_without_cap():
    eng = engine()
    t = feed(eng, [decode(running=4096, queue=5, usage=0.5)] * 3)
    j = judge(eng, "concurrency_capped", t)
    assert j.firing is None and "max_running_requests" in j.detail


# ---------------------------------------------------------------------------------------------- stalled
def test_stalled_boundary():
    eng = engine()
    eng.ingest(decode(queue=5, running=10), T0)
    assert judge(eng, "stalled", T0 + 60).firing is False         # exactly 60 s: not yet
    j = judge(eng, "stalled", T0 + 60.5)
    assert j.firing is True and j.value == pytest.approx(60.5)
    eng.ingest(decode(queue=5), T0 + 70)                           # progress again
    assert judge(eng, "stalled", T0 + 71).firing is False


def test_stalled_not_when_queue_empty():
    # a decode line is printed every 40 steps, so `running` in the last line may already have finished;
    # from logs only a waiting queue proves work is pending (catalog formula says queue + running; see report)
    eng = engine()
    eng.ingest(decode(queue=0, running=10), T0)
    assert judge(eng, "stalled", T0 + 1000).firing is False


def test_stalled_prefill_counts_as_progress():
    eng = engine()
    eng.ingest(decode(queue=5), T0)
    eng.ingest(prefill(queue=5), T0 + 50)
    assert judge(eng, "stalled", T0 + 100).firing is False


@pytest.mark.parametrize("soft,fires", [(False, True), (True, False)])
def test_stalled_watchdog(soft, fires):
    eng = engine()
    eng.ingest(decode(queue=0), T0)
    eng.ingest(watchdog(soft=soft), T0 + 1)
    assert judge(eng, "stalled", T0 + 2).firing is fires
    if fires:
        assert judge(eng, "stalled", T0 + 1 + 301).firing is False      # left the 5-minute window


def test_stalled_watchdog_before_any_batch():
    eng = engine()
    eng.ingest(watchdog(), T0)
    assert judge(eng, "stalled", T0).firing is True


def test_stalled_unknown_before_progress():
    assert judge(engine(), "stalled", T0).firing is None


# ---------------------------------------------------------------------------------------------- latency (scrape)
BUCKETS = (0.1, 0.5, 1.0, 2.0, 4.0, 8.0, float("inf"))


def hist(counts: dict) -> dict:
    """Cumulative buckets from {le: count in that bucket}."""
    out, total = {}, 0.0
    for le in BUCKETS:
        total += counts.get(le, 0)
        out[le] = total
    return out


def scrape_with(**histograms) -> ScrapeResult:
    return ScrapeResult(True, ranks={(None, 0, 0): {"queue": 0.0, "running": 1.0}}, histograms=histograms)


def latency_engine(profile="online", log_fed=False):
    eng = Engine(Config(profile=profile), log_fed=log_fed)
    eng.set_sources(metrics_up=True)
    return eng


@pytest.mark.parametrize("profile,slow,fires", [("online", True, True), ("online", False, False),
                                                ("multi-turn", True, True), ("long-context", True, False)])
def test_latency_high_from_histogram_snapshots(profile, slow, fires):
    eng = latency_engine(profile)
    eng.ingest_scrape(scrape_with(time_to_first_token_seconds=hist({})), T0)
    # 100 requests; slow: all TTFTs in (2, 4] -> p99 = 3.98 s vs objective 2 s (10 s long-context)
    later = hist({4.0: 100}) if slow else hist({0.5: 100})
    eng.ingest_scrape(scrape_with(time_to_first_token_seconds=later), T0 + 60)
    j = judge(eng, "latency_high", T0 + 60)
    objective = SIGNALS_BY_ID["latency_high"].params(profile)["ttft_p99_seconds"]
    p99 = 2.0 + 2.0 * 0.99 if slow else 0.1 + 0.4 * 0.99
    assert j.value == pytest.approx(p99 / objective)
    assert j.firing is fires


def test_latency_high_uses_window_delta_not_lifetime():
    eng = latency_engine()
    eng.ingest_scrape(scrape_with(time_to_first_token_seconds=hist({8.0: 1000})), T0)   # old slow history
    eng.ingest_scrape(scrape_with(time_to_first_token_seconds=hist({8.0: 1000, 0.5: 100})), T0 + 30)
    assert judge(eng, "latency_high", T0 + 30).firing is False


def test_latency_high_inter_token_old_name():
    eng = latency_engine()
    eng.ingest_scrape(scrape_with(time_per_output_token_seconds=hist({})), T0)
    eng.ingest_scrape(scrape_with(time_per_output_token_seconds=hist({0.5: 100})), T0 + 15)   # > 0.2 s
    j = judge(eng, "latency_high", T0 + 15)
    assert j.firing is True and "time_per_output_token" in j.detail


def test_latency_high_counter_reset_after_restart():
    eng = latency_engine()
    eng.ingest_scrape(scrape_with(time_to_first_token_seconds=hist({0.5: 1000})), T0)
    eng.ingest_scrape(scrape_with(time_to_first_token_seconds=hist({4.0: 50})), T0 + 15)    # reset
    j = judge(eng, "latency_high", T0 + 15)
    assert j.firing is True and j.value == pytest.approx((2.0 + 2.0 * 0.99) / 2.0)


def test_latency_unknown_when_metrics_down_or_no_requests():
    eng = latency_engine()
    eng.ingest_scrape(scrape_with(time_to_first_token_seconds=hist({})), T0)
    eng.ingest_scrape(scrape_with(time_to_first_token_seconds=hist({})), T0 + 15)
    assert judge(eng, "latency_high", T0 + 15).firing is None       # no requests completed
    eng.ingest_scrape(scrape_with(time_to_first_token_seconds=hist({4.0: 10})), T0 + 30)
    assert judge(eng, "latency_high", T0 + 30).firing is True
    eng.set_sources(metrics_up=False)
    assert judge(eng, "latency_high", T0 + 31).firing is None


# ---------------------------------------------------------------------------------------------- restarts
def test_restart_starts_new_epoch():
    eng = engine()
    eng.ingest(server_args(schedule_conservativeness=1.0, cuda_graph_max_bs=8), T0)
    eng.ingest(memory_config(avail_gib=3.0, max_running=100), T0 + 1)
    eng.ingest(Event("server_ready", {}), T0 + 2)
    for i in range(5):
        eng.ingest(decode(queue=0, running=100, usage=0.5, graph=False), T0 + 10 + i)
        eng.ingest(retraction(n=2), T0 + 10 + i)
    eng.ingest(oom("decode"), T0 + 20)
    snap = eng.evaluate(T0 + 20)
    assert snap.judgements["queue_below_range"].firing is True
    assert snap.judgements["gpu_headroom_low"].firing is True
    counters = (eng.state.retractions_total, eng.state.retracted_requests_total, eng.state.oom_total["decode"])
    assert counters == (5, 10, 1)
    assert eng.state.epoch == 1 and eng.state.restarts == 0

    # SGLang restarts: a new server_args after batch lines
    eng.ingest(server_args(schedule_conservativeness=1.3), T0 + 100)
    eng.ingest(memory_config(avail_gib=12.0, max_running=200), T0 + 101)
    st = eng.state
    assert st.epoch == 2 and st.restarts == 1
    assert st.server_args.get("schedule_conservativeness") == 1.3 and "cuda_graph_max_bs" not in st.server_args
    assert st.headroom_bytes == int(12.0 * GIB)               # replaced, not min'ed with the old epoch
    assert st.memory_config["max_running_requests"] == 200
    assert not st.ranks
    snap = eng.evaluate(T0 + 101)
    assert snap.judgements["queue_below_range"].firing is None       # fraction windows reset
    assert snap.judgements["cuda_graph_off_small_batch"].firing is None
    assert snap.judgements["gpu_headroom_low"].firing is False
    assert snap.judgements["gpu_headroom_high"].firing is True
    # the OOM that caused the restart keeps its (15-minute) window: it must not vanish on the restart
    assert snap.judgements["oom_decode"].firing is True
    # counters never go backwards
    assert (st.retractions_total, st.retracted_requests_total, st.oom_total["decode"]) == counters
    eng.ingest(retraction(n=1), T0 + 102)
    assert st.retractions_total == 6 and st.retracted_requests_total == 11


def test_startup_sequence_is_one_epoch():
    eng = engine()
    eng.ingest(server_args(), T0)
    eng.ingest(memory_config(), T0 + 1)
    eng.ingest(decode(), T0 + 2)              # warm-up batch before the ready line
    eng.ingest(Event("server_ready", {}), T0 + 3)
    assert eng.state.epoch == 1 and eng.state.restarts == 0


def test_restart_of_server_joined_mid_run_counts():
    eng = engine()
    feed(eng, [decode()] * 3)                 # followed from the end: batches first
    eng.ingest(server_args(), T0 + 10)
    assert eng.state.restarts == 1


def test_second_ready_line_is_a_restart():
    eng = engine()
    eng.ingest(server_args(), T0)
    eng.ingest(Event("server_ready", {}), T0 + 1)
    eng.ingest(Event("server_ready", {}), T0 + 2)
    assert eng.state.restarts == 1


# ---------------------------------------------------------------------------------------------- history
def test_history_tracks_intervals_and_worst():
    eng = engine()
    eng.ingest(decode(queue=5), T0)
    eng.evaluate(T0 + 10)
    eng.evaluate(T0 + 70)
    eng.evaluate(T0 + 100)
    eng.ingest(decode(queue=5), T0 + 110)
    eng.evaluate(T0 + 110)
    h = eng.history["stalled"]
    assert h.fired and h.state == "ok" and h.since == T0 + 110
    assert h.intervals == [[T0 + 70, T0 + 110, 100.0]]
    assert h.worst == 100.0


def test_every_signal_can_fire():
    """One stream that makes every offline signal fire at once (guards against a judge that never fires)."""
    eng = engine()
    eng.ingest(server_args(), T0 - 1300)                  # no ready line since: start-up stalled
    eng.ingest(Event("oom", {"phase": "startup", "source": "startup"}), T0 - 1250)
    eng.ingest(memory_config(avail_gib=4.0, max_running=10), T0)
    for i in range(3):
        eng.ingest(decode(queue=3000, running=10, usage=0.5, graph=False), T0 + i)
    for i in range(60):
        eng.ingest(retraction(), T0 + i)
    eng.ingest(oom("prefill"), T0 + 1)
    eng.ingest(oom("decode"), T0 + 1)
    eng.ingest(watchdog(), T0 + 2)
    eng.ingest(Event("scheduler_exception", {"component": "Scheduler", "message": "AssertionError"}), T0 + 3)
    for _ in range(30):       # every inference request answered 500: both error-rate signals
        eng.ingest(Event("http_access", {"client": "10.0.0.1:1", "method": "POST", "path": "/generate",
                                         "status": 500}), T0 + 4)
    snap = eng.evaluate(T0 + 60)
    not_firing = {sid for sid, j in snap.judgements.items() if not j.firing}
    # queue below and above range and headroom low/high exclude each other; the tuning signals read /metrics
    # (tests/test_native_metrics.py makes each fire), the serving signals /metrics, a --max-queued-requests or
    # several start-ups (tests/test_serving_signals.py makes each fire)
    from exporter.catalog.serving import SERVING_SIGNALS
    from exporter.catalog.tuning import TUNING_SIGNALS
    assert not_firing - {s.id for s in TUNING_SIGNALS + SERVING_SIGNALS} == {"queue_below_range", "gpu_headroom_high"}
