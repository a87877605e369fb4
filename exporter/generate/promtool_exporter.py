"""Generated promtool tests of the sidecar's rules: each signal alert, each meta alert, the fleet recording rules.

Each scenario is computed from the same catalog as the rules (so it follows a changed threshold); the
hand-written files in alerts/tests/oracle/ state the guide's numbers literally and catch a wrong catalog entry.
"""
from __future__ import annotations

from exporter import catalog
from exporter.generate.promql import fmt_duration, parse_duration, selector_labels
from exporter.generate.promtool_common import (
    POD_A,
    POD_B,
    POD_C,
    POD_D,
    STALE,
    UNIT_VALUES,
    alert_case,
    counter,
    expected_alert,
    interval,
    series_text,
    target_labels,
    test_clusters,
    values_text,
)
from exporter.generate.records import events_record, exporter_recording_rules
from exporter.generate.rules import WATCHDOG, Alert
from exporter.generate.series import (
    M_CAUSE,
    M_EVENTS,
    M_FIRING,
    M_INFO,
    M_KNOWN,
    M_OOM,
    M_READ,
    M_RETR,
    M_RETR_REQ,
    M_SCRAPE,
    M_SOURCE_UP,
    M_STALE,
    M_UNPARSED,
    NOISE_REASON,
    value_metric,
)
from exporter.generate.settings import RuleSettings


