"""SGLang's own /metrics as the only source: the metric map against every release's families, and for each
release's exposition the judgements it allows, unknown (with the reason) for the rest, never ok on nothing."""
from __future__ import annotations

from pathlib import Path

import pytest

from exporter import releases
from exporter.catalog import SIGNALS
from exporter.catalog.native import (
    METRICS_ONLY,
    NATIVE_BY_NAME,
    NATIVE_VALUES,
    SIGNAL_METRICS,
    family_span,
    family_values,
    missing_metrics,
    signal_sources,
    values_in,
)
from exporter.config import Config
from exporter.engine import Engine
from exporter.ingest.scrape import parse_exposition
from tests import expositions

ALL = releases.releases()
GIB = 2 ** 30


def _short(name: str) -> str:
    short = releases.short_metric(name)
    return short[:-len("_total")] if short.endswith("_total") else short


# ------------------------------------------------------------------------------------------ the map itself
def test_every_mapped_family_is_defined_by_some_release_with_the_kind_the_map_reads():
    for v in NATIVE_VALUES:
        for fam in v.families:
            span = family_span(fam)
            assert span is not None, f"{v.name}: sglang:{fam} is defined by no release"
            first = span[0]
            types = {f.type for f in releases.metric_families(first).values() if _short(f.name) == fam}
            # the 0.4.9-0.5.2 total_retracted_reqs is a gauge that counts since start-up
            want = {"counter", "gauge"} if (v.kind, fam) == ("counter", "total_retracted_reqs") else {v.kind}
            # kv_transfer_latency_ms: a last-value gauge before 0.5.10, a histogram since (only that is read)
            want |= {"gauge"} if (v.kind, fam) == ("histogram", "kv_transfer_latency_ms") else set()
            assert types & want, f"sglang:{fam} is {types} in {first}, the map reads it as {v.kind}"


def test_every_metric_rename_across_releases_feeds_one_value():
    by_family = family_values()
    for r in releases.renames():
        if r.kind != "metric":
            continue
        old, new = _short(r.old), _short(r.new)
        if old in by_family or new in by_family:
            assert by_family.get(old) == by_family.get(new), f"{r.old} -> {r.new} ({r.release}) split in the map"


def test_the_issues_unused_families_are_read_now():
    wanted = ("cache_hit_rate", "cached_tokens", "queue_time_seconds", "num_retracted_reqs", "num_paused_reqs",
              "max_total_num_tokens", "kv_used_tokens", "kv_available_tokens", "kv_evictable_tokens",
              "full_token_usage", "swa_token_usage", "mamba_usage", "new_token_ratio", "utilization",
              "fwd_occupancy", "spec_accept_length", "spec_accept_rate", "num_prefill_inflight_queue_reqs",
              "num_decode_prealloc_queue_reqs", "num_decode_transfer_queue_reqs", "weight_memory_usage_gb",
              "kv_cache_memory_usage_gb", "startup_available_gpu_memory_gb")
    assert not [f for f in wanted if f not in family_values()]


def test_every_signal_names_its_inputs_per_source():
    assert set(SIGNAL_METRICS) == {s.id for s in SIGNALS}
    sources = signal_sources()
    for s in SIGNALS:
        entry = sources[s.id]
        assert entry["log"] or entry["metrics"], f"{s.id} reads nothing"
        for group in SIGNAL_METRICS[s.id] or ():
            assert all(v in NATIVE_BY_NAME for v in group)
    assert sources["retraction_storm"]["releases"] == "0.4.9.post6+"
    assert sources["gpu_headroom_low"]["releases"] == "0.5.11+"
    assert sources["oom_decode"]["releases"] == "none"


# ------------------------------------------------------------------------------- per-release expositions
def _engine() -> Engine:
    eng = Engine(Config(profile="offline"), log_fed=False)
    eng.set_sources(metrics_up=True)
    return eng


def _judge(texts, t0: float = 1000.0, step: float = 15.0):
    eng = _engine()
    for i, text in enumerate(texts):
        res = parse_exposition(text)
        assert res.success
        eng.ingest_scrape(res, t0 + i * step)
    return eng, eng.evaluate(t0 + (len(texts) - 1) * step).judgements


