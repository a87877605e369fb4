"""exporter.simulate: line writers, scenarios, /metrics, live mode and CLI glue."""
from __future__ import annotations

import argparse
import threading
import urllib.request
from datetime import datetime

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter import simulate
from exporter.catalog.native import NATIVE_BY_NAME, family_values
from exporter.config import Config
from exporter.ingest.grammar import Parser
from exporter.sidecar.run import Sidecar
from exporter.simulate import (
    FAMILIES,
    LineWriter,
    Scenario,
    ScenarioError,
    Simulator,
    list_scenarios,
    load_scenario,
    parse_scenario,
    run_simulator,
    serve_metrics,
)
from tests.helpers import free_port, wait_until

WHEN = datetime(2025, 8, 11, 17, 17, 3)
EXPECTED = {"healthy_offline", "healthy_online", "queue_starved", "queue_overloaded", "too_conservative",
            "retractions_frequent", "retraction_storm", "oom_prefill", "oom_decode", "headroom_high",
            "headroom_low", "cuda_graph_off", "concurrency_capped", "stalled", "restart"}
DECODE = {"running": 5, "num_tokens": 26740, "token_usage": 0.21, "cuda_graph": True, "gen_throughput": 1834.27,
          "queue": 0}


def parse_all(lines):
    """Feed lines to a fresh Parser; returns (events, parser)."""
    p = Parser("sim")
    events = []
    for n, line in enumerate(lines, 1):
        events.extend(p.feed(line, n))
    events.extend(p.flush())
    return events, p


def kinds_of(lines):
    events, p = parse_all(lines)
    assert not p.unparsed, (p.unparsed, lines)
    return [e.kind for e in events]


# ------------------------------------------------------------------ scenarios
def test_all_scenarios_load():
    assert set(list_scenarios()) >= EXPECTED
    for name in list_scenarios():
        sc = load_scenario(name)
        assert sc.name == name and sc.description and sc.duration > 0
        assert sc.format in FAMILIES


