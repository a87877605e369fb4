"""Every metric the exporter exposes on its own /metrics, with its lifecycle (deprecated, replaced_by).

Naming follows Prometheus' rules for exporters: base units (seconds, bytes, ratios 0-1; no per-minute), one
unit per name, `_total` only on counters, no two names saying the same thing. A rename keeps the old name
exported, unchanged, for one more release: its entry says `deprecated` (the release that deprecated it) and
`replaced_by` (what to read instead); docs/metrics.md lists both, and the release after drops the old entry.
"""
from __future__ import annotations

from dataclasses import dataclass

from exporter.catalog.model import NS


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: str           # gauge | counter (info-style gauges end in _info and are always 1)
    help: str
    labels: tuple = ()
    deprecated: str = ""     # the exporter release that deprecated it (still exported until the next release)
    replaced_by: str = ""    # for a deprecated metric: what to read instead (a metric, or a PromQL expression)


DEPRECATED_IN = "0.1.0"     # the current release: the renames below are still exported, marked deprecated

_RANK = ("dp", "tp", "pp")

# The value a signal judges, one family per unit (its catalog entry's `value_unit`): unit -> (family, scale
# from the judged value to the family's base unit). The retraction signals judge events per minute (their
# thresholds are set that way); the family carries the same rate per second.
SIGNAL_VALUE_METRICS: dict[str, tuple[str, float]] = {
    "ratio": (f"{NS}_signal_value_ratio", 1.0),
    "bytes": (f"{NS}_signal_value_bytes", 1.0),
    "seconds": (f"{NS}_signal_value_seconds", 1.0),
    "per_minute": (f"{NS}_signal_value_per_second", 1 / 60),
    "count": (f"{NS}_signal_value_number", 1.0),
}
_UNIT_HELP = {
    "ratio": "a ratio, 0-1 (share of samples, or latency over its objective)",
    "bytes": "bytes",
    "seconds": "seconds",
    "per_minute": "events per second (the retraction signals; their thresholds are set per minute: x 60)",
    "count": "a plain number without unit: events or samples counted in the window, or tokens per step",
}


def signal_value_metric(unit: str) -> tuple[str, float]:
    """(family, scale) of the value of a signal whose catalog `value_unit` is `unit`."""
    try:
        return SIGNAL_VALUE_METRICS[unit]
    except KeyError:
        raise KeyError(f"value_unit {unit!r}: no metric family for it in exporter/catalog/metrics.py "
                       f"SIGNAL_VALUE_METRICS (known: {', '.join(SIGNAL_VALUE_METRICS)})") from None


def signal_value_unit(unit: str) -> str:
    """The unit suffix of that family as exposed (ratio, bytes, seconds, per_second, number)."""
    return signal_value_metric(unit)[0].removeprefix(f"{NS}_signal_value_")


