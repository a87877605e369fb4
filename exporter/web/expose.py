"""The Prometheus face: a custom Collector that builds every family fresh from a View at scrape time.

Names, types, help and labels come from catalog.METRICS; a family this module emits that the catalog does
not declare fails at import-time tests, so the two cannot drift.
"""
from __future__ import annotations

import math
import platform
import re
from collections import Counter

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from exporter.catalog import METRICS_BY_NAME, NS, SIGNAL_VALUE_METRICS, SIGNALS_BY_ID
from exporter.ingest.scrape import REJECT_REASONS
from exporter.sidecar.run import SGLANG_SOURCE, View

_OOM_PHASES = ("prefill", "decode", "startup", "unknown")


def _family(name: str):
    spec = METRICS_BY_NAME[name]
    if spec.type == "counter":
        return CounterMetricFamily(name[:-len("_total")], spec.help, labels=list(spec.labels))
    return GaugeMetricFamily(name, spec.help, labels=list(spec.labels))


def _rank_labels(key: tuple) -> list[str]:
    """dp, tp, pp label values of a rank key. A rank SGLang does not tag is rank 0 of its kind (SGLang tags a
    kind only when there are several), so a single-GPU server reads dp="0", tp="0", pp="0", never an empty label;
    the slot where ranks past the cap are folded reads "other" in all three."""
    if key and key[0] == "other":
        return ["other"] * len(key)
    return ["0" if v is None else str(v) for v in key]


# An unprefixed log line comes from a server with one rank: SGLang's TP rank 0.
SINGLE_RANK = "TP0"


CAUSE_LABEL_CHARS = 120
_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+(?:\.\d+)?")


def cause_label(line: str) -> str:
    """The cause line as a label value: numbers (sizes, addresses, line numbers, ranks) become `N` and the text
    is cut at 120 characters, so one kind of failure is one series across servers and incidents instead of a
    new one per traceback. The line as written is in /api/v1/signals, the status page and the report."""
    return _NUMBERS.sub("N", line)[:CAUSE_LABEL_CHARS]