def test_load_by_path(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("phases:\n  - {duration: 10, queue: 5}\n")
    sc = load_scenario(str(f))
    assert sc.name == "mine" and sc.duration == 10 and sc.phases[0].queue == 5
    assert sc.format == "0.5.23" and sc.tp == 1 and sc.server_args["max_running_requests"] == 256


@pytest.mark.parametrize("body, message", [
    ("phases:\n  - {queue: lots}\n", "bad.yaml: phases[0].queue: expected a number or [lo, hi]"),
    ("phases:\n  - {}\n  - {queue: [5, 1]}\n", "bad.yaml: phases[1].queue: expected a number or [lo, hi]"),
    ("phases:\n  - {token_usage: 1.5}\n", "bad.yaml: phases[0].token_usage:"),
    ("phases:\n  - {quue: 3}\n", "bad.yaml: phases[0].quue: unknown key"),
    ("phases:\n  - {events: [{at: 5, kind: explode}]}\n", "bad.yaml: phases[0].events[0].kind:"),
    ("phases:\n  - {duration: 10, events: [{at: 50, kind: watchdog}]}\n", "bad.yaml: phases[0].events[0].at:"),
    ("format: '0.9'\n", "bad.yaml: format:"),
    ("layout: {tp: 0}\n", "bad.yaml: layout.tp:"),
    ("startup: {available_gpu_mem_gb: big}\n", "bad.yaml: startup.available_gpu_mem_gb:"),
    ("server_args: {max_running_requests: -1}\n", "bad.yaml: server_args.max_running_requests:"),
    ("phases: []\n", "bad.yaml: phases:"),
    ("colour: red\n", "bad.yaml: colour: unknown key"),
    ("phases: [\n", "bad.yaml: invalid YAML"),
    ("phases:\n  - {pd_queue: -3}\n", "bad.yaml: phases[0].pd_queue:"),
    ("phases:\n  - {spec_accept_length: 0.5}\n", "bad.yaml: phases[0].spec_accept_length:"),
    ("server_args: {disaggregation_mode: both}\n", "bad.yaml: server_args.disaggregation_mode:"),
])
def test_bad_scenario_names_file_and_key(tmp_path, body, message):
    f = tmp_path / "bad.yaml"
    f.write_text(body)
    with pytest.raises(ScenarioError) as exc:
        load_scenario(str(f))
    assert str(exc.value).startswith(message), str(exc.value)


def test_unknown_scenario_name():
    with pytest.raises(ScenarioError, match=r"no_such\.yaml: no such scenario"):
        load_scenario("no_such")


# ------------------------------------------------------------------ exact lines per family
def test_decode_line_0_5_23_exact():
    assert LineWriter("0.5.23", tp=2).decode(WHEN, **DECODE) == (
        "[2025-08-11 17:17:03 TP0] Decode batch, #running-req: 5, #token: 26740, token usage: 0.21, "
        "cuda graph: True, gen throughput (token/s): 1834.27, #queue-req: 0")
    assert LineWriter("0.5.23", tp=1).decode(WHEN, **DECODE) == (
        "[2025-08-11 17:17:03] Decode batch, #running-req: 5, #token: 26740, token usage: 0.21, "
        "cuda graph: True, gen throughput (token/s): 1834.27, #queue-req: 0")
    assert LineWriter("0.5.23", tp=2, dp=2).decode(WHEN, dp_rank=1, **DECODE).startswith(
        "[2025-08-11 17:17:03 DP1 TP0] Decode batch, ")


def test_decode_line_older_families_exact():
    assert LineWriter("0.3", tp=1).decode(WHEN, **DECODE) == (
        "[17:17:03 TP0] Decode batch. #running-req: 5, #token: 26740, token usage: 0.21, "
        "gen throughput (token/s): 1834.27, #queue-req: 0")
    assert LineWriter("0.4.7", tp=1).decode(WHEN, **DECODE) == (
        "[2025-08-11 17:17:03] Decode batch. #running-req: 5, #token: 26740, token usage: 0.21, "
        "cuda graph: True, gen throughput (token/s): 1834.27, #queue-req: 0")
    assert LineWriter("0.5.8", tp=2).decode(WHEN, **DECODE) == (
        "[2025-08-11 17:17:03 TP0] Decode batch, #running-req: 5, #token: 26740, token usage: 0.21, "
        "cuda graph: True, gen throughput (token/s): 1834.27, #queue-req: 0, ")


def test_retraction_lines_exact():
    kw = {"retracted": 1, "ratio_before": 0.9998, "ratio_after": 1.0, "tokens_gained": 2048}
    assert LineWriter("0.5.23", tp=2).retraction(WHEN, tp_rank=1, **kw) == (
        "[2025-08-11 17:17:03 TP1] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
        "#new_tokens_gained: 2048, #new_token_ratio: 0.9998 -> 1.0000")
    assert LineWriter("0.4.7").retraction(WHEN, **kw) == (
        "[2025-08-11 17:17:03] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
        "#new_token_ratio: 0.9998 -> 1.0000")
    assert LineWriter("0.3").retraction(WHEN, **kw) == (
        "[17:17:03 TP0] Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.9998 -> 1.0000")


def test_startup_block_exact_lines():
    args = dict(simulate.DEFAULT_SERVER_ARGS)
    lines, tokens = LineWriter("0.5.23").startup(WHEN, args, 13.5, max_total_num_tokens=130000)
    assert tokens == 130000
    assert lines[0] == (
        "[2025-08-11 17:17:03] server_args={'model_path': 'meta-llama/Llama-3.1-8B-Instruct', 'tp_size': 1, "
        "'mem_fraction_static': 0.88, 'max_running_requests': 256, 'chunked_prefill_size': 8192, "
        "'schedule_conservativeness': 1.0, 'cuda_graph_max_bs': 160, 'disable_cuda_graph': False}")
    assert lines[1] == "[2025-08-11 17:17:03] Load weight begin. avail mem=79.10 GB"
    assert "[2025-08-11 17:17:03] max_total_num_tokens=130000, chunked_prefill_size=8192, max_prefill_tokens=16384, " \
           "max_running_requests=256, context_len=131072, available_gpu_mem=13.50 GB" in lines
    assert lines[-1] == "[2025-08-11 17:17:03] The server is fired up and ready to roll!"
    old, _ = LineWriter("0.5.8").startup(WHEN, args, 13.5)
    assert old[0].startswith("[2025-08-11 17:17:03] server_args=ServerArgs(model_path='meta-llama/")
    assert kinds_of(lines) == ["server_args", "load_weight", "load_weight", "kv_cache_allocated", "memory_pool",
                               "memory_config", "server_ready"]


def test_error_records_exact_and_parsed():
    w = LineWriter("0.5.23", tp=2)
    kv = w.kv_oom(WHEN, phase="prefill", requested=8192, available=1024)
    assert kv == ["[2025-08-11 17:17:03 TP0] Prefill out of memory. Try to lower your batch size.",
                  "Try to allocate 8192 tokens.",
                  "Available tokens: 1024 (available_size=1024 + evictable_size=0)"]
    events, p = parse_all(kv)
    assert not p.unparsed and [e.kind for e in events] == ["oom"]
    assert events[0].fields["phase"] == "prefill" and events[0].fields["requested_tokens"] == 8192
    for phase in ("prefill", "decode"):
        tb = w.cuda_oom(WHEN, phase=phase)
        assert tb[0] == "[2025-08-11 17:17:03 TP0] Scheduler hit an exception: Traceback (most recent call last):"
        assert tb[-1] == ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU 0 has a total "
                          "capacity of 79.19 GiB of which 1.01 GiB is free.")
        events, p = parse_all(tb)
        assert not p.unparsed
        ooms = [e for e in events if e.kind == "oom"]
        assert [e.kind for e in events] == ["scheduler_exception", "oom"] and ooms[0].fields["phase"] == phase
    assert w.watchdog(WHEN) == ("[2025-08-11 17:17:03 TP0] Scheduler watchdog timeout "
                                "(self.watchdog_timeout=300, self.soft=False)")
    assert LineWriter("0.5.23").access(WHEN, port=53242) == \
        '[2025-08-11 17:17:03] INFO:     127.0.0.1:53242 - "POST /generate HTTP/1.1" 200 OK'


