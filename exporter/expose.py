"""The Prometheus face: a custom Collector that builds every family fresh from a View at scrape time.

Names, types, help and labels come from catalog.METRICS; a family this module emits that the catalog does
not declare fails at import-time tests, so the two cannot drift.
"""
from __future__ import annotations

import platform

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from exporter.catalog import METRICS_BY_NAME, NS, SIGNALS_BY_ID
from exporter.sidecar import SGLANG_SOURCE, View

_OOM_PHASES = ("prefill", "decode", "startup", "unknown")


def _family(name: str):
    spec = METRICS_BY_NAME[name]
    if spec.type == "counter":
        return CounterMetricFamily(name[:-len("_total")], spec.help, labels=list(spec.labels))
    return GaugeMetricFamily(name, spec.help, labels=list(spec.labels))


def _rank_labels(key: tuple) -> list[str]:
    return ["" if v is None else str(v) for v in key]


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def families(view: View) -> list:
    out = []
    snap = view.snapshot

    firing, known, value, dur = (_family(f"{NS}_signal_firing"), _family(f"{NS}_signal_known"),
                                 _family(f"{NS}_signal_value"), _family(f"{NS}_signal_state_duration_seconds"))
    for sid, j in sorted(snap.judgements.items()):
        known.add_metric([sid], 0.0 if j.firing is None else 1.0)
        if j.firing is not None:
            firing.add_metric([sid, SIGNALS_BY_ID[sid].severity], 1.0 if j.firing else 0.0)
        if j.value is not None:
            value.add_metric([sid], float(j.value))
        h = snap.history.get(sid)
        if h is not None and h.since is not None:
            dur.add_metric([sid], max(0.0, snap.now - h.since))
    out += [firing, known, value, dur]

    causes = _family(f"{NS}_failure_cause_info")
    for sid, j in sorted(snap.judgements.items()):
        if j.firing and j.cause is not None:
            causes.add_metric([sid, j.cause[0], j.cause[1][:200]], 1.0)
    out.append(causes)

    advice = _family(f"{NS}_advice_info")
    for r in snap.advice:
        advice.add_metric([r.flag, r.action, _fmt(r.current), _fmt(r.suggested), ",".join(r.signals)], 1.0)
    out.append(advice)

    per_rank = {"queue_requests": 0, "running_requests": 1, "token_usage_ratio": 2,
                "gen_throughput_tokens_per_second": 3, "cuda_graph_enabled": 4}
    for suffix, idx in per_rank.items():
        fam = _family(f"{NS}_{suffix}")
        for key, vals in sorted(view.ranks.items(), key=lambda kv: str(kv[0])):
            v = vals[idx]
            if v is not None:
                fam.add_metric(_rank_labels(key), float(v))
        out.append(fam)

    def gauge(suffix: str, v):
        fam = _family(f"{NS}_{suffix}")
        if v is not None:
            fam.add_metric([], float(v))
        out.append(fam)

    gauge("max_running_requests", view.max_running_requests)
    gauge("gpu_headroom_bytes", view.headroom_bytes)
    gauge("retractions_per_minute", view.retractions_per_minute)
    gauge("last_batch_age_seconds", view.last_batch_age)
    for suffix, v in (("retractions_total", view.retractions_total),
                      ("retracted_requests_total", view.retracted_requests_total),
                      ("watchdog_timeouts_total", view.watchdog_total),
                      ("server_restarts_total", view.restarts)):
        fam = _family(f"{NS}_{suffix}")
        fam.add_metric([], float(v))
        out.append(fam)
    oom = _family(f"{NS}_oom_events_total")
    for phase in _OOM_PHASES:
        oom.add_metric([phase], float(view.oom_total.get(phase, 0)))
    out.append(oom)

    info = _family(f"{NS}_sglang_info")
    if view.format_family or view.model:
        info.add_metric([view.format_family or "unknown", view.model], 1.0)
    out.append(info)
    build = _family(f"{NS}_build_info")
    build.add_metric([view.version, platform.python_version()], 1.0)
    out.append(build)

    lines, rot, trunc, cut, up = (_family(f"{NS}_log_lines_read_total"), _family(f"{NS}_log_rotations_total"),
                                  _family(f"{NS}_log_truncations_total"), _family(f"{NS}_log_lines_cut_total"),
                                  _family(f"{NS}_source_up"))
    for path, s in sorted(view.log_sources.items()):
        lines.add_metric([path], float(s["lines_read"]))
        rot.add_metric([path], float(s["rotations"]))
        trunc.add_metric([path], float(s["truncations"]))
        cut.add_metric([path], float(s["lines_cut"]))
        up.add_metric([path], 1.0 if s["up"] else 0.0)
    unparsed = _family(f"{NS}_log_lines_unparsed_total")
    for reason, n in sorted(view.unparsed.items()):
        unparsed.add_metric([reason], float(n))
    events = _family(f"{NS}_log_events_total")
    for kind, n in sorted(view.events_total.items()):
        events.add_metric([kind], float(n))
    success, duration = _family(f"{NS}_scrape_success"), _family(f"{NS}_scrape_duration_seconds")
    if view.scrape is not None:
        up.add_metric([SGLANG_SOURCE], 1.0 if view.scrape["success"] else 0.0)
        success.add_metric([SGLANG_SOURCE], 1.0 if view.scrape["success"] else 0.0)
        duration.add_metric([SGLANG_SOURCE], float(view.scrape["duration"]))
    out += [lines, rot, trunc, cut, up, unparsed, events, success, duration]
    return out


class SidecarCollector:
    """prometheus_client custom collector over a live Sidecar."""

    def __init__(self, sidecar):
        self.sidecar = sidecar

    def describe(self):
        return []   # do not let registration call collect()

    def collect(self):
        yield from families(self.sidecar.view())
