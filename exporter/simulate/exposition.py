"""The simulated server's /metrics: the state its scheduler and tokenizer would report, exposed under the SGLang
family names the catalog's table (exporter/catalog/native.py) gives for the simulated release."""
from __future__ import annotations

import math
from functools import cache

from exporter import releases
from exporter.catalog.native import NATIVE_BY_NAME

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
                400.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2,
               0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
               400.0, 800.0)
QUEUE_TIME_BUCKETS = (0.0, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0,
                      80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 1200.0, 1800.0, 2400.0)
LATENCY_SIGMA = 0.35        # log-normal spread of simulated latencies around the scenario's median

# The SGLang release whose collector each log format family stands for (its /metrics families and their help).
FORMAT_RELEASE = {"0.3": "0.3.6.post3", "0.4.7": "0.4.7.post1", "0.5.8": "0.5.8.post1", "0.5.23": "0.5.23"}

# The values the simulator models (catalog_native names) -> where their number comes from: an attribute of a
# rank (_RankState, one series per DP rank, scheduler labels) or of the server (_Metrics, tokenizer labels for
# counters and histograms). Values not listed (hybrid pools, CUDA graph flags, utilization) are not simulated.
RANK_GAUGES = {
    "running": "running", "queue": "queue", "usage": "usage", "throughput": "throughput", "used_tokens": "tokens",
    "cache_hit_rate": "hit_rate", "new_token_ratio": "new_token_ratio", "kv_used_tokens": "tokens",
    "kv_available_tokens": "kv_available", "kv_evictable_tokens": "kv_evictable",
    "max_total_num_tokens": "capacity", "headroom_gb": "headroom_gb", "spec_accept_length": "spec_accept_length",
    "spec_accept_rate": "spec_accept_rate", "paused": "paused", "retracted_gauge": "retracted_last",
    "prefill_bootstrap_queue": "pd_prefill_bootstrap", "prefill_prealloc_queue": "pd_prefill_prealloc",
    "prefill_inflight_queue": "pd_prefill_inflight", "decode_prealloc_queue": "pd_decode_prealloc",
    "decode_transfer_queue": "pd_decode_transfer",
}
SCHEDULER_COUNTERS = {"retracted_requests": "retracted"}
RANK_COUNTERS = {"idle_seconds": "idle_seconds"}     # one series per DP rank (scheduler labels)
TOKENIZER_COUNTERS = {"prompt_tokens": "prompt_tokens", "generation_tokens": "generation_tokens",
                      "requests": "requests", "cached_tokens": "cached_tokens"}
HISTOGRAMS = {"ttft": "ttft", "itl": "itl", "e2e": "e2e", "queue_time": "queue_time"}
# Gauges the simulator's older formats never exported (kept as they were: these formats' label sets and
# families are what tests of old releases were written against).
NEWER_ONLY = frozenset(("new_token_ratio", "kv_used_tokens", "kv_available_tokens", "kv_evictable_tokens",
                        "max_total_num_tokens", "headroom_gb", "spec_accept_length", "spec_accept_rate", "paused",
                        "retracted_gauge", "prefill_bootstrap_queue", "prefill_prealloc_queue",
                        "prefill_inflight_queue", "decode_prealloc_queue", "decode_transfer_queue",
                        "cached_tokens", "queue_time"))


def _lognorm_cdf(x: float, median: float, sigma: float = LATENCY_SIGMA) -> float:
    if x <= 0:
        return 0.0
    return 0.5 * (1.0 + math.erf((math.log(x) - math.log(median)) / (sigma * math.sqrt(2.0))))


class Histogram:
    def __init__(self, buckets):
        self.buckets = buckets
        self.cum = [0.0] * len(buckets)
        self.count = 0.0
        self.sum = 0.0

    def observe_many(self, n: float, median: float):
        """Add n observations of a log-normal latency with this median (fractions allowed)."""
        if n <= 0:
            return
        for i, le in enumerate(self.buckets):
            self.cum[i] += n * _lognorm_cdf(le, median)
        self.count += n
        self.sum += n * median * math.exp(LATENCY_SIGMA ** 2 / 2)   # log-normal mean

    def family(self, name, doc, labels: dict):
        from prometheus_client.core import HistogramMetricFamily
        fam = HistogramMetricFamily(name, doc, labels=list(labels))
        count = round(self.count)
        # the tallies are fractional: each bucket is rounded at its share of the count exposed, so a bucket the
        # whole distribution lies under holds all of it (rounded apart, 77.5 observations were exposed as 78 with
        # 77 under 2 s: one phantom request between 2 and 4 s made a healthy p99 read 2.4 s for a scrape or two)
        scale = count / self.count if self.count else 0.0
        buckets = [(repr(float(le)), float(min(round(c * scale), count))) for le, c in zip(self.buckets, self.cum)]
        buckets.append(("+Inf", float(count)))
        fam.add_metric(list(labels.values()), buckets, float(self.sum))
        return fam