@pytest.mark.parametrize("family", FAMILIES)
def test_every_line_type_parses_to_its_kind(family):
    w = LineWriter(family, tp=2, dp=2)
    cases = [
        (w.decode(WHEN, **DECODE), "decode_batch"),
        (w.prefill(WHEN, new_seq=3, new_token=4012, cached_token=1280, token_usage=0.21, running=5, queue=0,
                   input_throughput=15342.77), "prefill_batch"),
        (w.retraction(WHEN, retracted=2, ratio_before=0.5, ratio_after=0.8), "retraction"),
        (w.server_args(WHEN, simulate.DEFAULT_SERVER_ARGS), "server_args"),
        (w.access(WHEN, port=1234), "http_access"),
        (w.watchdog(WHEN), "watchdog_timeout"),
    ]
    for line, kind in cases:
        events, p = parse_all([line])
        assert [e.kind for e in events] == [kind], (line, p.unparsed)
    events, p = parse_all([w.decode(WHEN, **DECODE)])
    f = events[0].fields
    assert (f["running_req"], f["num_tokens"], f["token_usage"], f["queue_req"]) == (5, 26740, 0.21, 0)
    assert events[0].rank["dp"] == 0 and events[0].rank["tp"] == 0
    if family != "0.3":
        assert f["cuda_graph"] is True
    events, _ = parse_all([w.retraction(WHEN, retracted=2, ratio_before=0.5, ratio_after=0.8)])
    assert events[0].fields["retracted_reqs"] == 2


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_scenario_line_is_recognised(name, family, tmp_path):
    sim = Simulator(load_scenario(name), start=WHEN, seed=1, fmt=family)
    path = tmp_path / "sglang.log"
    n = sim.write_log(path)
    lines = path.read_text().splitlines()
    assert n == len(lines) > 0
    events, p = parse_all(lines)
    assert p.unparsed.get("unknown_message", 0) == 0 and p.unparsed.get("malformed", 0) == 0, p.unparsed
    assert not p.unparsed, p.unparsed
    kinds = {e.kind for e in events}
    assert {"server_args", "memory_config", "server_ready", "decode_batch"} <= kinds


def test_deterministic_with_seed():
    sc = load_scenario("retraction_storm")
    a = Simulator(sc, start=WHEN, seed=7).lines_until(120)
    b = Simulator(sc, start=WHEN, seed=7).lines_until(120)
    c = Simulator(sc, start=WHEN, seed=8).lines_until(120)
    assert a == b and a != c


def test_lines_until_is_incremental():
    sc = load_scenario("healthy_offline")
    whole = Simulator(sc, start=WHEN).lines_until(30)
    sim = Simulator(sc, start=WHEN)
    parts = sim.lines_until(0) + sim.lines_until(10.5) + sim.lines_until(10.9) + sim.lines_until(30)
    assert parts == whole
    assert sim.lines_until(30) == []
    assert whole[-1].startswith("[2025-08-11 17:17:33")     # timestamps in simulated time


# ------------------------------------------------------------------ scenario statistics
def _decode_fields(lines):
    events, _ = parse_all(lines)
    return [e.fields for e in events if e.kind == "decode_batch"]