@pytest.mark.parametrize("release", ALL)
def test_a_release_exposition_gives_the_judgements_it_allows_and_unknown_for_the_rest(release):
    _, judged = _judge([expositions.healthy(release, step) for step in range(1, 6)])
    can = values_in(release)
    for sid, j in judged.items():
        groups = SIGNAL_METRICS[sid]
        fed = groups is not None and all(set(g) & can for g in groups)
        if j.firing is not None:
            # no ok (nor firing) with no input: every input group is exported by this release
            assert fed, f"{release}: {sid} judged {j.firing} but {release} exports none of its inputs"
            assert j.firing is False, f"{release}: {sid} fires on a healthy server: {j.detail}"
        elif not fed:
            assert j.unsupported, f"{release}: {sid} unknown but not marked unsupported: {j.detail}"
            assert j.detail.startswith(("not exported by this release", "read from SGLang's logs only",
                                        "not in SGLang's /metrics")), j.detail
    retraction_metric = releases.version_key(release) >= releases.version_key("0.4.9.post6")
    assert (judged["retraction_storm"].firing is not None) == retraction_metric, judged["retraction_storm"]
    assert (judged["gpu_headroom_low"].firing is not None) == (release in _since("0.5.11"))
    if releases.metric_families(release):
        assert judged["queue_above_range"].firing is False


def _since(first: str) -> list:
    return [r for r in ALL if releases.version_key(r) >= releases.version_key(first)]


def test_old_releases_say_why_retractions_cannot_be_judged():
    _, judged = _judge([expositions.healthy("0.4.6.post5", s) for s in (1, 2, 3)])
    j = judged["retractions_frequent"]
    assert j.firing is None and j.unsupported
    assert "not exported by this release" in j.detail and "sglang:num_retracted_requests_total" in j.detail


def test_committed_fixtures_are_the_rendered_expositions():
    from prometheus_client import disable_created_metrics, enable_created_metrics
    disable_created_metrics()
    try:
        stale = [r for r in ALL
                 if (expositions.FIXTURES / f"{r}.prom").read_text() != expositions.healthy(r)]
    finally:
        enable_created_metrics()
    assert not stale, f"run `python -m tests.expositions`: stale {stale}"


# ------------------------------------------------------------------------- values read from /metrics alone
def _storm(release: str, gauge: bool):
    texts = []
    for step in range(1, 8):
        g = dict(expositions.HEALTHY)
        counters = {c: 1000 * step for c in expositions.STEADY_COUNTERS}
        if gauge:
            g["num_retracted_reqs"] = 3 + step % 2      # retracted since the last report: changes every scrape
        else:
            counters["num_retracted_requests"] = 5 * step
            g["total_retracted_reqs"] = 5 * step
        texts.append(expositions.render(release, g, counters))
    return _judge(texts, step=5.0)


@pytest.mark.parametrize("release,gauge", [("0.5.4.post3", True), ("0.5.23", False), ("0.4.10.post2", False)])
def test_a_retraction_storm_fires_from_whichever_retraction_metric_the_release_has(release, gauge):
    eng, judged = _storm(release, gauge)
    assert judged["retraction_storm"].firing is True, judged["retraction_storm"]
    assert eng.state.retractions_total >= 5


def test_retracted_requests_count_once_per_dp_rank_not_per_tp_rank():
    """With --enable-metrics-for-all-schedulers every TP rank of a scheduler group reports the requests the group
    retracted: 2 DP ranks x 4 TP ranks, each DP group retracting 3 requests per scrape, is 6 requests, not 24."""
    def text(step: int) -> str:
        rows = [f'sglang:num_retracted_requests_total{{model_name="m",dp_rank="{dp}",tp_rank="{tp}",pp_rank="0"}} '
                f"{3 * step}" for dp in range(2) for tp in range(4)]
        return ("# TYPE sglang:num_retracted_requests_total counter\n" + "\n".join(rows) + "\n"
                "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\",dp_rank=\"0\","
                "tp_rank=\"0\",pp_rank=\"0\"} 5\n")
    eng, _ = _judge([text(step) for step in range(1, 5)], step=15.0)
    assert eng.state.retracted_requests_total == 3 * 6       # 3 scrapes of growth x 6 requests


def test_steady_retraction_metrics_do_not_fire():
    for release in ("0.5.4.post3", "0.5.23", "0.4.10.post2"):
        _, judged = _judge([expositions.healthy(release, s) for s in range(1, 8)], step=5.0)
        assert judged["retraction_storm"].firing is False, release


