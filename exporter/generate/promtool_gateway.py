"""The gateway rules' promtool tests: series in the label sets the gateway's code emits
(exporter/releases/gateway.json), for alerts/tests/sglang-gateway.test.yml."""
from __future__ import annotations

from exporter.catalog.gateway import GATEWAY_SIGNALS_BY_ID
from exporter.catalog.native import native_metric_names
from exporter.generate import gateway_joins as joins
from exporter.generate.gateway_rules import (
    GATEWAY_JOB,
    NO_CAUSE,
    RATE,
    RULES,
    SITE_LABELS,
    alerts,
    cause_template,
    description,
)
from exporter.generate.gotemplate import render_template
from exporter.generate.promql import fmt_duration, parse_duration, selector_labels
from exporter.generate.promtool_common import alert_case, expected_alert, interval, series_text, values_text
from exporter.generate.records import model_labels, quantile_record
from exporter.generate.rules import Alert
from exporter.generate.series import M_CAUSE, M_FIRING, M_SOURCE_UP
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
    a = by_name["gateway_cache_aware_fallback"]
    ca_w = parse_duration(settings.window("15m"))
    n, f = int((parse_duration(a.for_) + ca_w) / step) + 4, parse_duration(a.for_)
    series = []
    # gateway-c: 6 of 10 decisions in the fallback (fires); gateway-a: 2 of 10 (quiet); gateway-b: never imbalanced,
    # so its fallback counter was never exported (quiet)
    b_ = gateway_target(settings, "gateway-b")
    for lab, hits, misses, fallbacks in ((c_, 3, 1, 6), (a_, 6, 2, 2), (b_, 8, 2, 0)):
        series += [_s("sgl_router_cache_hits_total", lab, [hits * k for k in range(n)]),
                   _s("sgl_router_cache_misses_total", lab, [misses * k for k in range(n)])]
        if fallbacks:
            series.append(_s("sgl_router_load_balancing_events_total", lab, [fallbacks * k for k in range(n)]))
    out.append(_case(a, f, step, series, [(_keep(settings, c_), 0.6)],
                     "60% of decisions in the load-balancing fallback fire; 20% are quiet; a router whose loads "
                     "never tripped the thresholds (no fallback counter exported) is quiet",
                     lead=ca_w + step, rated=True))
    out += joined_tests(settings, by_name, a_, c_, step)
    return out


def test_file(settings: RuleSettings) -> dict:
    return {"rule_files": [f"../{RULES}"], "evaluation_interval": fmt_duration(interval(settings)),
            "tests": tests(settings)}


# ---- the joined signals: the gateway's view of a worker beside the verdict of its engine's sidecar ----

def _engine(settings: RuleSettings, pod: str, namespace: str, instance: str) -> dict:
    """A sidecar target's labels: the engine's identity and the exporter selector's labels."""
    picked = selector_labels(settings.exporter_selector, settings.exporter_test_labels)
    lab = {"cluster": "c1", "namespace": namespace, "pod": pod, "instance": instance, "job": "sglang-exporter",
           **picked}
    return _keep(settings, lab, tuple(picked))


def _joined_alert(settings: RuleSettings, a: Alert, engine: dict, worker: str, value: float,
                  cause: dict | None = None, **extra: str) -> dict:
    """The joined alert as Prometheus renders it: the engine's identity labels, the worker, the gateway's state
    (value 1: circuit open, 2: unhealthy) and the cause its description queries."""
    s = GATEWAY_SIGNALS_BY_ID[a.signal or ""]
    text = description(settings, s).replace(joins.STATE_TEMPLATE, "circuit open" if value == joins.OPEN
                                            else "marked unhealthy")
    text = text.replace(cause_template(settings, s), f"{cause['cause_class']}: {cause['cause']}" if cause
                        else NO_CAUSE)
    lab = {**_keep(settings, engine), "worker": worker, **extra, "severity": a.severity, **a.labels}
    annotations = {"summary": a.summary, "description": render_template(text, lab, value),
                   "runbook_url": a.runbook_url}
    return {"exp_labels": lab, "exp_annotations": annotations}


def _firing(engine: dict, signal: str, values: list) -> dict:
    return _s(M_FIRING, {**engine, "signal": signal, "severity": "critical"}, values)


