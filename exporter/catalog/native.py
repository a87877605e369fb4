"""SGLang's own /metrics, as data: which native family feeds which value the exporter keeps, and which of those
values each signal needs when /metrics is its only source.

One table for every reader (the scraper, the signals' unknown reasons, alert and dashboard generation, the
simulator, the docs). A value names its families by their short name (without `sglang:` / `sglang_`, and a
counter without `_total`); the first family of a value that a scrape carries wins, so a value lists the
newest spelling first and every older one after it (renames across releases are one value with two families,
and `replaced_by` names which older spelling the newer one replaced). Which releases define each family is not
written here: `exporter.releases` has it, read from SGLang's own collector code of every release, and
tests/test_native_metrics.py checks this table against it. `native_families()` joins the two into one
lifecycle record per family (first and last release, deprecated, replaced_by): the table the generators and
the simulator read.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache

from exporter import releases


@dataclass(frozen=True)
class NativeValue:
    name: str         # the value's name in ScrapeResult / state ("queue", "retracted_requests")
    kind: str         # gauge (latest per rank) | counter (summed; state counts its increase) | histogram
    families: tuple   # SGLang's short family names, preferred first (counters without "_total")
    meaning: str
    # older family -> the family that replaced it (a rename across releases; both are in `families`)
    replaced_by: dict = field(default_factory=dict)
    # a gauge SGLang sets once per process (the series carry a `pid` label): the scraper sums them
    per_process: bool = False
    # a gauge whose series a label splits (startup_time_seconds{phase}): the scraper keeps every series
    # (ScrapeResult.gauge_series) besides the per-rank value
    per_series: bool = False


@dataclass(frozen=True)
class NativeFamily:
    """One SGLang family's lifecycle: the releases defining it and, once gone, what replaced it."""
    short: str            # without prefix (counters without `_total`)
    exposed: str          # as Prometheus sees it: `sglang:` + short (+ `_total` for a counter)
    value: str            # the NativeValue it feeds
    kind: str             # gauge | counter | histogram
    first: str | None     # first release defining it (None: no extracted release does)
    last: str | None      # last release defining it; None while the newest still does
    replaced_by: str = ""  # the family that took its place (short name), for a rename

    @property
    def deprecated(self) -> bool:
        """The newest SGLang release no longer exports it (renamed or dropped): read it for older releases only."""
        return self.last is not None


