"""The detail dashboard's per-rank panels and the sidecar's own health: log reading, parser drift, scrapes,
worker errors and builds."""
from __future__ import annotations

from exporter.catalog import NS
from exporter.generate.dashboards.model import Limits, Panel, Target, num, row
from exporter.generate.dashboards.queries import (
    EXPORTER_SELECTOR,
    PER_NATIVE_RANK,
    PER_SERVER,
    exported,
    native,
    sglang,
)
from exporter.generate.records import events_record
from exporter.generate.settings import RuleSettings

PER_RANK = f"{PER_SERVER}, dp, tp, pp"
RANK_LEGEND = "{{instance}} dp{{dp}} tp{{tp}} pp{{pp}}"


def _increase(metric: str, by: str) -> str:
    return f"sum by ({PER_SERVER}, {by}) (increase({exported(metric)}[$__rate_interval]))"


def _rate(metric: str, by: str) -> str:
    return f"sum by ({PER_SERVER}, {by}) (rate({exported(metric)}[$__rate_interval]))"


def per_rank_panels(limits: Limits) -> list[Panel]:
    usage_floor = limits.signal("kv_cache_underused")["min_usage"]
    return [
        row("Per rank"),
        Panel("Queue per rank", "timeseries", "short", min=0,
              shows="#queue-req of every DP/TP/PP rank that prints batch lines.",
              good="DP ranks carry similar queues.",
              bad="one DP rank far above the others: load balancing across DP ranks is uneven.",
              targets=[Target(f"max by ({PER_RANK}) ({exported(f'{NS}_queue_requests')})", RANK_LEGEND)]),
        Panel("Running requests per rank", "timeseries", "short", min=0,
              shows="#running-req of every rank.",
              good="DP ranks carry similar batches.",
              bad="an idle DP rank next to a full one: uneven balancing; a rank at 0 with a queue: stalled.",
              targets=[Target(f"max by ({PER_RANK}) ({exported(f'{NS}_running_requests')})", RANK_LEGEND)]),
        Panel("Token usage per rank", "timeseries", "percentunit", min=0, max=1,
              shows=f"KV cache usage of every rank from the log, and SGLang's {sglang('usage')} gauge per rank "
                    "from its /metrics.",
              good=f"above {num(usage_floor)} under load on every rank; log and metric agree.",
              bad="one rank much fuller than the others retracts first; the log and metric disagree: check the "
                  "exporter's parser-drift panels.",
              targets=[Target(f"max by ({PER_RANK}) ({exported(f'{NS}_token_usage_ratio')})", RANK_LEGEND),
                       Target(f"max by ({PER_NATIVE_RANK}) ({native(sglang('usage'))})",
                              "{{instance}} metric dp{{dp_rank}} tp{{tp_rank}} pp{{pp_rank}}")],
              steps=[(None, "transparent"), (usage_floor, "green")], style="dashed"),
        Panel("Decode throughput per rank", "timeseries", "short", min=0,
              shows="Generated tokens per second of every rank (gen throughput).",
              good="DP ranks within a few percent of each other.",
              bad="a slow rank holds back DP-attention steps of all ranks: check its GPU.",
              targets=[Target(f"max by ({PER_RANK}) ({exported(f'{NS}_gen_throughput_tokens_per_second')})",
                              RANK_LEGEND)]),
    ]