def test_retraction_storm_rate():
    sim = Simulator(load_scenario("retraction_storm"), start=WHEN)
    sim.lines_until(60)                       # the calm first minute
    for minute in range(5):
        lines = sim.lines_until(120 + 60 * minute)
        events, _ = parse_all(lines)
        tp0 = [e for e in events if e.kind == "retraction" and e.rank["tp"] == 0]
        tp1 = [e for e in events if e.kind == "retraction" and e.rank["tp"] == 1]
        assert len(tp0) >= 20 and len(tp1) == len(tp0)
    assert all(" TP0] Decode batch" in ln or "Decode batch" not in ln for ln in lines)


def test_retractions_frequent_rate():
    lines = Simulator(load_scenario("retractions_frequent"), start=WHEN).lines_until(600)
    n = sum("Retract requests" in ln for ln in lines)
    assert 15 <= n <= 25          # ~2 a minute


def test_queue_starved_mostly_below_100():
    samples = _decode_fields(Simulator(load_scenario("queue_starved"), start=WHEN).lines_until(600))
    assert len(samples) > 500
    assert sum(f["queue_req"] < 100 for f in samples) / len(samples) > 0.9


def test_concurrency_capped_and_cuda_graph_off():
    sc = load_scenario("concurrency_capped")
    samples = _decode_fields(Simulator(sc, start=WHEN).lines_until(300))
    mrr = sc.server_args["max_running_requests"]
    assert all(f["running_req"] == mrr and f["queue_req"] > 0 and 0.5 <= f["token_usage"] <= 0.7 for f in samples)
    samples = _decode_fields(Simulator(load_scenario("cuda_graph_off"), start=WHEN).lines_until(300))
    assert all(f["cuda_graph"] is False and f["running_req"] <= 100 for f in samples)


def test_headroom_and_restart_and_stall():
    for name, lo, hi in (("headroom_high", 14, 16), ("headroom_low", 2, 3)):
        events, _ = parse_all(Simulator(load_scenario(name), start=WHEN).lines_until(5))
        mem = [e.fields["available_gpu_mem_bytes"] / 2 ** 30 for e in events if e.kind == "memory_config"]
        assert mem and all(lo <= m <= hi for m in mem)
    events, _ = parse_all(Simulator(load_scenario("restart"), start=WHEN).lines_until(300))
    assert sum(e.kind == "server_ready" for e in events) == 2
    events, _ = parse_all(Simulator(load_scenario("stalled"), start=WHEN).lines_until(400))
    batches = [e for e in events if e.kind in ("decode_batch", "prefill_batch")]
    dog = [e for e in events if e.kind == "watchdog_timeout"]
    assert batches[-1].fields["queue_req"] > 0
    assert len(dog) == 1 and dog[0].ts - batches[-1].ts >= 300


def test_oom_scenarios_phase():
    for name, phase in (("oom_prefill", "prefill"), ("oom_decode", "decode")):
        events, _ = parse_all(Simulator(load_scenario(name), start=WHEN).lines_until(300))
        assert [e.fields["phase"] for e in events if e.kind == "oom"] == [phase]


# ------------------------------------------------------------------ /metrics
def _families(text):
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_metrics_text_content():
    sim = Simulator(load_scenario("retraction_storm"), start=WHEN)
    sim.lines_until(180)
    fams = _families(sim.metrics_text())
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:gen_throughput",
                 "sglang:num_used_tokens", "sglang:cache_hit_rate"):
        assert fams[name].type == "gauge"
        s = fams[name].samples[0]
        assert s.labels["engine_type"] == "unified" and s.labels["tp_rank"] == "0" and s.labels["pp_rank"] == "0"
        assert s.labels["model_name"] == "meta-llama/Llama-3.1-8B-Instruct"
    for name in ("sglang:num_retracted_requests", "sglang:prompt_tokens", "sglang:generation_tokens",
                 "sglang:num_requests"):
        assert fams[name].type == "counter" and fams[name].samples[0].value > 0
    assert fams["sglang:num_retracted_requests"].samples[0].value >= 2 * 30   # two storm minutes, >= 1 per event
    for name in ("sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
                 "sglang:e2e_request_latency_seconds"):
        fam = fams[name]
        assert fam.type == "histogram"
        buckets = [s for s in fam.samples if s.name.endswith("_bucket")]
        values = [s.value for s in buckets]
        assert values == sorted(values) and buckets[-1].labels["le"] == "+Inf"
        count = next(s.value for s in fam.samples if s.name.endswith("_count"))
        assert values[-1] == count > 0
    # the e2e median sits near the scenario's 30 s (storm phase), not near 1 s
    e2e = [s for s in fams["sglang:e2e_request_latency_seconds"].samples if s.name.endswith("_bucket")]
    below = {s.labels["le"]: s.value for s in e2e}
    assert below["10.0"] < 0.5 * below["+Inf"] < below["60.0"]


