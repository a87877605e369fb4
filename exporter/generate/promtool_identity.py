"""alerts/tests/sglang-identity.test.yml: both rule files together, on the label sets Prometheus Operator gives
(cluster, namespace, pod, instance, job, container, endpoint), in two clusters running the same StatefulSet.

- One incident, one alert: where a pod's sidecar is scraped, its alert fires and the native one stands down;
  the same pod name in the other cluster, without a sidecar, gets the native alert.
- No "found duplicate series for the match group": the failure alerts' cause join and the native roll-ups
  keep the two clusters apart, each firing with its own labels.
- Quiet cases: a sidecar without the server label (pod) silences nothing; a server below the threshold.
"""
from __future__ import annotations

from exporter import catalog
from exporter.generate.promql import fmt_duration, parse_duration
from exporter.generate.promtool_common import (
    POD_A,
    POD_B,
    POD_C,
    alert_case,
    counter,
    expected_alert,
    interval,
    prom_rate,
    series_text,
    target_labels,
    test_clusters,
    values_text,
)
from exporter.generate.rules import Alert
from exporter.generate.series import M_CAUSE, M_FIRING, M_KNOWN, value_metric
from exporter.generate.settings import RuleSettings

SIDECAR = {"container": "sglang-exporter", "endpoint": "metrics"}
SGLANG = {"container": "sglang", "endpoint": "http", "model_name": "m", "engine_type": "unified",
          "tp_rank": "0", "pp_rank": "0", "dp_rank": "0"}


def _sidecar(settings: RuleSettings, pod: str, cluster: str) -> dict:
    lab = target_labels(settings, pod, 10060, settings.exporter_selector, settings.exporter_test_labels, cluster)
    return {**lab, **SIDECAR}


def _sglang(settings: RuleSettings, pod: str, cluster: str) -> dict:
    lab = target_labels(settings, pod, 30000, settings.sglang_selector, settings.sglang_test_labels, cluster)
    return {**lab, **SGLANG}


def storm_once(settings: RuleSettings, alerts: dict[str, Alert]) -> dict | None:
    sidecar_alert, native_alert = alerts.get("SGLangRetractionStorm"), alerts.get("SGLangNativeRetractionStorm")
    t = settings.thresholds_in_force("retraction_storm")
    if sidecar_alert is None or native_alert is None or not t:
        return None
    step = interval(settings)
    thr = t["per_minute"]
    window = parse_duration(settings.window(fmt_duration(catalog.SIGNALS_BY_ID["retraction_storm"].window_seconds)))
    f = max(parse_duration(sidecar_alert.for_), parse_duration(native_alert.for_))
    steps = int((2 * window + f) / step) + 5
    t_eval = (steps - 2) * step
    hi = thr * 3
    storm = counter(hi * step / 60, steps)
    per_second = prom_rate([(i * step, v) for i, v in enumerate(storm)], t_eval, window)
    assert per_second is not None, "the storm's window holds samples at t_eval"
    native_value = per_second * 60
    series, up = [], [1] * steps
    home, other = test_clusters(settings)
    # eu-1/sglang-0: sidecar and SGLang both scraped, both see the storm -> the sidecar's alert only
    side_a, native_a = _sidecar(settings, POD_A, home), _sglang(settings, POD_A, home)
    sig = {**side_a, "signal": "retraction_storm"}
    value_name, back = value_metric(catalog.SIGNALS_BY_ID["retraction_storm"])
    series += [{"series": series_text("up", side_a), "values": values_text(up)},
               {"series": series_text(M_FIRING, {**sig, "severity": "critical"}), "values": values_text(up)},
               {"series": series_text(M_KNOWN, sig), "values": values_text(up)},
               {"series": series_text(value_name, sig), "values": values_text([hi / back] * steps)},
               {"series": series_text("up", native_a), "values": values_text(up)},
               {"series": series_text("sglang:num_retracted_requests_total", native_a), "values": values_text(storm)}]
    # us-1/sglang-0: the same names, no sidecar -> the native alert, with that cluster's labels
    native_fire = []
    if other:
        native_twin = _sglang(settings, POD_A, other)
        native_fire.append(native_twin)
        series += [{"series": series_text("up", native_twin), "values": values_text(up)},
                   {"series": series_text("sglang:num_retracted_requests_total", native_twin),
                    "values": values_text(storm)}]
    # eu-1/sglang-1: a sidecar target without a pod label (a static scrape config) silences nothing
    podless = {k: v for k, v in _sidecar(settings, POD_B, home).items() if k != settings.server_label}
    native_b = _sglang(settings, POD_B, home)
    native_fire.append(native_b)
    series += [{"series": series_text("up", podless), "values": values_text(up)},
               {"series": series_text("up", native_b), "values": values_text(up)},
               {"series": series_text("sglang:num_retracted_requests_total", native_b), "values": values_text(storm)}]
    # eu-1/sglang-2: below the threshold, no sidecar: quiet
    quiet = _sglang(settings, POD_C, home)
    series.append({"series": series_text("sglang:num_retracted_requests_total", quiet),
                   "values": values_text(counter(thr * 0.5 * step / 60, steps))})
    keep = set(settings.join_labels) | set(settings.native_keep_labels)

    def native_out(lab):
        return {k: v for k, v in lab.items() if k in keep}
    return {"name": "one storm, one alert: the sidecar's where it is scraped, the native one only where no "
                    "sidecar (or one without a pod label) watches; two clusters with the same names stay apart",
            "interval": fmt_duration(step), "input_series": series,
            "alert_rule_test": [
                alert_case(sidecar_alert.name, t_eval, [expected_alert(sidecar_alert, sig, hi)]),
                alert_case(native_alert.name, t_eval, [expected_alert(native_alert, native_out(lab), native_value)
                                                       for lab in native_fire])]}


