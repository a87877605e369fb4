"""The detail dashboard: its batch and throughput, KV cache, memory and CUDA graph and latency panels, then the
native-metric, per-rank and exporter-health sections."""
from __future__ import annotations

from exporter.catalog import NS, SIGNALS_BY_ID
from exporter.catalog.native import native_metric_names
from exporter.generate.dashboards.health import exporter_health_panels, per_rank_panels
from exporter.generate.dashboards.model import DashboardSpec, Limits, Panel, Target, dashed, gib, num, row
from exporter.generate.dashboards.native import native_panels
from exporter.generate.dashboards.objectives import objective_panels
from exporter.generate.dashboards.queries import (
    EXPORTER_SELECTOR,
    PER_SERVER,
    absent_text,
    absent_value_text,
    exported,
    latency_targets,
    rank_max,
    rate_per_server,
    sglang,
    sglang_family,
)
from exporter.generate.dashboards.serving import serving_panels

UID = "sglang-detail"
TITLE = "SGLang / Detail"
DESCRIPTION = ("Batch, KV cache, memory, CUDA graph, latency, per-rank and exporter-health views of SGLang servers, "
               "with the tuning guide's bands. Generated from the signal catalog; do not edit by hand.")


def window_minutes(signal_id: str) -> str:
    return f"{SIGNALS_BY_ID[signal_id].window_seconds / 60:g}"


def batch_panels(limits: Limits) -> list[Panel]:
    capped = limits.signal("concurrency_capped")
    queue_floor = limits.signal("queue_below_range")["min_queue"]
    queue_ceiling = limits.signal("queue_above_range")["max_queue"]
    max_running = exported(f"{NS}_max_running_requests")
    requests = sglang_family("num_requests")
    return [
        row("Throughput and batch"),
        Panel("Running requests vs cap", "timeseries", "short",
              shows="Running requests per DP rank (#running-req), the server's --max-running-requests, and "
                    f"{num(capped['running_fraction'] * 100)} % of it (where concurrency_capped starts counting).",
              good="running below the cap, or at the cap only while the KV cache is full.",
              bad="at the cap while requests queue and token usage stays below "
                  f"{num(capped['max_usage'])}: raise --max-running-requests.",
              targets=[Target(f"max by ({PER_SERVER}, dp) ({exported(f'{NS}_running_requests')})",
                              "{{instance}} dp{{dp}}"),
                       Target(f"max by ({PER_SERVER}) ({max_running})", "{{instance}} max_running_requests"),
                       Target(f"{num(capped['running_fraction'])} * max by ({PER_SERVER}) ({max_running})",
                              "{{instance}} capped threshold")],
              overrides=[dashed("/max_running_requests$/", "red"), dashed("/capped threshold$/", "orange")]),
        Panel("Queue", "timeseries", "short",
              shows="Requests waiting (#queue-req), summed over DP ranks, with the offline healthy band "
                    f"{num(queue_floor)}-{num(queue_ceiling)} (queue_below_range / queue_above_range).",
              good=f"offline batch: inside the green band {num(queue_floor)}-{num(queue_ceiling)}; online "
                   "serving: near 0 (the band does not apply).",
              bad=f"offline below {num(queue_floor)}: the client submits too slowly, raise the request rate; "
                  f"above {num(queue_ceiling)}: queueing delay and scheduling overhead, lower the rate or add "
                  "servers.",
              targets=[Target(rank_max(f"{NS}_queue_requests"), "{{instance}}")],
              steps=[(None, "orange"), (queue_floor, "green"), (queue_ceiling, "orange")], style="dashed+area",
              min=0),
        Panel("Decode throughput", "timeseries", "short",
              shows="Generated tokens per second (gen throughput of each decode line), summed over DP ranks; "
                    "and SGLang's generated and prompt token rates from its counters.",
              good="flat at the level your benchmark reached; the log and counter views agree.",
              bad="drops while requests are pending: look at retractions, OOMs and the stall panel below.",
              targets=[Target(rank_max(f"{NS}_gen_throughput_tokens_per_second"), "{{instance}} log"),
                       Target(rate_per_server(sglang("generation_tokens")), "{{instance}} generated (counter)"),
                       Target(rate_per_server(sglang("prompt_tokens")), "{{instance}} prompt (counter)")],
              min=0),
        Panel("Request rate", "timeseries", "reqps",
              shows=f"Requests finished per second, from SGLang's {requests} counter.",
              good="matches the load you send.",
              bad="lower than the send rate with a growing queue: the server is saturated.",
              targets=[Target(rate_per_server(requests), "{{instance}}")],
              min=0, no_value=absent_text(requests)),
    ]