def test_metrics_label_sets_by_family():
    sc = load_scenario("healthy_offline")
    for family, has_rank, has_retracted in (("0.3", False, False), ("0.4.7", False, False),
                                            ("0.5.8", True, True), ("0.5.23", True, True)):
        sim = Simulator(sc, start=WHEN, fmt=family)
        sim.lines_until(10)
        fams = _families(sim.metrics_text())
        labels = fams["sglang:num_running_reqs"].samples[0].labels
        assert ("tp_rank" in labels) == has_rank and ("pp_rank" in labels) == has_rank
        assert ("sglang:num_retracted_requests" in fams) == has_retracted


def _value(fams, name, **labels):
    """The one sample of `name` (a family or a sample name) with these labels (None when absent)."""
    for fam in fams.values():
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return None


def _short(name: str) -> str:
    return name.removeprefix("sglang:").removesuffix("_total")


def test_exposition_names_come_from_the_catalog_table():
    """Every SGLang family the simulator exposes is one the catalog reads, under the spelling of the
    simulated release; 0.5.23 exposes the newer families a metrics-only sidecar judges."""
    known = family_values()
    for fmt in FAMILIES:
        sim = Simulator(load_scenario("retraction_storm"), start=WHEN, fmt=fmt)
        sim.lines_until(90)
        fams = _families(sim.metrics_text())
        assert fams and all(_short(n) in known for n in fams), sorted(n for n in fams if _short(n) not in known)
    newest = set(fams)
    for name in ("cached_tokens", "cache_hit_rate", "queue_time_seconds", "max_total_num_tokens",
                 "startup_available_gpu_memory_gb", "new_token_ratio", "num_paused_reqs", "kv_used_tokens",
                 "kv_available_tokens", "kv_evictable_tokens", "spec_accept_length", "spec_accept_rate",
                 "num_prefill_bootstrap_queue_reqs", "num_prefill_inflight_queue_reqs",
                 "num_decode_prealloc_queue_reqs", "num_decode_transfer_queue_reqs", "num_retracted_reqs"):
        assert f"sglang:{name}" in newest, name
    # 0.3 stands for SGLang 0.3.6, before inter_token_latency_seconds replaced time_per_output_token_seconds
    sim = Simulator(load_scenario("healthy_offline"), start=WHEN, fmt="0.3")
    sim.lines_until(30)
    old = _families(sim.metrics_text())
    assert "sglang:time_per_output_token_seconds" in old and "sglang:inter_token_latency_seconds" not in old
    assert NATIVE_BY_NAME["itl"].replaced_by == {"time_per_output_token_seconds": "inter_token_latency_seconds"}


def test_kv_tokens_split_capacity_as_sglang_counts():
    sim = Simulator(load_scenario("retraction_storm"), start=WHEN)
    sim.lines_until(200)
    fams = _families(sim.metrics_text())
    cap = _value(fams, "sglang:max_total_num_tokens")
    used, free, evictable = (_value(fams, f"sglang:kv_{k}_tokens") for k in ("used", "available", "evictable"))
    assert cap == sim.max_total_num_tokens > 0
    assert used + free + evictable == cap
    assert used == round(_value(fams, "sglang:token_usage") * cap)
    assert evictable == round((cap - used) * 0.25)          # the scenario's default cache_hit_rate
    assert _value(fams, "sglang:startup_available_gpu_memory_gb") == sim.scenario.available_gpu_mem_gb
    assert _value(fams, "sglang:num_paused_reqs") == 0


def test_new_token_ratio_jumps_at_a_retraction_then_decays():
    sim = Simulator(load_scenario("retraction_storm"), start=WHEN)
    sim.lines_until(30)                    # the calm minute: decaying from 0.7 x conservativeness
    calm = _value(_families(sim.metrics_text()), "sglang:new_token_ratio")
    c = sim.args["schedule_conservativeness"]
    assert calm == pytest.approx(max(0.14 * c, 0.7 * c - 29 * 0.001))     # first tick at second 1
    lines = []
    while not any("Retract requests" in line for line in lines):
        lines = sim.lines_until(sim.now + 1)
    after = float(next(line for line in lines if "Retract requests" in line).rsplit("-> ", 1)[1])
    assert _value(_families(sim.metrics_text()), "sglang:new_token_ratio") == pytest.approx(after, abs=1e-4)  # 4 digits
    retracted = sum(int(line.split("#retracted_reqs: ")[1].split(",")[0]) for line in lines
                    if "Retract requests" in line and " TP0]" in line)
    assert _value(_families(sim.metrics_text()), "sglang:num_retracted_reqs") == retracted


