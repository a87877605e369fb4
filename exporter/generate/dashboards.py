"""Grafana dashboards, their provisioning files, a ConfigMap and docs/dashboards.md, generated from the catalog.

Every panel is defined once, here, as data (`Panel`): its query, unit, thresholds and the three sentences an SRE
needs (what it shows, what good looks like, what to do when it looks bad). The dashboard JSON and the per-panel
documentation are both rendered from those definitions, so they cannot drift; thresholds and bands are read
from `exporter.catalog` (never typed here), so changing a catalog threshold moves the dashboard lines too.

    python -m exporter.generate.dashboards [--out DIR] [--check]

`DIR` is the repository root (the directory holding `dashboards/` and `docs/`); `--check` writes nothing and
exits 1 listing the files that differ from what the generator makes.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exporter.catalog import GIB, META_ALERTS, NS, SIGNALS, SIGNALS_BY_ID
from exporter.catalog_native import family_span
from exporter.generate.yamlout import BlockDumper
from exporter.releases import short_metric

# ------------------------------------------------------------------------------------------------------------
# Conventions

DS = {"type": "prometheus", "uid": "${datasource}"}

# Profiles whose thresholds the (static) dashboards draw. The exporter's own signals use whatever profile it is
# configured with; the lines on the graphs are the guide's reference values.
THROUGHPUT_PROFILE = "offline"   # queue band, KV usage target
LATENCY_PROFILE = "online"       # latency objectives (latency_high is inactive offline)

# The `instance` variable holds a host (the instance label without its port): the sidecar and the SGLang server
# it watches share a host (a pod IP, or 127.0.0.1 locally) but not a port, so one selection covers both the
# exporter's series and SGLang's own /metrics series.
INSTANCE_MATCH = '$instance(:[0-9]+)?'
SEL = f'namespace=~"$namespace", instance=~"{INSTANCE_MATCH}"'
SEL_SGLANG = SEL + ', model_name=~"$model"'
BY = "namespace, instance"

# SGLang's own metrics that the dashboards read (exposed names without histogram suffixes), with the versions
# that export them (sglang-formats.md §5). None = still present in the newest version checked (0.5.23).
SGLANG_METRICS = {
    "sglang:time_to_first_token_seconds": ("histogram", "0.3.6.post3", None),
    "sglang:inter_token_latency_seconds": ("histogram", "0.4.4", None),
    "sglang:time_per_output_token_seconds": ("histogram", "0.3.6.post3", "0.4.4"),
    "sglang:e2e_request_latency_seconds": ("histogram", "0.3.6.post3", None),
    "sglang:num_requests_total": ("counter", "0.4.2", None),
    "sglang:prompt_tokens_total": ("counter", "0.3.6.post3", None),
    "sglang:generation_tokens_total": ("counter", "0.3.6.post3", None),
    "sglang:token_usage": ("gauge", "0.3.6.post3", None),
    "sglang:num_retracted_requests_total": ("counter", "0.5.7", None),
    # the newer families (catalog_native), as the reference's table lists them
    "sglang:cached_tokens_total": ("counter", "0.4.4", None),
    "sglang:cache_hit_rate": ("gauge", "0.3.6.post3", None),
    "sglang:queue_time_seconds": ("histogram", "0.5.3", None),
    "sglang:full_token_usage": ("gauge", "0.5.10", None),
    "sglang:swa_token_usage": ("gauge", "0.5.2", None),
    "sglang:mamba_usage": ("gauge", "0.5.5", None),
    "sglang:kv_evictable_tokens": ("gauge", "0.5.11", None),
    "sglang:max_total_num_tokens": ("gauge", "0.5.6", None),
    "sglang:new_token_ratio": ("gauge", "0.5.6", None),
    "sglang:num_paused_reqs": ("gauge", "0.5.2", None),
    "sglang:spec_accept_length": ("gauge", "0.4.2", None),
    "sglang:spec_accept_rate": ("gauge", "0.5.4", None),
    "sglang:num_prefill_bootstrap_queue_reqs": ("gauge", "0.5.12", None),
    "sglang:num_prefill_inflight_queue_reqs": ("gauge", "0.5.2", None),
    "sglang:num_decode_prealloc_queue_reqs": ("gauge", "0.4.7", None),
    "sglang:num_decode_transfer_queue_reqs": ("gauge", "0.4.7", None),
}

PERCENTILES = (50, 90, 99)     # latency quantiles drawn (p99 is what latency_high judges)

# Grafana unit ids used here (validated by the tests).
UNITS = {"short", "none", "percentunit", "bytes", "s", "reqps", "cps", "cpm"}


def _p(signal: str, profile: str = THROUGHPUT_PROFILE) -> dict:
    params = SIGNALS_BY_ID[signal].params(profile)
    assert params is not None, f"{signal} is inactive in profile {profile}"
    return params


def _meta(name: str) -> dict:
    for m in META_ALERTS:
        if m.alert.name == name:
            return m.params
    raise KeyError(name)


def _num(x: float) -> str:
    return f"{x:g}"


def _gib(x: float) -> str:
    return f"{x / GIB:g} GiB"


# ------------------------------------------------------------------------------------------------------------
# Panel model


@dataclass
class Target:
    expr: str
    legend: str = ""
    table: bool = False          # instant query, table format


@dataclass
class Panel:
    title: str
    type: str                    # timeseries | stat | state-timeline | table | row
    unit: str = "short"
    shows: str = ""
    good: str = ""
    bad: str = ""
    targets: list = field(default_factory=list)
    w: int = 12
    h: int = 8
    steps: list | None = None    # [(value|None, color), ...] absolute thresholds
    style: str = "off"           # timeseries thresholdsStyle.mode
    mappings: list | None = None  # [(value, text, color), ...]
    min: float | None = None
    max: float | None = None
    overrides: list = field(default_factory=list)
    organize: dict | None = None  # table: {"exclude": [...], "rename": {...}}
    no_value: str | None = None   # shown instead of "No data": why the panel may be empty (release, feature)

    @property
    def description(self) -> str:
        return f"{self.shows} Good: {self.good} When bad: {self.bad}"


def row(title: str) -> Panel:
    return Panel(title=title, type="row", w=24, h=1)


def _dashed(regex: str, color: str | None = None) -> dict:
    props = [{"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}},
             {"id": "custom.fillOpacity", "value": 0}]
    if color:
        props.append({"id": "color", "value": {"fixedColor": color, "mode": "fixed"}})
    return {"matcher": {"id": "byRegexp", "options": regex}, "properties": props}


def _rank_max(metric: str) -> str:
    """One value per DP rank (TP/PP ranks of one DP rank print the same batch state), summed per server."""
    return f"sum by ({BY}) (max by ({BY}, dp) ({metric}{{{SEL}}}))"


def _quantile(q: float, hist: str) -> str:
    return (f"histogram_quantile({_num(q)}, sum by (le, {BY}) "
            f"(rate({hist}_bucket{{{SEL_SGLANG}}}[$__rate_interval])))")


def _latency_targets(hist: str, fallback: str | None = None) -> list:
    out = []
    for pct in PERCENTILES:
        expr = _quantile(pct / 100, hist)
        if fallback:
            expr = f"{expr}\nor\n{_quantile(pct / 100, fallback)}"
        out.append(Target(expr, f"{{{{instance}}}} p{pct}"))
    mean = (f"sum by ({BY}) (rate({hist}_sum{{{SEL_SGLANG}}}[$__rate_interval]))\n/\n"
            f"sum by ({BY}) (rate({hist}_count{{{SEL_SGLANG}}}[$__rate_interval]))")
    out.append(Target(mean, "{{instance}} mean"))
    return out


def _absent(metric: str, what: str = "") -> str:
    """A panel's text for no data: the releases that export `metric` (from the release data)."""
    span = family_span(short_metric(metric)[:-len("_total")] if metric.endswith("_total") else short_metric(metric))
    since = f"SGLang {span[0]}+" if span else "no release"
    return f"not exported by this release ({since}{', ' + what if what else ''})"


