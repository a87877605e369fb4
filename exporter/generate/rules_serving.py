"""The native rules (over SGLang's own /metrics) of the serving signals (catalog_serving), for servers without
the sidecar: (alert name, signal, expression, summary, description) for rules.native_alerts to build.

Each joins only series that share their labels: a scheduler's idle counter with its own queue gauge (the same
scheduler labels), the others aggregated to the server first (`group`: the join labels and the kept SGLang
labels). Start-up regressions are judged by the sidecar only: a restarted pod is a new series, so PromQL has no
"previous start" of the same server to compare with.
"""
from __future__ import annotations

from exporter import catalog
from exporter.catalog.native import native_metric_names
from exporter.generate.promql import by, fmt_duration, num, sel
from exporter.generate.settings import RuleSettings

QUEUE, = native_metric_names("queue")
IDLE, = native_metric_names("idle_seconds")
TRANSFER_FAILED, = native_metric_names("transfer_failed")
BOOTSTRAP_FAILED, = native_metric_names("bootstrap_failed")
DROPPED, = native_metric_names("hicache_dropped")
BACKUP, = native_metric_names("hicache_backup")
IMBALANCE, = native_metric_names("dp_imbalance")
INF = 'le="+Inf"'       # a histogram's +Inf bucket: its count, as a counter the linter accepts


def serving_native_specs(settings: RuleSettings) -> list[tuple[str, str, str, str, str]]:
    group = by(settings.join_labels + settings.native_keep_labels)
    sglang = settings.sglang_selector
    out = []

    def window_of(sid):
        return settings.window(fmt_duration(catalog.SIGNALS_BY_ID[sid].window_seconds))

    t = settings.thresholds_in_force("admission_blocked")
    if t and t["max_queued_requests"]:
        # the cap is not on /metrics: rendered only when the deployment sets it (generate --config)
        w, cap = window_of("admission_blocked"), t["fill"] * t["max_queued_requests"]
        out.append(("SGLangNativeAdmissionBlocked", "admission_blocked",
                    f"max by ({group}) (\n  quantile_over_time({num(1 - t['fraction'])}, {QUEUE}{sel(sglang)}[{w}])\n)"
                    f" >= {num(cap)}\n",
                    "SGLang rejects requests: its queue is pinned at --max-queued-requests.",
                    "{{ $labels.instance }}: a scheduler's waiting queue stayed at {{ $value | printf \"%.0f\" }} "
                    f"over {w} (--max-queued-requests {num(t['max_queued_requests'])}): new requests are "
                    "rejected with 503. Advice: shed load or add replicas."))
    t = settings.thresholds_in_force("scheduler_idle_waiting")
    if t:
        w = window_of("scheduler_idle_waiting")
        out.append(("SGLangNativeSchedulerIdleWithQueue", "scheduler_idle_waiting",
                    f"max by ({group}) (\n"
                    f"  # one scheduler's idle clock against its own queue: both carry that scheduler's labels\n"
                    f"  rate({IDLE}{sel(sglang)}[{w}]) >= {num(t['min_idle'])}\n"
                    f"  and\n  min_over_time({QUEUE}{sel(sglang)}[{w}]) > 0\n)\n",
                    "SGLang's scheduler is idle while requests wait.",
                    "{{ $labels.instance }}: a scheduler was idle {{ $value | humanizePercentage }} of the last "
                    + w + " while its queue held requests. See the runbook: dump the scheduler's stacks, then "
                    "restart."))
    t = settings.thresholds_in_force("pd_transfer_failures")
    if t:
        w = window_of("pd_transfer_failures")
        transfer = f"sum by ({group}) (rate({TRANSFER_FAILED}{sel(sglang)}[{w}]))"
        bootstrap = f"sum by ({group}) (rate({BOOTSTRAP_FAILED}{sel(sglang)}[{w}]))"
        out.append(("SGLangNativePDTransferFailures", "pd_transfer_failures",
                    # a failure counter appears with its first failure: either may be missing, so each term
                    # falls back to 0 x the other (one rate() over both names would give two series one labelset)
                    f"(\n  ({transfer}\n   or 0 * {bootstrap})\n"
                    f"  +\n  ({bootstrap}\n   or 0 * {transfer})\n) * 60 >= {num(t['per_minute'])}\n",
                    "SGLang's PD disaggregation transfers are failing.",
                    "{{ $labels.instance }}: {{ $value | printf \"%.1f\" }} KV bootstraps or transfers failed per "
                    "minute over " + w + ". Advice: check the transfer backend and the network between prefill "
                    "and decode."))
    t = settings.thresholds_in_force("hicache_tokens_dropped")
    if t:
        w = window_of("hicache_tokens_dropped")
        dropped = f"sum by ({group}) (rate({DROPPED}{sel(sglang)}[{w}]))"
        out.append(("SGLangNativeHiCacheTokensDropped", "hicache_tokens_dropped",
                    f"(\n  {dropped}\n  /\n  ({dropped} + sum by ({group}) (rate({BACKUP}{sel(sglang)}[{w}])))\n)"
                    f" >= {num(t['max_drop_share'])}\n"
                    f"and on ({group})\n"
                    f"sum by ({group}) (increase({DROPPED}{sel(sglang)}[{w}])) >= {num(t['min_tokens'])}\n",
                    "SGLang's hierarchical cache drops KV tokens without a host backup.",
                    "{{ $labels.instance }}: {{ $value | humanizePercentage }} of evicted tokens were dropped "
                    "instead of backed up over " + w + ". Advice: raise --hicache-ratio, or "
                    "--hicache-write-policy write_through."))
    t = settings.thresholds_in_force("dp_attention_imbalance")
    if t:
        w = window_of("dp_attention_imbalance")
        out.append(("SGLangNativeDPAttentionImbalance", "dp_attention_imbalance",
                    f"histogram_quantile(0.5,\n  sum by (le, {group}) (rate({IMBALANCE}_bucket{sel(sglang)}[{w}]))\n)"
                    f" >= {num(t['max_ratio'])}\n"
                    f"and on ({group})\n"
                    f"sum by ({group}) (increase({IMBALANCE}_bucket{sel(sglang, INF)}[{w}]))"
                    f" >= {num(t['min_steps'])}\n",
                    "SGLang's DP-attention ranks are out of balance.",
                    "{{ $labels.instance }}: the median step ran {{ $value | printf \"%.2f\" }}x the mean tokens "
                    "on its busiest DP rank over " + w + ". Advice: check the load-balance method and "
                    "prompt-length skew."))
    return out