def test_queue_time_follows_the_queue():
    """Little's law: the overloaded queue waits far longer than the empty online one."""
    def median_bucket(name):
        sim = Simulator(load_scenario(name), start=WHEN)
        sim.lines_until(120)
        fam = _families(sim.metrics_text())["sglang:queue_time_seconds"]
        buckets = [(float(s.labels["le"]), s.value) for s in fam.samples if s.name.endswith("_bucket")]
        total = buckets[-1][1]
        assert total > 0
        return next(le for le, c in buckets if c >= total / 2)
    assert median_bucket("healthy_online") <= 0.1
    assert median_bucket("queue_overloaded") >= 30


def test_kv_usage_of_each_scenario_is_clear_of_kv_pressures_threshold():
    """A scenario docs/simulate.md says fires kv_pressure keeps every sample of its main phase at or over the
    catalog's min_usage; any other keeps the share of such samples under half the signal's fraction. Between the
    two the share hovers over the fraction and the alert fires and resolves within one run (queue_overloaded at
    0.92-0.98: ~58 % of samples against 0.5). The simulator rounds usage to two decimals."""
    from exporter.catalog import SIGNALS_BY_ID
    from tests.e2e_harness import documented_signals
    p = SIGNALS_BY_ID["kv_pressure"].defaults
    edge = p["min_usage"] - 0.005          # what rounds to min_usage or more

    def share(usage) -> float:
        lo, hi = usage if isinstance(usage, (list, tuple)) else (usage, usage)
        return 1.0 if lo >= edge else 0.0 if hi < edge else (hi - edge) / (hi - lo)
    for name, fired in documented_signals().items():
        phases = load_scenario(name).phases
        if "kv_pressure" in fired:
            assert share(max(phases, key=lambda ph: ph.duration).token_usage) == 1.0, name
        else:
            assert all(share(ph.token_usage) <= p["fraction"] / 2 for ph in phases), name


def test_latency_histograms_hold_no_observation_the_distribution_lacks():
    """healthy_online's latencies lie far under 1 s (TTFT), 20 s (e2e) and 0.1 s (inter-token): at every second
    the buckets from there up hold the whole count. Rounded apart from the count, 77.5 observations were exposed
    as 78 with 77 under 2 s, a phantom slow request that made latency_high fire on a healthy demo."""
    sim = Simulator(load_scenario("healthy_online"), start=WHEN)
    for second in range(1, 121):
        sim.lines_until(second)
        fams = _families(sim.metrics_text())
        for name, least in (("sglang:time_to_first_token_seconds", 1.0), ("sglang:e2e_request_latency_seconds", 20.0),
                            ("sglang:inter_token_latency_seconds", 0.1)):
            samples = fams[name].samples
            count = next(x.value for x in samples if x.name.endswith("_count"))
            above = {x.labels["le"]: x.value for x in samples if x.name.endswith("_bucket")
                     and float(x.labels["le"]) >= least}
            assert set(above.values()) == {count}, (second, name, count, above)


def test_speculative_and_pd_figures_come_from_the_scenario():
    sc = parse_scenario({"server_args": {"disaggregation_mode": "decode"},
                         "phases": [{"duration": 30, "spec_accept_length": 2.5, "pd_queue": 100}]}, "pd", "pd.yaml")
    sim = Simulator(sc, start=WHEN)
    sim.lines_until(20)
    fams = _families(sim.metrics_text())
    assert _value(fams, "sglang:spec_accept_length") == 2.5
    assert _value(fams, "sglang:spec_accept_rate") == pytest.approx(1.5 / 4)
    assert _value(fams, "sglang:num_decode_prealloc_queue_reqs") == 100
    assert _value(fams, "sglang:num_decode_transfer_queue_reqs") == 50
    assert _value(fams, "sglang:num_prefill_bootstrap_queue_reqs") == 0
    # off by default: a healthy server exports zeros (SGLang does too)
    sim = Simulator(load_scenario("healthy_offline"), start=WHEN)
    sim.lines_until(20)
    fams = _families(sim.metrics_text())
    assert _value(fams, "sglang:spec_accept_length") == 0 and _value(fams, "sglang:num_decode_prealloc_queue_reqs") == 0


