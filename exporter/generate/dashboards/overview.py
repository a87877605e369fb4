"""The overview dashboard's panels: headline numbers, every signal's state, failure causes and tuning advice."""
from __future__ import annotations

from exporter.catalog import NS, SIGNAL_VALUE_METRICS, SIGNALS, signal_value_unit
from exporter.generate.dashboards.model import DashboardSpec, Limits, Panel, Target, gib, num, row
from exporter.generate.dashboards.queries import EXPORTER_SELECTOR, PER_SERVER, exported, rank_max
from exporter.generate.records import firing_record
from exporter.generate.settings import RuleSettings

UID = "sglang-overview"
TITLE = "SGLang / Overview"
DESCRIPTION = ("Health signals, tuning advice and headline numbers of SGLang servers, from sglang-exporter. "
               "Generated from the signal catalog; do not edit by hand.")


def _table_columns(*labels: str, **renamed: str) -> dict:
    """A table's organize step: hide Time and Value, title-case the server labels and `labels`."""
    rename = {"instance": "Instance", "namespace": "Namespace"}
    rename.update({label: label.capitalize() for label in labels})
    rename.update(renamed)
    return {"exclude": ["Time", "Value"], "rename": rename}


def _headline_panels(limits: Limits) -> list[Panel]:
    queue_floor = limits.signal("queue_below_range")["min_queue"]
    queue_ceiling = limits.signal("queue_above_range")["max_queue"]
    usage_floor = limits.signal("kv_cache_underused")["min_usage"]
    retractions_frequent = limits.signal("retractions_frequent")["per_minute"]
    retraction_storm = limits.signal("retraction_storm")["per_minute"]
    headroom_floor = limits.signal("gpu_headroom_low")["min_bytes"]
    headroom_ceiling = limits.signal("gpu_headroom_high")["max_bytes"]
    return [
        row("Now"),
        Panel("Queue", "stat", "short", width=4, height=4,
              shows="Requests waiting in SGLang's queue (#queue-req), summed over DP ranks.",
              good=f"offline batch: between {num(queue_floor)} and {num(queue_ceiling)} (the batch stays full); "
                   "online: near 0.",
              bad=f"below {num(queue_floor)} offline: submit requests faster; above {num(queue_ceiling)}: lower "
                  "the request rate or add servers.",
              targets=[Target(rank_max(f"{NS}_queue_requests"), "{{instance}}")],
              steps=[(None, "orange"), (queue_floor, "green"), (queue_ceiling, "orange")]),
        Panel("Running requests", "stat", "short", width=4, height=4,
              shows="Requests in the running batch (#running-req), summed over DP ranks.",
              good="steady and close to what the KV cache holds; compare with the cap on the detail dashboard.",
              bad="pinned at --max-running-requests with a queue: see 'Concurrency capped'; 0 with a queue: "
                  "the server is stalled.",
              targets=[Target(rank_max(f"{NS}_running_requests"), "{{instance}}")],
              steps=[(None, "blue")]),
        Panel("KV cache token usage", "stat", "percentunit", width=4, height=4, min=0, max=1,
              shows="KV cache pool usage (token usage), the fullest rank.",
              good=f"above {num(usage_floor)} under load (the guide's target).",
              bad=f"below {num(usage_floor)} while requests queue: decrease --schedule-conservativeness "
                  "(e.g. 0.3).",
              targets=[Target(f"max by ({PER_SERVER}) ({exported(f'{NS}_token_usage_ratio')})", "{{instance}}")],
              steps=[(None, "yellow"), (usage_floor, "green")]),
        Panel("Decode throughput", "stat", "short", width=4, height=4,
              shows="Generated tokens per second (gen throughput of the last decode line), summed over DP "
                    "ranks.",
              good="stable at the level your benchmark reached for this model and GPU.",
              bad="a drop with requests pending: check retractions, the stall signal and CUDA graph.",
              targets=[Target(rank_max(f"{NS}_gen_throughput_tokens_per_second"), "{{instance}}")],
              steps=[(None, "blue")]),
        Panel("GPU memory headroom", "stat", "bytes", width=4, height=4,
              shows="GPU memory left after start-up on the GPU with the least left.",
              good=f"between {gib(headroom_floor)} and {gib(headroom_ceiling)}.",
              bad=f"below {gib(headroom_floor)}: OOM risk, decrease --mem-fraction-static; above "
                  f"{gib(headroom_ceiling)}: KV cache too small, increase --mem-fraction-static.",
              targets=[Target(f"min by ({PER_SERVER}) ({exported(f'{NS}_gpu_headroom_bytes')})", "{{instance}}")],
              steps=[(None, "red"), (headroom_floor, "green"), (headroom_ceiling, "yellow")]),
        Panel("Retractions per minute", "stat", "cpm", width=4, height=4,
              shows="KV-cache-full retraction events per minute over the retractions_frequent window.",
              good=f"at most {num(retractions_frequent)} per minute (occasional retractions are fine).",
              bad=f"above {num(retractions_frequent)}: increase --schedule-conservativeness (e.g. 1.3); at "
                  f"{num(retraction_storm)} or more it is a storm: also lower --max-running-requests.",
              targets=[Target(f"60 * max by ({PER_SERVER}) ({NS}_signal_value_per_second{{{EXPORTER_SELECTOR}, "
                              "signal=\"retractions_frequent\"})",
                              "{{instance}}")],
              steps=[(None, "green"), (retractions_frequent, "yellow"), (retraction_storm, "red")]),
    ]


