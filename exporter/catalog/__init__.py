"""The signal catalog, one import for every reader: the health signals with their thresholds per workload profile,
advice, alerts and runbook anchors, the alerts on the monitoring itself, the metrics we export and the ranges
of what we read, as data.

This is the one source of truth. The exporter evaluates it; `exporter.generate` turns it into alert rules,
dashboards, runbooks and docs/metrics.md; tests read it to know what must exist. Change a threshold here and
everything downstream follows (after `sglang-exporter generate`). Its parts, one job each:

- `model`: the records (Signal, Advice, AlertSpec, MetaAlert), profiles, severities, the namespace;
- `signals`, `tuning`, `errors`, `failures`, `serving`: the signals;
- `meta`: the alerts on the monitoring itself;
- `metrics`: our own /metrics, with each name's lifecycle;
- `native`: SGLang's /metrics per release, with its renames;
- `ranges`: the ranges a scraped value or a log field must lie in.
"""
from __future__ import annotations

from exporter.catalog.errors import ERROR_SIGNALS
from exporter.catalog.failures import FAILURE_SIGNALS
from exporter.catalog.meta import META_ALERTS  # noqa: F401 - re-exported
from exporter.catalog.metrics import (  # noqa: F401 - re-exported
    METRICS,
    METRICS_BY_NAME,
    SIGNAL_VALUE_METRICS,
    MetricSpec,
    signal_value_metric,
    signal_value_unit,
)
from exporter.catalog.model import (  # noqa: F401 - re-exported
    COUNT_PARAMS,
    DEFAULT_PROFILE,
    GIB,
    NS,
    PROFILES,
    RUNBOOK_BASE,
    SEVERITIES,
    Advice,
    AlertSpec,
    MetaAlert,
    Signal,
    runbook_url,
)
from exporter.catalog.ranges import (  # noqa: F401 - re-exported
    BYTES_MAX,
    COUNT_MAX,
    COUNTER_MAX,
    DEFAULT_FIELD_RANGE,
    FIELD_RANGES,
    RATIO_MAX,
    SECONDS_MAX,
    VALUE_RANGES,
)
from exporter.catalog.serving import SERVING_SIGNALS
from exporter.catalog.signals import CORE_SIGNALS
from exporter.catalog.tuning import TUNING_SIGNALS

SIGNALS: tuple[Signal, ...] = (CORE_SIGNALS + TUNING_SIGNALS + ERROR_SIGNALS + FAILURE_SIGNALS
                              + SERVING_SIGNALS)
SIGNALS_BY_ID = {s.id: s for s in SIGNALS}
assert {k for s in SIGNALS for k in s.defaults} >= COUNT_PARAMS, "a count parameter no signal has"
FAILURE_IDS = tuple(s.id for s in SIGNALS if s.failure)


def active_signals(profile: str) -> list[Signal]:
    return [s for s in SIGNALS if s.params(profile) is not None]
