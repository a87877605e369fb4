"""The serving signals: a server that is up but does not serve (admission blocked at its own queue cap, a
scheduler idle while requests wait), PD transfers that fail, HiCache tiers that drop tokens, DP-attention ranks
out of balance, and start-ups that got slower than the server's own previous ones. Catalog entries like any
other (catalog.SIGNALS holds them); they live here to keep each module short. What each reads per source, and
from which release, is catalog_native.SIGNAL_METRICS and docs/signal-sources.md.
"""
from __future__ import annotations

from exporter.catalog.model import Advice, AlertSpec, Signal

SERVING_SIGNALS: tuple[Signal, ...] = (
    Signal(
        id="admission_blocked",
        title="Admission blocked",
        meaning="SGLang's waiting queue sits at the server's own --max-queued-requests: every new request past "
                "the cap is rejected (HTTP 503, \"The request queue is full\") while the server looks up.",
        impact="Clients get errors instead of answers; `up` and the health check stay green.",
        severity="critical",
        inputs=("decode_batch.queue_req", "prefill_batch.queue_req", "server_args.max_queued_requests",
                "sglang:num_queue_reqs"),
        formula="a scheduler's waiting queue >= `fill` x the cap in >= `fraction` of the window's batch samples (at "
                "least `min_samples`); the cap is --max-queued-requests from the server_args line, else "
                "`max_queued_requests` set here (0: not set; no release exports the cap on /metrics); a server "
                "without a cap is never blocked",
        value_unit="ratio",
        window_seconds=120,
        defaults={"fill": 0.95, "fraction": 0.8, "min_samples": 3, "max_queued_requests": 0},
        profiles={},
        advice=(Advice("request-rate", "decrease", None,
                       "More arrives than the server drains: past the cap every request is turned away."),
                Advice("--max-queued-requests", "check", None,
                       "A cap far below what the server drains in the clients' timeout rejects work it could "
                       "serve; raise it only if the queue wait stays inside the latency objective.")),
        alert=AlertSpec("SGLangAdmissionBlocked", "2m",
                        "SGLang rejects requests: its queue is pinned at --max-queued-requests.",
                        "{{ $labels.instance }}: the waiting queue was at its --max-queued-requests cap in "
                        "{{ $value | humanizePercentage }} of samples; new requests are rejected with 503. "
                        "Advice: shed load or add replicas.", page=True),
        guide="The queue is bounded by --max-queued-requests: at the cap the server rejects new requests.",
    ),
    Signal(
        id="scheduler_idle_waiting",
        title="Scheduler idle while requests wait",
        meaning="SGLang's scheduler counts itself idle (sglang:scheduler_idle_seconds_total grows at wall-clock "
                "speed) while its waiting queue holds requests: the engine looks healthy and does nothing.",
        impact="Queued requests never start; the server answers health checks and serves nobody.",
        severity="critical",
        inputs=("sglang:scheduler_idle_seconds_total", "sglang:num_queue_reqs"),
        formula="a scheduler idle >= `min_idle` of the time its queue held requests over the window (its idle "
                "seconds over the scrape intervals that found requests queued), with the queue non-empty in >= "
                "`fraction` of the scrapes (at least `min_samples`); a second witness, from the scheduler's own "
                "clock, for `stalled`",
        value_unit="ratio",
        window_seconds=180,
        defaults={"min_idle": 0.9, "fraction": 0.8, "min_samples": 3},
        profiles={},
        advice=(),
        alert=AlertSpec("SGLangSchedulerIdleWithQueue", "3m",
                        "SGLang's scheduler is idle while requests wait.",
                        "{{ $labels.instance }}: a scheduler was idle {{ $value | humanizePercentage }} of the "
                        "time while requests waited. See the runbook: dump the scheduler's stacks, then restart.",
                        page=True),
        family="stall",
        guide="",
    ),
    Signal(
        id="pd_transfer_failures",
        title="PD transfers failing",
        meaning="In prefill/decode disaggregation, KV bootstraps or transfers between the prefill and decode "
                "servers fail.",
        impact="The failed requests are aborted (or retried, adding latency); time to first token and error "
               "rate grow.",
        severity="warning",
        inputs=("sglang:num_transfer_failed_reqs_total", "sglang:num_bootstrap_failed_reqs_total",
                "sglang:num_prefill_retries_total", "sglang:kv_transfer_latency_ms"),
        formula="failed bootstraps + failed transfers per minute over the window >= `per_minute`; prefill retries "
                "and the p99 KV transfer latency (histogram, 0.5.10+) are named in the detail",
        value_unit="per_minute",
        window_seconds=300,
        defaults={"per_minute": 1.0},
        profiles={},
        advice=(Advice("--disaggregation-transfer-backend", "check", None,
                       "Failing transfers point at the KV transfer path: the backend, its NICs (--disaggregation-"
                       "ib-device) and the network between prefill and decode."),
                Advice("--disaggregation-bootstrap-port", "check", None,
                       "Failing bootstraps: the decode side cannot reach the prefill server's bootstrap port.")),
        alert=AlertSpec("SGLangPDTransferFailures", "5m", "SGLang's PD disaggregation transfers are failing.",
                        "{{ $labels.instance }}: {{ $value | printf \"%.1f\" }} KV bootstraps or transfers failed "
                        "per minute. Advice: check the transfer backend and the network between prefill and "
                        "decode.", page=False),
        guide="(PD disaggregation) the KV transfer between prefill and decode must succeed: failures abort requests.",
    ),
    Signal(
        id="hicache_tokens_dropped",
        title="HiCache drops tokens",
        meaning="The hierarchical cache destroys device KV tokens without a host backup: the host tier cannot take "
                "what the GPU evicts, so those prefixes are computed again when they return.",
        impact="Prefix reuse falls to what the GPU alone holds; long shared contexts are prefilled again.",
        severity="warning",
        inputs=("sglang:hicache_dropped_tokens_total", "sglang:hicache_backup_tokens_total",
                "sglang:prefill_effective_tokens_total", "sglang:cached_tokens_total"),
        formula="tokens dropped over tokens dropped + backed up to host (or, without the backup counter, over "
                "prefill tokens) in the window >= `max_drop_share`, with at least `min_tokens` dropped; the hit "
                "rate per tier (device/host/storage, prefill_effective_tokens_total{mode} or "
                "cached_tokens_total{cache_source}) is named in the detail",
        value_unit="ratio",
        window_seconds=600,
        defaults={"max_drop_share": 0.05, "min_tokens": 1000},
        profiles={},
        advice=(Advice("--hicache-ratio", "increase", None,
                       "A larger host pool (relative to the device pool) keeps what the GPU evicts instead of "
                       "dropping it.", relieves_pressure=True),
                Advice("--hicache-write-policy", "check", "write_through",
                       "write_through backs every token up as it is computed, so eviction has nothing left to "
                       "drop (more host-memory traffic).")),
        alert=AlertSpec("SGLangHiCacheTokensDropped", "15m",
                        "SGLang's hierarchical cache drops KV tokens without a host backup.",
                        "{{ $labels.instance }}: {{ $value | humanizePercentage }} of evicted tokens were dropped "
                        "instead of backed up. Advice: raise --hicache-ratio, or --hicache-write-policy "
                        "write_through.", page=False),
        guide="Long contexts with low hit rates under memory pressure: the hierarchical cache (HiCache) keeps "
              "evicted prefixes in host memory; size its host pool so it can take what the GPU evicts.",
    ),
    Signal(
        id="dp_attention_imbalance",
        title="DP attention out of balance",
        meaning="With DP attention every step waits for the busiest DP rank: one rank gets far more tokens than "
                "the mean, and the others idle in the collective.",
        impact="Throughput falls towards one rank's; the GPUs of the other ranks wait.",
        severity="warning",
        inputs=("sglang:dp_attention_token_imbalance_ratio", "sglang:dp_attention_tokens_total"),
        formula="the median per-step imbalance ratio (max over mean tokens across DP ranks; 1 = balanced) over the "
                "window >= `max_ratio` (at least `min_steps` steps), or, without the histogram, the busiest DP "
                "rank's scheduled tokens over the mean >= `max_ratio`; the busiest rank is named",
        value_unit="count",
        window_seconds=600,
        defaults={"max_ratio": 1.5, "min_steps": 100},
        profiles={},
        advice=(Advice("--load-balance-method", "check", None,
                       "The router spreads requests unevenly over the DP ranks: a method that counts tokens "
                       "(or shortest queue) evens them out."),),
        alert=AlertSpec("SGLangDPAttentionImbalance", "15m", "SGLang's DP-attention ranks are out of balance.",
                        "{{ $labels.instance }}: the busiest DP rank runs {{ $value | printf \"%.2f\" }}x the mean "
                        "tokens per step. Advice: check the load-balance method and prompt-length skew.",
                        page=False),
        guide="",
    ),
    Signal(
        id="startup_regression",
        title="Start-up slower than before",
        meaning="The latest start-up (or weight update) of this server took much longer than its previous ones: "
                "weights downloaded instead of read from a cache, a slower disk or a new compile step.",
        impact="Restarts and scale-ups take longer to serve; a crash-looping server is down for longer.",
        severity="warning",
        inputs=("server_args", "load_weight.elapsed_seconds", "server_ready", "sglang:startup_time_seconds",
                "sglang:engine_startup_time", "sglang:weight_load_duration_seconds"),
        formula="the latest duration >= `factor` x the median of up to `history` previous ones and at least "
                "`min_seconds` longer, for the start-up (server_args line to ready line; startup_time_seconds' "
                "largest phase, or engine_startup_time), weight loading (load weight begin to end) and "
                "weight updates (weight_load_duration_seconds); fires for the window after that start",
        value_unit="count",
        window_seconds=3600,
        defaults={"factor": 1.5, "min_seconds": 60.0, "history": 5},
        profiles={},
        advice=(Advice("--model-loader-extra-config", "check", None,
                       "A start-up that now downloads or converts weights: cache them on a volume (HF_HOME), "
                       "pre-shard them, or check the storage they are read from."),),
        alert=AlertSpec("SGLangStartupRegression", "0m", "SGLang's latest start-up was much slower than before.",
                        "{{ $labels.instance }}: the latest start-up took {{ $value | printf \"%.1f\" }}x its "
                        "previous ones. Advice: check whether weights were downloaded instead of cached.",
                        page=False),
        guide="",
    ),
)

