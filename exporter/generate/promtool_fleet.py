"""Generated promtool tests of the recording rules a fleet reads: SGLang's latency quantiles per server and per
model, and the sidecar's per-server signal states and inventory. Real label sets, two clusters running the same
StatefulSet (identical namespace, pod and address), so a roll-up that forgets `cluster` fails here."""
from __future__ import annotations

from exporter.catalog.native import native_metric_names
from exporter.generate.promql import fmt_duration, parse_duration
from exporter.generate.promtool_common import (
    POD_A,
    POD_B,
    counter,
    interval,
    series_text,
    target_labels,
    test_clusters,
    values_text,
)
from exporter.generate.records import (
    MODEL_QUANTILES,
    QUANTILES,
    RECORDED_HISTOGRAMS,
    SEVERITY_RANK,
    bucket_record,
    firing_rule,
    model_labels,
    quantile_record,
    server_level,
    server_rules,
)
from exporter.generate.series import M_BUILD, M_FIRING, M_INFO
from exporter.generate.settings import RuleSettings

# a histogram whose requests all fall in (1 s, 2 s], 2 per second: quantile q interpolates to 1 + q
BUCKETS = (("0.5", 0), ("1", 0), ("2", 2), ("4", 2), ("+Inf", 2))


def latency_recording_tests(settings: RuleSettings) -> dict:
    step = interval(settings)
    sel, tl = settings.sglang_selector, settings.sglang_test_labels
    base = {"model_name": "m", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
    other = test_clusters(settings)[1]
    pods = [{**target_labels(settings, POD_A, 30000, sel, tl), **base},
            {**target_labels(settings, POD_B, 30000, sel, tl), **base}]
    if other:
        pods.append({**target_labels(settings, POD_A, 30000, sel, tl, other), **base})
    keep = set(settings.join_labels) | set(settings.native_keep_labels)
    w = settings.window(settings.rate_window)
    steps = int(2 * parse_duration(w) / step) + 5
    t_eval = fmt_duration((steps - 2) * step)
    series, cases = [], []
    for value in RECORDED_HISTOGRAMS:
        newest, *older = native_metric_names(value)
        for i, pod in enumerate(pods):
            # SGLang before 0.4.4 spelled the inter-token histogram differently: the second pod runs it
            name = older[0] if older and i == 1 else newest
            for le, per_second in BUCKETS:
                series.append({"series": series_text(name + "_bucket", {**pod, "le": le}),
                               "values": values_text(counter(per_second * step, steps))})
        for q in QUANTILES:
            rec = quantile_record(settings, newest, q)
            cases.append({"expr": rec, "eval_time": t_eval,
                          "exp_samples": [{"labels": series_text(rec, {k: v for k, v in pod.items() if k in keep}),
                                           "value": 1 + q} for pod in pods]})
        for q in MODEL_QUANTILES:
            rec = quantile_record(settings, newest, q, model_labels(settings))
            models = {tuple((k, pod[k]) for k in model_labels(settings) if k in pod) for pod in pods}
            cases.append({"expr": rec, "eval_time": t_eval,
                          "exp_samples": [{"labels": series_text(rec, dict(m)), "value": 1 + q}
                                          for m in sorted(models)]})
        rec = bucket_record(settings, newest)
        cases.append({"expr": rec, "eval_time": t_eval,
                      "exp_samples": [{"labels": series_text(rec, {**{k: v for k, v in pod.items() if k in keep},
                                                                   "le": le}), "value": per_second}
                                      for pod in pods for le, per_second in BUCKETS]})
    return {"name": "latency recording rules: quantiles per server and per model, two clusters sharing names",
            "interval": fmt_duration(step), "input_series": series, "promql_expr_test": cases}


def server_recording_tests(settings: RuleSettings) -> dict:
    """pod A: a critical and a warning signal fire; pod B: a warning fires, an info does not; pod A's twin in
    the second cluster: nothing fires."""
    step = interval(settings)
    sel, tl = settings.exporter_selector, settings.exporter_test_labels
    other = test_clusters(settings)[1]
    pod_a, pod_b = (target_labels(settings, p, 10060, sel, tl) for p in (POD_A, POD_B))
    twin = target_labels(settings, POD_A, 10060, sel, tl, other) if other else None
    firing = {  # pod -> [(signal, severity, value)]
        "a": [("server_crashed", "critical", 1), ("queue_above_range", "warning", 1), ("gpu_headroom_high", "info", 0)],
        "b": [("queue_above_range", "warning", 1), ("gpu_headroom_high", "info", 0)],
        "twin": [("server_crashed", "critical", 0), ("queue_above_range", "warning", 0)],
    }
    targets = {"a": pod_a, "b": pod_b, **({"twin": twin} if twin else {})}
    steps = 5
    series = []
    for key, lab in targets.items():
        for signal, severity, v in firing[key]:
            series.append({"series": series_text(M_FIRING, {**lab, "signal": signal, "severity": severity}),
                           "values": values_text([v] * steps)})
        series.append({"series": series_text(M_INFO, {**lab, "model": "m1", "format": "0.5.11"}),
                       "values": values_text([1] * steps)})
        series.append({"series": series_text(M_BUILD, {**lab, "version": "1.2.0", "python": "3.11"}),
                       "values": values_text([1] * steps)})
    lvl = server_level(settings)
    records = [r["record"] for r in [firing_rule(settings), *server_rules(settings)]]
    expected = {
        f"{lvl}:{M_FIRING}:max_severity": [(lab, max([SEVERITY_RANK[sev] * v for _, sev, v in firing[key]]))
                                            for key, lab in targets.items()],
        f"{lvl}:{M_FIRING}:sum": [(lab, sum(v for *_, v in firing[key])) for key, lab in targets.items()],
        f"{lvl}_signal:{M_FIRING}:max": [({**lab, "signal": signal, "severity": sev}, 1)
                                         for key, lab in targets.items() for signal, sev, v in firing[key] if v],
        f"{lvl}:{M_INFO}:max": [({**lab, "model": "m1", "format": "0.5.11", "version": "1.2.0"}, 1)
                                for lab in targets.values()],
    }
    assert sorted(records) == sorted(expected), (records, list(expected))
    t_eval = fmt_duration((steps - 1) * step)
    cases = [{"expr": rec, "eval_time": t_eval,
              "exp_samples": [{"labels": series_text(rec, lab), "value": v} for lab, v in expected[rec]]}
             for rec in records]
    return {"name": "per-server signal states and inventory, two clusters sharing names",
            "interval": fmt_duration(step), "input_series": series, "promql_expr_test": cases}