def _log_panels(limits: Limits) -> list[Panel]:
    settings = RuleSettings(limits.config)
    drift = limits.meta_alert("SGLangLogParserDrift")["max_unknown_ratio"]
    return [
        Panel("Log lines read", "timeseries", "cps", min=0,
              shows="Log lines the sidecar reads per second, per source.",
              good="non-zero while SGLang serves (decode lines arrive every few seconds).",
              bad="zero for long while SGLang serves: the log hand-off (file, stderr pipe, container log) is "
                  "broken; check the source_up panel.",
              targets=[Target(_rate(f"{NS}_log_lines_read_total", "source"), "{{instance}} {{source}}")]),
        Panel("Unrecognised log lines", "timeseries", "cps", min=0,
              shows="Log lines the parser did not recognise per second, by reason.",
              good="low and steady (SGLang also prints lines we do not need).",
              bad="a jump after an SGLang upgrade: its log format changed; file an issue with sample lines "
                  "(`sglang-exporter parse --stats`).",
              targets=[Target(_rate(f"{NS}_log_lines_unparsed_total", "reason"), "{{instance}} {{reason}}")]),
        Panel("Unrecognised share", "timeseries", "percentunit", min=0, max=1,
              shows="Unrecognised lines over lines read (sum, then divide), with the parser-drift alert "
                    f"threshold ({num(drift * 100)} %).",
              good=f"below {num(drift * 100)} %.",
              bad="above the line: SGLang's log format probably changed (SGLangLogParserDrift); log-fed signals "
                  "may go silent.",
              targets=[Target(f"sum by ({PER_SERVER}) (rate({exported(f'{NS}_log_lines_unparsed_total')}"
                              f"[$__rate_interval]))\n/\nsum by ({PER_SERVER}) "
                              f"(rate({exported(f'{NS}_log_lines_read_total')}[$__rate_interval]))",
                              "{{instance}}")],
              steps=[(None, "transparent"), (drift, "red")], style="dashed"),
        Panel("Events recognised", "timeseries", "cps", min=0,
              shows="SGLang events recognised per second, by kind (decode_batch, prefill_batch, retraction, "
                    f"oom, ...), over {settings.window(settings.rate_window)} as the fleet recording rules write "
                    "it every minute (the raw counters of every server and kind were the board's heaviest read at "
                    "1,000 servers).",
              good="decode_batch and prefill_batch while serving.",
              bad="no decode_batch while lines are read: the parser no longer recognises batch lines.",
              targets=[Target(f"sum by ({PER_SERVER}, kind) ({events_record(settings)}{{{EXPORTER_SELECTOR}}})",
                              "{{instance}} {{kind}}")]),
        Panel("Sources up", "state-timeline", "none",
              shows="Whether each source is being read: a log file read successfully last time; SGLang's "
                    "/metrics scraped successfully last time, less than scrape_stale_after ago.",
              good="up everywhere.",
              bad="down: the log file is missing or unreadable, or SGLang's /metrics does not answer "
                  "(SGLangTargetDown).",
              targets=[Target(f"min by ({PER_SERVER}, source) ({exported(f'{NS}_source_up')})",
                              "{{instance}} {{source}}")],
              mappings=[(0, "down", "red"), (1, "up", "green")], steps=[(None, "green")]),
        Panel("Since a source last failed", "timeseries", "s", min=0,
              shows="Per source, how long ago the sidecar last saw it failing (a failed scrape; a log file "
                    "missing, unreadable or stale); no line for a source that never failed.",
              good="no line, or a line that keeps growing: the last problem is long past.",
              bad="near 0: the source fails now; /api/v1/signals (sources) and the sidecar's log give the reason.",
              targets=[Target(f"time() - max by ({PER_SERVER}, source) "
                              f"({exported(f'{NS}_source_last_error_timestamp_seconds')})",
                              "{{instance}} {{source}}")]),
        Panel("Log rotations, truncations and cut lines", "timeseries", "short", min=0,
              shows="Log rotations followed, truncations detected and over-long lines cut, per rate interval; "
                    "stale (1) while a rotated-away file is still written to.",
              good="rotations at your logrotate cadence; truncations, cut lines and stale zero.",
              bad="truncations: something rewrites the log in place (copytruncate: use delaycompress); cut "
                  "lines: raise the line cap; stale: the writer never reopens its log (SGLangLogSourceStale).",
              targets=[Target(_increase(f"{NS}_log_rotations_total", "source"), "{{instance}} rotations {{source}}"),
                       Target(_increase(f"{NS}_log_truncations_total", "source"),
                              "{{instance}} truncations {{source}}"),
                       Target(_increase(f"{NS}_log_lines_cut_total", "source"), "{{instance}} cut {{source}}"),
                       Target(f"max by ({PER_SERVER}, source) ({exported(f'{NS}_log_source_stale')})",
                              "{{instance}} stale {{source}}")]),
    ]