def kv_cache_panels(limits: Limits) -> list[Panel]:
    usage_floor = limits.signal("kv_cache_underused")["min_usage"]
    retractions_frequent = limits.signal("retractions_frequent")["per_minute"]
    retraction_storm = limits.signal("retraction_storm")["per_minute"]
    retracted_counter = sglang("retracted_requests")
    return [
        row("KV cache"),
        Panel("KV cache token usage", "timeseries", "percentunit", min=0, max=1,
              shows="KV cache pool usage (token usage), the fullest rank, with the guide's "
                    f"{num(usage_floor)} target.",
              good=f"above the {num(usage_floor)} line under load.",
              bad=f"below {num(usage_floor)} while the queue is non-empty (kv_cache_underused): decrease "
                  "--schedule-conservativeness (e.g. 0.3); pinned at 1 with retractions: increase it.",
              targets=[Target(f"max by ({PER_SERVER}) ({exported(f'{NS}_token_usage_ratio')})", "{{instance}}")],
              steps=[(None, "transparent"), (usage_floor, "green")], style="dashed"),
        Panel("Retractions per minute", "timeseries", "cpm", min=0,
              shows="KV-cache-full retraction events per minute: each retraction signal's value over its own "
                    f"window (the numbers the alerts judge, as the API and the report show them) and the rate of "
                    f"the counter, with the acceptable line ({num(retractions_frequent)}/min) and the storm line "
                    f"({num(retraction_storm)}/min).",
              good=f"at or below {num(retractions_frequent)} per minute.",
              bad=f"above {num(retractions_frequent)}: increase --schedule-conservativeness (e.g. 1.3); at "
                  f"{num(retraction_storm)} or more (retraction storm, pages): also lower --max-running-requests "
                  "and check --mem-fraction-static.",
              targets=[*(Target(f"60 * max by ({PER_SERVER}) ({NS}_signal_value_per_second{{{EXPORTER_SELECTOR}, "
                                f"signal=\"{sid}\"}})", f"{{{{instance}}}} {sid} ({window_minutes(sid)} min)")
                         for sid in ("retractions_frequent", "retraction_storm")),
                       Target(f"60 * sum by ({PER_SERVER}) (rate({exported(f'{NS}_retractions_total')}"
                              "[$__rate_interval]))", "{{instance}} rate")],
              steps=[(None, "transparent"), (retractions_frequent, "yellow"), (retraction_storm, "red")],
              style="dashed"),
        Panel("Requests retracted per minute", "timeseries", "cpm", min=0,
              shows="Requests evicted and re-queued per minute (sum of #retracted_reqs from the log), and "
                    f"SGLang's own counter {retracted_counter} (0.5.7+).",
              good="near 0.",
              bad="many requests per event: each retraction throws away a lot of decode work; raise "
                  "--schedule-conservativeness.",
              targets=[Target(f"60 * sum by ({PER_SERVER}) (rate({exported(f'{NS}_retracted_requests_total')}"
                              "[$__rate_interval]))", "{{instance}} log"),
                       Target(f"60 * {rate_per_server(retracted_counter)}", "{{instance}} counter")]),
    ]