@pytest.mark.parametrize("gb,low,high", [(2.0, True, False), (6.5, False, False), (14.0, False, True)])
def test_headroom_from_startup_available_gpu_memory(gb, low, high):
    g = dict(expositions.HEALTHY, startup_available_gpu_memory_gb=gb)
    eng, judged = _judge([expositions.render("0.5.15.post1", g)] * 2)
    assert eng.state.headroom_bytes == pytest.approx(gb * GIB)
    assert (judged["gpu_headroom_low"].firing, judged["gpu_headroom_high"].firing) == (low, high)


def test_a_start_up_memory_gauge_of_zero_is_not_yet_set_and_judges_nothing():
    """A scheduler still starting shows sglang:startup_available_gpu_memory_gb as 0: no headroom is known from
    it (never "0 GiB left", which fired gpu_headroom_low for the first scrape of a healthy server)."""
    unset = expositions.render("0.5.23", dict(expositions.HEALTHY, startup_available_gpu_memory_gb=0.0))
    eng, judged = _judge([unset] * 2)
    assert eng.state.headroom_bytes is None and judged["gpu_headroom_low"].firing is None
    set_ = expositions.render("0.5.23", dict(expositions.HEALTHY, startup_available_gpu_memory_gb=6.5))
    eng, judged = _judge([unset, set_])
    assert eng.state.headroom_bytes == pytest.approx(6.5 * GIB)
    assert (judged["gpu_headroom_low"].firing, judged["gpu_headroom_high"].firing) == (False, False)


def test_headroom_is_the_smallest_rank():
    res = parse_exposition(expositions.render("0.5.23", {"startup_available_gpu_memory_gb": 7.0}) +
                           expositions.render("0.5.23", {"startup_available_gpu_memory_gb": 3.0})
                           .replace('tp_rank="0"', 'tp_rank="1"').replace("# HELP", "# X").replace("# TYPE", "# X"))
    eng = _engine()
    eng.ingest_scrape(res, 1.0)
    assert eng.state.headroom_bytes == pytest.approx(3.0 * GIB)


def test_capacity_from_max_total_num_tokens():
    eng, _ = _judge([expositions.healthy("0.5.23")])
    assert eng.state.memory_config["max_total_num_tokens"] == 100000


def test_a_hybrid_model_is_judged_on_its_fullest_pool():
    # token_usage says 0.5, but the SWA pool is full: the queue waits for memory, not for a cautious scheduler
    g = dict(expositions.HEALTHY, token_usage=0.5, full_token_usage=0.5, swa_token_usage=0.97)
    _, judged = _judge([expositions.render("0.5.23", g)] * 4)
    assert judged["kv_cache_underused"].firing is False
    g = dict(g, swa_token_usage=0.5)
    _, judged = _judge([expositions.render("0.5.23", g)] * 4)
    assert judged["kv_cache_underused"].firing is True


def test_both_prefix_spellings_feed_the_same_values():
    text = expositions.healthy("0.5.23")
    a, b = parse_exposition(text), parse_exposition(text.replace("sglang:", "sglang_"))
    assert a.present == b.present and a.ranks == b.ranks and a.counters == b.counters


def test_missing_metrics_names_the_releases_of_the_inputs():
    reason = missing_metrics("gpu_headroom_low", {"queue"}, {"num_queue_reqs", "is_cuda_graph"})
    assert reason.startswith("not in SGLang's /metrics (yet)")   # 0.5.11+ may carry it: not yet reported
    assert "sglang:startup_available_gpu_memory_gb (0.5.11+)" in reason
    assert missing_metrics("queue_above_range", {"queue"}) == ""
    assert missing_metrics("oom_decode", {"queue"}).startswith("read from SGLang's logs only")


def test_the_signal_sources_doc_is_fresh_and_names_every_signal():
    from exporter.config import Config
    from exporter.generate import sources
    text = sources.render(Config())[sources.PATH]
    assert (Path(__file__).parents[1] / sources.PATH).read_text() == text, \
        "docs/signal-sources.md is stale: run `sglang-exporter generate`"
    assert all(f"| `{s.id}` |" in text for s in SIGNALS)


@pytest.fixture
def target():
    from tests.test_scrape import Target
    t = Target()
    yield t
    t.close()