def _native_panels() -> list:
    """What the newer families of SGLang's /metrics show (catalog_native); each says when it may be empty."""
    spec = SIGNALS_BY_ID["spec_accept_low"].defaults
    pd = SIGNALS_BY_ID["pd_backlog"].defaults
    pressure = SIGNALS_BY_ID["kv_pressure"].defaults
    hit = SIGNALS_BY_ID["prefix_reuse_missed"].defaults
    qwait = SIGNALS_BY_ID["queue_wait_high"].defaults
    by_rank = f"{BY}, dp_rank, tp_rank, pp_rank"
    return [
        row("SGLang /metrics: cache, queue wait, pools, speculation, PD"),
        Panel("Prefix cache hit rate", "timeseries", "percentunit", min=0, max=1,
              shows="Share of prompt tokens served from the prefix cache (sglang:cached_tokens_total over "
                    "sglang:prompt_tokens_total) and SGLang's sglang:cache_hit_rate gauge (the last prefill; "
                    "zeroed by decode reports on 0.4.4-0.5.19).",
              good="high for chat and shared-prompt traffic; near zero is normal for unique prompts.",
              bad=f"above {_num(hit['min_hit_rate'])} with a queue under fcfs: try --schedule-policy lpm "
                  "(prefix_reuse_missed).",
              targets=[Target(f"sum by ({BY}) (rate(sglang:cached_tokens_total{{{SEL_SGLANG}}}[$__rate_interval]))"
                              f"\n/\nsum by ({BY}) (rate(sglang:prompt_tokens_total{{{SEL_SGLANG}}}"
                              f"[$__rate_interval]))", "{{instance}} cached / prompt tokens"),
                       Target(f"max by ({BY}) (sglang:cache_hit_rate{{{SEL_SGLANG}}})",
                              "{{instance}} cache_hit_rate gauge")],
              steps=[(None, "transparent"), (hit["min_hit_rate"], "blue")], style="dashed",
              no_value=_absent("sglang:cached_tokens_total")),
        Panel("Queue wait", "timeseries", "s", min=0,
              shows="How long requests wait in SGLang's queue (sglang:queue_time_seconds), with the online "
                    f"objective ({_num(qwait['p99_seconds'])} s p99, queue_wait_high).",
              good="p99 below the objective line.",
              bad="lower the request rate or add capacity; check the queue and KV panels for the cause.",
              targets=_latency_targets("sglang:queue_time_seconds"),
              steps=[(None, "transparent"), (qwait["p99_seconds"], "red")], style="dashed",
              no_value=_absent("sglang:queue_time_seconds")),
        Panel("KV pools per rank (hybrid models)", "timeseries", "percentunit", min=0, max=1,
              shows="Usage of each KV pool of a hybrid model per rank: full attention (sglang:full_token_usage), "
                    "sliding window (sglang:swa_token_usage), mamba state (sglang:mamba_usage). The exporter "
                    "judges the fullest.",
              good=f"the fullest pool near {_num(pressure['min_usage'])} under load.",
              bad="one pool full while the others have room: that pool limits concurrency.",
              targets=[Target(f"max by ({by_rank}) (sglang:{m}{{{SEL_SGLANG}}})",
                              f"{{{{instance}}}} {label} dp{{{{dp_rank}}}} tp{{{{tp_rank}}}}")
                       for m, label in (("full_token_usage", "full"), ("swa_token_usage", "swa"),
                                        ("mamba_usage", "mamba"))],
              no_value=_absent("sglang:swa_token_usage", "hybrid models only")),
        Panel("KV memory pressure", "timeseries", "short", min=0,
              shows="Evictable share of the KV pool (sglang:kv_evictable_tokens / sglang:max_total_num_tokens), "
                    "the scheduler's new-token ratio (sglang:new_token_ratio, rises after retractions) and "
                    "paused requests (sglang:num_paused_reqs).",
              good=f"an evictable share above {_num(pressure['max_evictable'])}, no paused requests.",
              bad="little evictable with a full pool, or paused requests: kv_pressure; raise "
                  "--schedule-conservativeness, consider HiCache for long shared contexts.",
              targets=[Target(f"sum by ({BY}) (sglang:kv_evictable_tokens{{{SEL_SGLANG}}})\n/\n"
                              f"sum by ({BY}) (sglang:max_total_num_tokens{{{SEL_SGLANG}}})",
                              "{{instance}} evictable share"),
                       Target(f"max by ({BY}) (sglang:new_token_ratio{{{SEL_SGLANG}}})",
                              "{{instance}} new_token_ratio"),
                       Target(f"sum by ({BY}) (sglang:num_paused_reqs{{{SEL_SGLANG}}})", "{{instance}} paused")],
              no_value=_absent("sglang:kv_evictable_tokens")),
        Panel("Speculative decoding acceptance", "timeseries", "short", min=0,
              shows="Tokens accepted per verify step (sglang:spec_accept_length) and the accepted share of "
                    f"draft tokens (sglang:spec_accept_rate), with the spec_accept_low threshold "
                    f"({_num(spec['min_accept_length'])}).",
              good=f"accept length well above {_num(spec['min_accept_length'])}.",
              bad="fewer speculative steps, or a draft model closer to the target.",
              targets=[Target(f"avg by ({BY}) (sglang:spec_accept_length{{{SEL_SGLANG}}} > 0)",
                              "{{instance}} accept length"),
                       Target(f"avg by ({BY}) (sglang:spec_accept_rate{{{SEL_SGLANG}}} > 0)",
                              "{{instance}} accept rate")],
              steps=[(None, "red"), (spec["min_accept_length"], "transparent")], style="dashed",
              no_value=_absent("sglang:spec_accept_length", "speculative decoding on")),
        Panel("PD disaggregation queues", "timeseries", "short", min=0,
              shows="Requests in the prefill/decode disaggregation queues: prefill bootstrap and in-flight "
                    "(KV being sent), decode pre-allocation (waiting for KV memory) and transfer (KV being "
                    f"received), with the pd_backlog threshold ({_num(pd['max_queue'])}).",
              good="short queues that drain.",
              bad="pre-allocation growing: the decode side lacks KV memory; transfer growing: the KV transfer "
                  "path is the bottleneck.",
              targets=[Target(f"sum by ({BY}) (sglang:{m}{{{SEL_SGLANG}}})", f"{{{{instance}}}} {label}")
                       for m, label in (("num_prefill_bootstrap_queue_reqs", "prefill bootstrap"),
                                        ("num_prefill_inflight_queue_reqs", "prefill in-flight"),
                                        ("num_decode_prealloc_queue_reqs", "decode pre-allocation"),
                                        ("num_decode_transfer_queue_reqs", "decode transfer"))],
              steps=[(None, "transparent"), (pd["max_queue"], "orange")], style="dashed",
              no_value=_absent("sglang:num_decode_prealloc_queue_reqs", "PD disaggregation only")),
    ]


def _signal_catalog_text() -> str:
    return "; ".join(f"{s.id} ({s.severity})" for s in SIGNALS)


# ------------------------------------------------------------------------------------------------------------
# The panels


def _drawn_thresholds() -> tuple:
    """The thresholds both dashboards draw: queue band, KV usage floor, retraction rates, headroom band."""
    return (_p("queue_below_range")["min_queue"], _p("queue_above_range")["max_queue"],
            _p("kv_cache_underused")["min_usage"], _p("retractions_frequent")["per_minute"],
            _p("retraction_storm")["per_minute"], _p("gpu_headroom_low")["min_bytes"],
            _p("gpu_headroom_high")["max_bytes"])