METRICS: tuple[MetricSpec, ...] = (
    # health judgements
    MetricSpec(f"{NS}_signal_firing", "gauge", "1 when the health signal fires, 0 when it does not; absent "
               "while it cannot be judged.", ("signal", "severity")),
    MetricSpec(f"{NS}_signal_known", "gauge", "1 when the signal has the data it needs to be judged.",
               ("signal",)),
    MetricSpec(f"{NS}_signal_unsupported", "gauge", "1 while the signal is unknown because its only live "
               "source cannot feed it: the scraped SGLang release does not export its inputs on /metrics, or it "
               "is read from logs only (the API and the report say which); 0 otherwise.", ("signal",)),
    *(MetricSpec(name, "gauge", f"The value the signal judges, for the signals whose value is {_UNIT_HELP[unit]}; "
                 "absent while it cannot be judged.", ("signal",)) for unit, (name, _) in SIGNAL_VALUE_METRICS.items()),
    MetricSpec(f"{NS}_signal_value", "gauge", "The value the signal judges, in the unit its catalog entry "
               "names (ratio, per_minute, bytes, count, seconds).", ("signal",), deprecated=DEPRECATED_IN,
               replaced_by=", ".join(name for name, _ in SIGNAL_VALUE_METRICS.values()) + " (one family per unit)"),
    MetricSpec(f"{NS}_signal_state_duration_seconds", "gauge", "Seconds the signal has been in its current "
               "state.", ("signal",)),
    MetricSpec(f"{NS}_failure_cause_info", "gauge", "The cause of a firing failure signal: the last exception "
               "line of the traceback with its numbers as N, at most 120 characters (the line as written is in "
               "/api/v1/signals), and its class (cuda_oom, nccl, timeout, assertion, "
               "import_config, killed, health_check, startup_hung, other); always 1.",
               ("signal", "cause_class", "cause")),
    MetricSpec(f"{NS}_advice_info", "gauge", "A reconciled tuning recommendation (always 1).",
               ("flag", "action", "current", "suggested", "signals"), deprecated=DEPRECATED_IN,
               replaced_by=f"{NS}_advice_action_info, {NS}_advice_current_value, {NS}_advice_suggested_value "
                           "(its values as labels made a new series whenever a suggestion moved)"),
    MetricSpec(f"{NS}_advice_action_info", "gauge", "A reconciled tuning recommendation for a flag: what to do "
               "(increase, decrease, check, hold, keep) and the signals that ask for it (always 1). Its values "
               "are in advice_current_value and advice_suggested_value.", ("flag", "action", "signals")),
    MetricSpec(f"{NS}_advice_current_value", "gauge", "The flag's current value, for a recommendation whose "
               "current value is a number (a boolean flag: 1 or 0); absent otherwise (a backend name is in "
               "/api/v1/signals).", ("flag",)),
    MetricSpec(f"{NS}_advice_suggested_value", "gauge", "The value the recommendation suggests for the flag, "
               "when it suggests a number (a boolean flag: 1 or 0); absent otherwise.", ("flag",)),
    # raw values the dashboards plot (latest sample per rank)
    MetricSpec(f"{NS}_queue_requests", "gauge", "Requests in the waiting queue (#queue-req).", _RANK),
    MetricSpec(f"{NS}_running_requests", "gauge", "Requests in the running batch (#running-req).", _RANK),
    MetricSpec(f"{NS}_max_running_requests", "gauge", "The server's max_running_requests.", ()),
    MetricSpec(f"{NS}_token_usage_ratio", "gauge", "KV cache pool usage, 0-1 (token usage; the fullest pool "
               "for hybrid models).", _RANK),
    MetricSpec(f"{NS}_gen_throughput_tokens_per_second", "gauge", "Decode throughput of the last decode "
               "line (gen throughput).", _RANK),
    MetricSpec(f"{NS}_cuda_graph_enabled", "gauge", "1 when the last decode batch ran with CUDA graph.",
               _RANK),
    MetricSpec(f"{NS}_gpu_headroom_bytes", "gauge", "GPU memory left after start-up on the GPU with the "
               "least left (the headroom signals judge this one).", ()),
    MetricSpec(f"{NS}_rank_gpu_headroom_bytes", "gauge", "GPU memory left after start-up per rank (`rank` as "
               "SGLang's log prefix spells it, e.g. 'DP1 TP4'; 'TP0' for an unprefixed log, whose one rank is TP "
               "rank 0): the capacity line's available_gpu_mem, else the rank's last model-runner reading (CUDA "
               "graph capture or memory pool end).", ("rank",)),
    MetricSpec(f"{NS}_retractions_per_minute", "gauge", "Retraction events per minute: the retractions_frequent "
               "signal's value, by the rate every face uses (its window, or the span observed when shorter).", (),
               deprecated=DEPRECATED_IN,
               replaced_by=f"rate({NS}_retractions_total[10m]), or {NS}_signal_value_per_second for the judged "
                           "rate"),
    MetricSpec(f"{NS}_retractions_total", "counter", "Retraction events (one per 'Retract requests' record "
               "of TP rank 0).", ()),
    MetricSpec(f"{NS}_retracted_requests_total", "counter", "Requests retracted (sum of #retracted_reqs).",
               ()),
    MetricSpec(f"{NS}_oom_events_total", "counter", "Out-of-memory events by phase.", ("phase",)),
    MetricSpec(f"{NS}_watchdog_timeouts_total", "counter", "SGLang watchdog timeouts.", ()),
    MetricSpec(f"{NS}_server_restarts_total", "counter", "SGLang (re)starts seen (new epoch).", ()),
    MetricSpec(f"{NS}_last_batch_age_seconds", "gauge", "Seconds since the last prefill or decode batch "
               "line.", ()),
    MetricSpec(f"{NS}_sglang_info", "gauge", "Detected SGLang log format family and model (always 1).",
               ("format", "model")),
    MetricSpec(f"{NS}_build_info", "gauge", "sglang-exporter build (always 1).", ("version", "python")),
    # self-metrics
    MetricSpec(f"{NS}_log_lines_read_total", "counter", "Log lines read.", ("source",)),
    MetricSpec(f"{NS}_log_lines_unparsed_total", "counter", "Log lines not recognised, by reason.",
               ("reason",)),
    MetricSpec(f"{NS}_log_events_total", "counter", "Events recognised, by kind.", ("kind",)),
    MetricSpec(f"{NS}_log_rotations_total", "counter", "Log rotations followed.", ("source",)),
    MetricSpec(f"{NS}_log_truncations_total", "counter", "Log truncations detected.", ("source",)),
    MetricSpec(f"{NS}_log_lines_cut_total", "counter", "Lines longer than the cap, cut.", ("source",)),
    MetricSpec(f"{NS}_log_source_stale", "gauge", "1 while a file rotated away from the followed path is "
               "still written to after the grace period (the writer does not reopen its log).", ("source",)),
    MetricSpec(f"{NS}_source_up", "gauge", "1 when the source is being read: a log file read successfully "
               "last time; SGLang's /metrics (source=\"sglang_metrics\") when its last scrape succeeded, less than "
               "scrape_stale_after ago, and the scraper is not stuck (no scrape finished for 2 x (scrape_interval + "
               "scrape_timeout)). The one series that says whether a scrape worked.", ("source",)),
    MetricSpec(f"{NS}_source_last_error_timestamp_seconds", "gauge", "Unix time a problem with the source "
               "was last seen (a failed scrape; a log file missing, unreadable, stale or not read); absent until "
               "the first. The reason is in the exporter's log and in /api/v1/signals (sources).", ("source",)),
    MetricSpec(f"{NS}_scrape_success", "gauge", "1 when the last scrape of SGLang's /metrics succeeded; 0 "
               "too when none finished for 2 x (scrape_interval + scrape_timeout) (a stuck scraper).",
               ("source",), deprecated=DEPRECATED_IN, replaced_by=f'{NS}_source_up{{source="sglang_metrics"}}'),
    MetricSpec(f"{NS}_scrape_duration_seconds", "gauge", "Duration of the last scrape of SGLang's /metrics.",
               ("source",)),
    MetricSpec(f"{NS}_worker_errors_total", "counter", "Unexpected errors caught in a worker (follow, scrape, "
               "evaluate, positions); the worker goes on.", ("worker",)),
    MetricSpec(f"{NS}_scrape_samples_rejected_total", "counter", "Samples of SGLang's /metrics dropped as "
               "malformed, by reason (non_finite, out_of_range, bad_le; too_many_series: past what one scrape "
               "keeps of rank label sets, series of a counter or buckets of a histogram).", ("reason",)),
    MetricSpec(f"{NS}_exposition_errors_total", "counter", "Metric families left out of this /metrics "
               "because building them failed (the rest are served), by family.", ("family",)),
)

METRICS_BY_NAME = {m.name: m for m in METRICS}