def signal_test(settings: RuleSettings, a: Alert) -> dict:
    step = interval(settings)
    assert a.signal is not None, a.name
    s = catalog.SIGNALS_BY_ID[a.signal]
    f = parse_duration(a.for_)
    start_steps = 5
    steps = start_steps + int(f / step) + 6
    unit = s.value_unit
    value = UNIT_VALUES.get(unit)
    if unit == "bytes":
        thr = settings.thresholds(s.id)
        value = float(thr["min_bytes"] * 3 // 5 if "min_bytes" in thr else thr["max_bytes"] * 3 // 2)
    if value is None:
        value = 1.5
    if s.id == "latency_high":
        value = 1.5
    sel = settings.exporter_selector
    tl = settings.exporter_test_labels
    series = []
    pod_a, pod_b, pod_c, pod_d = (target_labels(settings, x, 10060, sel, tl) for x in (POD_A, POD_B, POD_C, POD_D))
    step1 = [0] * start_steps + [1] * (steps - start_steps)
    for lab, firing, known, val in ((pod_a, step1, 1, value), (pod_b, [0] * steps, 1, value * 2),
                                    (pod_c, None, 0, value), (pod_d, step1, 1, None)):
        sig = {**lab, "signal": s.id}
        if firing is not None:
            series.append({"series": series_text(M_FIRING, {**sig, "severity": s.severity}),
                           "values": values_text(firing)})
        series.append({"series": series_text(M_KNOWN, sig), "values": values_text([known] * steps)})
        if val is not None:
            value_name, back = value_metric(s)
            series.append({"series": series_text(value_name, sig), "values": values_text([val / back] * steps)})
    cause_class, cause = {}, {}
    if s.failure:       # pod_a exports a cause line (its class joined as a label, the line read by the text)
        cause_class = {"cause_class": "cuda_oom"}
        cause = {"cause": "torch.OutOfMemoryError: CUDA out of memory."}
        series.append({"series": series_text(M_CAUSE, {**pod_a, "signal": s.id, **cause_class, **cause}),
                       "values": values_text([1] * steps)})
    t_on = start_steps * step
    cases = []
    if f > 0:
        cases.append(alert_case(a.name, t_on + f - step, []))
    else:
        cases.append(alert_case(a.name, t_on - step, []))
    cases.append(alert_case(a.name, t_on + f, [expected_alert(a, {**pod_a, "signal": s.id, **cause_class}, value,
                                                              cause or None),
                                                 expected_alert(a, {**pod_d, "signal": s.id}, 1.0)]))
    return {"name": f"{a.name}: fires after {a.for_} with firing=1; not for firing=0 or unknown",
            "interval": fmt_duration(step), "input_series": series, "alert_rule_test": cases}


def meta_tests(settings: RuleSettings, a: Alert) -> list[dict]:
    step = interval(settings)
    f = parse_duration(a.for_)
    sel, tl = settings.exporter_selector, settings.exporter_test_labels
    pod_a, pod_b, pod_c, pod_d = (target_labels(settings, x, 10060, sel, tl) for x in (POD_A, POD_B, POD_C, POD_D))
    iv = fmt_duration(step)
    if a.name == "SGLangExporterDown":
        k = 5
        steps = k + int(f / step) + 5
        series = [{"series": series_text("up", pod_a), "values": values_text([1] * k + [0] * (steps - k))},
                  {"series": series_text("up", pod_b), "values": values_text([1] * steps)}]
        absent_lab = selector_labels(sel, tl)
        return [
            {"name": f"{a.name}: target up==0 for {a.for_}", "interval": iv, "input_series": series,
             "alert_rule_test": [alert_case(a.name, k * step + f - step, []),
                                 alert_case(a.name, k * step + f, [expected_alert(a, pod_a, 0)])]},
            {"name": f"{a.name}: no exporter target at all (absent)", "interval": iv,
             "input_series": [{"series": series_text("up", {**pod_a, "job": "something-else"}),
                               "values": values_text([1] * (int(f / step) + 3))}],
             "alert_rule_test": [alert_case(a.name, f - step, []) if f > 0 else
                                 alert_case(a.name, 0, [expected_alert(a, absent_lab, 1)]),
                                 alert_case(a.name, f, [expected_alert(a, absent_lab, 1)])]},
        ]
    if a.name == "SGLangExportersVanished":
        return [exporters_vanished_test(settings, a)]
    if a.name == "SGLangTargetDown":
        k = 5
        steps = k + int(f / step) + 5
        src = {"source": "sglang_metrics"}
        series = [{"series": series_text(M_SCRAPE, {**pod_a, **src}),
                   "values": values_text([1] * k + [0] * (steps - k))},
                  {"series": series_text(M_SCRAPE, {**pod_b, **src}), "values": values_text([1] * steps)}]
        return [{"name": f"{a.name}: scrape of SGLang fails for {a.for_}", "interval": iv,
                 "input_series": series,
                 "alert_rule_test": [alert_case(a.name, k * step + f - step, []),
                                     alert_case(a.name, k * step + f, [expected_alert(a, {**pod_a, **src}, 0)])]}]
    if a.name == "SGLangLogParserDrift":
        steps = int(f / step) + 8
        thr = settings.max_unknown_ratio
        series = []
        # per step: lines read, no_sglang_prefix, unknown_message, malformed
        # pod_a: SGLang lines = 100 - 60 = 40, unknown+malformed = 40 * thr * 1.25 -> ratio 1.25 * thr (fires)
        # pod_b: same with 0.95 * thr (just inside); pod_c: 90 % foreign noise, no drift (never fires)
        for lab, read, noise, ratio in ((pod_a, 100, 60, thr * 1.25), (pod_b, 100, 60, thr * 0.95),
                                        (pod_c, 100, 90, 0)):
            bad = (read - noise) * ratio
            series += [
                {"series": series_text(M_READ, {**lab, "source": "/var/log/sglang/sglang.log"}),
                 "values": values_text(counter(read, steps))},
                {"series": series_text(M_UNPARSED, {**lab, "reason": NOISE_REASON}),
                 "values": values_text(counter(noise, steps))},
                {"series": series_text(M_UNPARSED, {**lab, "reason": "unknown_message"}),
                 "values": values_text(counter(bad * 0.6, steps))},
                {"series": series_text(M_UNPARSED, {**lab, "reason": "malformed"}),
                 "values": values_text(counter(bad * 0.4, steps))},
            ]
        # pod_d: no no_sglang_prefix series at all: the denominator is every line read
        series += [
            {"series": series_text(M_READ, {**pod_d, "source": "/l"}),
             "values": values_text(counter(100, steps))},
            {"series": series_text(M_UNPARSED, {**pod_d, "reason": "malformed"}),
             "values": values_text(counter(100 * thr * 1.5, steps))}]
        # ratios are constant from the second sample on: pending at step, firing at step + for
        def joined(lab):   # sum by (join_labels) keeps only those
            return {k: v for k, v in lab.items() if k in settings.join_labels}
        exp = [expected_alert(a, joined(pod_a), thr * 1.25), expected_alert(a, joined(pod_d), thr * 1.5)]
        return [{"name": f"{a.name}: unknown+malformed over SGLang lines above {thr}, noise excluded",
                 "interval": iv, "input_series": series,
                 "alert_rule_test": [alert_case(a.name, step + f - step, []), alert_case(a.name, step + f, exp)]}]
    if a.name == "SGLangLogStale":
        window = parse_duration(settings.window(settings.log_stale_window))
        k = 5
        # sampled every half evaluation: the last sample before the counter stops is then never on a window's
        # left edge at an evaluation, which Prometheus 2 keeps in the window and 3 leaves out (left-open)
        n = 2 * (k + int((window + f) / step) + 5)
        src = {"source": "/var/log/sglang/sglang.log"}
        # pod_a: reads lines, then nothing from step k on. pod_b: one line per (window - step): never a silent window.
        a_vals = [10 * min(i, 2 * k) for i in range(n)]
        every = 2 * (int(window / step) - 1)
        b_vals, c = [], 0
        for i in range(n):
            if i % every == 0:
                c += 1
            b_vals.append(c)
        series = [{"series": series_text(M_READ, {**pod_a, **src}), "values": values_text(a_vals)},
                  {"series": series_text(M_READ, {**pod_b, **src}), "values": values_text(b_vals)},
                  {"series": series_text(M_SOURCE_UP, {**pod_a, **src}), "values": values_text([1] * n)},
                  {"series": series_text(M_SOURCE_UP, {**pod_b, **src}), "values": values_text([1] * n)},
                  {"series": series_text(M_SOURCE_UP, {**pod_b, "source": "sglang_metrics"}),
                   "values": values_text([0] * n)}]
        t_on = k * step + window   # the first evaluation whose window holds only equal samples
        tests = [{"name": f"{a.name}: no line read for {fmt_duration(window)}, then {a.for_}",
                  "interval": fmt_duration(step / 2),
                  "input_series": series,
                  "alert_rule_test": [alert_case(a.name, t_on + f - step, []),
                                      alert_case(a.name, t_on + f, [expected_alert(a, {**pod_a, **src}, 0)])]}]
        # pod_c: the followed file cannot be read (source_up 0) and no counter exists
        steps2 = int(f / step) + 4
        series2 = [{"series": series_text(M_SOURCE_UP, {**pod_c, **src}), "values": values_text([0] * steps2)}]
        tests.append({"name": f"{a.name}: the followed file is unreadable", "interval": iv,
                      "input_series": series2,
                      "alert_rule_test": [alert_case(a.name, f - step, []) if f > 0 else
                                          alert_case(a.name, 0, [expected_alert(a, {**pod_c, **src}, 0)]),
                                          alert_case(a.name, f, [expected_alert(a, {**pod_c, **src}, 0)])]})
        return tests
    if a.name == "SGLangLogSourceStale":
        k = 5
        steps = k + int(f / step) + 5
        src = {"source": "/var/log/sglang/sglang.log"}
        series = [{"series": series_text(M_STALE, {**pod_a, **src}),
                   "values": values_text([0] * k + [1] * (steps - k))},
                  {"series": series_text(M_STALE, {**pod_b, **src}), "values": values_text([0] * steps)}]
        return [{"name": f"{a.name}: a rotated-away file still written to for {a.for_}", "interval": iv,
                 "input_series": series,
                 "alert_rule_test": [alert_case(a.name, k * step + f - step, []),
                                     alert_case(a.name, k * step + f, [expected_alert(a, {**pod_a, **src}, 1)])]}]
    if a.name == WATCHDOG:
        return [{"name": f"{a.name}: always fires", "interval": iv, "input_series": [],
                 "alert_rule_test": [alert_case(a.name, 0, [expected_alert(a, {}, 1)]),
                                     alert_case(a.name, 3 * step, [expected_alert(a, {}, 1)])]}]
    raise KeyError(f"no promtool test scenario for meta alert {a.name}")


def exporters_vanished_test(settings: RuleSettings, a: Alert) -> dict:
    """Two clusters with the same namespace and pod names. Every sidecar of the second leaves service
    discovery (a staleness marker ends its series): that cluster pages, alone, until the absence window no
    longer remembers it. In the first, one pod goes away while another still reports: quiet."""
    step = interval(settings)
    f = parse_duration(a.for_)
    window = parse_duration(settings.window(settings.absence_window))
    assert f < window, f"{a.name}: for: {a.for_} must be shorter than alerts.absence_window"
    sel, tl = settings.exporter_selector, settings.exporter_test_labels
    k = 10                                    # samples before the vanishing
    steps = k + int((window + f) / step) + 5
    series = []
    home, other = test_clusters(settings)
    # a selector that pins the cluster: that one cluster vanishes (no second one to stay quiet)
    clusters = ((home, (POD_A,)), (other, ())) if other else ((home, ()),)
    for cluster, pods_staying in clusters:
        for pod in (POD_A, POD_B):
            lab = target_labels(settings, pod, 10060, sel, tl, cluster)
            values = [1] * steps if pod in pods_staying else [1] * k + [STALE]
            series.append({"series": series_text("up", lab), "values": values_text(values)})
    gone = {label: other or home for label in settings.cluster_labels}
    t_gone = k * step
    t_forgotten = (k - 1) * step + window + 2 * step   # the window holds none of the cluster's samples
    return {"name": f"{a.name}: one cluster's sidecars all vanish: it pages alone, while the window "
                    "remembers it; a single pod leaving a cluster that still reports stays quiet",
            "interval": fmt_duration(step), "input_series": series,
            "alert_rule_test": [alert_case(a.name, t_gone + f - step, []),
                                alert_case(a.name, t_gone + f, [expected_alert(a, gone, 2)]),
                                alert_case(a.name, t_forgotten, [])]}


def recording_tests_exporter(settings: RuleSettings) -> dict:
    """The fleet roll-ups over two clusters running the same StatefulSet: the copy of sglang-0 in the
    second cluster (identical namespace, pod and address) stays apart from the first cluster's."""
    step = interval(settings)
    sel, tl = settings.exporter_selector, settings.exporter_test_labels
    pod_a, pod_b, pod_c = (target_labels(settings, x, 10060, sel, tl) for x in (POD_A, POD_B, POD_C))
    pod_c = {**pod_c, "namespace": "other"}
    other = test_clusters(settings)[1]
    window = parse_duration(settings.window(settings.rate_window))
    steps = int(3600 / step) + 5 if not settings.short_windows else int(3 * window / step) + 5
    t_eval = (steps - 2) * step
    w = settings.window(settings.rate_window)
    series = []
    # per-second rates: exact binary fractions keep the expected values exact
    targets = [(pod_a, 0.5, "m1"), (pod_b, 0.25, "m1"), (pod_c, 0.125, "m2")]
    if other:       # sglang-0 again, in the second cluster
        targets.append((target_labels(settings, POD_A, 10060, sel, tl, other), 0.0625, "m1"))
    for lab, r, model in targets:
        series += [
            {"series": series_text(M_RETR, lab), "values": values_text(counter(r * step, steps))},
            {"series": series_text(M_RETR_REQ, lab), "values": values_text(counter(2 * r * step, steps))},
            {"series": series_text(M_OOM, {**lab, "phase": "decode"}), "values": values_text(counter(r * step, steps))},
            {"series": series_text(M_INFO, {**lab, "model": model, "format": "0.5.11"}),
             "values": values_text([1] * steps)},
            {"series": series_text(M_FIRING, {**lab, "signal": "retraction_storm", "severity": "critical"}),
             "values": values_text([1] * steps)},
            # known and not firing: no server counted for it in the firing roll-ups (they read the firing record)
            {"series": series_text(M_FIRING, {**lab, "signal": "latency_high", "severity": "warning"}),
             "values": values_text([0] * steps)},
            {"series": series_text(M_KNOWN, {**lab, "signal": "retraction_storm"}), "values": values_text([1] * steps)},
            {"series": series_text(M_KNOWN, {**lab, "signal": "latency_high"}),
             "values": values_text([1 if lab is pod_a else 0] * steps)},
            {"series": series_text(M_READ, {**lab, "source": "/l"}),
             "values": values_text(counter(4 * r * step, steps))},
            {"series": series_text(M_UNPARSED, {**lab, "reason": "unknown_message"}),
             "values": values_text(counter(r * step, steps))},
            {"series": series_text(M_EVENTS, {**lab, "kind": "decode_batch"}),
             "values": values_text(counter(r * step, steps))},
        ]
    oom_window = 3600.0
    clusters = settings.cluster_labels

    def rollup(keys: tuple, value, extra: dict | None = None, combine=sum) -> list:
        """Expected samples: per target (labels, model, rate) -> value, combined by `keys` (plus `extra`)."""
        groups: dict[tuple, list] = {}
        for lab, r, model in targets:
            row = {**lab, "model": model, **(extra or {})}
            key = tuple((k, row[k]) for k in (*clusters, *keys) if k in row)
            groups.setdefault(key, []).append(value(lab, r))
        return [(dict(key), combine(vals)) for key, vals in groups.items()]

    def mean(vals):
        return sum(vals) / len(vals)
    storm = {"signal": "retraction_storm"}
    exp: dict[str, list | None] = {
        f"namespace:{M_RETR[:-6]}:rate{w}": rollup(("namespace",), lambda lab, r: r),
        f"namespace_pod:{M_RETR[:-6]}:rate{w}": rollup(("namespace", "pod"), lambda lab, r: r),
        f"namespace_model:{M_RETR[:-6]}:rate{w}": rollup(("namespace", "model"), lambda lab, r: r),
        f"namespace_pod:{M_RETR_REQ[:-6]}:rate{w}": rollup(("namespace", "pod"), lambda lab, r: 2 * r),
        f"namespace_phase:{M_OOM[:-6]}:increase1h": rollup(("namespace", "phase"), lambda lab, r: r * oom_window,
                                                          {"phase": "decode"}),
        f"namespace_signal_severity:{M_FIRING}:sum": rollup(("namespace", "signal", "severity"),
                                                            lambda lab, r: 1, {**storm, "severity": "critical"}),
        f"namespace_model_signal:{M_FIRING}:sum": rollup(("namespace", "model", "signal"), lambda lab, r: 1, storm),
        f"namespace_signal:{M_KNOWN}:avg": (
            rollup(("namespace", "signal"), lambda lab, r: 1, storm, mean)
            + rollup(("namespace", "signal"), lambda lab, r: 1 if lab is pod_a else 0, {"signal": "latency_high"},
                     mean)),
        f"namespace_pod:{M_READ[:-6]}:rate{w}": rollup(("namespace", "pod"), lambda lab, r: 4 * r),
        f"namespace_pod_reason:{M_UNPARSED[:-6]}:rate{w}": rollup(("namespace", "pod", "reason"), lambda lab, r: r,
                                                                  {"reason": "unknown_message"}),
        events_record(settings): rollup((*settings.join_labels, "kind"), lambda lab, r: r, {"kind": "decode_batch"}),
    }
    assert len(exp[f"namespace:{M_RETR[:-6]}:rate{w}"] or ()) == len(targets) - 1   # the twin: its own group
    names = [r["record"] for r in exporter_recording_rules(settings)]
    assert sorted(names) == sorted(exp), (names, list(exp))
    if settings.short_windows and oom_window > t_eval:
        # the 1h increase is still ramping up in a short scenario: skip its exact value check
        exp.pop(f"namespace_phase:{M_OOM[:-6]}:increase1h")
        exp[f"namespace_phase:{M_OOM[:-6]}:increase1h"] = None
    cases = []
    for rec in names:
        samples = exp[rec]
        if samples is None:
            continue
        cases.append({"expr": rec, "eval_time": fmt_duration(t_eval),
                      "exp_samples": [{"labels": series_text(rec, lab), "value": v} for lab, v in samples]})
    return {"name": "fleet recording rules", "interval": fmt_duration(step), "input_series": series,
            "promql_expr_test": cases}

