"""The serving signals (catalog_serving) per release: each fires on a fault scripted into that release's own
exposition (tests/conformance/, values edited, labels kept) and stays quiet on the healthy one."""
from __future__ import annotations

import pytest

from exporter.config import Config
from exporter.engine import Engine
from exporter.ingest.pipeline import iter_file_events
from exporter.ingest.scrape import parse_exposition
from tests import serving_faults as sf

T0, STEP = 1000.0, 15.0


def _judge(texts, config: Config | None = None) -> dict:
    eng = Engine(config or Config(profile="online"), log_fed=False)
    eng.set_sources(metrics_up=True)
    for i, text in enumerate(texts):
        res = parse_exposition(text)
        assert res.success
        eng.ingest_scrape(res, T0 + i * STEP)
    return eng.evaluate(T0 + (len(texts) - 1) * STEP).judgements


def _counter_steps(text: str, release: str, short: str, rows_at, steps: int = 8) -> list[str]:
    """`steps` scrapes of `text` where family `short` (a counter) has rows_at(i) at scrape i."""
    return [sf.add_family(text, release, short, "counter", rows_at(i)) for i in range(steps)]


# -------------------------------------------------------------------------------------- scheduler idle
IDLE = "scheduler_idle_seconds_total"
IDLE_CASES = [(r, None) for r in sf.with_releases(IDLE)] + [("0.5.23", "dp_attention"), ("0.5.23", "pp")]


@pytest.mark.parametrize("release,layout", IDLE_CASES)
def test_scheduler_idle_with_a_queue_fires_and_a_busy_or_empty_one_does_not(release, layout):
    text = sf.exposition(release, layout)
    assert sf.scheduler_labels(text)[0]["model_name"] == "conformance/model"

    def idle(grow, queue):
        def at(i):
            out = sf.edit(text, "sglang:" + IDLE, lambda labels, old: old + grow * i)
            return sf.edit(out, "sglang:num_queue_reqs", lambda labels, old: queue)
        return [at(i) for i in range(8)]
    stuck = _judge(idle(STEP, 140))["scheduler_idle_waiting"]
    assert stuck.firing is True, stuck
    assert "idle 100% of the time with 140 queued" in stuck.detail
    busy = _judge(idle(0.0, 140))["scheduler_idle_waiting"]
    empty = _judge(idle(STEP, 0))["scheduler_idle_waiting"]
    assert busy.firing is False and empty.firing is False, (busy, empty)


def test_scheduler_idle_is_unknown_where_the_release_has_no_idle_counter():
    j = _judge([sf.exposition("0.5.19")] * 4)["scheduler_idle_waiting"]
    assert j.firing is None and j.unsupported and "sglang:scheduler_idle_seconds_total (0.5.20+)" in j.detail


# ------------------------------------------------------------------------------------- admission blocked
@pytest.mark.parametrize("release", ["0.4.10.post2", "0.5.2", "0.5.14", "0.5.23"])
def test_admission_blocked_at_the_configured_cap_fires_and_below_it_does_not(release):
    text = sf.exposition(release)       # each scheduler reports 140 queued
    at_cap = Config(profile="online", signals={"admission_blocked": {"max_queued_requests": 140}})
    below = Config(profile="online", signals={"admission_blocked": {"max_queued_requests": 1000}})
    j = _judge([text] * 6, at_cap)["admission_blocked"]
    assert j.firing is True and "at 133 of its --max-queued-requests 140 (configuration)" in j.detail, j
    assert _judge([text] * 6, below)["admission_blocked"].firing is False
    unknown = _judge([text] * 6)["admission_blocked"]
    assert unknown.firing is None and "--max-queued-requests not known" in unknown.detail


def _log_judge(tmp_path, lines: list[str], at: float, config: Config | None = None):
    """Judgements at `at` after these log lines, read through the parser (each at its own timestamp)."""
    path = tmp_path / "sglang.log"
    path.write_text("\n".join(lines) + "\n")
    eng = Engine(config or Config(profile="online"))
    eng.set_sources(log_up=True)
    for ev in iter_file_events(str(path)):
        assert ev.ts is not None, ev
        eng.ingest(ev, ev.ts)
    return eng.evaluate(at).judgements


_ARGS = ("[2026-03-02 10:{m:02d}:00] server_args=ServerArgs(model_path='m', tp_size=1, "
         "max_queued_requests={cap}, schedule_policy='fcfs')")
_DECODE = ("[2026-03-02 10:{m:02d}:{s:02d}] Decode batch. #running-req: 32, #token: 9000, token usage: 0.50, "
           "gen throughput (token/s): 900.00, #queue-req: {q}")