NATIVE_VALUES: tuple[NativeValue, ...] = (
    # per-rank scheduler gauges
    NativeValue("queue", "gauge", ("num_queue_reqs",), "requests in the waiting queue"),
    NativeValue("running", "gauge", ("num_running_reqs",), "requests in the running batch"),
    NativeValue("usage", "gauge", ("token_usage",), "KV pool usage, 0-1 (the fullest pool on 0.4.10+)"),
    NativeValue("full_usage", "gauge", ("full_token_usage",), "full-attention KV pool usage (hybrid models)"),
    NativeValue("swa_usage", "gauge", ("swa_token_usage",), "sliding-window KV pool usage (hybrid models)"),
    NativeValue("mamba_usage", "gauge", ("mamba_usage",), "mamba state pool usage (hybrid models)"),
    NativeValue("throughput", "gauge", ("gen_throughput",), "decode throughput, tokens/s"),
    NativeValue("cuda_graph", "gauge", ("is_cuda_graph",), "1 when the last decode batch ran a CUDA graph"),
    NativeValue("cache_hit_rate", "gauge", ("cache_hit_rate",), "prefix cache hit rate of the last prefill"),
    NativeValue("new_token_ratio", "gauge", ("new_token_ratio",),
                "the scheduler's estimate of the share of max_new_tokens still to come (rises after retractions)"),
    NativeValue("paused", "gauge", ("num_paused_reqs",), "requests paused since the last stats report",
                per_process=True),
    NativeValue("kv_used_tokens", "gauge", ("kv_used_tokens",), "KV tokens in use"),
    NativeValue("kv_available_tokens", "gauge", ("kv_available_tokens",), "KV tokens free"),
    NativeValue("kv_evictable_tokens", "gauge", ("kv_evictable_tokens",), "KV tokens held by the prefix cache "
                "that can be evicted"),
    NativeValue("max_total_num_tokens", "gauge", ("max_total_num_tokens",), "KV pool capacity in tokens"),
    NativeValue("used_tokens", "gauge", ("num_used_tokens",), "KV tokens in use (plotted, not judged)"),
    NativeValue("headroom_gb", "gauge", ("startup_available_gpu_memory_gb",),
                "GPU memory left after start-up, GiB (available_gpu_mem)"),
    NativeValue("weight_memory_gb", "gauge", ("weight_memory_usage_gb",), "GPU memory of the weights, GiB"),
    NativeValue("kv_cache_memory_gb", "gauge", ("kv_cache_memory_usage_gb",), "GPU memory of the KV cache, GiB"),
    NativeValue("utilization", "gauge", ("utilization",), "the scheduler's utilization estimate"),
    NativeValue("fwd_occupancy", "gauge", ("fwd_occupancy",), "share of time the GPU runs forward passes"),
    NativeValue("spec_accept_length", "gauge", ("spec_accept_length",),
                "speculative decoding: tokens accepted per verify step"),
    NativeValue("spec_accept_rate", "gauge", ("spec_accept_rate",),
                "speculative decoding: share of draft tokens accepted"),
    NativeValue("retracted_gauge", "gauge", ("num_retracted_reqs",),
                "requests retracted since the last stats report (0.5.2+; the only retraction metric of 0.5.2-0.5.6)",
                per_process=True),
    NativeValue("prefill_bootstrap_queue", "gauge", ("num_prefill_bootstrap_queue_reqs",),
                "PD prefill: requests waiting for the decode side's bootstrap"),
    NativeValue("prefill_prealloc_queue", "gauge", ("num_prefill_prealloc_queue_reqs",),
                "PD prefill: requests in the pre-allocation queue (0.4.6-0.5.11)"),
    NativeValue("prefill_inflight_queue", "gauge",
                ("num_prefill_inflight_queue_reqs", "num_prefill_infight_queue_reqs"),   # misspelt before 0.5.1
                "PD prefill: requests whose KV is being sent",
                replaced_by={"num_prefill_infight_queue_reqs": "num_prefill_inflight_queue_reqs"}),
    NativeValue("decode_prealloc_queue", "gauge", ("num_decode_prealloc_queue_reqs",),
                "PD decode: requests waiting for KV memory"),
    NativeValue("decode_transfer_queue", "gauge", ("num_decode_transfer_queue_reqs",),
                "PD decode: requests whose KV is being received"),
    # counters (summed over series; state takes their per-series increase)
    NativeValue("generation_tokens", "counter", ("generation_tokens",), "tokens generated"),
    NativeValue("prompt_tokens", "counter", ("prompt_tokens",), "prompt tokens prefilled"),
    NativeValue("cached_tokens", "counter", ("cached_tokens",), "prompt tokens served from the prefix cache"),
    NativeValue("requests", "counter", ("num_requests",), "requests finished (plotted, not judged)"),
    # the 0.4.9-0.5.2 gauge total_retracted_reqs counts since start-up, as a counter does
    NativeValue("retracted_requests", "counter", ("num_retracted_requests", "total_retracted_reqs"),
                "requests retracted", replaced_by={"total_retracted_reqs": "num_retracted_requests"}),
    # sglang:cuda_graph_passes_total{mode=decode_cuda_graph|decode_none|prefill_...} (0.5.7+), split by mode
    NativeValue("decode_graph_passes", "counter", ("cuda_graph_passes",), "decode forward passes run as a CUDA graph"),
    NativeValue("decode_eager_passes", "counter", ("cuda_graph_passes",), "decode forward passes run without one"),
    # sglang:http_responses_total{endpoint,method,status_code} (0.5.23+), inference (POST) responses only
    NativeValue("responses", "counter", ("http_responses",), "HTTP responses to inference (POST) requests"),
    NativeValue("responses_5xx", "counter", ("http_responses",), "of them, the 5xx (server error) responses"),
    NativeValue("aborted_requests", "counter", ("num_aborted_requests",), "requests aborted (client gone, "
                "aborted by the server or an abort call)"),
    NativeValue("transfer_failed", "counter", ("num_transfer_failed_reqs",), "PD: KV transfers that failed"),
    # histograms (buckets summed over series)
    NativeValue("ttft", "histogram", ("time_to_first_token_seconds",), "time to first token"),
    NativeValue("itl", "histogram", ("inter_token_latency_seconds", "time_per_output_token_seconds"),
                "inter-token latency (time_per_output_token_seconds before 0.4.4)",
                replaced_by={"time_per_output_token_seconds": "inter_token_latency_seconds"}),
    NativeValue("e2e", "histogram", ("e2e_request_latency_seconds",), "end-to-end request latency"),
    NativeValue("queue_time", "histogram", ("queue_time_seconds", "queue_time_s"),
                "time requests wait in the queue (queue_time_s in 0.5.2)",
                replaced_by={"queue_time_s": "queue_time_seconds"}),
)
# the serving signals' inputs (catalog_serving): failures and waste the scheduler counts itself
SERVING_VALUES: tuple[NativeValue, ...] = (
    NativeValue("idle_seconds", "counter", ("scheduler_idle_seconds",),
                "seconds a scheduler had no runnable or queued work (per scheduler)"),
    NativeValue("bootstrap_failed", "counter", ("num_bootstrap_failed_reqs",), "PD: bootstraps that failed"),
    NativeValue("prefill_retries", "counter", ("num_prefill_retries",), "PD: prefills retried"),
    NativeValue("kv_transfer_latency", "histogram", ("kv_transfer_latency_ms",),
                "PD: KV transfer latency, ms (a histogram from 0.5.10; a last-value gauge before)"),
    NativeValue("effective_tokens", "counter", ("prefill_effective_tokens",),
                "prefill tokens by mode: input (computed) and device_hit/host_hit/storage_hit (served by a tier)"),
    NativeValue("hicache_dropped", "counter", ("hicache_dropped_tokens",),
                "HiCache: device KV tokens destroyed without a host backup"),
    NativeValue("hicache_backup", "counter", ("hicache_backup_tokens",), "HiCache: tokens backed up to host memory"),
    NativeValue("dp_imbalance", "histogram", ("dp_attention_token_imbalance_ratio",),
                "DP attention: per step, max over mean tokens across the DP ranks (1 = balanced)"),
    NativeValue("dp_tokens", "counter", ("dp_attention_tokens",),
                "DP attention: tokens per DP rank (kind=scheduled: run there; kind=imbalance: the busiest's excess)"),
    NativeValue("startup_seconds", "gauge", ("startup_time_seconds", "engine_startup_time"),
                "start-up duration, s (per phase from 0.5.17; one value before)", per_series=True,
                replaced_by={"engine_startup_time": "startup_time_seconds"}),
    NativeValue("weight_update_seconds", "gauge", ("weight_load_duration_seconds",),
                "the latest update_weights_from_<source> call's wall time, s (per rank and source)", per_series=True),
)
NATIVE_VALUES = NATIVE_VALUES + SERVING_VALUES
NATIVE_BY_NAME = {v.name: v for v in NATIVE_VALUES}
RETRACTION_VALUES = ("retracted_requests", "retracted_gauge")

