"""The tuning signals beyond the guide's batch-line rules: queue wait, prefix reuse, KV memory pressure,
speculative decoding acceptance, PD-disaggregation backlogs (the newer families of SGLang's /metrics, and where
batch lines print the same, the log) and long prompts cut at the chunk size (the log's prefill lines). Catalog
entries like any other (catalog.SIGNALS holds them); they live here to keep each module short. What each reads
per source, and from which release, is catalog_native.SIGNAL_METRICS and docs/signal-sources.md.
"""
from __future__ import annotations

from exporter.catalog.model import Advice, AlertSpec, Signal

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
        inputs=("server_args.schedule_policy", "prefill_batch.cached_token", "prefill_batch.new_token",
                "prefill_batch.queue_req", "sglang:cache_hit_rate", "sglang:num_queue_reqs"),
        formula="schedule policy fcfs (or not known) and, over the window, queue > 0 and cache hit rate >= "
                "`min_hit_rate` in >= `fraction` of the samples (at least `min_samples`); a sample is a scrape "
                "(hit rate: cached over prompt tokens since the last one, else the cache_hit_rate gauge) or, "
                "without /metrics samples, a prefill batch line (#cached-token over #new-token + #cached-token)",
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
        inputs=("decode_batch.spec_accept_length", "sglang:spec_accept_length", "sglang:spec_accept_rate"),
        formula="mean accept length over the window's samples (speculative decoding on: accept length > 0) < "
                "`min_accept_length` (at least `min_samples`); samples are scrapes or, without them, decode "
                "batch lines (`accept len`)",
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
        inputs=("prefill_batch.bootstrap_req", "prefill_batch.inflight_req", "decode_batch.prealloc_req",
                "decode_batch.transfer_req", "sglang:num_decode_prealloc_queue_reqs",
                "sglang:num_decode_transfer_queue_reqs", "sglang:num_prefill_bootstrap_queue_reqs",
                "sglang:num_prefill_inflight_queue_reqs"),
        formula="share of samples with PD queue requests (prefill bootstrap + inflight + pre-allocation, decode "
                "pre-allocation + transfer) > `max_queue` >= `fraction` (at least `min_samples`); samples are "
                "scrapes (the server's sum) or, without them, one scheduler's batch lines (every release's "
                "spelling of those queues)",
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
    Signal(
        id="long_prompts_dominate",
        title="Long prompts dominate latency",
        meaning="Most prefill batches are cut at --chunked-prefill-size while requests wait: long prompts are "
                "prefilled a chunk per step, and the requests behind them wait for every chunk.",
        impact="Time to first token grows with prompt length, for the long prompts and for everything queued "
               "behind them.",
        severity="warning",
        inputs=("prefill_batch.new_token", "prefill_batch.queue_req", "memory_config.chunked_prefill_size",
                "server_args.chunked_prefill_size", "sglang:time_to_first_token_seconds",
                "sglang:queue_time_seconds"),
        formula="share of prefill batches with #new-token >= `chunk_fraction` x chunked_prefill_size >= "
                "`fraction` (at least `min_samples`), while latency is high: p99 time to first token > "
                "`ttft_p99_seconds` or p99 queue wait > `queue_p99_seconds` (/metrics), or, with logs only, "
                "requests queued (#queue-req > 0) in >= `fraction` of those chunk-size batches",
        value_unit="ratio",
        window_seconds=300,
        defaults={"chunk_fraction": 0.9, "fraction": 0.5, "min_samples": 5, "ttft_p99_seconds": 2.0,
                  "queue_p99_seconds": 1.0},
        profiles={"offline": None, "long-context": {"ttft_p99_seconds": 10.0, "queue_p99_seconds": 10.0}},
        advice=(Advice("--chunked-prefill-size", "increase", None,
                       "Larger chunks prefill a long prompt in fewer steps, so it and the requests behind it "
                       "start sooner (each step needs more activation memory)."),),
        alert=AlertSpec("SGLangLongPromptsDominate", "15m",
                        "Long prompts chunked at --chunked-prefill-size dominate SGLang's latency.",
                        "{{ $labels.instance }}: {{ $value | humanizePercentage }} of prefill batches are cut at "
                        "the chunk size while requests wait. Advice: increase --chunked-prefill-size.",
                        page=False),
        # (the guide's other step, piecewise CUDA graph, is on by default from 0.5.10 and its flag is gone from
        # the newest releases: not advised)
        guide="High latency when long prompts dominate: increase `--chunked-prefill-size`.",
    ),
)