@pytest.mark.parametrize("cap,queue,fires", [(128, 128, True), (128, 40, False), (None, 5000, False)])
def test_admission_cap_comes_from_the_server_args_line(tmp_path, cap, queue, fires):
    lines = [_ARGS.format(m=0, cap=cap), "[2026-03-02 10:00:30] The server is fired up and ready to roll!"]
    lines += [_DECODE.format(m=1, s=s, q=queue) for s in range(0, 60, 5)]
    j = _log_judge(tmp_path, lines, _ts("2026-03-02 10:01:55"))["admission_blocked"]
    assert j.firing is fires, j
    if cap is None:
        assert "unbounded" in j.detail


def _ts(text: str) -> float:
    import calendar
    import time
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M:%S")))


# ------------------------------------------------------------------------------------- PD failures
PD = "num_transfer_failed_reqs_total"


@pytest.mark.parametrize("release", sf.with_releases(PD))
def test_pd_transfer_failures_fire_on_a_growing_failure_counter(release):
    text = sf.exposition(release, None)
    failing = _counter_steps(text, release, PD, lambda i: [({}, 3.0 * i)])
    quiet = _counter_steps(text, release, PD, lambda i: [({}, 2.0)])
    j = _judge(failing)["pd_transfer_failures"]
    assert j.firing is True and j.value == pytest.approx(12.0), j       # 3 per 15 s
    assert _judge(quiet)["pd_transfer_failures"].firing is False
    if sf.defines(release, "num_bootstrap_failed_reqs_total"):
        both = [sf.add_family(t, release, "num_bootstrap_failed_reqs_total", "counter", [({}, 1.0 * i)])
                for i, t in enumerate(quiet)]
        assert _judge(both)["pd_transfer_failures"].value == pytest.approx(4.0)


# ------------------------------------------------------------------------------------- HiCache
DROP = "hicache_dropped_tokens_total"


@pytest.mark.parametrize("release", sf.with_releases(DROP))
def test_hicache_dropping_tokens_fires_and_names_the_hit_rate_per_tier(release):
    text = sf.exposition(release)
    tiers = {"input": 600.0, "device_hit": 300.0, "host_hit": 80.0, "storage_hit": 20.0}

    def scrape(i, dropped):
        out = sf.add_family(text, release, "prefill_effective_tokens_total", "counter",
                            [({"mode": m}, v * i) for m, v in tiers.items()])
        out = sf.add_family(out, release, "hicache_backup_tokens_total", "counter", [({"pool": "kv"}, 5000.0 * i)])
        return sf.add_family(out, release, DROP, "counter",
                             [({"reason": "evicted", "pool": "kv"}, dropped * i)])
    j = _judge([scrape(i, 1000.0) for i in range(8)])["hicache_tokens_dropped"]
    assert j.firing is True and j.value == pytest.approx(1000 / 6000), j
    assert "hit rate device 30%, host 8%, storage 2% of prefill tokens" in j.detail
    ok = _judge([scrape(i, 10.0) for i in range(8)])["hicache_tokens_dropped"]
    assert ok.firing is False, ok


# ------------------------------------------------------------------------------------- DP attention
@pytest.mark.parametrize("release,layout", [("0.5.22", None), ("0.5.23", None), ("0.5.23", "dp_attention")])
def test_dp_attention_imbalance_fires_and_names_the_busiest_rank(release, layout):
    text = sf.exposition(release, layout)
    hist = "sglang:dp_attention_token_imbalance_ratio_bucket"
    ranks = sorted({lab.get("dp_rank", lab["tp_rank"]) for lab in sf.scheduler_labels(text)})

    def scrape(i, ratio_le, busy):
        def bucket(labels, old):
            le = float(labels["le"])
            return float(100 * i if le >= ratio_le else 0)
        out = sf.edit(text, hist, bucket)
        out = sf.edit(out, "sglang:dp_attention_token_imbalance_ratio_count", lambda labels, old: float(100 * i))

        def tokens(labels, old):
            rank = labels.get("dp_rank", labels["tp_rank"])
            if labels["kind"] != "scheduled":
                return old
            return float((3000 if rank == busy else 1000) * i)
        return sf.edit(out, "sglang:dp_attention_tokens_total", tokens)
    busy = ranks[-1]
    j = _judge([scrape(i, 2.0, busy) for i in range(8)])["dp_attention_imbalance"]
    assert j.firing is True and f"busiest DP rank {busy}" in j.detail, j
    ok = _judge([scrape(i, 1.0, busy) for i in range(8)])["dp_attention_imbalance"]
    assert ok.firing is False, ok


def test_dp_attention_imbalance_is_unknown_before_0_5_22():
    j = _judge([sf.exposition("0.5.21")] * 4)["dp_attention_imbalance"]
    assert j.firing is None and j.unsupported and "0.5.22+" in j.detail