# What docs/signal-sources.md says of each serving signal's sources beyond its table row: where an input is
# missing from a source or a release, and what then feeds it.
SOURCE_NOTES: dict[str, str] = {
    "admission_blocked": "No release exports --max-queued-requests on `/metrics` (the flag exists from 0.4.9.post6; "
                         "0.4.9.post6-0.5.2 default to no cap, later ones to None): the cap comes from the log's "
                         "`server_args` line, else from `signals.admission_blocked.max_queued_requests` in the "
                         "configuration (which also renders the native `SGLangNativeAdmissionBlocked` rule with "
                         "`generate --config`). Without either it is unknown; a server without a cap is never "
                         "blocked.",
    "scheduler_idle_waiting": "`sglang:scheduler_idle_seconds_total` (0.5.20+) only; older releases leave it "
                              "unknown, and `stalled` (batch progress) is then the only witness.",
    "pd_transfer_failures": "The failure counters appear with their first failure (before it, unknown: nothing to "
                            "rate). The KV transfer latency in the detail is the `sglang:kv_transfer_latency_ms` "
                            "histogram of 0.5.10+ (a last-value gauge before, not read).",
    "hicache_tokens_dropped": "Dropped tokens from 0.5.18; the hit rate per tier from "
                              "`prefill_effective_tokens_total{mode}` (0.5.18+), else "
                              "`cached_tokens_total{cache_source}` (0.5.9+, per finished request).",
    "dp_attention_imbalance": "0.5.22+ only: the imbalance histogram, and `dp_attention_tokens_total{kind}` to name "
                              "the busiest DP rank.",
    "startup_regression": "The log feeds every release (server_args line to ready line; load weight begin to end, "
                          "or its `elapsed` from 0.5.9). `/metrics`: `startup_time_seconds{phase}` (0.5.17+, the "
                          "largest phase is taken), `engine_startup_time` (0.5.2-0.5.16), and "
                          "`weight_load_duration_seconds{source}` (0.5.13.post1+), which times weight *updates* "
                          "(update_weights_from_*), not the start-up's load. No native rule: a restarted pod is a "
                          "new series, so PromQL has no previous start of the same server to compare with. The "
                          "history lives in the sidecar's memory (lost when the sidecar restarts).",
}
