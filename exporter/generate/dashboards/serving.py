"""The detail dashboard's serving row (catalog_serving): admission at the queue cap, the scheduler's idle clock
against its queue, PD transfer failures, the prefix cache hit rate per tier with HiCache's dropped tokens,
DP-attention balance per rank, and start-up times; each says which releases export it."""
from __future__ import annotations

from exporter.generate.dashboards.model import Limits, Panel, Target, num, row
from exporter.generate.dashboards.queries import (
    PER_SERVER,
    absent_value_text,
    exported,
    native,
    newest_or_older,
    rate_per_server,
    sglang,
)

SIGNAL_RATIO = "sglang_exporter_signal_value_ratio"


def _admission(limits: Limits) -> Panel:
    p = limits.defaults("admission_blocked")
    return Panel(
        "Admission at --max-queued-requests", "timeseries", "percentunit", min=0, max=1,
        shows="Share of batch samples whose scheduler queue sat at the server's --max-queued-requests (from its "
              "server_args line, or the admission_blocked.max_queued_requests setting), as the sidecar judges "
              f"admission_blocked (fires at {num(p['fraction'])}).",
        good="zero: the queue never reaches the cap.",
        bad="near 1: every request past the cap is rejected with 503 while the server looks up; shed load or "
            "add replicas.",
        targets=[Target(f"max by ({PER_SERVER}) ({exported(SIGNAL_RATIO)[:-1]}, signal=\"admission_blocked\"}})",
                        "{{instance}} at the cap")],
        steps=[(None, "transparent"), (p["fraction"], "red")], style="dashed",
        no_value="the sidecar has not judged it: --max-queued-requests not known (server_args not seen, "
                 "admission_blocked.max_queued_requests not set)")


def _idle(limits: Limits) -> Panel:
    p = limits.defaults("scheduler_idle_waiting")
    return Panel(
        "Scheduler idle time vs queue", "timeseries", "percentunit", min=0, max=1,
        shows=f"Share of wall time each server's most idle scheduler had no work ({sglang('idle_seconds')}); "
              "read it beside the queue panel.",
        good="idle only when the queue is empty.",
        bad=f"idle above {num(p['min_idle'])} while requests wait: the engine does nothing with work queued "
            "(scheduler_idle_waiting); dump its stacks, restart.",
        targets=[Target(f"max by ({PER_SERVER}) (rate({native(sglang('idle_seconds'))}[$__rate_interval]))",
                        "{{instance}} idle share")],
        steps=[(None, "transparent"), (p["min_idle"], "red")], style="dashed",
        no_value=absent_value_text("idle_seconds"))


def _pd_failures(limits: Limits) -> Panel:
    p = limits.defaults("pd_transfer_failures")
    return Panel(
        "PD transfer failures", "timeseries", "cpm", min=0,
        shows="Failed KV transfers and bootstraps and retried prefills per minute (prefill/decode "
              f"disaggregation), with the pd_transfer_failures threshold ({num(p['per_minute'])}/min).",
        good="none.",
        bad="failures: check the transfer backend, its NICs and the bootstrap port between prefill and decode.",
        targets=[Target(f"60 * {rate_per_server(sglang(value))}", f"{{{{instance}}}} {legend}")
                 for value, legend in (("transfer_failed", "transfers failed"),
                                       ("bootstrap_failed", "bootstraps failed"),
                                       ("prefill_retries", "prefills retried"))],
        steps=[(None, "transparent"), (p["per_minute"], "orange")], style="dashed",
        no_value=absent_value_text("transfer_failed", "bootstrap_failed", condition="PD disaggregation only; a "
                                   "counter appears with its first failure"))