def overview_panels() -> list:
    q_lo, q_hi, usage, r_freq, r_storm, hr_lo, hr_hi = _drawn_thresholds()
    return [
        row("Now"),
        Panel("Queue", "stat", "short", w=4, h=4,
              shows="Requests waiting in SGLang's queue (#queue-req), summed over DP ranks.",
              good=f"offline batch: between {_num(q_lo)} and {_num(q_hi)} (the batch stays full); online: "
                   "near 0.",
              bad=f"below {_num(q_lo)} offline: submit requests faster; above {_num(q_hi)}: lower the request "
                  "rate or add servers.",
              targets=[Target(_rank_max(f"{NS}_queue_requests"), "{{instance}}")],
              steps=[(None, "orange"), (q_lo, "green"), (q_hi, "orange")]),
        Panel("Running requests", "stat", "short", w=4, h=4,
              shows="Requests in the running batch (#running-req), summed over DP ranks.",
              good="steady and close to what the KV cache holds; compare with the cap on the detail dashboard.",
              bad="pinned at --max-running-requests with a queue: see 'Concurrency capped'; 0 with a queue: "
                  "the server is stalled.",
              targets=[Target(_rank_max(f"{NS}_running_requests"), "{{instance}}")],
              steps=[(None, "blue")]),
        Panel("KV cache token usage", "stat", "percentunit", w=4, h=4, min=0, max=1,
              shows="KV cache pool usage (token usage), the fullest rank.",
              good=f"above {_num(usage)} under load (the guide's target).",
              bad=f"below {_num(usage)} while requests queue: decrease --schedule-conservativeness (e.g. 0.3).",
              targets=[Target(f"max by ({BY}) ({NS}_token_usage_ratio{{{SEL}}})", "{{instance}}")],
              steps=[(None, "yellow"), (usage, "green")]),
        Panel("Decode throughput", "stat", "short", w=4, h=4,
              shows="Generated tokens per second (gen throughput of the last decode line), summed over DP "
                    "ranks.",
              good="stable at the level your benchmark reached for this model and GPU.",
              bad="a drop with requests pending: check retractions, the stall signal and CUDA graph.",
              targets=[Target(_rank_max(f"{NS}_gen_throughput_tokens_per_second"), "{{instance}}")],
              steps=[(None, "blue")]),
        Panel("GPU memory headroom", "stat", "bytes", w=4, h=4,
              shows="GPU memory left after start-up on the GPU with the least left.",
              good=f"between {_gib(hr_lo)} and {_gib(hr_hi)}.",
              bad=f"below {_gib(hr_lo)}: OOM risk, decrease --mem-fraction-static; above {_gib(hr_hi)}: KV "
                  "cache too small, increase --mem-fraction-static.",
              targets=[Target(f"min by ({BY}) ({NS}_gpu_headroom_bytes{{{SEL}}})", "{{instance}}")],
              steps=[(None, "red"), (hr_lo, "green"), (hr_hi, "yellow")]),
        Panel("Retractions per minute", "stat", "cpm", w=4, h=4,
              shows="KV-cache-full retraction events per minute over the retractions_frequent window.",
              good=f"at most {_num(r_freq)} per minute (occasional retractions are fine).",
              bad=f"above {_num(r_freq)}: increase --schedule-conservativeness (e.g. 1.3); at {_num(r_storm)} or "
                  "more it is a storm: also lower --max-running-requests.",
              targets=[Target(f"max by ({BY}) ({NS}_retractions_per_minute{{{SEL}}})", "{{instance}}")],
              steps=[(None, "green"), (r_freq, "yellow"), (r_storm, "red")]),
        row("Health signals"),
        Panel("Signals", "state-timeline", "none", w=24, h=10,
              shows="Every health signal of the catalog per server over time: ok, firing, or unknown (not "
                    "enough data to judge; 'not exported by this release' when the only source, SGLang's "
                    f"/metrics, lacks its inputs). Signals: {_signal_catalog_text()}.",
              good="all ok (green); unknown is normal right after start-up and for signals the profile turns "
                   "off.",
              bad="a firing (red) row: open its runbook (docs/runbooks) and follow the advice table below.",
              targets=[Target(f"max by ({BY}, signal) ({NS}_signal_firing{{{SEL}}})\nor\n"
                              f"max by ({BY}, signal) ({NS}_signal_unsupported{{{SEL}}} == 1) * 0 - 2\nor\n"
                              f"max by ({BY}, signal) ({NS}_signal_known{{{SEL}}}) * 0 - 1",
                              "{{instance}} {{signal}}")],
              mappings=[(-2, "not exported by this release", "purple"), (-1, "unknown", "text"),
                        (0, "ok", "green"), (1, "firing", "red")],
              steps=[(None, "green")]),
        Panel("Failure causes", "table", "none", w=24, h=5,
              shows="Why a failure signal fires (server_crashed, startup_oom, startup_stalled): the last exception "
                    "line of the traceback and its class.",
              good="empty: nothing failed since the last ready line.",
              bad="read the cause; a cuda_oom at start-up follows the startup_oom advice; otherwise open the "
                  "runbook of the firing alert and SGLang's log around that time.",
              targets=[Target(f"max by ({BY}, signal, cause_class, cause) "
                              f"({NS}_failure_cause_info{{{SEL}}})", table=True)],
              organize={"exclude": ["Time", "Value"],
                        "rename": {"instance": "Instance", "namespace": "Namespace", "signal": "Signal",
                                   "cause_class": "Class", "cause": "Cause"}}),
        Panel("Tuning advice", "table", "none", w=24, h=8,
              shows="The reconciled tuning recommendations: flag, direction, current and suggested value, and "
                    "the signals that ask for it.",
              good="empty: nothing to tune.",
              bad="apply the suggestion (one flag at a time), restart SGLang, and watch the signal clear.",
              targets=[Target(f"max by ({BY}, flag, action, current, suggested, signals) "
                              f"({NS}_advice_info{{{SEL}}})", table=True)],
              organize={"exclude": ["Time", "Value"],
                        "rename": {"instance": "Instance", "namespace": "Namespace", "flag": "Flag",
                                   "action": "Action", "current": "Current", "suggested": "Suggested",
                                   "signals": "Signals"}}),
        Panel("Signal details", "table", "short", w=16, h=8,
              shows="Per signal: firing or not, the value it judges (unit per signal: "
                    + "; ".join(f"{s.id} {s.value_unit}" for s in SIGNALS)
                    + ") and how long it has been in its current state.",
              good="firing 0 everywhere; long durations in the ok state.",
              bad="a signal that flips state every few minutes sits on its threshold: tune the threshold in "
                  "the exporter config or fix the cause.",
              targets=[Target(f"max by ({BY}, signal) ({NS}_signal_firing{{{SEL}}})", table=True),
                       Target(f"max by ({BY}, signal) ({NS}_signal_value{{{SEL}}})", table=True),
                       Target(f"max by ({BY}, signal) ({NS}_signal_state_duration_seconds{{{SEL}}})",
                              table=True)],
              organize={"exclude": ["Time"],
                        "rename": {"instance": "Instance", "namespace": "Namespace", "signal": "Signal",
                                   "Value #A": "Firing", "Value #B": "Value",
                                   "Value #C": "In state for"}},
              overrides=[{"matcher": {"id": "byName", "options": "In state for"},
                          "properties": [{"id": "unit", "value": "s"}]}]),
        Panel("Servers", "table", "none", w=8, h=8,
              shows="The SGLang log format family and model each sidecar detected.",
              good="one row per server with the model you expect.",
              bad="no row: the sidecar has not recognised any SGLang line yet (check its log source); an "
                  "unexpected format family: see the parser-drift panels on the detail dashboard.",
              targets=[Target(f"max by ({BY}, format, model) "
                              f"({NS}_sglang_info{{{SEL}, model=~\"$model\"}})", table=True)],
              organize={"exclude": ["Time", "Value"],
                        "rename": {"instance": "Instance", "namespace": "Namespace", "format": "Format",
                                   "model": "Model"}}),
    ]