def _scrape_and_build_panels() -> list[Panel]:
    return [
        Panel("SGLang /metrics scrape success", "timeseries", "short", min=0, max=1,
              shows="1 when the sidecar's last scrape of SGLang's /metrics succeeded (0 too when its scraper is "
                    "stuck).",
              good="1.",
              bad="0: SGLang is down, not started with --enable-metrics, or --sglang-url is wrong; the sidecar's "
                  "log says why.",
              targets=[Target(f"min by ({PER_SERVER}, source) "
                              f"({NS}_source_up{{{EXPORTER_SELECTOR}, source=\"sglang_metrics\"}})",
                              "{{instance}} {{source}}")]),
        Panel("SGLang /metrics scrape duration", "timeseries", "s", min=0,
              shows="How long the sidecar's last scrape of SGLang's /metrics took.",
              good="well under a second.",
              bad="seconds: SGLang's HTTP process is overloaded (its /metrics shares the API port).",
              targets=[Target(f"max by ({PER_SERVER}, source) ({exported(f'{NS}_scrape_duration_seconds')})",
                              "{{instance}} {{source}}")]),
        Panel("SGLang /metrics samples rejected", "timeseries", "short", min=0,
              shows="Samples of SGLang's /metrics dropped as malformed (NaN, infinite, out of the range the "
                    "catalog declares, a bad bucket bound), per rate interval.",
              good="0.",
              bad="above 0: SGLang exports values that cannot be right; the affected gauges keep their last "
                  "good value and the affected counters and histograms skip those scrapes.",
              targets=[Target(_increase(f"{NS}_scrape_samples_rejected_total", "reason"),
                              "{{instance}} {{reason}}")]),
        Panel("Exporter worker errors", "timeseries", "short", min=0,
              shows="Unexpected errors the sidecar caught in a worker (follow, scrape, evaluate, positions) and "
                    "survived, per rate interval.",
              good="0.",
              bad="above 0: a bug or a hostile input the sidecar did not expect; the worker went on, its log "
                  "has the traceback. A worker that cannot go on fails /healthz and is restarted.",
              targets=[Target(_increase(f"{NS}_worker_errors_total", "worker"), "{{instance}} {{worker}}")]),
        Panel("Families left out of the sidecar's /metrics", "timeseries", "short", min=0,
              shows="Metric families the sidecar left out of its own /metrics because a value in them could not "
                    "be exposed (the rest were served), per rate interval, by family.",
              good="zero.",
              bad="non-zero: that family's panels go blank; file an issue with the family name and the sidecar's "
                  "log around that time.",
              # with no failure there is no series: `or` a zero per sidecar (its build_info), so zero shows
              targets=[Target(f"{_increase(f'{NS}_exposition_errors_total', 'family')}\nor\n"
                              f"sum by ({PER_SERVER}) (0 * {exported(f'{NS}_build_info')})",
                              "{{instance}} {{family}}")]),
        Panel("Exporter build", "table", "none", width=24, height=5,
              shows="sglang-exporter version and Python of each sidecar.",
              good="the same version everywhere.",
              bad="mixed versions after a rollout: signals and metrics may differ between servers.",
              targets=[Target(f"max by ({PER_SERVER}, version, python) ({exported(f'{NS}_build_info')})",
                              table=True)],
              organize={"exclude": ["Time", "Value"],
                        "rename": {"instance": "Instance", "namespace": "Namespace", "version": "Version",
                                   "python": "Python"}}),
    ]


def exporter_health_panels(limits: Limits) -> list[Panel]:
    return [row("Exporter health"), *_log_panels(limits), *_scrape_and_build_panels()]
