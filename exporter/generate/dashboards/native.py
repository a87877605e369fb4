"""The detail dashboard's panels for the newer families of SGLang's /metrics (prefix cache, queue wait, hybrid
KV pools, memory pressure, speculative decoding, PD disaggregation); each says which releases export it."""
from __future__ import annotations

from exporter.catalog.native import PD_QUEUES
from exporter.generate.dashboards.model import Limits, Panel, Target, num, row
from exporter.generate.dashboards.queries import (
    EXPORTER_SELECTOR,
    PER_NATIVE_RANK,
    PER_SERVER,
    absent_value_text,
    latency_targets,
    native,
    newest_or_older,
    rate_per_server,
    sglang,
)

HYBRID_POOLS = (("full_usage", "full", "full attention"), ("swa_usage", "swa", "sliding window"),
                ("mamba_usage", "mamba", "mamba state"))     # value, legend, what the pool holds
PD_QUEUE_LEGENDS = {"prefill_bootstrap_queue": "prefill bootstrap", "prefill_prealloc_queue": "prefill pre-allocation",
                    "prefill_inflight_queue": "prefill in-flight", "decode_prealloc_queue": "decode pre-allocation",
                    "decode_transfer_queue": "decode transfer"}


def _prefix_cache(limits: Limits) -> Panel:
    min_hit_rate = limits.defaults("prefix_reuse_missed")["min_hit_rate"]
    return Panel(
        "Prefix cache hit rate", "timeseries", "percentunit", min=0, max=1,
        shows=f"Share of prompt tokens served from the prefix cache ({sglang('cached_tokens')} over "
              f"{sglang('prompt_tokens')}) and SGLang's {sglang('cache_hit_rate')} gauge (the last prefill; "
              "zeroed by decode reports on 0.4.4-0.5.19).",
        good="high for chat and shared-prompt traffic; near zero is normal for unique prompts.",
        bad=f"above {num(min_hit_rate)} with a queue under fcfs: try --schedule-policy lpm (prefix_reuse_missed).",
        targets=[Target(f"{rate_per_server(sglang('cached_tokens'))}\n/\n{rate_per_server(sglang('prompt_tokens'))}",
                        "{{instance}} cached / prompt tokens"),
                 Target(f"max by ({PER_SERVER}) ({native(sglang('cache_hit_rate'))})",
                        "{{instance}} cache_hit_rate gauge")],
        steps=[(None, "transparent"), (min_hit_rate, "blue")], style="dashed",
        no_value=absent_value_text("cached_tokens", "cache_hit_rate"))


def _queue_wait(limits: Limits) -> Panel:
    objective = limits.defaults("queue_wait_high")["p99_seconds"]
    return Panel(
        "Queue wait", "timeseries", "s", min=0,
        shows=f"How long requests wait in SGLang's queue ({sglang('queue_time')}), with the online objective "
              f"({num(objective)} s p99, queue_wait_high).",
        good="p99 below the objective line.",
        bad="lower the request rate or add capacity; check the queue and KV panels for the cause.",
        targets=latency_targets(limits, "queue_time"),
        steps=[(None, "transparent"), (objective, "red")], style="dashed",
        no_value=absent_value_text("queue_time"))


def _hybrid_pools(limits: Limits) -> Panel:
    pressure = limits.defaults("kv_pressure")
    names = ", ".join(f"{holds} ({sglang(value)})" for value, _, holds in HYBRID_POOLS)
    return Panel(
        "KV pools per rank (hybrid models)", "timeseries", "percentunit", min=0, max=1,
        shows=f"Usage of each KV pool of a hybrid model per rank: {names}. The exporter judges the fullest.",
        good=f"the fullest pool near {num(pressure['min_usage'])} under load.",
        bad="one pool full while the others have room: that pool limits concurrency.",
        targets=[Target(f"max by ({PER_NATIVE_RANK}) ({native(sglang(value))})",
                        f"{{{{instance}}}} {legend} dp{{{{dp_rank}}}} tp{{{{tp_rank}}}}")
                 for value, legend, _ in HYBRID_POOLS],
        no_value=absent_value_text(*(value for value, _, _ in HYBRID_POOLS), condition="hybrid models only"))


def _memory_pressure(limits: Limits) -> Panel:
    pressure = limits.defaults("kv_pressure")
    return Panel(
        "KV memory pressure", "timeseries", "short", min=0,
        shows=f"Evictable share of the KV pool ({sglang('kv_evictable_tokens')} / {sglang('max_total_num_tokens')}), "
              f"the scheduler's new-token ratio ({sglang('new_token_ratio')}, rises after retractions) and paused "
              f"requests ({sglang('paused')}).",
        good=f"an evictable share above {num(pressure['max_evictable'])}, no paused requests.",
        bad="little evictable with a full pool, or paused requests: kv_pressure; raise --schedule-conservativeness, "
            "consider HiCache for long shared contexts.",
        targets=[Target(f"sum by ({PER_SERVER}) ({native(sglang('kv_evictable_tokens'))})\n/\n"
                        f"sum by ({PER_SERVER}) ({native(sglang('max_total_num_tokens'))})",
                        "{{instance}} evictable share"),
                 Target(f"max by ({PER_SERVER}) ({native(sglang('new_token_ratio'))})", "{{instance}} new_token_ratio"),
                 Target(f"sum by ({PER_SERVER}) ({native(sglang('paused'))})", "{{instance}} paused")],
        no_value=absent_value_text("kv_evictable_tokens", "max_total_num_tokens", "new_token_ratio", "paused"))