def detail_panels() -> list:
    q_lo, q_hi, usage, r_freq, r_storm, hr_lo, hr_hi = _drawn_thresholds()
    cap = _p("concurrency_capped")
    stall = _p("stalled")["stall_seconds"]
    cuda = _p("cuda_graph_off_small_batch")
    lat = _p("latency_high", LATENCY_PROFILE)
    drift = _meta("SGLangLogParserDrift")["max_unknown_ratio"]
    rank_legend = "{{instance}} dp{{dp}} tp{{tp}} pp{{pp}}"

    return [
        row("Throughput and batch"),
        Panel("Running requests vs cap", "timeseries", "short",
              shows="Running requests per DP rank (#running-req), the server's --max-running-requests, and "
                    f"{_num(cap['running_fraction'] * 100)} % of it (where concurrency_capped starts counting).",
              good="running below the cap, or at the cap only while the KV cache is full.",
              bad="at the cap while requests queue and token usage stays below "
                  f"{_num(cap['max_usage'])}: raise --max-running-requests.",
              targets=[Target(f"max by ({BY}, dp) ({NS}_running_requests{{{SEL}}})", "{{instance}} dp{{dp}}"),
                       Target(f"max by ({BY}) ({NS}_max_running_requests{{{SEL}}})",
                              "{{instance}} max_running_requests"),
                       Target(f"{_num(cap['running_fraction'])} * max by ({BY}) "
                              f"({NS}_max_running_requests{{{SEL}}})",
                              "{{instance}} capped threshold")],
              overrides=[_dashed("/max_running_requests$/", "red"), _dashed("/capped threshold$/", "orange")]),
        Panel("Queue", "timeseries", "short",
              shows="Requests waiting (#queue-req), summed over DP ranks, with the offline healthy band "
                    f"{_num(q_lo)}-{_num(q_hi)} (queue_below_range / queue_above_range).",
              good=f"offline batch: inside the green band {_num(q_lo)}-{_num(q_hi)}; online serving: near 0 "
                   "(the band does not apply).",
              bad=f"offline below {_num(q_lo)}: the client submits too slowly, raise the request rate; above "
                  f"{_num(q_hi)}: queueing delay and scheduling overhead, lower the rate or add servers.",
              targets=[Target(_rank_max(f"{NS}_queue_requests"), "{{instance}}")],
              steps=[(None, "orange"), (q_lo, "green"), (q_hi, "orange")], style="dashed+area", min=0),
        Panel("Decode throughput", "timeseries", "short",
              shows="Generated tokens per second (gen throughput of each decode line), summed over DP ranks; "
                    "and SGLang's generated and prompt token rates from its counters.",
              good="flat at the level your benchmark reached; the log and counter views agree.",
              bad="drops while requests are pending: look at retractions, OOMs and the stall panel below.",
              targets=[Target(_rank_max(f"{NS}_gen_throughput_tokens_per_second"), "{{instance}} log"),
                       Target(f"sum by ({BY}) (rate(sglang:generation_tokens_total{{{SEL_SGLANG}}}"
                              f"[$__rate_interval]))", "{{instance}} generated (counter)"),
                       Target(f"sum by ({BY}) (rate(sglang:prompt_tokens_total{{{SEL_SGLANG}}}"
                              f"[$__rate_interval]))", "{{instance}} prompt (counter)")],
              min=0),
        Panel("Request rate", "timeseries", "reqps",
              shows="Requests finished per second, from SGLang's sglang:num_requests_total counter.",
              good="matches the load you send.",
              bad="lower than the send rate with a growing queue: the server is saturated.",
              targets=[Target(f"sum by ({BY}) (rate(sglang:num_requests_total{{{SEL_SGLANG}}}"
                              f"[$__rate_interval]))", "{{instance}}")],
              min=0),
        row("KV cache"),
        Panel("KV cache token usage", "timeseries", "percentunit", min=0, max=1,
              shows=f"KV cache pool usage (token usage), the fullest rank, with the guide's {_num(usage)} target.",
              good=f"above the {_num(usage)} line under load.",
              bad=f"below {_num(usage)} while the queue is non-empty (kv_cache_underused): decrease "
                  "--schedule-conservativeness (e.g. 0.3); pinned at 1 with retractions: increase it.",
              targets=[Target(f"max by ({BY}) ({NS}_token_usage_ratio{{{SEL}}})", "{{instance}}")],
              steps=[(None, "transparent"), (usage, "green")], style="dashed"),
        Panel("Retractions per minute", "timeseries", "cpm", min=0,
              shows="KV-cache-full retraction events per minute: the exporter's windowed value and the rate of "
                    f"its counter, with the acceptable line ({_num(r_freq)}/min) and the storm line "
                    f"({_num(r_storm)}/min).",
              good=f"at or below {_num(r_freq)} per minute.",
              bad=f"above {_num(r_freq)}: increase --schedule-conservativeness (e.g. 1.3); at {_num(r_storm)} "
                  "or more (retraction storm, pages): also lower --max-running-requests and check "
                  "--mem-fraction-static.",
              targets=[Target(f"max by ({BY}) ({NS}_retractions_per_minute{{{SEL}}})", "{{instance}} window"),
                       Target(f"60 * sum by ({BY}) (rate({NS}_retractions_total{{{SEL}}}[$__rate_interval]))",
                              "{{instance}} rate")],
              steps=[(None, "transparent"), (r_freq, "yellow"), (r_storm, "red")], style="dashed"),
        Panel("Requests retracted per minute", "timeseries", "cpm", min=0,
              shows="Requests evicted and re-queued per minute (sum of #retracted_reqs from the log), and "
                    "SGLang's own counter sglang:num_retracted_requests_total (0.5.7+).",
              good="near 0.",
              bad="many requests per event: each retraction throws away a lot of decode work; raise "
                  "--schedule-conservativeness.",
              targets=[Target(f"60 * sum by ({BY}) (rate({NS}_retracted_requests_total{{{SEL}}}"
                              f"[$__rate_interval]))", "{{instance}} log"),
                       Target(f"60 * sum by ({BY}) (rate(sglang:num_retracted_requests_total{{{SEL_SGLANG}}}"
                              f"[$__rate_interval]))", "{{instance}} counter")]),
        row("Memory and CUDA graph"),
        Panel("GPU memory headroom", "timeseries", "bytes", min=0,
              shows=f"GPU memory left after start-up: the GPU with the least left, and each rank, with the "
                    f"{_gib(hr_lo)}-{_gib(hr_hi)} band of the guide (per GPU).",
              good=f"inside the green band {_gib(hr_lo)}-{_gib(hr_hi)}.",
              bad=f"below {_gib(hr_lo)}: decrease --mem-fraction-static (OOM risk); above {_gib(hr_hi)}: "
                  "increase it in steps of 0.01 (more KV cache).",
              targets=[Target(f"min by ({BY}) ({NS}_gpu_headroom_bytes{{{SEL}}})", "{{instance}}"),
                       Target(f"min by ({BY}, rank) ({NS}_rank_gpu_headroom_bytes{{{SEL}}})",
                              "{{instance}} {{rank}}")],
              steps=[(None, "red"), (hr_lo, "green"), (hr_hi, "yellow")], style="dashed+area"),
        Panel("CUDA graph per DP rank", "state-timeline", "none",
              shows="Whether the last decode batch of each DP rank ran with CUDA graph.",
              good="on, at least whenever the batch is small (at most --cuda-graph-max-bs requests).",
              bad="off for small batches: raise --cuda-graph-max-bs, make sure --disable-cuda-graph is not set, "
                  "or try another attention backend.",
              targets=[Target(f"min by ({BY}, dp) ({NS}_cuda_graph_enabled{{{SEL}}})",
                              "{{instance}} dp{{dp}}")],
              mappings=[(0, "off", "orange"), (1, "on", "green")], steps=[(None, "green")]),
        Panel("Small batches without CUDA graph", "timeseries", "short", min=0,
              shows="Decode samples in the window that ran without CUDA graph although the batch was at most "
                    f"cuda_graph_max_bs (default {_num(cuda['default_max_bs'])}) — the value of "
                    "cuda_graph_off_small_batch.",
              good=f"below {_num(cuda['min_samples'])}.",
              bad="raise --cuda-graph-max-bs (costs some GPU memory), check CUDA graph is not disabled.",
              targets=[Target(f"max by ({BY}) ({NS}_signal_value{{{SEL}, "
                              f"signal=\"cuda_graph_off_small_batch\"}})", "{{instance}}")],
              steps=[(None, "transparent"), (cuda["min_samples"], "orange")], style="dashed"),
        Panel("OOMs, watchdog timeouts and restarts", "timeseries", "short", min=0,
              shows="Out-of-memory events by phase, scheduler watchdog timeouts and SGLang (re)starts, counted "
                    "per rate interval.",
              good="all zero.",
              bad="OOM in prefill: decrease --chunked-prefill-size (4096 or 2048); in decode: lower "
                  "--max-running-requests; both: lower --mem-fraction-static. Watchdog timeouts and restarts: "
                  "read SGLang's log around that time.",
              targets=[Target(f"sum by ({BY}, phase) (increase({NS}_oom_events_total{{{SEL}}}"
                              f"[$__rate_interval]))", "{{instance}} OOM {{phase}}"),
                       Target(f"sum by ({BY}) (increase({NS}_watchdog_timeouts_total{{{SEL}}}"
                              f"[$__rate_interval]))", "{{instance}} watchdog timeout"),
                       Target(f"sum by ({BY}) (increase({NS}_server_restarts_total{{{SEL}}}"
                              f"[$__rate_interval]))", "{{instance}} restart")]),
        Panel("Time since last batch", "timeseries", "s", min=0,
              shows="Seconds since the last prefill or decode batch line, with the stall limit "
                    f"({_num(stall)} s).",
              good="a few seconds while serving (decode lines come every 40 decode steps); it may grow while "
                   "idle.",
              bad=f"above {_num(stall)} s with requests pending: the scheduler is hung (stalled pages); read the "
                  "log for a watchdog timeout or exception and restart the server.",
              targets=[Target(f"max by ({BY}) ({NS}_last_batch_age_seconds{{{SEL}}})", "{{instance}}")],
              steps=[(None, "transparent"), (stall, "red")], style="dashed"),
        row("Latency (SGLang histograms)"),
        Panel("Time to first token", "timeseries", "s", min=0,
              shows="Per-server TTFT quantiles and mean from sglang:time_to_first_token_seconds (rate per "
                    f"bucket, then summed per server), with the online objective ({_num(lat['ttft_p99_seconds'])} "
                    "s p99).",
              good="p99 below the objective line.",
              bad="long queue: lower the request rate; long prompts: raise --chunked-prefill-size; large "
                  "batches: lower --max-running-requests.",
              targets=_latency_targets("sglang:time_to_first_token_seconds"),
              steps=[(None, "transparent"), (lat["ttft_p99_seconds"], "red")], style="dashed"),
        Panel("Inter-token latency", "timeseries", "s", min=0,
              shows="Per-server inter-token latency quantiles and mean from sglang:inter_token_latency_seconds "
                    "(sglang:time_per_output_token_seconds on SGLang 0.4.4 and older), with the online objective "
                    f"({_num(lat['itl_p99_seconds'])} s p99).",
              good="p99 below the objective line.",
              bad="the decode batch is too large: lower --max-running-requests; check CUDA graph is on.",
              targets=_latency_targets("sglang:inter_token_latency_seconds",
                                       "sglang:time_per_output_token_seconds"),
              steps=[(None, "transparent"), (lat["itl_p99_seconds"], "red")], style="dashed"),
        Panel("End-to-end request latency", "timeseries", "s", min=0,
              shows="Per-server end-to-end latency quantiles and mean from sglang:e2e_request_latency_seconds, "
                    f"with the online objective ({_num(lat['e2e_p99_seconds'])} s p99).",
              good="p99 below the objective line and stable.",
              bad="compare with TTFT and inter-token latency to find the phase that grew; retractions also "
                  "lengthen requests.",
              targets=_latency_targets("sglang:e2e_request_latency_seconds"),
              steps=[(None, "transparent"), (lat["e2e_p99_seconds"], "red")], style="dashed"),
        *_native_panels(),
        row("Per rank"),
        Panel("Queue per rank", "timeseries", "short", min=0,
              shows="#queue-req of every DP/TP/PP rank that prints batch lines.",
              good="DP ranks carry similar queues.",
              bad="one DP rank far above the others: load balancing across DP ranks is uneven.",
              targets=[Target(f"max by ({BY}, dp, tp, pp) ({NS}_queue_requests{{{SEL}}})", rank_legend)]),
        Panel("Running requests per rank", "timeseries", "short", min=0,
              shows="#running-req of every rank.",
              good="DP ranks carry similar batches.",
              bad="an idle DP rank next to a full one: uneven balancing; a rank at 0 with a queue: stalled.",
              targets=[Target(f"max by ({BY}, dp, tp, pp) ({NS}_running_requests{{{SEL}}})", rank_legend)]),
        Panel("Token usage per rank", "timeseries", "percentunit", min=0, max=1,
              shows="KV cache usage of every rank from the log, and SGLang's sglang:token_usage gauge per rank "
                    "from its /metrics.",
              good=f"above {_num(usage)} under load on every rank; log and metric agree.",
              bad="one rank much fuller than the others retracts first; the log and metric disagree: check the "
                  "exporter's parser-drift panels.",
              targets=[Target(f"max by ({BY}, dp, tp, pp) ({NS}_token_usage_ratio{{{SEL}}})", rank_legend),
                       Target(f"max by ({BY}, dp_rank, tp_rank, pp_rank) (sglang:token_usage{{{SEL_SGLANG}}})",
                              "{{instance}} metric dp{{dp_rank}} tp{{tp_rank}} pp{{pp_rank}}")],
              steps=[(None, "transparent"), (usage, "green")], style="dashed"),
        Panel("Decode throughput per rank", "timeseries", "short", min=0,
              shows="Generated tokens per second of every rank (gen throughput).",
              good="DP ranks within a few percent of each other.",
              bad="a slow rank holds back DP-attention steps of all ranks: check its GPU.",
              targets=[Target(f"max by ({BY}, dp, tp, pp) ({NS}_gen_throughput_tokens_per_second{{{SEL}}})",
                              rank_legend)]),
        row("Exporter health"),
        Panel("Log lines read", "timeseries", "cps", min=0,
              shows="Log lines the sidecar reads per second, per source.",
              good="non-zero while SGLang serves (decode lines arrive every few seconds).",
              bad="zero for long while SGLang serves: the log hand-off (file, stderr pipe, container log) is "
                  "broken; check the source_up panel.",
              targets=[Target(f"sum by ({BY}, source) (rate({NS}_log_lines_read_total{{{SEL}}}"
                              f"[$__rate_interval]))", "{{instance}} {{source}}")]),
        Panel("Unrecognised log lines", "timeseries", "cps", min=0,
              shows="Log lines the parser did not recognise per second, by reason.",
              good="low and steady (SGLang also prints lines we do not need).",
              bad="a jump after an SGLang upgrade: its log format changed; file an issue with sample lines "
                  "(`sglang-exporter parse --stats`).",
              targets=[Target(f"sum by ({BY}, reason) (rate({NS}_log_lines_unparsed_total{{{SEL}}}"
                              f"[$__rate_interval]))", "{{instance}} {{reason}}")]),
        Panel("Unrecognised share", "timeseries", "percentunit", min=0, max=1,
              shows="Unrecognised lines over lines read (sum, then divide), with the parser-drift alert "
                    f"threshold ({_num(drift * 100)} %).",
              good=f"below {_num(drift * 100)} %.",
              bad="above the line: SGLang's log format probably changed (SGLangLogParserDrift); log-fed signals "
                  "may go silent.",
              targets=[Target(f"sum by ({BY}) (rate({NS}_log_lines_unparsed_total{{{SEL}}}[$__rate_interval]))"
                              f"\n/\nsum by ({BY}) (rate({NS}_log_lines_read_total{{{SEL}}}[$__rate_interval]))",
                              "{{instance}}")],
              steps=[(None, "transparent"), (drift, "red")], style="dashed"),
        Panel("Events recognised", "timeseries", "cps", min=0,
              shows="SGLang events recognised per second, by kind (decode_batch, prefill_batch, retraction, "
                    "oom, ...).",
              good="decode_batch and prefill_batch while serving.",
              bad="no decode_batch while lines are read: the parser no longer recognises batch lines.",
              targets=[Target(f"sum by ({BY}, kind) (rate({NS}_log_events_total{{{SEL}}}[$__rate_interval]))",
                              "{{instance}} {{kind}}")]),
        Panel("Sources up", "state-timeline", "none",
              shows="Whether each source is being read: a log file read successfully last time; SGLang's "
                    "/metrics scraped successfully last time, less than scrape_stale_after ago.",
              good="up everywhere.",
              bad="down: the log file is missing or unreadable, or SGLang's /metrics does not answer "
                  "(SGLangTargetDown).",
              targets=[Target(f"min by ({BY}, source) ({NS}_source_up{{{SEL}}})", "{{instance}} {{source}}")],
              mappings=[(0, "down", "red"), (1, "up", "green")], steps=[(None, "green")]),
        Panel("Since a source last failed", "timeseries", "s", min=0,
              shows="Per source, how long ago the sidecar last saw it failing (a failed scrape; a log file "
                    "missing, unreadable or stale); no line for a source that never failed.",
              good="no line, or a line that keeps growing: the last problem is long past.",
              bad="near 0: the source fails now; /api/v1/signals (sources) and the sidecar's log give the reason.",
              targets=[Target(f"time() - max by ({BY}, source) "
                              f"({NS}_source_last_error_timestamp_seconds{{{SEL}}})", "{{instance}} {{source}}")]),
        Panel("Log rotations, truncations and cut lines", "timeseries", "short", min=0,
              shows="Log rotations followed, truncations detected and over-long lines cut, per rate interval; "
                    "stale (1) while a rotated-away file is still written to.",
              good="rotations at your logrotate cadence; truncations, cut lines and stale zero.",
              bad="truncations: something rewrites the log in place (copytruncate: use delaycompress); cut "
                  "lines: raise the line cap; stale: the writer never reopens its log (SGLangLogSourceStale).",
              targets=[Target(f"sum by ({BY}, source) (increase({NS}_log_rotations_total{{{SEL}}}"
                              f"[$__rate_interval]))", "{{instance}} rotations {{source}}"),
                       Target(f"sum by ({BY}, source) (increase({NS}_log_truncations_total{{{SEL}}}"
                              f"[$__rate_interval]))", "{{instance}} truncations {{source}}"),
                       Target(f"sum by ({BY}, source) (increase({NS}_log_lines_cut_total{{{SEL}}}"
                              f"[$__rate_interval]))", "{{instance}} cut {{source}}"),
                       Target(f"max by ({BY}, source) ({NS}_log_source_stale{{{SEL}}})",
                              "{{instance}} stale {{source}}")]),
        Panel("SGLang /metrics scrape success", "timeseries", "short", min=0, max=1,
              shows="1 when the sidecar's last scrape of SGLang's /metrics succeeded (0 too when its scraper is "
                    "stuck).",
              good="1.",
              bad="0: SGLang is down, not started with --enable-metrics, or --sglang-url is wrong; the sidecar's "
                  "log says why.",
              targets=[Target(f"min by ({BY}, source) ({NS}_scrape_success{{{SEL}}})",
                              "{{instance}} {{source}}")]),
        Panel("SGLang /metrics scrape duration", "timeseries", "s", min=0,
              shows="How long the sidecar's last scrape of SGLang's /metrics took.",
              good="well under a second.",
              bad="seconds: SGLang's HTTP process is overloaded (its /metrics shares the API port).",
              targets=[Target(f"max by ({BY}, source) ({NS}_scrape_duration_seconds{{{SEL}}})",
                              "{{instance}} {{source}}")]),
        Panel("SGLang /metrics samples rejected", "timeseries", "short", min=0,
              shows="Samples of SGLang's /metrics dropped as malformed (NaN, infinite, out of the range the "
                    "catalog declares, a bad bucket bound), per rate interval.",
              good="0.",
              bad="above 0: SGLang exports values that cannot be right; the affected gauges keep their last "
                  "good value and the affected counters and histograms skip those scrapes.",
              targets=[Target(f"sum by ({BY}, reason) (increase({NS}_scrape_samples_rejected_total{{{SEL}}}"
                              f"[$__rate_interval]))", "{{instance}} {{reason}}")]),
        Panel("Exporter worker errors", "timeseries", "short", min=0,
              shows="Unexpected errors the sidecar caught in a worker (follow, scrape, evaluate, positions) and "
                    "survived, per rate interval.",
              good="0.",
              bad="above 0: a bug or a hostile input the sidecar did not expect; the worker went on, its log "
                  "has the traceback. A worker that cannot go on fails /healthz and is restarted.",
              targets=[Target(f"sum by ({BY}, worker) (increase({NS}_worker_errors_total{{{SEL}}}"
                              f"[$__rate_interval]))", "{{instance}} {{worker}}")]),
        Panel("Families left out of the sidecar's /metrics", "timeseries", "short", min=0,
              shows="Metric families the sidecar left out of its own /metrics because a value in them could not "
                    "be exposed (the rest were served), per rate interval, by family.",
              good="zero.",
              bad="non-zero: that family's panels go blank; file an issue with the family name and the sidecar's "
                  "log around that time.",
              # with no failure there is no series: `or` a zero per sidecar (its build_info), so zero shows
              targets=[Target(f"sum by ({BY}, family) (increase({NS}_exposition_errors_total{{{SEL}}}"
                              f"[$__rate_interval]))\nor\nsum by ({BY}) (0 * {NS}_build_info{{{SEL}}})",
                              "{{instance}} {{family}}")]),
        Panel("Exporter build", "table", "none", w=24, h=5,
              shows="sglang-exporter version and Python of each sidecar.",
              good="the same version everywhere.",
              bad="mixed versions after a rollout: signals and metrics may differ between servers.",
              targets=[Target(f"max by ({BY}, version, python) ({NS}_build_info{{{SEL}}})", table=True)],
              organize={"exclude": ["Time", "Value"],
                        "rename": {"instance": "Instance", "namespace": "Namespace", "version": "Version",
                                   "python": "Python"}}),
    ]