@pytest.mark.parametrize("release,retractions", [("0.4.6.post5", False), ("0.5.23", True)])
def test_a_metrics_only_sidecar_says_which_judgements_the_release_cannot_make(target, release, retractions):
    """serve --sglang-url (no log) over real HTTP: /metrics marks the unsupported signals, the API says why."""
    from exporter.config import Config
    from exporter.sidecar.run import Sidecar
    from tests.test_scrape import Clock, families, metric, ok
    clock = Clock()
    sc = Sidecar(Config(sglang_url=target.base, scrape_timeout=2.0), clock=clock)
    for step in range(1, 5):
        target.serve(ok(expositions.healthy(release, step)))
        clock.t += 15
        sc.scrape_once()
    fams = families(sc)
    unsupported = metric(fams, "sglang_exporter_signal_unsupported", {"signal": "retraction_storm"})
    firing = metric(fams, "sglang_exporter_signal_firing", {"signal": "retraction_storm"})
    j = sc.view().snapshot.judgements["retraction_storm"]
    if retractions:
        assert (unsupported, firing, j.firing) == (0.0, 0.0, False)
    else:
        assert (unsupported, firing, j.firing) == (1.0, None, None)      # no ok on nothing: no series at all
        assert "not exported by this release" in j.detail
    assert metric(fams, "sglang_exporter_signal_unsupported", {"signal": "oom_decode"}) == 1.0
    assert metric(fams, "sglang_exporter_signal_unsupported", {"signal": "queue_above_range"}) == 0.0


def test_the_simulators_newest_metrics_alone_page_on_a_retraction_storm():
    """The simulator's 0.5.23 /metrics carries the newer families: a metrics-only engine judges the storm, the
    headroom and the capacity from them, as it would in front of the simulator in e2e."""
    from exporter.simulate import Simulator, load_scenario
    for scenario, storm in (("retraction_storm", True), ("healthy_offline", False)):
        sim = Simulator(load_scenario(scenario), fmt="0.5.23")
        eng = _engine()
        t = 0.0
        while t < sim.duration:
            t += 5.0
            sim.lines_until(t)
            eng.ingest_scrape(parse_exposition(sim.metrics_text()), 1000.0 + t)
        judged = eng.evaluate(1000.0 + t).judgements
        assert judged["retraction_storm"].firing is storm, (scenario, judged["retraction_storm"])
        assert judged["gpu_headroom_low"].firing is not None
        assert eng.state.memory_config.get("max_total_num_tokens")


# ------------------------------------------------------------------------------ the tuning signals (catalog_tuning)
def _online_judge(texts, profile="online", log_args=None, step=15.0):
    eng = Engine(Config(profile=profile), log_fed=False)
    eng.set_sources(metrics_up=True)
    if log_args is not None:
        eng.state.server_args = dict(log_args)
    for i, text in enumerate(texts):
        eng.ingest_scrape(parse_exposition(text), 1000.0 + i * step)
    return eng.evaluate(1000.0 + (len(texts) - 1) * step).judgements


@pytest.mark.parametrize("wait,fires", [(0.2, False), (4.0, True)])
def test_queue_wait_high_from_queue_time_seconds(wait, fires):
    texts = [expositions.render("0.5.23", expositions.HEALTHY, {}, {"queue_time_seconds": [wait] * (20 * s)})
             for s in range(1, 5)]
    j = _online_judge(texts)["queue_wait_high"]
    assert j.firing is fires, j


def test_queue_wait_is_unknown_on_releases_without_queue_time():
    j = _online_judge([expositions.healthy("0.4.10.post2", s) for s in range(1, 5)])["queue_wait_high"]
    assert j.firing is None and j.unsupported and "sglang:queue_time_seconds (0.5.3.post3+)" in j.detail


@pytest.mark.parametrize("hit,queue,policy,fires", [(0.6, 50, None, True), (0.6, 50, "fcfs", True),
                                                    (0.6, 50, "lpm", False), (0.05, 50, "fcfs", False),
                                                    (0.6, 0, "fcfs", False)])
def test_prefix_reuse_missed(hit, queue, policy, fires):
    g = dict(expositions.HEALTHY, cache_hit_rate=hit, num_queue_reqs=queue)
    args = None if policy is None else {"schedule_policy": policy}
    j = _online_judge([expositions.render("0.5.23", g)] * 4, log_args=args)["prefix_reuse_missed"]
    assert j.firing is fires, j
    if policy is None:
        assert "schedule policy not known" in j.detail


