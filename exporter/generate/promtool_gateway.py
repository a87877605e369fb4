"""The gateway rules' promtool tests: series in the label sets the gateway's code emits
(exporter/releases/gateway.json), for alerts/tests/sglang-gateway.test.yml."""
from __future__ import annotations

from exporter.catalog_gateway import GATEWAY_SIGNALS_BY_ID
from exporter.catalog_native import native_metric_names
from exporter.generate.gateway_rules import GATEWAY_JOB, RATE, RULES, SITE_LABELS, alerts
from exporter.generate.promql import fmt_duration, parse_duration, selector_labels
from exporter.generate.promtool_common import alert_case, expected_alert, interval, series_text, values_text
from exporter.generate.rules import M_CAUSE, M_FIRING, Alert
from exporter.generate.settings import RuleSettings

WORKERS = ("http://10.0.1.1:30000", "http://10.0.1.2:30000", "http://10.0.1.3:30000")


def gateway_target(settings: RuleSettings, pod: str) -> dict:
    ip = {"gateway-a": "10.0.0.11", "gateway-b": "10.0.0.12", "gateway-c": "10.0.0.13"}[pod]
    lab = {"cluster": "c1", "namespace": "serving", "pod": pod, "instance": f"{ip}:29000", "job": GATEWAY_JOB}
    return {k: v for k, v in lab.items() if k in settings.join_labels}


def _keep(settings: RuleSettings, labels: dict, extra=()) -> dict:
    return {k: v for k, v in labels.items() if k in settings.join_labels or k in extra}


def _case(a: Alert, f: float, step: float, series: list, fires: list, name: str, lead: float = 0,
          rated: bool = False) -> dict:
    """Firing with exactly `fires` once `for:` has passed since the condition began (`lead`), and quiet one step
    earlier. A `rated` expression ramps up while its rate window fills (counters start at 0), so its start is not
    one sample: `lead` is then the window (full after it) and the step-before case is left out."""
    checks = [alert_case(a.name, lead + f, [expected_alert(a, lab, v) for lab, v in fires])]
    if f > 0 and not rated:
        checks.insert(0, alert_case(a.name, lead + f - step, []))
    return {"name": f"{a.name}: {name}", "interval": fmt_duration(step), "input_series": series,
            "alert_rule_test": checks}


def _s(name: str, labels: dict, values: list) -> dict:
    return {"series": series_text(name, labels), "values": values_text(values)}