def _speculation(limits: Limits) -> Panel:
    min_accept_length = limits.defaults("spec_accept_low")["min_accept_length"]
    return Panel(
        "Speculative decoding acceptance", "timeseries", "short", min=0,
        shows=f"Tokens accepted per verify step ({sglang('spec_accept_length')}) and the accepted share of draft "
              f"tokens ({sglang('spec_accept_rate')}), with the spec_accept_low threshold "
              f"({num(min_accept_length)}).",
        good=f"accept length well above {num(min_accept_length)}.",
        bad="fewer speculative steps, or a draft model closer to the target.",
        targets=[Target(f"avg by ({PER_SERVER}) ({native(sglang('spec_accept_length'))} > 0)",
                        "{{instance}} accept length"),
                 Target(f"avg by ({PER_SERVER}) ({native(sglang('spec_accept_rate'))} > 0)",
                        "{{instance}} accept rate")],
        steps=[(None, "red"), (min_accept_length, "transparent")], style="dashed",
        no_value=absent_value_text("spec_accept_length", "spec_accept_rate", condition="speculative decoding on"))


def _pd_queues(limits: Limits) -> Panel:
    max_queue = limits.defaults("pd_backlog")["max_queue"]
    return Panel(
        "PD disaggregation queues", "timeseries", "short", min=0,
        shows="Requests in the prefill/decode disaggregation queues: prefill bootstrap, pre-allocation (up to "
              "0.5.11) and in-flight (KV being sent), decode pre-allocation (waiting for KV memory) and transfer "
              f"(KV being received), with the pd_backlog threshold ({num(max_queue)}).",
        good="short queues that drain.",
        bad="pre-allocation growing: the decode side lacks KV memory; transfer growing: the KV transfer path is "
            "the bottleneck.",
        # every spelling a release used (in-flight was misspelt before 0.5.1), as the pd_backlog signal reads them
        targets=[Target(newest_or_older(value, f"sum by ({PER_SERVER}) ({{metric}})"),
                        f"{{{{instance}}}} {PD_QUEUE_LEGENDS[value]}") for value in PD_QUEUES],
        steps=[(None, "transparent"), (max_queue, "orange")], style="dashed",
        no_value=absent_value_text(*PD_QUEUES, condition="PD disaggregation only"))


def _errors(limits: Limits) -> Panel:
    objective = limits.defaults("error_rate")["max_ratio"]
    outage = limits.defaults("errors_nearly_all")["min_ratio"]
    responses, aborted, finished = sglang("responses"), sglang("aborted_requests"), sglang("requests")
    post, server_error = 'method="POST"', 'status_code=~"5.."'

    def rate(name: str, *matchers: str) -> str:
        # http_responses_total has no model_name label: the model variable cannot select it
        inner = ", ".join((EXPORTER_SELECTOR, *matchers))
        return f"sum by ({PER_SERVER}) (rate({name}{{{inner}}}[$__rate_interval]))"
    return Panel(
        "Failed requests", "timeseries", "percentunit", min=0, max=1,
        shows=f"Share of inference (POST) responses that were server errors ({responses}, 5xx; SGLang 0.5.23+) and "
              f"share of requests aborted ({aborted} over {finished}; 0.4.7+), with the error_rate objective "
              f"({num(objective)}: a ticket) and the errors_nearly_all line ({num(outage)}: a page). Health "
              f"checks are GETs and not counted; {responses} has no model_name label, so its line ignores the "
              "model selection.",
        good=f"below {num(objective)}; aborts that follow clients going away are normal.",
        bad="5xx above the objective: read SGLang's log for `Error in request:` lines (the cause); near 1: an "
            "outage while the process is up.",
        targets=[Target(f"{rate(responses, post, server_error)}\n/\n{rate(responses, post)}",
                        "{{instance}} 5xx share"),
                 Target(f"{rate_per_server(aborted)}\n/\n{rate_per_server(finished)}", "{{instance}} aborted share")],
        steps=[(None, "transparent"), (objective, "orange"), (outage, "red")], style="dashed",
        no_value=absent_value_text("responses", "aborted_requests", "requests"))


def native_panels(limits: Limits) -> list[Panel]:
    return [row("SGLang /metrics: cache, queue wait, pools, speculation, PD, errors"),
            _prefix_cache(limits), _queue_wait(limits), _hybrid_pools(limits), _memory_pressure(limits),
            _speculation(limits), _pd_queues(limits), _errors(limits)]
