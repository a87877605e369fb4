"""The tuning signals read from the newer families of SGLang's /metrics (catalog_native): queue wait, prefix
reuse, KV memory pressure, speculative decoding acceptance and PD-disaggregation backlogs. Catalog entries like
any other (catalog.SIGNALS holds them); they live here to keep each module short. What each reads per source,
and from which release, is catalog_native.SIGNAL_METRICS and docs/signal-sources.md.
"""
from __future__ import annotations

from exporter.catalog_model import Advice, AlertSpec, Signal

_LPM = Advice("--schedule-policy", "check", "lpm",
              "Requests share prompt prefixes the cache already holds, but first-come-first-served order does not "
              "group them: longest-prefix-match scheduling runs the ones that reuse the cache first.")
_HICACHE = Advice("--enable-hierarchical-cache", "check", True,
                  "The GPU KV cache is full and its prefix cache has little left to evict: a host-memory tier "
                  "(HiCache) keeps long shared contexts without recomputing them.", relieves_pressure=True)

TUNING_SIGNALS: tuple[Signal, ...] = (
    Signal(
        id="queue_wait_high",
        title="Queue wait high",
        meaning="Requests wait in SGLang's queue longer than the objective before they are scheduled.",
        impact="Time to first token grows by the wait, whatever the GPU does once they run.",
        severity="warning",
        inputs=("sglang:queue_time_seconds", "sglang:queue_time_s"),
        formula="p99 of SGLang's queue_time_seconds histogram over the window > `p99_seconds`",
        value_unit="seconds",
        window_seconds=300,
        defaults={"p99_seconds": 1.0},
        profiles={"offline": None, "long-context": {"p99_seconds": 10.0}},
        advice=(Advice("request-rate", "decrease", None,
                       "More arrives than the server drains: requests wait before they run."),
                Advice("--max-running-requests", "check", None,
                       "If the KV cache has room, a higher cap admits waiting requests sooner.")),
        alert=AlertSpec("SGLangQueueWaitHigh", "10m", "Requests wait in SGLang's queue longer than the objective.",
                        "{{ $labels.instance }}: p99 queue wait is {{ $value | humanizeDuration }}. Advice: lower "
                        "the request rate or add capacity.", page=False),
        guide="(Online) a long queue raises latency: keep the queue wait under the latency objective.",
    ),
    Signal(
        id="prefix_reuse_missed",
        title="Prefix reuse missed",
        meaning="Requests queue under first-come-first-served scheduling while the prefix cache hit rate shows "
                "they share prefixes: longest-prefix-match order would reuse the cache more.",
        impact="Shared prefixes are recomputed or evicted before the requests that share them run.",
        severity="info",
        inputs=("server_args.schedule_policy", "sglang:cache_hit_rate", "sglang:num_queue_reqs"),
        formula="schedule policy fcfs (or not known) and, over the window, queue > 0 and cache hit rate >= "
                "`min_hit_rate` in >= `fraction` of the samples (at least `min_samples`)",
        value_unit="ratio",
        window_seconds=600,
        defaults={"min_hit_rate": 0.3, "fraction": 0.5, "min_samples": 3},
        profiles={},
        advice=(_LPM,),
        alert=AlertSpec("SGLangPrefixReuseMissed", "30m",
                        "SGLang queues requests that share prefixes in first-come order.",
                        "{{ $labels.instance }}: {{ $value | humanizePercentage }} of samples queue with a high "
                        "prefix cache hit rate. Advice: --schedule-policy lpm.", page=False),
        guide="Shared prefixes with a queue: `--schedule-policy lpm` reuses the prefix cache better than fcfs.",
    ),
    Signal(
        id="kv_pressure",
        title="KV memory pressure",
        meaning="The KV cache is nearly full and the prefix cache has little left to evict (or the scheduler "
                "pauses requests): new work must wait for memory or retract running requests.",
        impact="Retractions and queueing follow; long shared contexts are evicted and recomputed.",
        severity="warning",
        inputs=("sglang:token_usage", "sglang:kv_evictable_tokens", "sglang:max_total_num_tokens",
                "sglang:num_paused_reqs"),
        formula="share of samples with (token usage >= `min_usage` and evictable tokens < `max_evictable` x "
                "capacity) or paused requests > 0 >= `fraction` (at least `min_samples`)",
        value_unit="ratio",
        window_seconds=300,
        defaults={"min_usage": 0.95, "max_evictable": 0.05, "fraction": 0.5, "min_samples": 3},
        profiles={},
        advice=(Advice("--schedule-conservativeness", "increase", 1.3,
                       "Admitting fewer new requests per step leaves KV-cache room.", relieves_pressure=True),
                _HICACHE),
        alert=AlertSpec("SGLangKVPressure", "15m", "SGLang's KV cache is under memory pressure.",
                        "{{ $labels.instance }}: {{ $value | humanizePercentage }} of samples with a full KV cache "
                        "and little evictable. Advice: raise --schedule-conservativeness; for long shared "
                        "contexts consider HiCache.", page=False),
        guide="Long contexts with low hit rates under memory pressure: consider the hierarchical cache (HiCache).",
    ),
    Signal(
        id="spec_accept_low",
        title="Speculative acceptance low",
        meaning="Speculative decoding accepts few draft tokens per verify step: the draft model guesses poorly "
                "for this traffic.",
        impact="Drafting costs GPU time that acceptance does not repay; decoding may be slower than without it.",
        severity="info",
        inputs=("sglang:spec_accept_length", "sglang:spec_accept_rate"),
        formula="mean accept length over the window's samples (speculative decoding on: accept length > 0) < "
                "`min_accept_length` (at least `min_samples`)",
        value_unit="count",
        window_seconds=600,
        defaults={"min_accept_length": 1.5, "min_samples": 3},
        profiles={},
        advice=(Advice("--speculative-num-steps", "decrease", None,
                       "Fewer draft steps waste less work when most drafts are rejected."),
                Advice("--speculative-algorithm", "check", None,
                       "A draft model closer to the target (or none) suits this traffic better.")),
        alert=AlertSpec("SGLangSpecAcceptLow", "30m", "SGLang's speculative decoding accepts few draft tokens.",
                        "{{ $labels.instance }}: {{ $value | printf \"%.2f\" }} tokens accepted per verify step. "
                        "Advice: fewer speculative steps or another draft model.", page=False),
        guide="Speculative decoding pays off only when the accept length is well above 1.",
    ),
    Signal(
        id="pd_backlog",
        title="PD transfer backlog",
        meaning="In prefill/decode disaggregation, requests pile up waiting for KV memory, bootstrap or KV "
                "transfer between the prefill and decode servers.",
        impact="Requests are prefilled but wait to decode: time to first token and throughput suffer.",
        severity="warning",
        inputs=("sglang:num_decode_prealloc_queue_reqs", "sglang:num_decode_transfer_queue_reqs",
                "sglang:num_prefill_bootstrap_queue_reqs", "sglang:num_prefill_inflight_queue_reqs"),
        formula="share of samples with PD queue requests (prefill bootstrap + inflight + pre-allocation, decode "
                "pre-allocation + transfer) > `max_queue` >= `fraction` (at least `min_samples`)",
        value_unit="ratio",
        window_seconds=300,
        defaults={"max_queue": 64, "fraction": 0.5, "min_samples": 3},
        profiles={},
        advice=(Advice("--max-running-requests", "check", None,
                       "A decode server short of KV memory leaves prefilled requests waiting in pre-allocation: "
                       "give decode more memory or fewer prefill servers."),
                Advice("--disaggregation-transfer-backend", "check", None,
                       "A transfer queue that keeps growing points at the KV transfer path (network, backend).")),
        alert=AlertSpec("SGLangPDBacklog", "10m", "SGLang's PD disaggregation queues are backing up.",
                        "{{ $labels.instance }}: {{ $value | humanizePercentage }} of samples with a PD queue "
                        "backlog. Advice: check decode memory and the KV transfer path.", page=False),
        guide="(PD disaggregation) prefill and decode must keep pace: a growing transfer or pre-allocation "
              "queue means one side or the transfer path is the bottleneck.",
    ),
)