class RankState:
    """Scheduler gauges of one DP rank (as of its last stats report)."""

    def __init__(self):
        self.running = 0
        self.queue = 0
        self.usage = 0.0
        self.tokens = 0
        self.throughput = 0.0
        self.hit_rate = 0.0
        self.capacity = 0
        self.kv_available = 0
        self.kv_evictable = 0
        self.new_token_ratio = 0.0
        self.headroom_gb = 0.0
        self.spec_accept_length = 0.0
        self.spec_accept_rate = 0.0
        self.paused = 0
        self.retracted_last = 0
        self.pd_prefill_bootstrap = self.pd_prefill_prealloc = self.pd_prefill_inflight = 0
        self.pd_decode_prealloc = self.pd_decode_transfer = 0
        self.idle_seconds = 0.0       # scheduler_idle_seconds_total (0.5.20+)


class ServerState:
    """Counters and latency histograms of one server process (a restart starts a new one)."""

    def __init__(self, dp: int):
        self.ranks = [RankState() for _ in range(dp)]
        self.retracted = 0
        self.prompt_tokens = 0.0
        self.cached_tokens = 0.0
        self.generation_tokens = 0.0
        self.requests = 0.0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.queue_time = Histogram(QUEUE_TIME_BUCKETS)
        # http_responses_total (0.5.23+): (endpoint, method, status_code) -> responses
        self.responses: dict[tuple[str, str, str], float] = {}

    def respond(self, endpoint: str, method: str, status: int, n: float) -> None:
        key = (endpoint, method, str(status))
        self.responses[key] = self.responses.get(key, 0.0) + n


@cache
def _release_families(fmt: str) -> dict:
    """Short name (counters without `_total`) -> MetricFamily of the release a format stands for."""
    out = {}
    for fam in releases.metric_families(FORMAT_RELEASE[fmt]).values():
        out[fam.short[:-len("_total")] if fam.type == "counter" and fam.short.endswith("_total") else fam.short] = fam
    return out


def family_for(value: str, fmt: str):
    """(exposed name, help, MetricFamily) of the family feeding `value` in the format's release, or None when
    that release exports none of the value's families. The exposed name is the catalog's preferred spelling of
    that release: `sglang:` and, for a counter, without `_total` (prometheus_client adds it)."""
    defined = _release_families(fmt)
    for short in NATIVE_BY_NAME[value].families:
        fam = defined.get(short)
        if fam is not None:
            return "sglang:" + short, fam.help, fam
    return None


def families(fmt: str, state: ServerState, scheduler_labels, tokenizer_labels: dict, pid: int = 4242) -> list:
    """Every family of the simulated /metrics. `scheduler_labels(dp_rank)` gives a rank's label set; ranks
    before 0.4.10 carried none, so older formats expose DP rank 0 only."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    newest = fmt == "0.5.23"
    ranks = list(enumerate(state.ranks))
    if fmt not in ("0.5.8", "0.5.23"):
        ranks = ranks[:1]
    out: list[Metric] = []

    def emitted(value: str):
        if value in NEWER_ONLY and not newest:
            return None
        return family_for(value, fmt)

    for value, attr in RANK_GAUGES.items():
        found = emitted(value)
        if found is None:
            continue
        name, doc, _ = found
        per_process = NATIVE_BY_NAME[value].per_process
        first = {**scheduler_labels(0), **({"pid": str(pid)} if per_process else {})}
        fam = GaugeMetricFamily(name, doc, labels=list(first))
        for d, r in ranks:
            labels = {**scheduler_labels(d), **({"pid": str(pid + d)} if per_process else {})}
            fam.add_metric(list(labels.values()), float(getattr(r, attr)))
        out.append(fam)
    for value, attr in RANK_COUNTERS.items():
        found = emitted(value) if newest else None
        if found is None:
            continue
        name, doc, _ = found
        per_rank = CounterMetricFamily(name, doc, labels=list(scheduler_labels(0)))
        for d, r in ranks:
            per_rank.add_metric(list(scheduler_labels(d).values()), float(getattr(r, attr)))
        out.append(per_rank)
    for table, labels in ((SCHEDULER_COUNTERS, scheduler_labels(0)), (TOKENIZER_COUNTERS, tokenizer_labels)):
        for value, attr in table.items():
            found = emitted(value)
            if found is None:
                continue
            name, doc, fam_def = found
            lab = dict(labels)
            if "cache_source" in " ".join(fam_def.labels):    # 0.5.9+: cached tokens by where they were found
                lab["cache_source"] = "device"
            # total_retracted_reqs (0.4.9-0.5.2) counted since start-up in a gauge
            kind: type[CounterMetricFamily] | type[GaugeMetricFamily] = (
                CounterMetricFamily if fam_def.type == "counter" else GaugeMetricFamily)
            count_family = kind(name, doc, labels=list(lab))
            count_family.add_metric(list(lab.values()), float(round(getattr(state, attr))))
            out.append(count_family)
    found = family_for("responses", fmt)     # the releases with http_responses_total: no rank labels
    if found is not None and state.responses:
        name, doc, _ = found
        answered = CounterMetricFamily(name, doc, labels=["endpoint", "method", "status_code"])
        for key, n in sorted(state.responses.items()):
            answered.add_metric(list(key), float(round(n)))
        out.append(answered)
    for value, attr in HISTOGRAMS.items():
        found = emitted(value)
        if found is not None:
            name, doc, _ = found
            out.append(getattr(state, attr).family(name, doc, tokenizer_labels))
    return out
