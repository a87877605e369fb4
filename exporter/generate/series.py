"""The series the generated rules and boards read, by name: the exporter's own families (each checked against the
catalog's list, so a renamed metric fails generation) and SGLang's native families by the catalog's value name."""
from __future__ import annotations

from exporter import catalog
from exporter.catalog.native import native_metric_names


def _metric(name: str) -> str:
    assert name in catalog.METRICS_BY_NAME, name
    return name


M_FIRING = _metric(f"{catalog.NS}_signal_firing")
M_KNOWN = _metric(f"{catalog.NS}_signal_known")


def value_metric(s) -> tuple[str, float]:
    """The family carrying a signal's judged value and the factor back to the unit its thresholds and
    alert texts use (the retraction signals: per second, x 60 for per minute)."""
    name, scale = catalog.signal_value_metric(s.value_unit)
    return _metric(name), round(1 / scale)


M_CAUSE = _metric(f"{catalog.NS}_failure_cause_info")
M_RETR = _metric(f"{catalog.NS}_retractions_total")
M_RETR_REQ = _metric(f"{catalog.NS}_retracted_requests_total")
M_OOM = _metric(f"{catalog.NS}_oom_events_total")
M_READ = _metric(f"{catalog.NS}_log_lines_read_total")
M_UNPARSED = _metric(f"{catalog.NS}_log_lines_unparsed_total")
M_EVENTS = _metric(f"{catalog.NS}_log_events_total")
M_SOURCE_UP = _metric(f"{catalog.NS}_source_up")
M_STALE = _metric(f"{catalog.NS}_log_source_stale")
M_SCRAPE = _metric(f"{catalog.NS}_source_up")     # of source="sglang_metrics": did the last scrape work
M_INFO = _metric(f"{catalog.NS}_sglang_info")
M_BUILD = _metric(f"{catalog.NS}_build_info")
DRIFT_REASONS = ("unknown_message", "malformed")   # SGLang-prefixed lines we could not read
NOISE_REASON = "no_sglang_prefix"                   # foreign lines: never drift
DRIFT_MATCH = 'reason=~"' + "|".join(DRIFT_REASONS) + '"'
NOISE_MATCH = f'reason="{NOISE_REASON}"'
SRC_METRICS = 'source="sglang_metrics"'
NOT_SRC_METRICS = 'source!="sglang_metrics"'

# SGLang's own families the native rules read, by the catalog's value name (release spans in catalog_native)
QUEUE, = native_metric_names("queue")
USAGE, = native_metric_names("usage")
RETRACTED = native_metric_names("retracted_requests")[0]
RESPONSES, = native_metric_names("responses")
ABORTED, = native_metric_names("aborted_requests")
REQUESTS, = native_metric_names("requests")
