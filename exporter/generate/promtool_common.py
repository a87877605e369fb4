"""Building blocks of the generated promtool tests: the fake targets, series text and Prometheus' rate()."""
from __future__ import annotations

from exporter.generate.gotemplate import render_template
from exporter.generate.promql import fmt_duration, num, selector_labels
from exporter.generate.rules import Alert
from exporter.generate.settings import RuleSettings

NAMESPACE, POD_A, POD_B, POD_C, POD_D = "sglang", "sglang-0", "sglang-1", "sglang-2", "sglang-3"
CLUSTER, OTHER_CLUSTER = "eu-1", "us-1"     # two clusters running the same StatefulSet (same names)
STALE = "stale"     # a staleness marker: the target left service discovery (its series end at once)


def test_clusters(settings: RuleSettings) -> tuple[str, str | None]:
    """The clusters of the test series: two that share every other name, or one when a selector pins it."""
    pinned = {**selector_labels(settings.sglang_selector, settings.sglang_test_labels),
              **selector_labels(settings.exporter_selector, settings.exporter_test_labels)}.get("cluster")
    return (pinned, None) if pinned else (CLUSTER, OTHER_CLUSTER)


def target_labels(settings: RuleSettings, pod: str, port: int, selector: str, override,
                  cluster: str | None = None) -> dict:
    ip = {POD_A: "10.0.0.1", POD_B: "10.0.0.2", POD_C: "10.0.0.3", POD_D: "10.0.0.4"}[pod]
    lab = {"cluster": cluster or test_clusters(settings)[0], "namespace": NAMESPACE, "pod": pod,
           "instance": f"{ip}:{port}"}
    lab.update(selector_labels(selector, override))
    lab.setdefault("job", "sglang-exporter" if port == 10060 else "sglang")
    return {k: v for k, v in lab.items() if k in settings.join_labels or k in selector_labels(selector, override)}


def escape_value(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def series_text(name: str, labels: dict) -> str:
    inner = ", ".join(f'{k}="{escape_value(v)}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def values_text(values: list) -> str:
    """Compact promtool values: runs of equal values become `vxN`, `_` is a missing sample, `stale` a
    staleness marker."""
    out, i = [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[i]:
            j += 1
        v = "_" if values[i] is None else STALE if values[i] == STALE else num(values[i])
        if v == "_":
            out.append(" ".join(["_"] * (j - i + 1)))
        else:
            out.append(v if j == i else f"{v}x{j - i}")
        i = j + 1
    return " ".join(out)


def counter(rate_per_step: float, steps: int, start: float = 0.0) -> list:
    return [start + rate_per_step * k for k in range(steps)]


def prom_rate(samples: list, t: float, window: float) -> float | None:
    """Prometheus 2.x `rate()` (extrapolatedRate, counters, inclusive range) over [(ts, v), ...]."""
    pts = [(ts, v) for ts, v in samples if v is not None and t - window <= ts <= t]
    if len(pts) < 2:
        return None
    result = pts[-1][1] - pts[0][1]
    dstart, dend = pts[0][0] - (t - window), t - pts[-1][0]
    sampled = pts[-1][0] - pts[0][0]
    avg = sampled / (len(pts) - 1)
    if result > 0 and pts[0][1] >= 0:
        dstart = min(dstart, sampled * (pts[0][1] / result))
    thr = avg * 1.1
    ext = sampled + (dstart if dstart < thr else avg / 2) + (dend if dend < thr else avg / 2)
    factor = ext / sampled
    factor /= window
    return result * factor


def alert_case(name: str, t: float, exp: list) -> dict:
    return {"eval_time": fmt_duration(t), "alertname": name, "exp_alerts": exp}


def expected_alert(alert: Alert, labels: dict, value: float, queried: dict | None = None) -> dict:
    lab = {**labels, "severity": alert.severity, **alert.labels}
    return {"exp_labels": lab,
            "exp_annotations": {"summary": alert.summary,
                                "description": render_template(alert.description, lab, value, queried),
                                "runbook_url": alert.runbook_url}}


UNIT_VALUES = {"ratio": 0.75, "per_minute": 12.5, "count": 3, "seconds": 95, "bytes": None}


def interval(settings: RuleSettings) -> float:
    return 5.0 if settings.short_windows else 60.0