def failures_in_two_clusters(settings: RuleSettings, a: Alert) -> dict | None:
    """A failure alert joins its cause by the target's labels: with the same namespace, pod and address in
    two clusters, each fires with its own cause class (no duplicate match group) and its description reads
    its own cause line (quotes and all), which is not a label."""
    step = interval(settings)
    f = parse_duration(a.for_)
    steps = int(f / step) + 5
    assert a.signal is not None, a.name
    s = catalog.SIGNALS_BY_ID[a.signal]
    value_name, back = value_metric(s)
    home, other = test_clusters(settings)
    if other is None:        # a selector pins one cluster: nothing to keep apart
        return None
    series, expected = [], []
    for cluster, cause in ((home, {"cause_class": "cuda_oom", "cause": "torch.OutOfMemoryError: CUDA out of "
                                                                         "memory."}),
                           (other, {"cause_class": "nccl", "cause": 'RuntimeError: NCCL error "2"'})):
        sig = {**_sidecar(settings, POD_A, cluster), "signal": s.id}
        series += [{"series": series_text(M_FIRING, {**sig, "severity": s.severity}),
                    "values": values_text([1] * steps)},
                   {"series": series_text(M_KNOWN, sig), "values": values_text([1] * steps)},
                   {"series": series_text(value_name, sig), "values": values_text([3 / back] * steps)},
                   {"series": series_text(M_CAUSE, {**sig, **cause}), "values": values_text([1] * steps)}]
        expected.append(expected_alert(a, {**sig, "cause_class": cause["cause_class"]}, 3,
                                       {"cause": cause["cause"]}))
    return {"name": f"{a.name}: the same pod in two clusters fires twice, each with its own cause",
            "interval": fmt_duration(step), "input_series": series,
            "alert_rule_test": [alert_case(a.name, f + step, expected)]}


def identity_tests(settings: RuleSettings, alerts: list[Alert]) -> list[dict]:
    by_name = {a.name: a for a in alerts}
    out = [t for t in (storm_once(settings, by_name),) if t is not None]
    for a in alerts:
        if a.kind == "signal" and a.signal and catalog.SIGNALS_BY_ID[a.signal].failure:
            test = failures_in_two_clusters(settings, a)
            if test is not None:
                out.append(test)
    return out