def _number(value) -> float | None:
    """A recommendation's value as a sample: a finite number as it is, a boolean flag as 1/0, else none (a
    backend name; no value)."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _value(v) -> float:
    """A sample value: a finite float, or an error that drops its family (see families)."""
    f = float(v)
    if f - f != 0.0:
        raise ValueError(f"not a finite value: {v!r}")
    return f


def _count(v) -> float:
    f = _value(v)
    if f < 0:
        raise ValueError(f"a counter below zero: {v!r}")
    return f


WHOLE_SERVER = "all"      # dp/tp/pp of the one series a per-rank family keeps with per_rank_series off


def _whole_server(values: list[tuple[str, float | None]], fold: str) -> float | None:
    """One value for the server from (dp rank, value) pairs, as the dashboards fold ranks: `sum` adds the DP
    ranks (the TP/PP ranks of one DP rank print the same batch, so the largest of each), `max`/`min` over all."""
    known = [(dp, v) for dp, v in values if v is not None]
    if not known:
        return None
    if fold == "max":
        return max(v for _, v in known)
    if fold == "min":
        return min(v for _, v in known)
    per_dp: dict[str, float] = {}
    for dp, v in known:
        per_dp[dp] = max(per_dp.get(dp, v), v)
    return sum(per_dp.values())


def families(view: View, errors: Counter | None = None, per_rank_series: bool = True) -> list:
    """Every family of our /metrics from one View. Each family is built on its own: one that fails (a value
    that is not a finite number, a counter below zero, a type float() refuses) is left out and counted in
    `errors` (family name -> failures), and the others are served: a scrape never fails because of a value.
    `per_rank_series` False folds the per-rank batch gauges into one series per server and leaves out the
    per-rank headroom (a large fleet's series budget; docs/metrics.md)."""
    out: list = []
    snap = view.snapshot

    def build(name: str, fill) -> None:
        fam = _family(name)
        try:
            fill(fam)
            for sample in fam.samples:      # the text format is UTF-8: a lone surrogate (a path) cannot be sent
                for v in sample.labels.values():
                    v.encode("utf-8")
        except Exception:  # noqa: BLE001 - whatever the value, only this family is lost
            if errors is not None:
                errors[name] += 1
            return
        out.append(fam)

    def firing(fam):
        for sid, j in sorted(snap.judgements.items()):
            if j.firing is not None:
                fam.add_metric([sid, SIGNALS_BY_ID[sid].severity], 1.0 if j.firing else 0.0)

    def known(fam):
        for sid, j in sorted(snap.judgements.items()):
            fam.add_metric([sid], 0.0 if j.firing is None else 1.0)

    def unsupported(fam):
        for sid, j in sorted(snap.judgements.items()):
            fam.add_metric([sid], 1.0 if j.unsupported else 0.0)

    def value(fam):     # deprecated: every unit in one family
        for sid, j in sorted(snap.judgements.items()):
            if j.value is not None:
                fam.add_metric([sid], _value(j.value))

    def value_in(unit: str, scale: float):
        def fill(fam):
            for sid, j in sorted(snap.judgements.items()):
                if j.value is not None and SIGNALS_BY_ID[sid].value_unit == unit:
                    fam.add_metric([sid], _value(j.value) * scale)
        return fill

    def duration(fam):
        for sid in sorted(snap.judgements):
            h = snap.history.get(sid)
            if h is not None and h.since is not None:
                fam.add_metric([sid], max(0.0, _value(snap.now - h.since)))

    build(f"{NS}_signal_firing", firing)
    build(f"{NS}_signal_known", known)
    build(f"{NS}_signal_unsupported", unsupported)
    for unit, (name, scale) in SIGNAL_VALUE_METRICS.items():
        build(name, value_in(unit, scale))
    build(f"{NS}_signal_value", value)
    build(f"{NS}_signal_state_duration_seconds", duration)

    def causes(fam):
        for sid, j in sorted(snap.judgements.items()):
            if j.firing and j.cause is not None:
                fam.add_metric([sid, j.cause[0], cause_label(j.cause[1])], 1.0)
    build(f"{NS}_failure_cause_info", causes)

    def advice(fam):     # deprecated: the values as labels, a new series whenever a suggestion moves
        for r in snap.advice:
            fam.add_metric([r.flag, r.action, _fmt(r.current), _fmt(r.suggested), ",".join(r.signals)], 1.0)
    build(f"{NS}_advice_info", advice)

    def advice_action(fam):
        for r in snap.advice:
            fam.add_metric([r.flag, r.action, ",".join(r.signals)], 1.0)
    build(f"{NS}_advice_action_info", advice_action)

    def advice_value(pick):
        def fill(fam):
            for r in snap.advice:
                v = _number(pick(r))
                if v is not None:
                    fam.add_metric([r.flag], v)
        return fill
    build(f"{NS}_advice_current_value", advice_value(lambda r: r.current))
    build(f"{NS}_advice_suggested_value", advice_value(lambda r: r.suggested))

    for suffix, idx, fold in (("queue_requests", 0, "sum"), ("running_requests", 1, "sum"),
                              ("token_usage_ratio", 2, "max"), ("gen_throughput_tokens_per_second", 3, "sum"),
                              ("cuda_graph_enabled", 4, "min")):
        def per_rank(fam, idx=idx, fold=fold):
            ranks = sorted(view.ranks.items(), key=lambda kv: str(kv[0]))
            if not per_rank_series:
                whole = _whole_server([(_rank_labels(key)[0], vals[idx]) for key, vals in ranks], fold)
                if whole is not None:
                    fam.add_metric([WHOLE_SERVER] * 3, _value(whole))
                return
            for key, vals in ranks:
                v = vals[idx]
                if v is not None:
                    fam.add_metric(_rank_labels(key), _value(v))
        build(f"{NS}_{suffix}", per_rank)

    def gauge(suffix: str, v):
        def fill(fam):
            if v is not None:
                fam.add_metric([], _value(v))
        build(f"{NS}_{suffix}", fill)

    gauge("max_running_requests", view.max_running_requests)
    gauge("gpu_headroom_bytes", view.headroom_bytes)

    def rank_headroom(fam):
        if not per_rank_series:       # gpu_headroom_bytes keeps the GPU with the least left
            return
        for g in (view.server or {}).get("gpu_headroom", ()):
            fam.add_metric([g["rank"] or SINGLE_RANK], _value(g["bytes"]))
    build(f"{NS}_rank_gpu_headroom_bytes", rank_headroom)
    gauge("retractions_per_minute", view.retractions_per_minute)
    gauge("last_batch_age_seconds", view.last_batch_age)
    for suffix, v in (("retractions_total", view.retractions_total),
                      ("retracted_requests_total", view.retracted_requests_total),
                      ("watchdog_timeouts_total", view.watchdog_total),
                      ("server_restarts_total", view.restarts)):
        build(f"{NS}_{suffix}", lambda fam, v=v: fam.add_metric([], _count(v)))

    def oom(fam):
        for phase in _OOM_PHASES:
            fam.add_metric([phase], _count(view.oom_total.get(phase, 0)))
    build(f"{NS}_oom_events_total", oom)

    def info(fam):
        if view.format_family or view.model:
            fam.add_metric([view.format_family or "unknown", view.model], 1.0)
    build(f"{NS}_sglang_info", info)
    build(f"{NS}_build_info", lambda fam: fam.add_metric([view.version, platform.python_version()], 1.0))

    for suffix, key in (("log_lines_read_total", "lines_read"), ("log_rotations_total", "rotations"),
                        ("log_truncations_total", "truncations"), ("log_lines_cut_total", "lines_cut")):
        def per_source(fam, key=key):
            for path, s in sorted(view.log_sources.items()):
                fam.add_metric([path], _count(s[key]))
        build(f"{NS}_{suffix}", per_source)

    def up(fam):
        for path, s in sorted(view.log_sources.items()):
            fam.add_metric([path], 1.0 if s["up"] else 0.0)
        if view.scrape is not None:
            fam.add_metric([SGLANG_SOURCE], 1.0 if view.scrape["up"] else 0.0)
    build(f"{NS}_source_up", up)

    def last_error(fam):
        for name, st in sorted(view.sources.items()):
            if st.last_error_time is not None:
                fam.add_metric([name], _value(st.last_error_time))
    build(f"{NS}_source_last_error_timestamp_seconds", last_error)

    def stale(fam):
        for path, s in sorted(view.log_sources.items()):
            fam.add_metric([path], 1.0 if s.get("stale") else 0.0)
    build(f"{NS}_log_source_stale", stale)

    def unparsed(fam):
        for reason, n in sorted(view.unparsed.items()):
            fam.add_metric([reason], _count(n))
    build(f"{NS}_log_lines_unparsed_total", unparsed)

    def events(fam):
        for kind, n in sorted(view.events_total.items()):
            fam.add_metric([kind], _count(n))
    build(f"{NS}_log_events_total", events)

    def success(fam):
        sc = view.scrape
        if sc is not None:
            # a stuck scraper's last result is not the last scrape's: it reads as a failure, never frozen at 1
            fam.add_metric([SGLANG_SOURCE], 1.0 if sc["success"] and not sc["stuck"] else 0.0)
    build(f"{NS}_scrape_success", success)

    def scrape_duration(fam):
        if view.scrape is not None:
            fam.add_metric([SGLANG_SOURCE], _value(view.scrape["duration"]))
    build(f"{NS}_scrape_duration_seconds", scrape_duration)

    def rejected(fam):
        if view.scrape is not None:
            for reason in REJECT_REASONS:
                fam.add_metric([reason], _count(view.scrape["rejected"].get(reason, 0)))
    build(f"{NS}_scrape_samples_rejected_total", rejected)

    def worker_errors(fam):
        for worker, n in sorted(view.worker_errors.items()):
            fam.add_metric([worker], _count(n))
    build(f"{NS}_worker_errors_total", worker_errors)

    out.append(_errors_family(errors or Counter()))
    return out


def _errors_family(errors: Counter):
    fam = _family(f"{NS}_exposition_errors_total")
    for name, n in sorted(errors.items()):
        fam.add_metric([name], float(n))
    return fam


class SidecarCollector:
    """prometheus_client custom collector over a live Sidecar. Counts the families it had to leave out, over
    the process's life (`sglang_exporter_exposition_errors_total`); when no View can be taken at all, that
    family alone is served (label `family="view"`), so the scrape still answers."""

    def __init__(self, sidecar):
        self.sidecar = sidecar
        self.errors: Counter = Counter()

    def describe(self):
        return []   # do not let registration call collect()

    def collect(self):
        try:
            view = self.sidecar.view()
        except Exception:  # noqa: BLE001 - no View: say so in the one family that needs none
            self.errors["view"] += 1
            yield _errors_family(self.errors)
            return
        yield from families(view, self.errors, self.sidecar.config.per_rank_series)