class _Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def test_metrics_only_sidecar_judges_the_newer_signals():
    """A sidecar given no log, scraping the simulator over HTTP: the newer signals are judged, not unknown."""
    sc = parse_scenario({"server_args": {"disaggregation_mode": "prefill"},
                         "phases": [{"duration": 600, "queue": [400, 900], "running": [220, 256],
                                     "token_usage": [0.97, 1.0], "spec_accept_length": 1.2, "pd_queue": 200}]},
                        "pressure", "pressure.yaml")
    sim = Simulator(sc, start=WHEN)
    server = serve_metrics(sim, "127.0.0.1", 0)
    clock = _Clock(1_754_932_623.0)
    car = Sidecar(Config(sglang_url=f"http://127.0.0.1:{server.server_address[1]}", scrape_timeout=2.0),
                  clock=clock)
    try:
        for k in range(1, 13):
            sim.lines_until(k * 15)
            clock.t += 15
            car.scrape_once()
        judged = car.view().snapshot.judgements
    finally:
        car.shutdown()
        server.shutdown()
        server.server_close()
    for sid in ("kv_pressure", "spec_accept_low", "pd_backlog"):
        assert judged[sid].firing is True, (sid, judged[sid])
    assert judged["gpu_headroom_low"].firing is False and judged["gpu_headroom_high"].firing is False
    assert judged["queue_above_range"].firing is False


def test_restart_resets_counters():
    sim = Simulator(load_scenario("restart"), start=WHEN)
    sim.lines_until(119)
    before = _families(sim.metrics_text())["sglang:num_requests"].samples[0].value
    sim.lines_until(125)
    after = _families(sim.metrics_text())["sglang:num_requests"].samples[0].value
    assert after < before


def test_metrics_over_http_reflect_current_state():
    sim = Simulator(load_scenario("queue_overloaded"), start=WHEN)
    port = free_port()
    server = serve_metrics(sim, "127.0.0.1", port)
    try:
        url = f"http://127.0.0.1:{port}/metrics"

        def fetch():
            with urllib.request.urlopen(url, timeout=5) as r:
                assert r.status == 200
                return _families(r.read().decode())

        fams = wait_until(fetch, what="/metrics")
        assert fams["sglang:num_queue_reqs"].samples[0].value == 0          # nothing simulated yet
        sim.lines_until(30)
        fams = fetch()
        assert fams["sglang:num_queue_reqs"].samples[0].value >= 2500
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------ live mode and CLI
def test_run_simulator_live_and_stoppable(tmp_path):
    log = tmp_path / "live.log"
    port = free_port()
    stop = threading.Event()
    result = {}
    t = threading.Thread(target=lambda: result.setdefault(
        "rc", run_simulator("healthy_offline", str(log), metrics_listen=f"127.0.0.1:{port}", speed=200.0,
                            stop_event=stop)))
    t.start()
    try:
        wait_until(lambda: log.exists() and log.read_text().count("Decode batch") >= 20, what="live decode lines")

        def scraped():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                return _families(r.read().decode())["sglang:num_running_reqs"].samples[0].value > 0
        wait_until(scraped, what="live /metrics")
    finally:
        stop.set()
        t.join(timeout=10)
    assert not t.is_alive() and result["rc"] == 0
    lines = log.read_text().splitlines()
    assert not parse_all(lines)[1].unparsed
    assert len(lines) < 600 * 6         # stopped well before the 600 s scenario finished


def test_run_simulator_instant_with_duration(tmp_path):
    log = tmp_path / "i.log"
    assert run_simulator("stalled", str(log), instant=True, duration=30, start=WHEN) == 0
    lines = log.read_text().splitlines()
    assert lines[0].startswith("[2025-08-11 17:17:03] server_args=")
    assert lines[-1].startswith("[2025-08-11 17:17:33")


def _cli(argv):
    parser = argparse.ArgumentParser()
    simulate.add_arguments(parser)
    return simulate.main(parser.parse_args(argv))