# What each signal needs from /metrics when it is the only source: all of the groups, one value of each group.
# None: the signal is judged from logs only (no release exposes what it reads).
SIGNAL_METRICS: dict[str, tuple | None] = {
    "queue_below_range": (("queue",),),
    "queue_above_range": (("queue",),),
    "kv_cache_underused": (("queue",), ("usage", "full_usage", "swa_usage", "mamba_usage")),
    "concurrency_capped": None,      # max_running_requests is in the log's capacity line only
    "retractions_frequent": (RETRACTION_VALUES,),
    "retraction_storm": (RETRACTION_VALUES,),
    "gpu_headroom_low": (("headroom_gb",),),
    "gpu_headroom_high": (("headroom_gb",),),
    "cuda_graph_off_small_batch": (("cuda_graph", "decode_eager_passes"), ("running",)),
    "oom_prefill": None,
    "oom_decode": None,
    "stalled": (("queue", "running"),),
    "latency_high": (("ttft", "itl", "e2e"),),
    "server_crashed": None,
    "startup_oom": None,
    "startup_stalled": None,
    "queue_wait_high": (("queue_time",),),
    "prefix_reuse_missed": (("queue",), ("cache_hit_rate",)),
    "kv_pressure": (("usage", "full_usage", "swa_usage", "mamba_usage", "paused"),
                    ("kv_evictable_tokens", "paused")),
    "spec_accept_low": (("spec_accept_length",),),
    "pd_backlog": (("prefill_bootstrap_queue", "prefill_prealloc_queue", "prefill_inflight_queue",
                    "decode_prealloc_queue", "decode_transfer_queue"),),
    "long_prompts_dominate": None,   # a batch's #new-token and chunked_prefill_size are in the log only
    "error_rate": (("responses", "aborted_requests"),),
    "errors_nearly_all": (("responses", "aborted_requests"),),
    # the serving signals (catalog_serving)
    "admission_blocked": (("queue",),),      # the cap: server_args or the signal's max_queued_requests
    "scheduler_idle_waiting": (("idle_seconds",), ("queue",)),
    "pd_transfer_failures": (("transfer_failed", "bootstrap_failed", "prefill_retries"),),
    "hicache_tokens_dropped": (("hicache_dropped",), ("effective_tokens", "hicache_backup")),
    "dp_attention_imbalance": (("dp_imbalance", "dp_tokens"),),
    "startup_regression": (("startup_seconds", "weight_update_seconds"),),
}
PD_QUEUES: tuple = SIGNAL_METRICS["pd_backlog"][0]  # type: ignore[index]  # (written just above)
# Signals no log line can feed: with logs as the only source they are unknown and unsupported. (Latency and
# queue wait are request timings; evictable tokens and paused requests are not in any batch line.)
METRICS_ONLY = frozenset(("latency_high", "queue_wait_high", "kv_pressure",
                          # the scheduler's idle clock, PD failures, HiCache drops, DP tokens: no log line has them
                          "scheduler_idle_waiting", "pd_transfer_failures", "hicache_tokens_dropped",
                          "dp_attention_imbalance"))