def memory_panels(limits: Limits) -> list[Panel]:
    headroom_floor = limits.signal("gpu_headroom_low")["min_bytes"]
    headroom_ceiling = limits.signal("gpu_headroom_high")["max_bytes"]
    cuda_graph = limits.signal("cuda_graph_off_small_batch")
    stall_seconds = limits.signal("stalled")["stall_seconds"]
    return [
        row("Memory and CUDA graph"),
        Panel("GPU memory headroom", "timeseries", "bytes", min=0,
              shows=f"GPU memory left after start-up: the GPU with the least left, and each rank, with the "
                    f"{gib(headroom_floor)}-{gib(headroom_ceiling)} band of the guide (per GPU).",
              good=f"inside the green band {gib(headroom_floor)}-{gib(headroom_ceiling)}.",
              bad=f"below {gib(headroom_floor)}: decrease --mem-fraction-static (OOM risk); above "
                  f"{gib(headroom_ceiling)}: increase it in steps of 0.01 (more KV cache).",
              targets=[Target(f"min by ({PER_SERVER}) ({exported(f'{NS}_gpu_headroom_bytes')})", "{{instance}}"),
                       Target(f"min by ({PER_SERVER}, rank) ({exported(f'{NS}_rank_gpu_headroom_bytes')})",
                              "{{instance}} {{rank}}")],
              steps=[(None, "red"), (headroom_floor, "green"), (headroom_ceiling, "yellow")], style="dashed+area"),
        Panel("CUDA graph per DP rank", "state-timeline", "none",
              shows="Whether the last decode batch of each DP rank ran with CUDA graph.",
              good="on, at least whenever the batch is small (at most --cuda-graph-max-bs requests).",
              bad="off for small batches: raise --cuda-graph-max-bs, make sure --disable-cuda-graph is not set, "
                  "or try another attention backend.",
              targets=[Target(f"min by ({PER_SERVER}, dp) ({exported(f'{NS}_cuda_graph_enabled')})",
                              "{{instance}} dp{{dp}}")],
              mappings=[(0, "off", "orange"), (1, "on", "green")], steps=[(None, "green")]),
        Panel("Small batches without CUDA graph", "timeseries", "short", min=0,
              shows="Decode samples in the window that ran without CUDA graph although the batch was at most "
                    f"cuda_graph_max_bs (default {num(cuda_graph['default_max_bs'])}) — the value of "
                    "cuda_graph_off_small_batch.",
              good=f"below {num(cuda_graph['min_samples'])}.",
              bad="raise --cuda-graph-max-bs (costs some GPU memory), check CUDA graph is not disabled.",
              targets=[Target(f"max by ({PER_SERVER}) ({NS}_signal_value_number{{{EXPORTER_SELECTOR}, "
                              "signal=\"cuda_graph_off_small_batch\"})", "{{instance}}")],
              steps=[(None, "transparent"), (cuda_graph["min_samples"], "orange")], style="dashed"),
        Panel("OOMs, watchdog timeouts and restarts", "timeseries", "short", min=0,
              shows="Out-of-memory events by phase, scheduler watchdog timeouts and SGLang (re)starts, counted "
                    "per rate interval.",
              good="all zero.",
              bad="OOM in prefill: decrease --chunked-prefill-size (4096 or 2048); in decode: lower "
                  "--max-running-requests; both: lower --mem-fraction-static. Watchdog timeouts and restarts: "
                  "read SGLang's log around that time.",
              targets=[Target(f"sum by ({PER_SERVER}, phase) (increase({exported(f'{NS}_oom_events_total')}"
                              "[$__rate_interval]))", "{{instance}} OOM {{phase}}"),
                       Target(f"sum by ({PER_SERVER}) (increase({exported(f'{NS}_watchdog_timeouts_total')}"
                              "[$__rate_interval]))", "{{instance}} watchdog timeout"),
                       Target(f"sum by ({PER_SERVER}) (increase({exported(f'{NS}_server_restarts_total')}"
                              "[$__rate_interval]))", "{{instance}} restart")]),
        Panel("Time since last batch", "timeseries", "s", min=0,
              shows="Seconds since the last prefill or decode batch line, with the stall limit "
                    f"({num(stall_seconds)} s).",
              good="a few seconds while serving (decode lines come every 40 decode steps); it may grow while "
                   "idle.",
              bad=f"above {num(stall_seconds)} s with requests pending: the scheduler is hung (stalled pages); "
                  "read the log for a watchdog timeout or exception and restart the server.",
              targets=[Target(f"max by ({PER_SERVER}) ({exported(f'{NS}_last_batch_age_seconds')})",
                              "{{instance}}")],
              steps=[(None, "transparent"), (stall_seconds, "red")], style="dashed"),
    ]


def latency_panels(limits: Limits) -> list[Panel]:
    objectives = limits.latency("latency_high")
    itl_newest, itl_older = native_metric_names("itl")
    return [
        row("Latency (SGLang histograms)"),
        Panel("Time to first token", "timeseries", "s", min=0,
              shows=f"Per-server TTFT quantiles and mean from {sglang('ttft')} (rate per bucket, then summed per "
                    f"server), with the online objective ({num(objectives['ttft_p99_seconds'])} s p99).",
              good="p99 below the objective line.",
              bad="long queue: lower the request rate; long prompts: raise --chunked-prefill-size; large "
                  "batches: lower --max-running-requests.",
              targets=latency_targets(limits, "ttft"),
              steps=[(None, "transparent"), (objectives["ttft_p99_seconds"], "red")], style="dashed",
              no_value=absent_value_text("ttft")),
        Panel("Inter-token latency", "timeseries", "s", min=0,
              shows=f"Per-server inter-token latency quantiles and mean from {itl_newest} ({itl_older} on SGLang "
                    f"0.4.4 and older), with the online objective ({num(objectives['itl_p99_seconds'])} s p99).",
              good="p99 below the objective line.",
              bad="the decode batch is too large: lower --max-running-requests; check CUDA graph is on.",
              targets=latency_targets(limits, "itl"),
              steps=[(None, "transparent"), (objectives["itl_p99_seconds"], "red")], style="dashed",
              no_value=absent_value_text("itl")),
        Panel("End-to-end request latency", "timeseries", "s", min=0,
              shows=f"Per-server end-to-end latency quantiles and mean from {sglang('e2e')}, with the online "
                    f"objective ({num(objectives['e2e_p99_seconds'])} s p99).",
              good="p99 below the objective line and stable.",
              bad="compare with TTFT and inter-token latency to find the phase that grew; retractions also "
                  "lengthen requests.",
              targets=latency_targets(limits, "e2e"),
              steps=[(None, "transparent"), (objectives["e2e_p99_seconds"], "red")], style="dashed",
              no_value=absent_value_text("e2e")),
    ]


def detail(limits: Limits) -> DashboardSpec:
    return DashboardSpec(UID, TITLE, DESCRIPTION,
                         [*batch_panels(limits), *kv_cache_panels(limits), *memory_panels(limits),
                          *latency_panels(limits), *objective_panels(), *native_panels(limits),
                          *serving_panels(limits), *per_rank_panels(limits), *exporter_health_panels(limits)])