@pytest.mark.parametrize("usage,evictable,paused,fires", [(0.99, 100, 0, True), (0.99, 50000, 0, False),
                                                          (0.5, 100, 0, False), (0.5, 50000, 2, True)])
def test_kv_pressure(usage, evictable, paused, fires):
    g = dict(expositions.HEALTHY, token_usage=usage, full_token_usage=usage, kv_evictable_tokens=evictable,
             num_paused_reqs=paused)
    j = _online_judge([expositions.render("0.5.23", g)] * 4)["kv_pressure"]
    assert j.firing is fires, j


@pytest.mark.parametrize("length,fires", [(1.1, True), (3.2, False)])
def test_spec_accept_low(length, fires):
    g = dict(expositions.HEALTHY, spec_accept_length=length, spec_accept_rate=length / 4)
    j = _online_judge([expositions.render("0.5.23", g)] * 4)["spec_accept_low"]
    assert j.firing is fires and j.value == pytest.approx(length), j


def test_spec_accept_is_unknown_without_speculative_decoding():
    j = _online_judge([expositions.healthy("0.5.23", s) for s in range(1, 5)])["spec_accept_low"]
    assert j.firing is None


@pytest.mark.parametrize("prealloc,transfer,fires", [(200, 10, True), (5, 3, False)])
def test_pd_backlog(prealloc, transfer, fires):
    g = dict(expositions.HEALTHY, num_decode_prealloc_queue_reqs=prealloc, num_decode_transfer_queue_reqs=transfer)
    j = _online_judge([expositions.render("0.5.23", g)] * 4)["pd_backlog"]
    assert j.firing is fires, j
    # the misspelt 0.4.x inflight family feeds the same queue
    g = dict(expositions.HEALTHY, num_prefill_infight_queue_reqs=prealloc + transfer)
    j = _online_judge([expositions.render("0.4.8.post1", g)] * 4)["pd_backlog"]
    assert j.firing is fires, j


@pytest.mark.parametrize("cached_share,fires", [(0.6, True), (0.05, False)])
def test_prefix_reuse_reads_the_hit_rate_from_the_token_counters(cached_share, fires):
    """On 0.4.4-0.5.19 every decode report zeroes cache_hit_rate: the cached/prompt token counters tell."""
    g = dict(expositions.HEALTHY, cache_hit_rate=0.0, num_queue_reqs=50)
    texts = [expositions.render("0.5.12.post1", g, {"prompt_tokens": 1000 * s,
                                                    "cached_tokens": round(1000 * s * cached_share)})
             for s in range(1, 6)]
    j = _online_judge(texts, log_args={"schedule_policy": "fcfs"})["prefix_reuse_missed"]
    assert j.firing is fires, j


def test_the_generators_sglang_tables_agree_with_the_release_data():
    """The SGLang families the dashboards read (the alert rules take theirs from catalog_native) are families
    the release data defines, with the same type; those that feed a value are in the map."""
    from exporter.generate import dashboards
    tables = list(dashboards.sglang_metrics().items())
    for name, typ in tables:
        first = releases.first_release(name)
        assert first is not None, f"{name}: no release defines it"
        types = {f.type for r in ALL for f in releases.metric_families(r).values()
                 if _short(f.name) == _short(name)}
        assert typ in types, f"{name}: {typ} in the generator, {types} in the releases"