def native_metric_names(value: str) -> tuple[str, ...]:
    """The exposed `sglang:` names of a value's families (counters with `_total`, as Prometheus sees them)."""
    return tuple(_exposed_name(f) for f in NATIVE_BY_NAME[value].families)


@cache
def _exposed_name(short: str) -> str:
    span = family_span(short)
    if span is not None:
        for fam in releases.metric_families(span[0]).values():
            if fam.short in (short, short + "_total"):
                return "sglang:" + short + ("_total" if fam.type == "counter" else "")
    return "sglang:" + short


@cache
def native_families() -> tuple[NativeFamily, ...]:
    """Every SGLang family the exporter reads, with its lifecycle, in table order (newest spelling first)."""
    out, done = [], set()
    for v in NATIVE_VALUES:
        for short, exposed in zip(v.families, native_metric_names(v.name)):
            if short in done:       # one family feeding two values (cuda_graph_passes, split by mode)
                continue
            done.add(short)
            span = family_span(short)
            first, last = span if span is not None else (None, None)
            out.append(NativeFamily(short, exposed, v.name, v.kind, first, last, v.replaced_by.get(short, "")))
    return tuple(out)


@cache
def native_family(short: str) -> NativeFamily:
    """The lifecycle record of one family (short name, counters without `_total`)."""
    for fam in native_families():
        if fam.short == short:
            return fam
    raise KeyError(f"{short}: not an SGLang family the catalog reads (exporter/catalog/native.py)")


# Values fed by only some series of a family: value -> test of a series' labels
SERIES_FILTERS = {
    "decode_graph_passes": lambda labels: labels.get("mode", "").startswith("decode") and
    "cuda_graph" in labels.get("mode", ""),
    "decode_eager_passes": lambda labels: labels.get("mode", "").startswith("decode") and
    "cuda_graph" not in labels.get("mode", ""),
    # health checks and /metrics are GETs: a share of them would hide failing inference requests
    "responses": lambda labels: labels.get("method", "POST") == "POST",
    "responses_5xx": lambda labels: labels.get("method", "POST") == "POST" and
    labels.get("status_code", "").startswith("5"),
}


@cache
def family_values() -> dict[str, str]:
    """Short family name (counters without `_total`) -> the (first) value it feeds."""
    out: dict[str, str] = {}
    for v in NATIVE_VALUES:
        for f in v.families:
            out.setdefault(f, v.name)
    return out


def _defined_short(release: str) -> set[str]:
    out = set()
    for fam in releases.metric_families(release).values():
        short = fam.short
        out.add(short[:-len("_total")] if short.endswith("_total") else short)
    return out


@cache
def values_in(release: str) -> frozenset[str]:
    """The values `release`'s collector can feed (one of their families is defined there)."""
    defined = _defined_short(releases.resolve(release))
    return frozenset(v.name for v in NATIVE_VALUES if defined & set(v.families))


@cache
def family_span(short: str) -> tuple[str, str | None] | None:
    """(first, last or None) release defining a family (short name, counters without `_total`), over both of its
    spellings: a family that turned from a gauge into a counter (num_transfer_failed_reqs, 0.5.2) is one family
    defined from its first spelling's first release on, still current while its newer spelling is."""
    spans = [(first, releases.last_release("sglang:" + name)) for name in (short, short + "_total")
             if (first := releases.first_release("sglang:" + name)) is not None]
    if not spans:
        return None
    key = releases.version_key
    first = min((f for f, _ in spans), key=key)
    lasts = [last for _, last in spans if last is not None]
    return first, None if len(lasts) < len(spans) else max(lasts, key=key)