def _tiers(limits: Limits) -> Panel:
    p = limits.defaults("hicache_tokens_dropped")
    effective = native(sglang("effective_tokens"))
    return Panel(
        "Prefix cache hit rate per tier", "timeseries", "percentunit", min=0, max=1,
        shows=f"Share of prefill tokens served by each cache tier ({sglang('effective_tokens')}{{mode}}: device "
              "GPU, host memory, storage) and the share of evicted tokens HiCache dropped without a host backup "
              f"({sglang('hicache_dropped')}).",
        good="host and storage hits where HiCache is on; nothing dropped.",
        bad=f"dropped above {num(p['max_drop_share'])} of evictions (hicache_tokens_dropped): raise "
            "--hicache-ratio, or --hicache-write-policy write_through.",
        targets=[Target(f"sum by ({PER_SERVER}, mode) (rate({effective[:-1]}, mode=~\".+_hit\"}}[$__rate_interval]))"
                        f"\n/ ignoring (mode) group_left\n"
                        f"sum by ({PER_SERVER}) (rate({effective}[$__rate_interval]))", "{{instance}} {{mode}}"),
                 Target(f"{rate_per_server(sglang('hicache_dropped'))}\n/\n"
                        f"({rate_per_server(sglang('hicache_dropped'))} + "
                        f"{rate_per_server(sglang('hicache_backup'))})", "{{instance}} dropped share")],
        steps=[(None, "transparent"), (p["max_drop_share"], "orange")], style="dashed",
        no_value=absent_value_text("effective_tokens", "hicache_dropped"))


def _dp_balance(limits: Limits) -> Panel:
    p = limits.defaults("dp_attention_imbalance")
    imbalance = sglang("dp_imbalance")
    return Panel(
        "DP attention balance", "timeseries", "short", min=0,
        shows=f"Median per-step imbalance ({imbalance}: max over mean tokens across DP ranks, 1 = balanced) and "
              f"each DP rank's scheduled tokens per second ({sglang('dp_tokens')}{{kind=\"scheduled\"}}).",
        good="a ratio near 1 and ranks close together.",
        bad=f"a ratio above {num(p['max_ratio'])} (dp_attention_imbalance): the busiest rank sets every step's "
            "pace; check the load-balance method.",
        targets=[Target(f"histogram_quantile(0.5, sum by (le, {PER_SERVER}) "
                        f"(rate({native(imbalance + '_bucket')}[$__rate_interval])))", "{{instance}} median ratio"),
                 Target(f"max by ({PER_SERVER}, dp_rank) "
                        f"(rate({native(sglang('dp_tokens'))[:-1]}, kind=\"scheduled\"}}[$__rate_interval]))",
                        "{{instance}} DP{{dp_rank}} tokens/s")],
        steps=[(None, "transparent"), (p["max_ratio"], "orange")], style="dashed",
        no_value=absent_value_text("dp_imbalance", "dp_tokens", condition="DP attention only"))


def _startup(limits: Limits) -> Panel:
    p = limits.defaults("startup_regression")
    return Panel(
        "Start-up and weight-update time", "timeseries", "s", min=0,
        shows="How long the running server took to start (the largest phase of "
              f"{sglang('startup_seconds')}, or engine_startup_time before 0.5.17) and its latest weight update "
              f"({sglang('weight_update_seconds')}); the sidecar compares each start with the previous ones.",
        good="each restart about as long as the last.",
        bad=f"{num(p['factor'])}x the previous starts (startup_regression): weights downloaded instead of cached, "
            "slower storage or a new compile step.",
        targets=[Target(newest_or_older("startup_seconds", f"max by ({PER_SERVER}) ({{metric}})"),
                        "{{instance}} start-up"),
                 Target(f"max by ({PER_SERVER}) ({native(sglang('weight_update_seconds'))})",
                        "{{instance}} weight update")],
        no_value=absent_value_text("startup_seconds", "weight_update_seconds"))


def serving_panels(limits: Limits) -> list[Panel]:
    return [row("Serving: admission, idle scheduler, PD failures, cache tiers, DP balance, start-up"),
            _admission(limits), _idle(limits), _pd_failures(limits), _tiers(limits), _dp_balance(limits),
            _startup(limits)]