def tests(settings: RuleSettings) -> list[dict]:
    step = interval(settings)
    by_name = {a.signal: a for a in alerts(settings)}
    a_, b_, c_ = (gateway_target(settings, p) for p in ("gateway-a", "gateway-b", "gateway-c"))
    w1, w2, w3 = WORKERS
    rate_lead = parse_duration(settings.window(RATE)) + step
    branch = "smg_prefix_hash_policy_branch_total"
    out = []

    def steps_for(a: Alert, extra_seconds: float = 0) -> int:
        return int((parse_duration(a.for_) + extra_seconds) / step) + 3

    a = by_name["gateway_no_healthy_worker"]
    n, f = steps_for(a), parse_duration(a.for_)
    out.append(_case(a, f, step, [
        # gateway-a: both workers unhealthy -> fires; gateway-b: one removed (-1), one healthy -> quiet
        _s("smg_worker_health", {**a_, "worker": w1}, [0] * n), _s("smg_worker_health", {**a_, "worker": w2}, [0] * n),
        _s("smg_worker_health", {**b_, "worker": w1}, [-1] * n), _s("smg_worker_health", {**b_, "worker": w2}, [1] * n),
        # gateway-c runs sglang-router 0.2.x: its only worker unhealthy -> fires
        _s("sgl_router_worker_health", {**c_, "worker": w3}, [0] * n),
    ], [(_keep(settings, a_), 0), (_keep(settings, c_), 0)],
        "all workers unhealthy fires (both spellings); one healthy beside a removed one is quiet"))

    a = by_name["gateway_pool_shrunk"]
    n, f = steps_for(a), parse_duration(a.for_)
    pool = {"connection_mode": "http", "model": "m", "worker_type": "regular"}
    shrink = [4] * 5 + [2] * n
    out.append(_case(a, f, step, [
        _s("smg_worker_pool_size", {**a_, **pool}, shrink),
        _s("smg_worker_pool_size", {**b_, **pool}, [4] * 5 + [3] * n),        # 75%: at the threshold, quiet
        _s("sgl_router_active_workers", c_, shrink),
    ], [(_keep(settings, a_), 0.5), (_keep(settings, c_), 0.5)],
        "half the pool gone fires (both spellings); three of four is quiet", lead=5 * step))

    a = by_name["gateway_circuit_open"]
    n, f = steps_for(a), parse_duration(a.for_)
    out.append(_case(a, f, step, [
        _s("smg_worker_cb_state", {**a_, "worker": w1}, [1] * n),
        _s("smg_worker_cb_state", {**a_, "worker": w2}, [2] * n),            # half-open: probing, quiet
        _s("smg_worker_cb_state", {**b_, "worker": w1}, [-1] * n),           # removed worker, quiet
        _s("sgl_router_cb_state", {**c_, "worker": w3}, [1] * n),
    ], [(_keep(settings, {**a_, "worker": w1}, ("worker",)), 1),
        (_keep(settings, {**c_, "worker": w3}, ("worker",)), 1)],
        "an open breaker fires per worker (both spellings); half-open and removed are quiet"))

    a = by_name["gateway_circuit_flapping"]
    opens = GATEWAY_SIGNALS_BY_ID["gateway_circuit_flapping"].defaults["opens"]
    n = steps_for(a) + 5
    flap = [min(k, opens) for k in range(n)]          # one opening per step up to `opens`
    few = [min(k, opens - 1) for k in range(n)]
    t = step * (opens + 1)
    case = _case(a, 0, step, [
        _s("smg_worker_cb_transitions_total", {**a_, "worker": w1, "from": "half_open", "to": "open"}, flap),
        _s("smg_worker_cb_transitions_total", {**a_, "worker": w1, "from": "open", "to": "half_open"}, flap),
        _s("smg_worker_cb_transitions_total", {**b_, "worker": w1, "from": "closed", "to": "open"}, few),
        _s("sgl_router_cb_state_transitions_total", {**c_, "worker": w3, "from": "half_open", "to": "open"}, flap),
    ], [], f"{opens} openings fire (both spellings); {opens - 1} are quiet")
    case["alert_rule_test"] = [alert_case(a.name, t, [
        expected_alert(a, _keep(settings, {**lab, "worker": wk}, ("worker",)), opens)
        for lab, wk in ((a_, w1), (c_, w3))])]
    # increase() over a 15m range extrapolates; the exact count is asserted on a range covering every sample
    out.append(case)

    a = by_name["gateway_retries_exhausted"]
    n, f = steps_for(a, 300), parse_duration(a.for_)
    per_step = step / 60 * 2                             # 2 per minute
    out.append(_case(a, f, step, [
        _s("smg_worker_retries_exhausted_total", {**a_, "endpoint": "chat", "worker_type": "regular"},
           [per_step * k for k in range(n)]),
        _s("smg_worker_retries_exhausted_total", {**b_, "endpoint": "chat", "worker_type": "regular"}, [3] * n),
        _s("sgl_router_retries_exhausted_total", {**c_, "route": "/generate"}, [per_step * k for k in range(n)]),
    ], [(_keep(settings, a_), 2), (_keep(settings, c_), 2)],
        "2 per minute fire (both spellings); a flat counter is quiet", lead=rate_lead, rated=True))

    a = by_name["gateway_error_ratio"]
    n, f = steps_for(a, 300), parse_duration(a.for_)
    ok = {"path": "/v1/chat/completions", "status_code": "200", "error_code": ""}
    bad = {"path": "/v1/chat/completions", "status_code": "503", "error_code": "no_workers"}
    client = {"path": "/v1/chat/completions", "status_code": "429", "error_code": "rate_limited"}
    out.append(_case(a, f, step, [
        _s("smg_http_responses_total", {**a_, **ok}, [9 * k for k in range(n)]),
        _s("smg_http_responses_total", {**a_, **bad}, [1 * k for k in range(n)]),      # 10% 5xx: fires
        _s("smg_http_responses_total", {**b_, **ok}, [9 * k for k in range(n)]),
        _s("smg_http_responses_total", {**b_, **client}, [1 * k for k in range(n)]),   # 10% 4xx: quiet
        _s("sgl_router_requests_total", {**c_, "route": "/generate"}, [10 * k for k in range(n)]),
        _s("sgl_router_request_errors_total", {**c_, "route": "/generate", "error_type": "request_failed"},
           [1 * k for k in range(n)]),
    ], [(_keep(settings, a_), 0.1), (_keep(settings, c_), 0.1)],
        "10% 5xx fires (both spellings); 10% 4xx is quiet", lead=rate_lead, rated=True))

    a = by_name["gateway_rate_limited"]
    n, f = steps_for(a, 300), parse_duration(a.for_)
    out.append(_case(a, f, step, [
        _s("smg_http_rate_limit_total", {**a_, "result": "allowed"}, [8 * k for k in range(n)]),
        _s("smg_http_rate_limit_total", {**a_, "result": "rejected"}, [2 * k for k in range(n)]),
        _s("smg_http_rate_limit_total", {**b_, "result": "allowed"}, [10 * k for k in range(n)]),
        _s("smg_http_rate_limit_total", {**b_, "result": "rejected"}, [0] * n),
    ], [(_keep(settings, a_), 0.2)], "20% rejected fires; none rejected is quiet", lead=rate_lead, rated=True))

    a = by_name["gateway_latency_above_engines"]
    n, f = steps_for(a, 300), parse_duration(a.for_)
    site = {k: v for k, v in a_.items() if k in SITE_LABELS}
    route = {"router_type": "http", "backend_type": "regular", "connection_mode": "http", "model": "m",
             "endpoint": "chat"}
    eng = {"job": "sglang", "pod": "engine-0", "instance": "10.0.1.1:30000", "model_name": "m",
           **selector_labels(settings.sglang_selector, settings.sglang_test_labels)}
    eng = {**{k: v for k, v in a_.items() if k in SITE_LABELS}, **eng}
    e2e = native_metric_names("e2e")[0]
    out.append(_case(a, f, step, [
        # gateway: 4 s per request; engines: 1.5 s -> 2.5 s spent in the gateway
        _s("smg_router_request_duration_seconds_sum", {**a_, **route}, [4 * k for k in range(n)]),
        _s("smg_router_request_duration_seconds_count", {**a_, **route}, list(range(n))),
        _s(f"{e2e}_sum", eng, [1.5 * k for k in range(n)]),
        _s(f"{e2e}_count", eng, list(range(n))),
    ], [(site, 2.5)], "2.5 s beyond the engines' mean fires", lead=rate_lead, rated=True))
    out.append(_case(a, f, step, [
        _s("smg_router_request_duration_seconds_sum", {**a_, **route}, [2 * k for k in range(n)]),
        _s("smg_router_request_duration_seconds_count", {**a_, **route}, list(range(n))),
        # the engines' names as the gateway's /engine_metrics rewrites them
        _s(f"{e2e.replace(':', '_')}_sum", eng, [1.5 * k for k in range(n)]),
        _s(f"{e2e.replace(':', '_')}_count", eng, list(range(n))),
    ], [], "0.5 s beyond the engines' (rewritten `sglang_` names) is quiet", lead=rate_lead, rated=True))

    a = by_name["gateway_load_imbalance"]
    n, f = steps_for(a), parse_duration(a.for_)
    series = []
    for lab, loads, healths, old in ((a_, (20, 1), (1, 1), False), (b_, (20, 0), (1, 0), False),
                                     (c_, (16, 2), (1, 1), True)):
        active, health = ("sgl_router_running_requests", "sgl_router_worker_health") if old else \
            ("smg_worker_requests_active", "smg_worker_health")
        for wk, load, h in zip(WORKERS, loads, healths):
            series += [_s(active, {**lab, "worker": wk}, [load] * n), _s(health, {**lab, "worker": wk}, [h] * n)]
    out.append(_case(a, f, step, series, [(_keep(settings, a_), 0.05), (_keep(settings, c_), 0.125)],
                     "one healthy worker idle beside a busy one fires (both spellings); "
                     "an idle unhealthy one is quiet"))
    a = by_name["gateway_pd_failures"]
    n, f = steps_for(a, 300), parse_duration(a.for_)
    out.append(_case(a, f, step, [
        # gateway-a: only KV transfers fail (its bootstrap counter never incremented, so not exported)
        _s("smg_pd_kv_transfer_failures_total", a_, [2 * step / 60 * k for k in range(n)]),
        # gateway-b: both exported, rare failures
        _s("smg_pd_kv_transfer_failures_total", b_, [0.25 * step / 60 * k for k in range(n)]),
        _s("smg_pd_bootstrap_failures_total", b_, [0.25 * step / 60 * k for k in range(n)]),
        # gateway-c: only bootstraps fail
        _s("smg_pd_bootstrap_failures_total", c_, [3 * step / 60 * k for k in range(n)]),
    ], [(_keep(settings, a_), 2), (_keep(settings, c_), 3)],
        "2 and 3 failures per minute fire whichever counter exists; 0.5 per minute is quiet",
        lead=rate_lead, rated=True))

    a = by_name["gateway_discovery_failing"]
    n, f = steps_for(a), parse_duration(a.for_)
    k8s = {"source": "kubernetes"}
    out.append(_case(a, f, step, [
        _s("smg_discovery_registrations_total", {**a_, **k8s, "result": "failed"}, [0, 0] + [2] * n),
        _s("smg_discovery_registrations_total", {**a_, **k8s, "result": "success"}, [5] * (n + 2)),
        _s("smg_discovery_registrations_total", {**b_, **k8s, "result": "success"}, [5] + [9] * (n + 1)),
    ], [(_keep(settings, {**a_, **k8s}, ("source",)), 2)],
        "failed registrations fire; successful ones are quiet", lead=2 * step))
    a = by_name["gateway_locality_lost"]
    n, f = int((parse_duration(a.for_) + parse_duration(settings.window("15m"))) / step) + 4, parse_duration(a.for_)
    series = []
    for lab, hits, walks in ((a_, 3, 7), (b_, 8, 2)):
        series += [_s(branch, {**lab, "branch": "ring_hit"}, [hits * k for k in range(n)]),
                   _s(branch, {**lab, "branch": "load_balance_walk"}, [walks * k for k in range(n)]),
                   _s(branch, {**lab, "branch": "no_tokens"}, [50 * k for k in range(n)])]
    out.append(_case(a, f, step, series, [(_keep(settings, a_), 0.3)],
                     "30% ring hits fire; 80% are quiet; requests without tokens count for neither",
                     lead=parse_duration(settings.window("15m")) + step, rated=True))
    a = by_name["gateway_worker_engine_crashed"]
    n = 6
    exporter_a = {"namespace": "serving", "pod": "engine-1", "instance": "10.0.1.1:10060", "job": "sglang-exporter",
                  "cluster": "c1", **selector_labels(settings.exporter_selector, settings.exporter_test_labels)}
    exporter_b = {**exporter_a, "pod": "engine-2", "instance": "10.0.1.2:10060"}
    exporter_a, exporter_b = (_keep(settings, e, tuple(selector_labels(settings.exporter_selector,
                                                                        settings.exporter_test_labels)))
                              for e in (exporter_a, exporter_b))
    cause = {"cause_class": "cuda_oom", "cause": "torch.OutOfMemoryError: CUDA out of memory."}
    crashed = {"signal": "server_crashed"}
    # the joined alert keeps the engine's identity labels (join_labels), not the rest of the exporter's selector
    fires = {**_keep(settings, exporter_a), "gateway": a_["pod"], "worker": w1, **cause}
    out.append(_case(a, 0, step, [
        _s("smg_worker_cb_state", {**a_, "worker": w1}, [1] * n),      # open, its engine crashed: fires
        _s("smg_worker_cb_state", {**a_, "worker": w2}, [1] * n),      # open, its engine fine: the breaker's own alert
        _s(M_FIRING, {**exporter_a, **crashed}, [1] * n),
        _s(M_CAUSE, {**exporter_a, **crashed, **cause}, [1] * n),
        _s(M_FIRING, {**exporter_b, **crashed}, [0] * n),
    ], [(fires, 1)], "an open breaker joined with its engine's crash and cause fires once; "
                     "an open breaker beside a healthy engine does not", lead=step))
    return out


def test_file(settings: RuleSettings) -> dict:
    return {"rule_files": [f"../{RULES}"], "evaluation_interval": fmt_duration(interval(settings)),
            "tests": tests(settings)}