# ------------------------------------------------------------------------------------- start-up regression
@pytest.mark.parametrize("release", [r for r in sf.with_releases("startup_time_seconds")][-2:]
                         + sf.with_releases("engine_startup_time")[:1])
def test_a_start_up_slower_than_the_previous_ones_fires_on_metrics(release):
    text = sf.exposition(release)
    short = "startup_time_seconds" if sf.defines(release, "startup_time_seconds") else "engine_startup_time"
    phase = {"phase": "total"} if sf.family_labels(release, short) else {}

    def gauge(seconds):
        return sf.add_family(text, release, short, "gauge", [(phase, seconds)])
    restarts = [gauge(100.0)] * 2 + [gauge(110.0)] * 2 + [gauge(400.0)] * 2
    assert _judge(restarts)["startup_regression"].firing is True
    steady = [gauge(100.0)] * 2 + [gauge(110.0)] * 2 + [gauge(120.0)] * 2
    assert _judge(steady)["startup_regression"].firing is False


def _start(day: int, took: int, weights: int) -> list[str]:
    h = f"2026-03-0{day} 09"
    return [f"[{h}:00:00] server_args=ServerArgs(model_path='m', tp_size=1)",
            f"[{h}:00:05 TP0] Load weight begin. avail mem=78.00 GB",
            f"[{h}:{(5 + weights) // 60:02d}:{(5 + weights) % 60:02d} TP0] Load weight end. type=LlamaForCausalLM, "
            "dtype=torch.bfloat16, avail mem=60.00 GB, mem usage=15.00 GB.",
            f"[{h}:{took // 60:02d}:{took % 60:02d}] The server is fired up and ready to roll!"]


def test_a_start_up_slower_than_the_previous_ones_fires_from_the_log(tmp_path):
    lines = _start(1, 120, 40) + _start(2, 130, 45) + _start(3, 600, 500)
    j = _log_judge(tmp_path, lines, _ts("2026-03-03 09:11:00"))["startup_regression"]
    assert j.firing is True and "latest weight loading took 500 s" in j.detail, j
    steady = _start(1, 120, 40) + _start(2, 130, 45) + _start(3, 125, 42)
    assert _log_judge(tmp_path, steady, _ts("2026-03-03 09:11:00"))["startup_regression"].firing is False
    once = _log_judge(tmp_path, _start(1, 120, 40), _ts("2026-03-01 09:11:00"))["startup_regression"]
    assert once.firing is None and "nothing to compare" in once.detail


def test_a_start_up_is_compared_with_the_median_of_history_before_it(tmp_path):
    """The latest start-up against the median of the `history` ones before it: 420 s after 100 and 400 is slow
    against their median (250 s), not against the one before (400 s)."""
    lines = _start(1, 100, 40) + _start(2, 400, 40) + _start(3, 420, 40)
    at = _ts("2026-03-03 09:11:00")
    j = _log_judge(tmp_path, lines, at)["startup_regression"]
    assert j.firing is True and "latest start-up took 420 s, the median of the 2 before 250 s" in j.detail, j
    one = Config(profile="online", signals={"startup_regression": {"history": 1}})
    j = _log_judge(tmp_path, lines, at, one)["startup_regression"]
    assert j.firing is False and "the median of the 1 before 400 s" in j.detail, j


def test_with_startup_regression_off_a_second_start_up_is_still_read(tmp_path):
    """The comparison is worked out when a start-up ends, for the signal's `history`; with the signal off there
    is none, and a second start-up crashed the state (the median of no start-up)."""
    off = Config(profile="online", signals={"startup_regression": {"enabled": False}})
    j = _log_judge(tmp_path, _start(1, 120, 40) + _start(2, 130, 45), _ts("2026-03-02 09:11:00"), off)
    assert "startup_regression" not in j and j["stalled"] is not None


# ------------------------------------------------------------------------------------- the simulator's demo
def test_the_simulated_busy_looking_idle_server_fires_from_its_metrics():
    from datetime import datetime, timezone

    from exporter.simulate import Simulator, load_scenario
    sim = Simulator(load_scenario("scheduler_idle"), start=datetime(2026, 3, 2, 10, 0, tzinfo=timezone.utc))
    eng = Engine(Config(profile="online"), log_fed=False)
    eng.set_sources(metrics_up=True)
    judged = {}
    for t in range(15, 360, 15):
        sim.lines_until(t)
        eng.ingest_scrape(parse_exposition(sim.metrics_text()), T0 + t)
        judged[t] = eng.evaluate(T0 + t).judgements["scheduler_idle_waiting"].firing
    assert judged[45] is not True          # serving: busy
    assert judged[300] is True and judged[345] is True, judged
