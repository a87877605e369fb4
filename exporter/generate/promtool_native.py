"""Generated promtool tests of the native rules (over SGLang's own /metrics) and their recording rules."""
from __future__ import annotations

from exporter import catalog
from exporter.generate.promql import fmt_duration, num, parse_duration
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
    values_text,
)
from exporter.generate.promtool_serving import SERVING_NATIVE, serving_native_tests
from exporter.generate.records import retraction_rules
from exporter.generate.rules import Alert
from exporter.generate.settings import RuleSettings


def native_tests(settings: RuleSettings, a: Alert) -> list[dict]:
    step = interval(settings)
    f = parse_duration(a.for_)
    iv = fmt_duration(step)
    sel, tl = settings.sglang_selector, settings.sglang_test_labels
    assert a.signal is not None, a.name       # every native alert judges one signal
    base = {"model_name": "m", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
    pod_a, pod_b, pod_c = ({**target_labels(settings, x, 30000, sel, tl), **base} for x in (POD_A, POD_B, POD_C))
    keep = set(settings.join_labels) | set(settings.native_keep_labels)

    def out_labels(lab):
        return {k: v for k, v in lab.items() if k in keep}

    if a.name in SERVING_NATIVE:
        return serving_native_tests(settings, a, step, (pod_a, pod_b, pod_c), out_labels)
    t = settings.thresholds_in_force(a.signal)
    assert t is not None, a.signal           # rendered only for the signals in force
    if a.name == "SGLangNativeQueueAboveRange":
        thr = t["max_queue"]
        steps = int(f / step) + 5
        series = [{"series": series_text("sglang:num_queue_reqs", pod_a), "values": values_text([thr + 500] * steps)},
                  {"series": series_text("sglang:num_queue_reqs", pod_b), "values": values_text([thr] * steps)}]
        return [{"name": f"{a.name}: median queue {thr + 500} fires, exactly {thr} does not", "interval": iv,
                 "input_series": series,
                 "alert_rule_test": [alert_case(a.name, f - step, []) if f > 0 else
                                     alert_case(a.name, 0, [expected_alert(a, out_labels(pod_a), thr + 500)]),
                                     alert_case(a.name, f, [expected_alert(a, out_labels(pod_a), thr + 500)])]}]
    if a.name == "SGLangNativeKVCacheUnderused":
        thr = t["min_usage"]
        steps = int(f / step) + 5
        series = []
        for lab, usage, queue in ((pod_a, 0.5, 10), (pod_b, thr, 10), (pod_c, 0.5, 0)):
            series += [{"series": series_text("sglang:token_usage", lab), "values": values_text([usage] * steps)},
                       {"series": series_text("sglang:num_queue_reqs", lab), "values": values_text([queue] * steps)}]
        return [{"name": f"{a.name}: usage 0.5 with a queue fires; usage {thr} or an empty queue does not",
                 "interval": iv, "input_series": series,
                 "alert_rule_test": [alert_case(a.name, f - step, []) if f > 0 else
                                     alert_case(a.name, 0, [expected_alert(a, out_labels(pod_a), 0.5)]),
                                     alert_case(a.name, f, [expected_alert(a, out_labels(pod_a), 0.5)])]}]
    if a.name in ("SGLangNativeRetractionsFrequent", "SGLangNativeRetractionStorm"):
        thr = t["per_minute"]
        window = parse_duration(settings.window(fmt_duration(catalog.SIGNALS_BY_ID[a.signal].window_seconds)))
        hi = thr * 2.4 if thr else 1.0       # requests per minute: fires (no tie on the ramp-up)
        lo = thr * 0.99                       # just inside: never fires
        steps = int((2 * window + f) / step) + 5
        series = []
        # pod_a: two DP ranks, each also reported by TP rank 1 (--enable-metrics-for-all-schedulers):
        # the per-DP max counts each retraction once; hi/2 per DP rank.
        # (pod_a's series are added once its rate is chosen, below)
        # pod_b: just inside. (Exactly at the threshold is not testable through rate(): Prometheus' float
        # arithmetic makes 10/min come out as 10.000000000000002.)
        series.append({"series": series_text("sglang:num_retracted_requests_total", pod_b),
                       "values": values_text(counter(lo * step / 60, steps))})
        strict = ">=" not in a.expr

        def val(r, tt):
            v = prom_rate([(i * step, r * step / 60 * i) for i in range(steps)], tt, window)
            return None if v is None else v * 60

        def fires_at(r):
            """Time the alert fires for a counter growing r per minute (None: never in the scenario)."""
            for k in range(steps):
                v = val(r, k * step)
                if v is not None and (v > thr if strict else v >= thr):
                    # the value one sample earlier must be clearly below (no float tie at a sample)
                    assert k == 0 or val(r, (k - 1) * step) is None or val(r, (k - 1) * step) < thr * (1 - 1e-6)
                    assert v > thr * (1 + 1e-6)
                    return k * step + f
            return None

        for mult in (2.4, 2.7, 3.1, 3.7, 4.3):   # the first rate whose ramp-up crosses between samples
            hi = thr * mult if thr else 1.0
            try:
                fa = fires_at(hi)
                break
            except AssertionError:
                continue
        else:
            raise AssertionError(f"{a.name}: no tie-free test rate found")
        assert fa is not None and fires_at(lo) is None
        for dp in ("0", "1"):
            for tp in ("0", "1"):
                series.append({"series": series_text("sglang:num_retracted_requests_total",
                                                 {**pod_a, "dp_rank": dp, "tp_rank": tp}),
                               "values": values_text(counter(hi * step / 60 / 2, steps))})
        late = steps * step - 2 * step
        return [{"name": f"{a.name}: {hi:g}/min fires after the window fills and {a.for_}; {lo:g}/min "
                         "never does", "interval": iv, "input_series": series,
                 "alert_rule_test": [alert_case(a.name, fa - step, []),
                                     alert_case(a.name, fa, [expected_alert(a, out_labels(pod_a), val(hi, fa))]),
                                     alert_case(a.name, late, [expected_alert(a, out_labels(pod_a), val(hi, late))])]}]
    if a.name in ("SGLangNativeTTFTHigh", "SGLangNativeInterTokenLatencyHigh", "SGLangNativeE2ELatencyHigh"):
        key, metric = {"SGLangNativeTTFTHigh": ("ttft_p99_seconds", "sglang:time_to_first_token_seconds"),
                       "SGLangNativeInterTokenLatencyHigh": ("itl_p99_seconds",
                                                             "sglang:inter_token_latency_seconds"),
                       "SGLangNativeE2ELatencyHigh": ("e2e_p99_seconds",
                                                      "sglang:e2e_request_latency_seconds")}[a.name]
        thr = t[key]
        les = [thr / 4, thr / 2, thr, thr * 2, thr * 4, None]
        steps = int(f / step) + 5
        series = []
        # pod_a: every request in (thr, 2 thr] -> p99 = 1.99 thr. pod_b: every request in (thr/2, thr] -> 0.995 thr.
        for lab, lo_edge in ((pod_a, thr), (pod_b, thr / 2)):
            for le in les:
                n = 100 if (le is None or le > lo_edge) else 0
                series.append({"series": series_text(metric + "_bucket", {**lab, "le": "+Inf" if le is None else
                                                                     num(le)}),
                               "values": values_text(counter(n, steps))})
        tests = [{"name": f"{a.name}: p99 1.99x the objective fires, 0.995x does not", "interval": iv,
                  "input_series": series,
                  # the alert reads the latency group's record, which may be one evaluation older: certain
                  # before `for` has passed, certain one interval after
                  "alert_rule_test": [alert_case(a.name, step + f - step, []),
                                      alert_case(a.name, step + f + step,
                                                 [expected_alert(a, out_labels(pod_a), thr * 1.99)])]}]
        if a.name == "SGLangNativeInterTokenLatencyHigh":
            # SGLang < 0.4.4: the old histogram name is used when the new one is missing
            old = []
            for le in les:
                n = 100 if (le is None or le > thr) else 0
                old.append({"series": series_text("sglang:time_per_output_token_seconds_bucket",
                                              {**pod_c, "le": "+Inf" if le is None else num(le)}),
                            "values": values_text(counter(n, steps))})
            tests.append({"name": f"{a.name}: old time_per_output_token_seconds histogram", "interval": iv,
                          "input_series": old,
                          "alert_rule_test": [alert_case(a.name, step + f + step, [expected_alert(a, out_labels(pod_c),
                                                                               thr * 1.99)])]})
        return tests
    if a.name in ("SGLangNativeErrorRate", "SGLangNativeErrorsNearlyAll"):
        return _error_tests(a, f, step, iv, out_labels, pod_a, pod_b, pod_c, base)
    raise KeyError(f"no promtool test scenario for native alert {a.name}")


def _error_tests(a: Alert, f: float, step: float, iv: str, out_labels, pod_a: dict, pod_b: dict, pod_c: dict,
                 base: dict) -> list[dict]:
    """The label sets SGLang exports: http_responses_total{endpoint, method, status_code} (0.5.23, no rank
    labels) beside the target's; num_aborted_requests_total and num_requests_total with the collector's base
    labels (0.4.7-0.5.22). pod_a fails, pod_b stays under the threshold with many health checks, pod_c is an
    older release that has only the abort counter."""
    paging = a.name == "SGLangNativeErrorsNearlyAll"
    # per step: (POST 200, POST 500) of pod_a and pod_b; (finished, aborted) of pod_c
    a_ok, a_bad = (0, 30) if paging else (10, 2)
    b_ok, b_bad = (10, 10) if paging else (100, 2)
    c_done, c_aborted = (20, 20) if paging else (10, 5)
    steps = int(f / step) + 8

    def responses(pod: dict, endpoint: str, method: str, code: str, per_step: float) -> dict:
        target = {k: v for k, v in pod.items() if k not in base}
        return {"series": series_text("sglang:http_responses_total",
                                      {**target, "endpoint": endpoint, "method": method, "status_code": code}),
                "values": values_text(counter(per_step, steps))}
    series = []
    for pod, ok, bad in ((pod_a, a_ok, a_bad), (pod_b, b_ok, b_bad)):
        series += [responses(pod, "/v1/chat/completions", "POST", "200", ok),
                   responses(pod, "/v1/chat/completions", "POST", "500", bad),
                   responses(pod, "/health", "GET", "200", 200)]     # health checks: never in the share
    # pod_c has only the abort counter; pod_a (0.5.23) has it too, and aborts every request: its response
    # counter wins, so it fires once, at its 5xx share (and pod_b's aborts do not fire it either)
    for pod, done, aborted in ((pod_c, c_done, c_aborted), (pod_a, 10, 10), (pod_b, 10, 10)):
        series += [{"series": series_text("sglang:num_requests_total", pod), "values": values_text(counter(done,
                                                                                                        steps))},
                   {"series": series_text("sglang:num_aborted_requests_total", pod),
                    "values": values_text(counter(aborted, steps))}]
    fired = [expected_alert(a, out_labels({k: v for k, v in pod_a.items() if k not in base}),
                            a_bad / (a_ok + a_bad)),
             expected_alert(a, out_labels(pod_c), c_aborted / c_done)]
    quiet = f"{b_bad / (b_ok + b_bad):.0%}"
    return [{"name": f"{a.name}: pod_a ({a_bad / (a_ok + a_bad):.0%} 5xx) and an older release's aborts "
                     f"({c_aborted / c_done:.0%}) fire; pod_b ({quiet}, and many GET health checks) does not",
             "interval": iv, "input_series": series,
             "alert_rule_test": [alert_case(a.name, f - step, []) if f > step else alert_case(a.name, 0, []),
                                 alert_case(a.name, f + 3 * step, fired)]}]


def recording_tests_native(settings: RuleSettings) -> dict:
    step = interval(settings)
    sel, tl = settings.sglang_selector, settings.sglang_test_labels
    base = {"model_name": "m", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
    pod_a = {**target_labels(settings, POD_A, 30000, sel, tl), **base}
    keep = set(settings.join_labels) | set(settings.native_keep_labels)
    out = {k: v for k, v in pod_a.items() if k in keep}
    w = settings.window(settings.rate_window)
    steps = int(2 * parse_duration(w) / step) + 5
    t_eval = (steps - 2) * step
    series, cases = [], []
    for dp in ("0", "1"):
        for tp in ("0", "1"):
            series.append({"series": series_text("sglang:num_retracted_requests_total",
                                             {**pod_a, "dp_rank": dp, "tp_rank": tp}),
                           "values": values_text(counter(0.25 * step, steps))})
    rec = retraction_rules(settings)[0]["record"]
    cases.append({"expr": rec, "eval_time": fmt_duration(t_eval),
                  "exp_samples": [{"labels": series_text(rec, out), "value": 0.5}]})
    return {"name": "native recording rules", "interval": fmt_duration(step), "input_series": series,
            "promql_expr_test": cases}