def joined_tests(settings: RuleSettings, by_name: dict, a_: dict, c_: dict, step: float) -> list[dict]:
    """Both spellings (gateway-a runs SMG, gateway-c sglang-router 0.2.x), both join keys (a worker URL with the
    engine pod's IP, in another namespace than the gateway; one with its pod name), and the quiet cases: the
    gateway still routing, the engine sound, an IP two sidecars share (hostNetwork)."""
    out = []
    w1, w2 = "http://10.0.1.1:30000", "http://10.0.1.2:30000"
    e1, e2 = (_engine(settings, f"engine-{i}", "engines", f"10.0.1.{i}:10060") for i in (1, 2))
    crash_cause = {"cause_class": "cuda_oom", "cause": "torch.OutOfMemoryError: CUDA out of memory."}

    a = by_name["gateway_worker_engine_crashed"]
    n = 6
    named = "http://engine-3.engine-headless:30000"              # a StatefulSet pod behind a headless Service
    e3 = _engine(settings, "engine-3", c_.get("namespace", "serving"), "10.0.9.3:10060")
    shared = "http://10.0.2.1:30001"                              # hostNetwork: two sidecars on one node's IP
    e5, e6 = (_engine(settings, f"engine-{i}", "engines", f"10.0.2.1:1006{i}") for i in (5, 6))
    series = [
        _s("smg_worker_cb_state", {**a_, "worker": w1}, [1] * n),      # open, its engine crashed: fires
        _s("smg_worker_cb_state", {**a_, "worker": w2}, [1] * n),      # open, its engine sound: quiet
        _s("smg_worker_cb_state", {**a_, "worker": shared}, [1] * n),  # open, but which engine? quiet
        _s("sgl_router_cb_state", {**c_, "worker": named}, [0] * n),
        _s("sgl_router_worker_health", {**c_, "worker": named}, [0] * n),   # unhealthy, its engine crashed: fires
    ]
    for e, crashed in ((e1, 1), (e2, 0), (e3, 1), (e5, 1), (e6, 0)):
        series += [_s("up", e, [1] * n), _firing(e, "server_crashed", [crashed] * n)]
    series.append(_s(M_CAUSE, {**e1, "signal": "server_crashed", **crash_cause}, [1] * n))
    out.append(_joined_case(a, step, series, [
        _joined_alert(settings, a, e1, w1, joins.OPEN, crash_cause),
        _joined_alert(settings, a, e3, named, joins.UNHEALTHY)],
        "a breaker open on a worker whose engine (another namespace, by its pod IP) crashed fires with the cause; "
        "an unhealthy worker (sglang-router) whose engine (by its pod name) crashed fires without one; an open "
        "breaker beside a sound engine, and an IP two sidecars share, are quiet"))

    a = by_name["gateway_worker_engine_failing"]
    w3, w4 = "http://10.0.1.3:30000", "http://10.0.1.4:30000"
    e3, e4 = (_engine(settings, f"engine-{i}", "engines", f"10.0.1.{i}:10060") for i in (3, 4))
    hung = {"cause_class": "startup_hung", "cause": "no ready line N s after server_args"}
    series = [
        _s("smg_worker_cb_state", {**a_, "worker": w1}, [1] * n),      # open; its engine OOMs and stalls: fires once
        _s("smg_worker_cb_state", {**a_, "worker": w2}, [1] * n),      # open; its engine crashed: the crash alert's
        _s("smg_worker_cb_state", {**a_, "worker": w4}, [0] * n),      # still routed although its engine stalls
        _s("smg_worker_health", {**a_, "worker": w4}, [1] * n),
        _s("sgl_router_worker_health", {**c_, "worker": w3}, [0] * n),  # unhealthy; its engine never started
        _firing(e1, "oom_decode", [1] * n), _firing(e1, "stalled", [1] * n),
        _firing(e2, "server_crashed", [1] * n), _firing(e2, "stalled", [1] * n),
        _firing(e3, "startup_stalled", [1] * n),
        _s(M_CAUSE, {**e3, "signal": "startup_stalled", **hung}, [1] * n),
        _firing(e4, "stalled", [1] * n),
    ]
    series += [_s("up", e, [1] * n) for e in (e1, e2, e3, e4)]
    out.append(_joined_case(a, step, series, [
        _joined_alert(settings, a, e1, w1, joins.OPEN, engine_signal="oom_decode"),
        _joined_alert(settings, a, e3, w3, joins.UNHEALTHY, hung, engine_signal="startup_stalled")],
        "an open breaker whose engine OOMs and stalls fires once, naming the OOM; an unhealthy worker "
        "(sglang-router) whose engine never started fires with the cause; a crashed engine is the crash alert's; "
        "a stalled engine the gateway still routes to is quiet"))

    a = by_name["gateway_cuts_off_healthy_engine"]
    n = int(parse_duration(a.for_) / step) + 3
    w5 = "http://10.0.1.5:30000"
    e5 = _engine(settings, "engine-5", "engines", "10.0.1.5:10060")

    def answering(e: dict, v: int) -> dict:      # the sidecar's last scrape of its engine's /metrics
        return _s(M_SOURCE_UP, {**e, "source": "sglang_metrics"}, [v] * n)
    series = [
        _s("smg_worker_cb_state", {**a_, "worker": w1}, [1] * n),      # open; its engine answers, sound: fires
        _s("smg_worker_cb_state", {**a_, "worker": w2}, [1] * n),      # open; its sidecar cannot reach it either
        _s("sgl_router_cb_state", {**c_, "worker": w3}, [1] * n),      # open; its engine stalled: quiet
        _s("sgl_router_cb_state", {**c_, "worker": w5}, [1] * n),      # open; its engine answers, sound: fires
        answering(e1, 1), answering(e2, 0), answering(e3, 1), answering(e5, 1),
        _firing(e1, "server_crashed", [0] * n), _firing(e3, "stalled", [1] * n), _firing(e5, "stalled", [0] * n),
    ]
    series += [_s("up", e, [1] * n) for e in (e1, e2, e3, e5)]
    f = parse_duration(a.for_)
    case = _joined_case(a, step, series, [_joined_alert(settings, a, e1, w1, joins.OPEN),
                                          _joined_alert(settings, a, e5, w5, joins.OPEN)],
                        "an open breaker (both spellings) on a worker whose engine answers its sidecar and is sound "
                        "fires; one whose engine stalled, or does not answer its sidecar either (starting, gone), is "
                        "quiet", at=f)
    case["alert_rule_test"].insert(0, alert_case(a.name, f - step, []))
    out.append(case)

    a = by_name["gateway_ttft_above_engines"]
    rate_lead = parse_duration(settings.window(RATE)) + step
    n = int((parse_duration(a.for_) + rate_lead) / step) + 3
    route = {"router_type": "http", "backend_type": "regular", "endpoint": "chat"}
    record = quantile_record(settings, native_metric_names("ttft")[0], 0.99, model_labels(settings))
    b_ = gateway_target(settings, "gateway-b")
    series = []
    for gw, model, engines_p99 in ((a_, "m", 1.0), (b_, "m2", 3.0)):
        for le, per_step in (("1", 0), ("2", 0), ("4", 10), ("+Inf", 10)):   # every request in (2 s, 4 s]
            series.append(_s("smg_router_ttft_seconds_bucket", {**gw, **route, "model": model, "le": le},
                             [per_step * k for k in range(n)]))
        engine = {lab: v for lab, v in {"cluster": "c1", "namespace": "engines", "model_name": model}.items()
                  if lab in model_labels(settings)}
        series.append(_s(record, engine, [engines_p99] * n))
    site = {k: v for k, v in a_.items() if k in SITE_LABELS}
    out.append(_case(a, parse_duration(a.for_), step, series, [({**site, "model": "m"}, 3.98)],
                     "p99 3.98 s at the gateway against the engines' 1 s fires; against their 3 s it is quiet "
                     "(sglang-router before 0.3.0 has no TTFT family: SGLangGatewayLatencyAboveEngines covers it)",
                     lead=rate_lead, rated=True))
    return out


def _joined_case(a: Alert, step: float, series: list, fires: list, name: str, at: float = 0) -> dict:
    return {"name": f"{a.name}: {name}", "interval": fmt_duration(step), "input_series": series,
            "alert_rule_test": [{"eval_time": fmt_duration(at + step), "alertname": a.name, "exp_alerts": fires}]}