DASHBOARDS: dict[str, dict[str, Any]] = {
    "sglang-overview": {
        "title": "SGLang / Overview",
        "description": "Health signals, tuning advice and headline numbers of SGLang servers, from "
                       "sglang-exporter. Generated from the signal catalog; do not edit by hand.",
        "panels": overview_panels,
    },
    "sglang-detail": {
        "title": "SGLang / Detail",
        "description": "Batch, KV cache, memory, CUDA graph, latency, per-rank and exporter-health views of "
                       "SGLang servers, with the tuning guide's bands. Generated from the signal catalog; do "
                       "not edit by hand.",
        "panels": detail_panels,
    },
}


# ------------------------------------------------------------------------------------------------------------
# Rendering


def _layout(panels: list) -> list:
    """(x, y) for each panel: left to right, wrapping at 24 columns; rows take a full line."""
    out, x, y, line_h = [], 0, 0, 0
    for p in panels:
        if p.type == "row" or x + p.w > 24:
            y, x, line_h = y + line_h, 0, 0
        out.append((x, y))
        x += p.w
        line_h = max(line_h, p.h)
        if p.type == "row":
            y, x, line_h = y + p.h, 0, 0
    return out


def _steps(steps) -> dict:
    return {"mode": "absolute",
            "steps": [{"color": c, "value": v} for v, c in (steps or [(None, "green")])]}