def _signal_panels(settings: RuleSettings) -> list[Panel]:
    per_signal = f"{PER_SERVER}, signal"
    signal_list = "; ".join(f"{signal.id} ({signal.severity})" for signal in SIGNALS)
    return [
        row("Health signals"),
        Panel("Firing signals", "state-timeline", "none", width=24, height=10,
              shows="The health signals firing per server over time, one row per server and firing signal (read "
                    "from the `sglang-exporter.servers` record of firing signals: a signal that does not fire draws "
                    "no row, so the panel stays small at 1,000 servers). Every signal's state, value and time in "
                    f"state: the Signal details table below and the status page. Signals: {signal_list}.",
              good="empty: nothing fires.",
              bad="a red row: open its runbook (docs/runbooks) and follow the advice table below.",
              targets=[Target(f"max by ({per_signal}) ({firing_record(settings)}{{{EXPORTER_SELECTOR}}})",
                              "{{instance}} {{signal}}")],
              mappings=[(1, "firing", "red")],
              steps=[(None, "red")]),
        Panel("Failure causes", "table", "none", width=24, height=5,
              shows="Why a failure signal fires (server_crashed, startup_oom, startup_stalled): the last exception "
                    "line of the traceback and its class.",
              good="empty: nothing failed since the last ready line.",
              bad="read the cause; a cuda_oom at start-up follows the startup_oom advice; otherwise open the "
                  "runbook of the firing alert and SGLang's log around that time.",
              targets=[Target(f"max by ({per_signal}, cause_class, cause) "
                              f"({exported(f'{NS}_failure_cause_info')})", table=True)],
              organize=_table_columns("signal", "cause", cause_class="Class")),
        Panel("Tuning advice", "table", "none", width=24, height=8,
              shows="The reconciled tuning recommendations: flag, direction, current and suggested value, and "
                    "the signals that ask for it.",
              good="empty: nothing to tune.",
              bad="apply the suggestion (one flag at a time), restart SGLang, and watch the signal clear.",
              targets=[Target(f"max by ({PER_SERVER}, flag, action, signals) "
                              f"({exported(f'{NS}_advice_action_info')})", table=True),
                       Target(f"max by ({PER_SERVER}, flag) ({exported(f'{NS}_advice_current_value')})", table=True),
                       Target(f"max by ({PER_SERVER}, flag) ({exported(f'{NS}_advice_suggested_value')})",
                              table=True)],
              organize={"exclude": ["Time", "Value #A"],
                        "rename": {"instance": "Instance", "namespace": "Namespace", "flag": "Flag",
                                   "action": "Action", "signals": "Signals", "Value #B": "Current",
                                   "Value #C": "Suggested"}}),
        Panel("Signal details", "table", "short", width=16, height=8,
              shows="Per signal: firing or not, the value it judges (unit per signal: "
                    + "; ".join(f"{signal.id} {signal_value_unit(signal.value_unit)}" for signal in SIGNALS)
                    + "), how long it has been in its current state, whether it has the data to be judged "
                      "(Known 0: unknown, normal right after start-up and for signals the profile turns off) and "
                      "whether its only source, SGLang's /metrics, lacks its inputs in this release.",
              good="firing 0 everywhere; long durations in the ok state.",
              bad="a signal that flips state every few minutes sits on its threshold: tune the threshold in "
                  "the exporter config or fix the cause.",
              targets=[Target(f"max by ({per_signal}) ({exported(f'{NS}_signal_firing')})", table=True),
                       Target(" or ".join(f"max by ({per_signal}) ({exported(name)})"
                                          for name, _ in SIGNAL_VALUE_METRICS.values()), table=True),
                       Target(f"max by ({per_signal}) ({exported(f'{NS}_signal_state_duration_seconds')})",
                              table=True),
                       Target(f"max by ({per_signal}) ({exported(f'{NS}_signal_known')})", table=True),
                       Target(f"max by ({per_signal}) ({exported(f'{NS}_signal_unsupported')})", table=True)],
              organize={"exclude": ["Time"],
                        "rename": {"instance": "Instance", "namespace": "Namespace", "signal": "Signal",
                                   "Value #A": "Firing", "Value #B": "Value",
                                   "Value #C": "In state for", "Value #D": "Known",
                                   "Value #E": "Not exported by this release"}},
              overrides=[{"matcher": {"id": "byName", "options": "In state for"},
                          "properties": [{"id": "unit", "value": "s"}]}]),
        Panel("Servers", "table", "none", width=8, height=8,
              shows="The SGLang log format family and model each sidecar detected.",
              good="one row per server with the model you expect.",
              bad="no row: the sidecar has not recognised any SGLang line yet (check its log source); an "
                  "unexpected format family: see the parser-drift panels on the detail dashboard.",
              targets=[Target(f"max by ({PER_SERVER}, format, model) "
                              f"({NS}_sglang_info{{{EXPORTER_SELECTOR}, model=~\"$model\"}})", table=True)],
              organize=_table_columns("format", "model")),
    ]


def overview(limits: Limits) -> DashboardSpec:
    settings = RuleSettings(limits.config)
    return DashboardSpec(UID, TITLE, DESCRIPTION, _headline_panels(limits) + _signal_panels(settings))