def test_cli(tmp_path, capsys):
    assert _cli(["--list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in EXPECTED)
    log = tmp_path / "c.log"
    assert _cli(["--scenario", "oom_prefill", "--log-file", str(log), "--instant", "--format", "0.4.7"]) == 0
    assert "Prefill out of memory" in log.read_text() and "server_args=ServerArgs(" in log.read_text()
    assert _cli(["--scenario", "nope", "--log-file", str(log), "--instant"]) == 2
    assert "sglang-exporter simulate: error: --scenario nope: nope.yaml: no such scenario" in capsys.readouterr().err
    assert _cli(["--log-file", str(log)]) == 2
    assert _cli(["--scenario", "stalled", "--metrics-listen", "nonsense"]) == 2
    assert _cli(["--scenario", "stalled", "--speed", "0"]) == 2
    assert _cli(["--scenario", "stalled", "--log-file", str(tmp_path / "missing" / "x.log")]) == 2
    bad = tmp_path / "retraction_storm.yaml"
    bad.write_text("phases:\n  - {queue: many}\n")
    assert _cli(["--scenario", str(bad), "--instant"]) == 2
    assert "retraction_storm.yaml: phases[0].queue: expected a number or [lo, hi]" in \
        capsys.readouterr().err
    assert simulate.main(["--format", "9.9"]) == 2


def test_parse_scenario_defaults_are_healthy():
    sc = parse_scenario({}, "empty", "empty.yaml")
    assert isinstance(sc, Scenario) and sc.phases[0].retractions_per_minute == 0
    assert sc.available_gpu_mem_gb == 6.5


# ------------------------------------------------------------------ end to end: the engine fires what docs promise
FIRES = {
    "healthy_offline": set(), "restart": set(),
    "healthy_online": {"queue_below_range"},            # under the offline profile; nothing under online (default)
    "queue_starved": {"queue_below_range"}, "queue_overloaded": {"queue_above_range"},
    "too_conservative": {"kv_cache_underused"},
    "retractions_frequent": {"retractions_frequent"}, "retraction_storm": {"retractions_frequent", "retraction_storm"},
    "oom_prefill": {"oom_prefill"},
    "oom_decode": {"oom_decode", "server_crashed"},     # the traceback crashed it; the restart's ready line clears
    "server_crash": {"server_crashed", "queue_below_range"},
    "headroom_high": {"gpu_headroom_high"}, "headroom_low": {"gpu_headroom_low"},
    "cuda_graph_off": {"cuda_graph_off_small_batch"},
    "concurrency_capped": {"concurrency_capped", "kv_cache_underused"},
    "stalled": {"stalled"},
    # from the log's 500 access lines (SGLang's /metrics counts them too); the page's warning twin fires with it
    "errors_elevated": {"error_rate"}, "errors_nearly_all": {"errors_nearly_all", "error_rate"},
}


@pytest.mark.parametrize("name", sorted(FIRES))
def test_scenario_fires_its_signals(name, tmp_path):
    from exporter.config import Config
    from exporter.report.analyze import analyze
    log = tmp_path / f"{name}.log"
    Simulator(load_scenario(name), start=WHEN).write_log(log)
    report = analyze([str(log)], Config(profile="offline"), progress=False)
    assert {s["id"] for s in report["signals"] if s["fired"]} == FIRES[name]
    if name in ("healthy_online", "server_crash"):
        # the default profile (online) calls an idle online server healthy, and a crash only a crash
        report = analyze([str(log)], Config(), progress=False)
        assert {s["id"] for s in report["signals"] if s["fired"]} == FIRES[name] - {"queue_below_range"}
        assert not [a for a in report["advice"] if a["flag"] == "request-rate"]


def test_error_ratio_fails_that_share_and_counts_by_status_on_0_5_23_only():
    """error_ratio: the share of access lines that are 500s after SGLang's request error; on 0.5.23 the POST
    responses by status code plus health-check GETs in http_responses_total; older families lack the family."""
    from exporter.ingest.grammar.patterns import REQUEST_ERROR_STARTS
    data = {"phases": [{"duration": 120, "error_ratio": 0.25}]}
    sim = Simulator(parse_scenario(data, "errs", "errs.yaml"), start=WHEN)
    lines = sim.lines_until(120)
    failed = [ln for ln in lines if ln.endswith('"POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error')]
    answered = [ln for ln in lines if '"POST /' in ln]
    assert len(failed) == len(answered) // 4 > 0
    errors = [ln for ln in lines if "] Error in request: " in ln]
    assert len(errors) == len(failed) and errors[0].split("] ", 1)[1].startswith(REQUEST_ERROR_STARTS)
    counts = {(s.labels["method"], s.labels["status_code"]): s.value
              for fam in text_string_to_metric_families(sim.metrics_text()) if fam.name == "sglang:http_responses"
              for s in fam.samples}
    assert counts[("POST", "500")] == pytest.approx(counts[("POST", "200")] / 3, rel=0.02)
    assert counts[("GET", "200")] == pytest.approx(119, abs=1)
    older = Simulator(parse_scenario(data, "errs", "errs.yaml"), start=WHEN, fmt="0.5.8")
    older.lines_until(120)
    assert "http_responses" not in older.metrics_text()
    with pytest.raises(ScenarioError, match=r"errs.yaml: phases\[0\].error_ratio: expected values between 0 and 1"):
        parse_scenario({"phases": [{"error_ratio": 1.5}]}, "errs", "errs.yaml")