@pytest.mark.parametrize("eager_growth,fires", [(40, True), (0, False)])
def test_cuda_graph_off_from_the_graph_pass_counters(eager_growth, fires):
    """0.5.7+: decode passes without a CUDA graph since the last scrape, while the batch is small, even when
    is_cuda_graph (the last batch only) says 1."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest
    texts = []
    for step in range(1, 5):
        reg = CollectorRegistry()
        c = Counter("sglang:cuda_graph_passes", "passes", ["model_name", "mode"], registry=reg)
        c.labels(model_name=expositions.MODEL, mode="decode_cuda_graph").inc(100 * step)
        c.labels(model_name=expositions.MODEL, mode="decode_none").inc(1 + eager_growth * step)
        c.labels(model_name=expositions.MODEL, mode="prefill_none").inc(50 * step)
        g = dict(expositions.HEALTHY, num_running_reqs=8, is_cuda_graph=1)
        texts.append(expositions.render("0.5.23", g) + generate_latest(reg).decode())
    _, judged = _judge(texts)
    assert judged["cuda_graph_off_small_batch"].firing is fires, judged["cuda_graph_off_small_batch"]


# ------------------------------------------------------------- the tuning signals from SGLang's log lines alone
def _log_judge(tmp_path, lines: list[str], profile: str = "online", scrapes=(), chunk: int = 8192):
    """Judgements after a 0.5.23 log of these batch lines, one every 10 s, read through the parser as `serve`
    and `analyze` read it (the lines of a learned layout as rows); `scrapes` (texts) are ingested alongside."""
    from exporter.ingest.pipeline import iter_file_items
    t0 = 1_764_062_223.0     # 2025-11-25 09:17:03 UTC
    stamp = "[2025-11-25 09:{:02d}:{:02d}] "
    head = [stamp.format(17, 0) + "server_args=ServerArgs(model_path='m', schedule_policy='fcfs')",
            stamp.format(17, 1) + f"max_total_num_tokens=200000, chunked_prefill_size={chunk}, max_prefill_tokens=16384, "
                                  "max_running_requests=512, context_len=32768, available_gpu_mem=6.50 GB",
            stamp.format(17, 2) + "The server is fired up and ready to roll!"]
    body = [stamp.format(18 + (10 * i) // 60, (10 * i) % 60) + line for i, line in enumerate(lines)]
    path = tmp_path / "sglang.log"
    path.write_text("\n".join(head + body) + "\n")
    eng = Engine(Config(profile=profile), log_fed=True)
    eng.set_sources(log_up=True, metrics_up=bool(scrapes))
    last = t0
    for item in iter_file_items(str(path)):
        ts = item[2] if item.__class__ is tuple else item.ts
        last = ts
        (eng.ingest_row if item.__class__ is tuple else eng.ingest)(item, ts)
    for i, text in enumerate(scrapes):
        eng.ingest_scrape(parse_exposition(text), last - 15 * (len(scrapes) - 1 - i))
    return eng.evaluate(last).judgements


def _prefill(new=8192, cached=0, queue=20, extra=""):
    return (f"Prefill batch, #new-seq: 1, #new-token: {new}, #cached-token: {cached}, token usage: 0.40, "
            f"#running-req: 8, #queue-req: {queue}, #pending-token: 0, {extra}cuda graph: False, "
            "input throughput (token/s): 15342.77")


def _decode(extra="", queue=20):
    return (f"Decode batch, #running-req: 8, #token: 80000, token usage: 0.40, {extra}cuda graph: True, "
            f"gen throughput (token/s): 1834.27, #queue-req: {queue}")


@pytest.mark.parametrize("new,queue,fires", [(8192, 20, True), (8192, 0, False), (1024, 20, False)])
def test_long_prompts_dominate_from_the_log_alone(tmp_path, new, queue, fires):
    """Prefills cut at the chunk size (the capacity line's 8192) with requests queued behind them."""
    lines = [line for _ in range(6) for line in (_prefill(new=new, queue=queue), _decode(queue=queue))]
    j = _log_judge(tmp_path, lines)["long_prompts_dominate"]
    assert j.firing is fires, j
    assert j.value == (1.0 if new == 8192 else 0.0)
    assert "of 6 prefill batches at the chunk size (8192)" in j.detail


@pytest.mark.parametrize("ttft,fires", [(6.0, True), (0.3, False)])
def test_long_prompts_dominate_judges_latency_from_metrics_beside_the_log(tmp_path, ttft, fires):
    lines = [_prefill(new=8192, queue=20) for _ in range(6)]
    texts = [expositions.render("0.5.23", expositions.HEALTHY, {},
                                {"time_to_first_token_seconds": [ttft] * (20 * s)}) for s in range(1, 4)]
    j = _log_judge(tmp_path, lines, scrapes=texts)["long_prompts_dominate"]
    assert j.firing is fires, j
    assert "p99 time to first token" in j.detail


def test_long_prompts_dominate_is_off_with_chunked_prefill_off_and_log_only_on_metrics(tmp_path):
    lines = [_prefill(new=9000, queue=20) for _ in range(6)]
    assert _log_judge(tmp_path, lines)["long_prompts_dominate"].firing is True
    j = _log_judge(tmp_path, lines, chunk=-1)["long_prompts_dominate"]
    assert j.firing is False and "chunked prefill is off" in j.detail, j
    judged = _online_judge([expositions.healthy("0.5.23", s) for s in range(1, 5)])
    j = judged["long_prompts_dominate"]
    assert j.firing is None and j.unsupported and j.detail.startswith("read from SGLang's logs only")
    # the offline profile does not judge latency
    assert "long_prompts_dominate" not in _log_judge(tmp_path, lines, profile="offline")


@pytest.mark.parametrize("cached,queue,fires", [(6000, 20, True), (100, 20, False), (6000, 0, False)])
def test_prefix_reuse_missed_from_the_log_alone(tmp_path, cached, queue, fires):
    lines = [_prefill(new=2000, cached=cached, queue=queue) for _ in range(5)]
    j = _log_judge(tmp_path, lines)["prefix_reuse_missed"]
    assert j.firing is fires and not j.unsupported, j
    assert "5 batch lines" in j.detail


@pytest.mark.parametrize("accept,fires", [(1.1, True), (3.2, False)])
def test_spec_accept_low_from_the_log_alone(tmp_path, accept, fires):
    lines = [_decode(f"accept len: {accept:.2f}, accept rate: 0.50, ") for _ in range(4)]
    j = _log_judge(tmp_path, lines)["spec_accept_low"]
    assert j.firing is fires and j.value == pytest.approx(accept), j


def test_spec_accept_low_is_unknown_in_a_log_without_speculative_decoding(tmp_path):
    j = _log_judge(tmp_path, [_decode() for _ in range(4)])["spec_accept_low"]
    assert j.firing is None and not j.unsupported and "not in use" in j.detail


@pytest.mark.parametrize("prealloc,fires", [(200, True), (3, False)])
def test_pd_backlog_from_the_log_alone(tmp_path, prealloc, fires):
    """A PD decode server's lines: pre-allocation and transfer queues (0.5.3+ spelling)."""
    pd = f"pre-allocated usage: 0.10, #prealloc-req: {prealloc}, #transfer-req: 4, #retracted-req: 0, "
    j = _log_judge(tmp_path, [_decode(pd) for _ in range(4)])["pd_backlog"]
    assert j.firing is fires, j


def test_pd_backlog_reads_the_prefill_servers_older_spelling(tmp_path):
    old = ("Prefill batch. #new-seq: 1, #new-token: 100, #cached-token: 0, token usage: 0.40, "
           "#unbootstrapped-req: 90, #queue-req: 0, #transferring-req: 10, input throughput (token/s): 10.00, ")
    j = _log_judge(tmp_path, [old] * 4)["pd_backlog"]
    assert j.firing is True, j


def test_logs_only_signals_with_no_log_line_stay_metrics_only(tmp_path):
    judged = _log_judge(tmp_path, [_decode() for _ in range(4)])
    for sid in METRICS_ONLY:
        assert judged[sid].firing is None and judged[sid].unsupported, judged[sid]
    assert set(METRICS_ONLY) == {"latency_high", "queue_wait_high", "kv_pressure", "scheduler_idle_waiting",
                                 "pd_transfer_failures", "hicache_tokens_dropped", "dp_attention_imbalance"}


# --------------------------------------------- every release's /metrics as SGLang's own collector code renders it
# tests/conformance/run.py --expositions ran each release's scheduler collector (a two-GPU TP server) with
# chosen values: queue 140, running 34, token usage 0.46, prefix hit rate 0.25, 3 retracted requests (4 on the
# older gauge), a CUDA graph, accept length 2.5, 8000 evictable tokens, short PD queues, and (0.5.11+) 6.25 GiB
# left on TP0, 5.75 GiB on TP1.
COLLECTOR_EXPOSITIONS = Path(__file__).resolve().parent / "conformance" / "expositions"


def test_every_release_with_a_collector_has_its_collectors_exposition():
    have = {p.stem for p in COLLECTOR_EXPOSITIONS.glob("*.prom")}
    assert have == {r for r in ALL if releases.metric_families(r)}
    assert min(have, key=releases.version_key).startswith("0.3.") and releases.newest() in have


@pytest.mark.parametrize("release", [r for r in ALL if (COLLECTOR_EXPOSITIONS / f"{r}.prom").exists()])
def test_the_collectors_exposition_alone_gives_the_states_its_release_allows(release):
    text = (COLLECTOR_EXPOSITIONS / f"{release}.prom").read_text()
    eng, judged = _judge([text] * 4)
    present = eng.state.native_present
    for sid, j in judged.items():
        groups = SIGNAL_METRICS[sid]
        fed = groups is not None and all(set(g) & present for g in groups)
        # never ok (nor firing) on nothing: a judged signal has every input group in the scrape
        assert j.firing is None or fed, f"{release}: {sid} says {j.firing} with no input: {j.detail}"
        if not fed:
            assert j.firing is None and j.unsupported and j.detail.startswith(
                ("not exported by this release", "read from SGLang's logs only", "not in SGLang's /metrics")), j
    # the states the chosen values call for, wherever the release exports the inputs
    assert judged["kv_cache_underused"].firing is True          # usage 0.46 with 140 queued
    assert judged["queue_above_range"].firing is False and judged["queue_below_range"].firing is False
    assert judged["kv_pressure"].firing in ((False,) if "paused" in present or "kv_evictable_tokens" in present
                                            else (None,))
    for sid in ("retractions_frequent", "retraction_storm"):
        assert judged[sid].firing is (False if {"retracted_requests", "retracted_gauge"} & present else None)
    for sid in ("prefix_reuse_missed", "pd_backlog", "cuda_graph_off_small_batch"):
        assert judged[sid].firing is (False if SIGNAL_METRICS[sid] and all(
            set(g) & present for g in SIGNAL_METRICS[sid]) else None), (sid, judged[sid])
    since_headroom = releases.version_key(release) >= releases.version_key("0.5.11")
    assert (judged["gpu_headroom_low"].firing, judged["gpu_headroom_high"].firing) == (
        (False, False) if since_headroom else (None, None))
    if since_headroom:       # judged per GPU, as the log's capacity lines are: the least left, named
        assert eng.state.headroom_rank == "TP1" and eng.state.headroom_bytes == pytest.approx(5.75 * GIB)
        assert {g["rank"] for g in eng.state.facts()["gpu_headroom"]} == {"TP0", "TP1"}
        assert "on TP1 (the least of 2 GPUs)" in judged["gpu_headroom_low"].detail


@pytest.mark.parametrize("gb,low,high", [((7.0, 3.0), True, False), ((9.0, 12.0), False, True)])
def test_metrics_only_headroom_is_judged_per_rank(gb, low, high):
    text = expositions.render("0.5.23", dict(expositions.HEALTHY, startup_available_gpu_memory_gb=gb[0]))
    other = expositions.render("0.5.23", {"startup_available_gpu_memory_gb": gb[1]})
    other = "\n".join(ln.replace('tp_rank="0"', 'tp_rank="1"') for ln in other.splitlines() if not ln.startswith("#"))
    eng, judged = _judge([text + other + "\n"] * 2)
    worst = min(gb)
    assert eng.state.headroom_bytes == pytest.approx(worst * GIB)
    assert eng.state.headroom_rank == ("TP1" if gb[1] < gb[0] else "TP0")
    assert (judged["gpu_headroom_low"].firing, judged["gpu_headroom_high"].firing) == (low, high)
    assert f"{worst:.2f} GiB left after start-up on {eng.state.headroom_rank}" in judged["gpu_headroom_low"].detail


@pytest.mark.parametrize("profile", ["offline", "online"])
def test_nothing_read_yet_is_never_ok(profile):
    """A log source up with no line read, and /metrics up with a scrape that carries no SGLang family: every
    signal is unknown (with a reason), none says ok; but the followed log's silence is evidence of no
    retraction and no OOM (test_signals.test_with_a_live_log_only_event_counts_are_known_before_data)."""
    silence = {"retractions_frequent", "retraction_storm", "oom_prefill", "oom_decode"}
    eng = Engine(Config(profile=profile), log_fed=True)
    eng.set_sources(log_up=True)
    judged = eng.evaluate(1000.0).judgements
    assert judged and all(j.firing is None and j.detail for s, j in judged.items() if s not in silence), \
        {s: j.detail for s, j in judged.items() if j.firing is not None}
    eng = Engine(Config(profile=profile), log_fed=False)
    eng.set_sources(metrics_up=True)
    eng.ingest_scrape(parse_exposition("# nothing of SGLang's\nup 1\n"), 1000.0)
    judged = eng.evaluate(1000.0).judgements
    assert all(j.firing is None and j.detail for j in judged.values()), \
        {s: j.detail for s, j in judged.items() if j.firing is not None}