def _mappings(mappings) -> list:
    if not mappings:
        return []
    return [{"type": "value",
             "options": {str(v): {"color": c, "index": i, "text": t} for i, (v, t, c) in enumerate(mappings)}}]


def _target(t: Target, ref: str) -> dict:
    d: dict[str, Any] = {"datasource": DS, "editorMode": "code", "expr": t.expr, "refId": ref}
    if t.table:
        d.update({"format": "table", "instant": True, "range": False, "legendFormat": "__auto"})
    else:
        d.update({"instant": False, "range": True, "legendFormat": t.legend or "__auto"})
    return d


def _panel(p: Panel, pid: int, x: int, y: int) -> dict:
    grid = {"h": p.h, "w": p.w, "x": x, "y": y}
    if p.type == "row":
        return {"collapsed": False, "gridPos": grid, "id": pid, "panels": [], "title": p.title, "type": "row"}
    defaults: dict[str, Any] = {"color": {"mode": "palette-classic" if p.type == "timeseries" else "thresholds"},
                "mappings": _mappings(p.mappings), "thresholds": _steps(p.steps), "unit": p.unit}
    if p.min is not None:
        defaults["min"] = p.min
    if p.max is not None:
        defaults["max"] = p.max
    if p.no_value:
        defaults["noValue"] = p.no_value
    legend = {"calcs": ["lastNotNull", "max"], "displayMode": "table", "placement": "bottom", "showLegend": True}
    tooltip = {"mode": "multi", "sort": "desc"}
    if p.type == "timeseries":
        defaults["custom"] = {"axisBorderShow": False, "axisPlacement": "auto", "drawStyle": "line",
                              "fillOpacity": 10, "gradientMode": "none", "lineInterpolation": "linear",
                              "lineWidth": 1, "pointSize": 4, "showPoints": "never", "spanNulls": False,
                              "stacking": {"group": "A", "mode": "none"},
                              "thresholdsStyle": {"mode": p.style}}
        options = {"legend": legend, "tooltip": tooltip}
    elif p.type == "stat":
        options = {"colorMode": "value", "graphMode": "area", "justifyMode": "auto", "orientation": "auto",
                   "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                   "showPercentChange": False, "textMode": "auto", "wideLayout": True}
    elif p.type == "state-timeline":
        defaults["custom"] = {"fillOpacity": 80, "lineWidth": 0}
        options = {"alignValue": "left", "legend": {"displayMode": "list", "placement": "bottom",
                                                     "showLegend": False},
                   "mergeValues": True, "rowHeight": 0.8, "showValue": "auto", "tooltip": tooltip}
    elif p.type == "table":
        defaults["custom"] = {"align": "auto", "cellOptions": {"type": "auto"}, "filterable": True}
        options = {"cellHeight": "sm", "showHeader": True}    # no footer: hidden by default in 10.4-13
    else:  # pragma: no cover - guarded by tests
        raise ValueError(p.type)
    panel = {
        "datasource": DS,
        "description": p.description,
        "fieldConfig": {"defaults": defaults, "overrides": p.overrides},
        "gridPos": grid,
        "id": pid,
        "options": options,
        "targets": [_target(t, chr(ord("A") + i)) for i, t in enumerate(p.targets)],
        "title": p.title,
        "type": p.type,
    }
    if p.type == "table":
        org = p.organize or {}
        transformations = []
        if len(p.targets) > 1:
            transformations.append({"id": "merge", "options": {}})
        transformations.append({"id": "organize", "options": {
            "excludeByName": {k: True for k in org.get("exclude", [])},
            "indexByName": {}, "renameByName": org.get("rename", {})}})
        panel["transformations"] = transformations
    return panel


def _variables() -> list:
    def query_var(name, label, query, regex=""):
        return {"allValue": ".*", "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                "datasource": DS, "hide": 0, "includeAll": True, "label": label,
                "multi": True, "name": name, "options": [], "query": query, "refresh": 2, "regex": regex,
                "skipUrlSync": False, "sort": 1, "type": "query"}

    return [
        {"current": {"selected": False, "text": "${DS_PROMETHEUS}", "value": "${DS_PROMETHEUS}"},
         "hide": 0, "includeAll": False, "label": "Data source", "multi": False, "name": "datasource",
         "options": [], "query": "prometheus", "refresh": 1, "regex": "", "skipUrlSync": False,
         "type": "datasource"},
        query_var("namespace", "Namespace", f"label_values({NS}_build_info, namespace)"),
        query_var("model", "Model", f'label_values({NS}_sglang_info{{namespace=~"$namespace"}}, model)'),
        # host part of the instance label (see INSTANCE_MATCH)
        query_var("instance", "Host", f'label_values({NS}_sglang_info{{namespace=~"$namespace", '
                                      f'model=~"$model"}}, instance)', regex="/^(.*?)(:[0-9]+)?$/"),
    ]


PANEL_TYPES = {"timeseries": "Time series", "stat": "Stat", "state-timeline": "State timeline",
               "table": "Table"}


def build_dashboard(uid: str) -> dict:
    spec = DASHBOARDS[uid]
    panels = spec["panels"]()
    rendered = [_panel(p, i + 1, x, y) for i, (p, (x, y)) in enumerate(zip(panels, _layout(panels)))]
    used = sorted({p.type for p in panels if p.type != "row"})
    return {
        "__inputs": [{"description": "Prometheus that scrapes sglang-exporter and SGLang's /metrics",
                      "label": "Prometheus", "name": "DS_PROMETHEUS", "pluginId": "prometheus",
                      "pluginName": "Prometheus", "type": "datasource"}],
        "__requires": [{"id": "grafana", "name": "Grafana", "type": "grafana", "version": "10.4.0"},
                       {"id": "prometheus", "name": "Prometheus", "type": "datasource", "version": "1.0.0"}]
                      + [{"id": t, "name": PANEL_TYPES[t], "type": "panel", "version": ""} for t in used],
        "annotations": {"list": []},
        "description": spec["description"],
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [{"asDropdown": False, "icon": "external link", "includeVars": True, "keepTime": True,
                   "tags": ["sglang-exporter"], "targetBlank": False, "title": "SGLang dashboards",
                   "tooltip": "", "type": "dashboards", "url": ""}],
        "panels": rendered,
        "refresh": "30s",
        "schemaVersion": 39,
        "tags": ["sglang", "sglang-exporter"],
        "templating": {"list": _variables()},
        "time": {"from": "now-3h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "title": spec["title"],
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }


def _json(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"




def _yaml(obj, header: str) -> str:
    return header + yaml.dump(obj, Dumper=BlockDumper, sort_keys=True, default_flow_style=False, width=120,
                               allow_unicode=True)


HEADER = "# Generated by `python -m exporter.generate.dashboards` from exporter/catalog.py. Do not edit.\n"
GRAFANA_PATH = "/var/lib/grafana/dashboards/sglang-exporter"
FOLDER = "SGLang"


def _provider() -> str:
    return _yaml({"apiVersion": 1, "providers": [{
        "name": "sglang-exporter", "orgId": 1, "folder": FOLDER, "type": "file", "disableDeletion": False,
        "allowUiUpdates": False, "updateIntervalSeconds": 30,
        "options": {"path": GRAFANA_PATH, "foldersFromFilesStructure": False}}]}, HEADER)


def _datasource() -> str:
    return _yaml({"apiVersion": 1, "datasources": [{
        "name": "Prometheus", "type": "prometheus", "uid": "prometheus", "access": "proxy",
        "url": "http://127.0.0.1:9090", "isDefault": True, "editable": False,
        "jsonData": {"timeInterval": "5s"}}]}, HEADER)


def _configmap(jsons: dict) -> str:
    return _yaml({"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": "sglang-exporter-dashboards",
                               "labels": {"grafana_dashboard": "1",
                                          "app.kubernetes.io/name": "sglang-exporter",
                                          "app.kubernetes.io/component": "dashboards"},
                               "annotations": {"grafana_folder": FOLDER,
                                               "k8s-sidecar-target-directory": FOLDER}},
                  "data": jsons}, HEADER)


def _steps_text(steps, unit: str) -> str:
    """[(None, a), (v1, b), (v2, c)] -> 'below v1: a; from v1: b; from v2: c'."""
    fmt = _gib if unit == "bytes" else _num
    parts = [f"below {fmt(steps[1][0])}: {steps[0][1]}"]
    parts += [f"from {fmt(v)}: {c}" for v, c in steps[1:]]
    return "; ".join(parts).replace("transparent", "no colour")


def _docs() -> str:
    lines = [
        "# Dashboards",
        "",
        "<!-- Generated by `python -m exporter.generate.dashboards` from the panel definitions in",
        "     exporter/generate/dashboards.py and the thresholds in exporter/catalog.py. Do not edit. -->",
        "",
        "Two Grafana dashboards ship in `dashboards/`, generated from the signal catalog:",
        "",
    ]
    for uid, spec in DASHBOARDS.items():
        lines.append(f"- `dashboards/{uid}.json` — **{spec['title']}** (uid `{uid}`): {spec['description']}")
    lines += [
        "",
        "## Installing",
        "",
        "- **Grafana UI**: Dashboards → New → Import, upload the JSON, pick your Prometheus data source for the",
        "  `DS_PROMETHEUS` input. The dashboards never hard-code a data-source uid: every panel uses the",
        "  `datasource` variable.",
        "- **Provisioning** (the local stack): mount `dashboards/provisioning/datasources.yaml` and",
        "  `dashboards/provisioning/dashboards.yaml` into `/etc/grafana/provisioning/{datasources,dashboards}/`,",
        f"  and the JSON files into `{GRAFANA_PATH}` (folder \"{FOLDER}\"). The data source points at",
        "  `http://127.0.0.1:9090` with `timeInterval: 5s` (the local stack's scrape interval); set it to your",
        "  scrape interval so `$__rate_interval` covers at least four scrapes.",
        "- **Kubernetes (kube-prometheus-stack)**: `kubectl apply --server-side -f "
        "dashboards/sglang-dashboards.configmap.yaml`",
        "  in a namespace the Grafana sidecar watches. The ConfigMap carries `grafana_dashboard: \"1\"` (the",
        "  sidecar's default label) and the folder annotations `grafana_folder` and `k8s-sidecar-target-directory`",
        f"  (\"{FOLDER}\"; set `grafana.sidecar.dashboards.folderAnnotation` to use one).",
        "",
        "## Variables",
        "",
        "| variable | values | used by |",
        "|---|---|---|",
        "| `datasource` | Prometheus data sources | every panel and query |",
        f"| `namespace` | `label_values({NS}_build_info, namespace)`; All = `.*` (also matches series without "
        "the label, e.g. bare VMs) | every query |",
        f"| `model` | `label_values({NS}_sglang_info, model)` | SGLang's own series (`model_name`), the "
        "servers table, and the `instance` list |",
        "| `instance` | hosts: the `instance` label without its port | every query, as "
        f"`instance=~\"{INSTANCE_MATCH}\"` |",
        "",
        "`instance` holds the host rather than host:port because the sidecar and the SGLang server it watches "
        "are two",
        "scrape targets on the same host (pod IP) with different ports: selecting a host shows both the",
        "exporter's series and SGLang's own `/metrics` series (latency histograms, token counters).",
        "",
        "## Conventions",
        "",
        "- Rates and increases use `$__rate_interval`; rates are taken per series before any `sum`; ratios are",
        "  sums divided by sums; latency quantiles are per server:",
        "  `histogram_quantile(q, sum by (le, namespace, instance) (rate(..._bucket[$__rate_interval])))`.",
        "- Batch gauges are reported per rank (`dp`, `tp`, `pp` labels). Only one TP rank per DP rank prints",
        "  batch lines, but to avoid counting a rank twice the dashboards take the max per DP rank and then sum",
        "  over DP ranks.",
        f"- Bands and lines come from the catalog: throughput-side values from the `{THROUGHPUT_PROFILE}` "
        f"profile, latency objectives from the `{LATENCY_PROFILE}` profile. The exporter's signals use the",
        "  profile it runs with.",
        "- SGLang metrics used, with the SGLang versions that export them:",
        "",
        "| SGLang metric | type | versions |",
        "|---|---|---|",
    ]
    for name, (kind, first, last) in SGLANG_METRICS.items():
        lines.append(f"| `{name}` | {kind} | {first} – {last or 'current'} |")
    for uid, spec in DASHBOARDS.items():
        lines += ["", f"## {spec['title']} (`{uid}`)"]
        for p in spec["panels"]():
            if p.type == "row":
                lines += ["", f"### {p.title}"]
                continue
            lines += ["", f"#### {p.title}", "",
                      f"*{p.type}, unit `{p.unit}`*", "",
                      f"- **Shows**: {p.shows}",
                      f"- **Good**: {p.good}",
                      f"- **When bad**: {p.bad}"]
            if p.steps and len(p.steps) > 1:
                lines.append(f"- **Thresholds**: {_steps_text(p.steps, p.unit)}")
            lines += ["", "```promql"]
            for i, t in enumerate(p.targets):
                if i:
                    lines.append("")
                lines.append(t.expr)
            lines.append("```")
    return "\n".join(lines) + "\n"


def render() -> dict:
    """Every generated file: path relative to the repository root -> content."""
    files = {}
    jsons = {}
    for uid in DASHBOARDS:
        text = _json(build_dashboard(uid))
        files[f"dashboards/{uid}.json"] = text
        jsons[f"{uid}.json"] = text
    files["dashboards/provisioning/dashboards.yaml"] = _provider()
    files["dashboards/provisioning/datasources.yaml"] = _datasource()
    files["dashboards/sglang-dashboards.configmap.yaml"] = _configmap(jsons)
    files["docs/dashboards.md"] = _docs()
    return files


def _root() -> Path:
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


def generate(out_dir: Path | str | None = None) -> list:
    """Write every generated file under `out_dir` (the repository root); return the paths written."""
    root = Path(out_dir) if out_dir is not None else _root()
    written = []
    for rel, text in render().items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def check(out_dir: Path | str | None = None) -> list:
    """Relative paths of generated files that are missing or differ from what `generate` would write."""
    root = Path(out_dir) if out_dir is not None else _root()
    stale = []
    for rel, text in render().items():
        path = root / rel
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(rel)
    return stale


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m exporter.generate.dashboards",
                                 description="Generate the Grafana dashboards and their docs from the catalog.")
    ap.add_argument("--out", default=None, help="repository root to write into (default: this checkout)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file is stale")
    args = ap.parse_args(argv)
    if args.check:
        stale = check(args.out)
        for rel in stale:
            print(f"stale: {rel}", file=sys.stderr)
        if stale:
            print("run: python -m exporter.generate.dashboards", file=sys.stderr)
        return 1 if stale else 0
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