def _span_text(short: str) -> str:
    span = family_span(short)
    if span is None:
        return "no release"
    first, last = span
    return f"{first}+" if last is None else f"{first}-{last}"


# Families the scheduler sets at every stats report, together with num_queue_reqs: a scrape that carries
# num_queue_reqs and lacks one of them comes from a release before that family's first.
REPORTED_FAMILIES = ("num_queue_reqs", "num_running_reqs", "token_usage", "gen_throughput", "cache_hit_rate",
                     "total_retracted_reqs", "num_retracted_reqs", "num_paused_reqs")


def release_range(families_seen) -> tuple[str, str | None] | None:
    """The releases an exposition can come from, given the SGLang families it carries (short names): (oldest,
    newest or None for "up to the newest"), or None when it carries no family any release defines. A family
    a release defines bounds it from below (and its removal from above); a family of REPORTED_FAMILIES that
    is missing while num_queue_reqs is there bounds it from above."""
    key, every = releases.version_key, releases.releases()
    lo = hi = None
    for short in families_seen:
        span = family_span(short)
        if span is None:
            continue
        first, last = span
        if lo is None or key(first) > key(lo):
            lo = first
        if last is not None and (hi is None or key(last) < key(hi)):
            hi = last
    if lo is None:
        return None
    if "num_queue_reqs" in families_seen:
        for short in REPORTED_FAMILIES:
            span = family_span(short)
            if short in families_seen or span is None or key(span[0]) <= key(lo):
                continue
            before = every[every.index(span[0]) - 1]
            if (span[1] is None or key(span[1]) >= key(lo)) and (hi is None or key(before) < key(hi)):
                hi = before
    return lo, hi


def missing_metrics(signal: str, present, families_seen=()) -> str:
    """Why `signal` cannot be judged from /metrics alone, or "" when the scrape carries what it needs.

    `present`: the values the last scrape fed; `families_seen`: the SGLang families it carried (to name the
    releases it may come from)."""
    groups = SIGNAL_METRICS.get(signal)
    if groups is None:
        return "read from SGLang's logs only: no release exports it on /metrics"
    for group in groups:
        if any(v in present for v in group):
            continue
        fams = [(f, n) for v in group for f, n in zip(NATIVE_BY_NAME[v].families, native_metric_names(v))]
        needs = ", ".join(f"{n} ({_span_text(f)})" for f, n in fams)
        shorts = [f for f, _ in fams]
        rng = release_range(families_seen)
        if rng is not None:
            lo, hi = rng
            if not any(_exposable(f, lo, hi) for f in shorts):
                where = f"SGLang {lo}" + ("" if hi == lo else f" to {hi or 'newest'}")
                return f"not exported by this release ({where}): needs one of {needs}"
        return f"not in SGLang's /metrics (yet): needs one of {needs}"
    return ""


def _exposable(short: str, lo: str, hi: str | None) -> bool:
    """Whether some release in lo..hi defines the family."""
    span = family_span(short)
    if span is None:
        return False
    first, last = span
    key = releases.version_key
    return key(first) <= key(hi or releases.newest()) and (last is None or key(last) >= key(lo))


def signal_sources() -> dict[str, dict]:
    """Per signal: what it reads from logs, from /metrics (exposed names) and the releases whose /metrics can
    feed it alone ("0.5.11+", "none"). For docs/signal-sources.md."""
    from exporter.catalog import SIGNALS
    out = {}
    all_releases = releases.releases()
    for s in SIGNALS:
        logs = tuple(i for i in s.inputs if not i.startswith("sglang"))
        groups = SIGNAL_METRICS.get(s.id)
        if groups is None:
            out[s.id] = {"log": logs, "metrics": (), "releases": "none"}
            continue
        # a value in two groups (paused requests in kv_pressure) is named once
        names = tuple(dict.fromkeys(n for g in groups for v in g for n in native_metric_names(v)))
        ok = [r for r in all_releases if all(set(g) & values_in(r) for g in groups)]
        out[s.id] = {"log": logs, "metrics": names, "releases": _ranges(ok, all_releases)}
    return out


def _ranges(ok: list, every: list) -> str:
    """"0.5.11+" / "0.4.9.post6-0.5.2" / "none" for a set of releases."""
    if not ok:
        return "none"
    parts, start, prev = [], None, None
    for r in every:
        if r in ok:
            start = start or r
            prev = r
        elif start:
            parts.append(f"{start}-{prev}")
            start = None
    if start:
        parts.append(f"{start}+")
    return ", ".join(parts)
