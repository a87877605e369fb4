"""The gateway's alert rules, their promtool tests, runbooks and Grafana board, from exporter/catalog_gateway.py.

    alerts/sglang-gateway.rules.yml            rules over the gateway's own port (smg_* and sgl_router_*)
    alerts/tests/sglang-gateway.test.yml       promtool tests on the label sets the gateway's code emits
    docs/runbooks/SGLangGateway*.md            one page per alert
    dashboards/sglang-gateway.json             the Gateway board, linked to the engine boards

Every rule reads a family under each spelling that carries its meaning (`smg_` first, the older router's
`sgl_router_` after an `or`), and groups by the same identity labels as every other rule
(`alerts.join_labels`, through `promql.by`).
"""
from __future__ import annotations

import copy

import yaml

from exporter.catalog_gateway import GATEWAY_SIGNALS, GATEWAY_SIGNALS_BY_ID, GatewaySignal, spellings
from exporter.catalog_native import native_metric_names
from exporter.config import Config
from exporter.generate.dashboards.files import dashboard_json
from exporter.generate.dashboards.grafana import DATASOURCE, dashboard_content
from exporter.generate.dashboards.house import decorate as decorate_dashboard
from exporter.generate.dashboards.model import DashboardSpec, Panel, Target
from exporter.generate.promql import by, fmt_duration, num, parse_duration, sel, selector_labels
from exporter.generate.promtool_common import alert_case, expected_alert, interval, series_text, values_text
from exporter.generate.rules import HEADER, Alert, decorate, dump
from exporter.generate.settings import RuleSettings
from exporter.generate.yamlout import BlockDumper

RULES = "sglang-gateway.rules.yml"
TESTS = "tests/sglang-gateway.test.yml"
UID = "sglang-gateway"
RATE = "5m"
SITE_LABELS = ("cluster", "namespace")     # the identity labels a gateway shares with the engines behind it
# label values the gateway's code sets (status_code, not `status`; result, not `decision`)
OPEN = 'to="open"'
SERVER_ERROR = 'status_code=~"5.."'
REJECTED = 'result="rejected"'
FAILED = 'result="failed"'
RUN = "# Run: promtool test rules alerts/tests/*.test.yml\n"
ENGINE_BOARDS = (("SGLang overview", "sglang-overview"), ("SGLang detail", "sglang-detail"))


def _either(family: str, build) -> str:
    """`build(name)` for each spelling of a family, joined by `or` (the newest spelling wins)."""
    parts = [build(name) for name in spellings(family)]
    if len(parts) == 1:
        return parts[0]
    return "(\n  " + "\n  # the older router's spelling (sglang-router before 0.3.0)\n  or\n  ".join(parts) + "\n)"


def exprs(settings: RuleSettings, scope: str = "") -> dict[str, tuple[str, str]]:
    """signal id -> (what the panel plots, the alert's expression: `{}` the plotted value against its threshold).
    `scope`: a matcher on every gateway series (the dashboard's `namespace=~"$namespace"`)."""
    j = by(settings.join_labels)

    def g(name: str, *matchers: str) -> str:
        """A gateway series selector within `scope`."""
        found = [m for m in (scope, *matchers) if m]
        return name + (sel(*found) if found else "")

    def healthy_only(metric: str, health: str) -> str:
        return f"({g(metric)} and on ({j}, worker) {g(health)} == 1)"

    site = by(tuple(lab for lab in settings.join_labels if lab in SITE_LABELS)) or j
    d = {s.id: s.defaults for s in GATEWAY_SIGNALS}
    w = settings.window(RATE)
    out = {}
    health = _either("smg_worker_health", g)
    out["gateway_no_healthy_worker"] = (f"max by ({j}) {health}", "{} < 1")
    pool_w = settings.window(d["gateway_pool_shrunk"]["window"])
    pool = _either("smg_worker_pool_size",
                   lambda m: f"sum by ({j}) ({g(m)})\n  / sum by ({j}) (max_over_time({g(m)}[{pool_w}]))")
    out["gateway_pool_shrunk"] = (pool, "{} < " + num(d["gateway_pool_shrunk"]["min_fraction"]))
    out["gateway_circuit_open"] = (f"max by ({j}, worker) {_either('smg_worker_cb_state', g)}",
                                   "{} == 1")
    flap_w = settings.window(d["gateway_circuit_flapping"]["window"])
    out["gateway_circuit_flapping"] = (
        _either("smg_worker_cb_transitions_total",
                lambda m: f"sum by ({j}, worker) (increase({g(m, OPEN)}[{flap_w}]))"),
        "{} >= " + num(d["gateway_circuit_flapping"]["opens"]))
    out["gateway_retries_exhausted"] = (
        _either("smg_worker_retries_exhausted_total", lambda m: f"sum by ({j}) (rate({g(m)}[{w}]))") + " * 60",
        "{} > " + num(d["gateway_retries_exhausted"]["per_minute"]))
    errors = (f"sum by ({j}) (rate({g('smg_http_responses_total', SERVER_ERROR)}[{w}]))\n"
              f"  / sum by ({j}) (rate({g('smg_http_responses_total')}[{w}]))\n"
              "  # the older router counts failed requests, not responses by status\n  or\n"
              f"  sum by ({j}) (rate({g('sgl_router_request_errors_total')}[{w}]))\n"
              f"  / sum by ({j}) (rate({g('sgl_router_requests_total')}[{w}]))")
    out["gateway_error_ratio"] = (f"(\n  {errors}\n)", "{} > " + num(d["gateway_error_ratio"]["max_ratio"]))
    out["gateway_rate_limited"] = (
        f"sum by ({j}) (rate({g('smg_http_rate_limit_total', REJECTED)}[{w}]))\n"
        f"/ sum by ({j}) (rate({g('smg_http_rate_limit_total')}[{w}]))",
        "(\n{}\n) > " + num(d["gateway_rate_limited"]["max_ratio"]))

    def mean(sum_series: str, count_series: str) -> str:
        return (f"sum by ({site}) (rate({sum_series}[{w}]))\n"
                f"  / sum by ({site}) (rate({count_series}[{w}]))")
    engine_e2e = native_metric_names("e2e")[0]
    engine_sel = sel(settings.sglang_selector, *([scope] if scope else []))
    rewritten = ("\n  # engines scraped through the gateway's /engine_metrics: `sglang:` rewritten to `sglang_`"
                 "\n  or\n  ")
    engine = "(\n  " + rewritten.join(mean(f"{e}_sum{engine_sel}", f"{e}_count{engine_sel}")
                                      for e in (engine_e2e, engine_e2e.replace(":", "_"))) + "\n)"
    out["gateway_latency_above_engines"] = (
        _either("smg_router_request_duration_seconds", lambda m: mean(g(m + "_sum"), g(m + "_count")))
        + f"\n- on ({site})\n" + engine,
        "(\n{}\n) > " + num(d["gateway_latency_above_engines"]["max_extra_seconds"]))
    # metrics-rs exports a counter once it is first incremented: either PD counter may be missing alone
    boot, xfer = (f"sum by ({j}) (rate({g(m)}[{w}]))"
                  for m in ("smg_pd_bootstrap_failures_total", "smg_pd_kv_transfer_failures_total"))
    out["gateway_pd_failures"] = (f"(\n  (\n    {boot}\n    or\n    0 * {xfer}\n  )\n  +\n"
                                  f"  (\n    {xfer}\n    or\n    0 * {boot}\n  )\n) * 60",
                                  "{} > " + num(d["gateway_pd_failures"]["per_minute"]))
    disc_w = settings.window(d["gateway_discovery_failing"]["window"])
    out["gateway_discovery_failing"] = (
        f"sum by ({j}, source) (increase({g('smg_discovery_registrations_total', FAILED)}[{disc_w}]))",
        "{} >= " + num(d["gateway_discovery_failing"]["failures"]))
    li = d["gateway_load_imbalance"]
    pairs = [("smg_worker_requests_active", "smg_worker_health"),
             ("sgl_router_running_requests", "sgl_router_worker_health")]
    share = "\n  # the older router's spelling (sglang-router before 0.3.0)\n  or\n  ".join(
        f"min by ({j}) {healthy_only(a, h)}\n  / max by ({j}) {healthy_only(a, h)}" for a, h in pairs)
    busiest = "\n  or\n  ".join(f"max by ({j}) {healthy_only(a, h)}" for a, h in pairs)
    out["gateway_load_imbalance"] = (
        f"(\n  {share}\n)",
        "{} < " + num(li["max_min_share"]) + f"\nand on ({j})\n(\n  {busiest}\n) >= " + num(li["min_busy"]))
    return out


def alerts(settings: RuleSettings) -> list[Alert]:
    plotted = exprs(settings)
    out = []
    for s in GATEWAY_SIGNALS:
        value, test = plotted[s.id]
        out.append(Alert(s.alert, test.format(value) + "\n", _for(settings, s), s.severity, s.summary,
                         s.description, s.page, {"signal": s.id, "component": "gateway"}, "gateway", s.id,
                         s.meaning, s.impact))
    return decorate(out, settings)


def _for(settings: RuleSettings, s: GatewaySignal) -> str:
    if settings.short_windows and parse_duration(s.for_) > 0:
        return settings.short_for
    return s.for_


def rule_file(settings: RuleSettings) -> dict:
    return {"groups": [{"name": "sglang-gateway.alerts", "rules": [a.rule() for a in alerts(settings)]}]}


# ---- promtool tests: series in the label sets the gateway's code emits (exporter/releases/gateway.json) ----

GATEWAY_JOB = "sglang-gateway"
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
    return out


def test_file(settings: RuleSettings) -> dict:
    return {"rule_files": [f"../{RULES}"], "evaluation_interval": fmt_duration(interval(settings)),
            "tests": tests(settings)}


# ---- runbooks ----

def runbook(a: Alert, s: GatewaySignal) -> str:
    fams = ", ".join(f"`{name}`" for fam in s.families for name in spellings(fam))
    lines = [f"# {a.name}", "",
             "<!-- Generated by exporter/generate/gateway.py from exporter/catalog_gateway.py; do not edit by hand. "
             "Run `sglang-exporter generate`. -->", "",
             f"Severity: **{a.severity}** ({'pages' if a.page else 'opens a ticket'}). Source: the SGLang gateway's "
             f"own metrics port (SGLang Model Gateway or sglang-router), families {fams}.", "",
             "## Meaning", "", s.meaning, "", "## Impact", "", s.impact, "",
             "## Diagnosis", "", "The alert's expression (run it in Prometheus; the Gateway dashboard plots it):",
             "", "```promql", a.expr.rstrip(), "```", ""]
    lines += [f"{k}. {c}" for k, c in enumerate(s.checks, 1)]
    lines += ["", "## Mitigation", "",
              "Fix the cause the diagnosis names; the engine dashboards (linked from the Gateway board) show the "
              "workers' own verdicts.", ""]
    return "\n".join(lines)


# ---- dashboard ----

def _panel(s: GatewaySignal, plotted: str, threshold: float | None) -> Panel:
    unit = {"gateway_no_healthy_worker": "short", "gateway_circuit_open": "short",
            "gateway_circuit_flapping": "short", "gateway_retries_exhausted": "short",
            "gateway_latency_above_engines": "s"}.get(s.id, "percentunit")
    return Panel(s.title, "timeseries", unit, shows=s.meaning, good="on the healthy side of the line (no alert).",
                 bad=s.checks[0], targets=[Target(plotted.strip())],
                 steps=[(None, "transparent"), (threshold, "red")] if threshold is not None else None,
                 style="dashed" if threshold is not None else "off")


def dashboard(settings: RuleSettings) -> dict:
    plotted = exprs(settings, 'namespace=~"$namespace"')
    panels = []
    for s in GATEWAY_SIGNALS:
        value, test = plotted[s.id]
        thr = _threshold(test)
        panels.append(_panel(s, value, thr))
    spec = DashboardSpec(UID, "SGLang gateway", "The SGLang gateway (SGLang Model Gateway smg_* or sglang-router "
                         "sgl_router_*) in front of the engines: worker health, circuit breakers, retries, errors, "
                         "latency beyond the engines', load balance. Each panel is an alert's value.", panels)
    content = dashboard_content(spec)
    content["templating"] = {"list": [content["templating"]["list"][0], {
        "allValue": ".*", "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": DATASOURCE, "hide": 0, "includeAll": True, "label": "Namespace", "multi": True,
        "name": "namespace", "options": [],
        "query": 'label_values({__name__=~"smg_worker_health|sgl_router_worker_health"}, namespace)',
        "refresh": 2, "regex": "", "skipUrlSync": False, "sort": 1, "type": "query"}]}
    board = decorate_dashboard({UID: content})[UID]
    board["links"] = copy.deepcopy(board["links"]) + [
        {"asDropdown": False, "icon": "dashboard", "includeVars": False, "keepTime": True, "tags": [],
         "targetBlank": False, "title": title, "tooltip": "the engines behind the gateway", "type": "link",
         "url": f"/d/{uid}?var-namespace=${{namespace}}"} for title, uid in ENGINE_BOARDS]
    board["tags"] = sorted(set(board["tags"]) | {"sglang-gateway"})
    return board


def _threshold(test: str) -> float | None:
    head = test.split("\n")[-1] if test.startswith("(") else test.split("\n")[0]
    for op in ("<", ">=", ">", "=="):
        if f" {op} " in head:
            try:
                return float(head.rsplit(f" {op} ", 1)[1].split()[0])
            except (ValueError, IndexError):
                return None
    return None


def render(config: Config) -> dict[str, str]:
    settings = RuleSettings(config)
    files = {f"alerts/{RULES}": HEADER + dump(rule_file(settings)),
             f"alerts/{TESTS}": HEADER + RUN + dump(test_file(settings)),
             f"dashboards/{UID}.json": dashboard_json(dashboard(settings))}
    files["docs/gateway.md"] = doc(settings)
    files.update(helm_files(settings, files[f"dashboards/{UID}.json"]))
    files.update(component_files(settings, files[f"dashboards/{UID}.json"]))
    for a in alerts(settings):
        files[f"docs/runbooks/{a.name}.md"] = runbook(a, GATEWAY_SIGNALS_BY_ID[a.signal or ""])
    return files


# ---- where it runs: the Helm chart's gateway objects and a kustomize Component (no sidecar beside a gateway) ----

CHART = "deploy/helm/sglang-exporter"
COMPONENT = "deploy/kubernetes/components/gateway"
GATEWAY_LABEL = "sglang-exporter.io/gateway"      # the kustomize Component's opt-in pod label
METRICS_PORT = 29000                              # the gateway's --prometheus-port default
DEPLOY_HEADER = ("# GENERATED by exporter/generate/gateway.py from {src}; do not edit.\n"
                 "# Regenerate: sglang-exporter generate\n")

HELM_TEMPLATE = """\
{{- /* The gateway's own metrics port (no sidecar beside a gateway): a monitor, the rules, under gateway.enabled. */}}
{{- $g := .Values.gateway }}
{{- if $g.enabled }}
{{- if not (or $g.podSelector $g.service.selector) }}
{{- fail "gateway.podSelector (PodMonitor) or gateway.service.selector (ServiceMonitor): the labels of your gateway" }}
{{- end }}
{{- if eq $g.monitor "PodMonitor" }}
apiVersion: monitoring.coreos.com/v1
kind: PodMonitor
metadata:
  name: {{ include "sglang-exporter.fullname" . }}-gateway
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "sglang-exporter.monitoringLabels" . | nindent 4 }}
spec:
  selector:
    {{- toYaml $g.podSelector | nindent 4 }}
  podMetricsEndpoints:
    - targetPort: {{ $g.port }}
      path: /metrics
      interval: {{ .Values.monitoring.interval }}
      scrapeTimeout: {{ .Values.monitoring.scrapeTimeout }}
      relabelings:
        - targetLabel: job
          replacement: @JOB@
{{- else if eq $g.monitor "ServiceMonitor" }}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "sglang-exporter.fullname" . }}-gateway
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "sglang-exporter.monitoringLabels" . | nindent 4 }}
spec:
  selector:
    {{- toYaml $g.service.selector | nindent 4 }}
  endpoints:
    - port: {{ $g.service.port }}
      path: /metrics
      interval: {{ .Values.monitoring.interval }}
      scrapeTimeout: {{ .Values.monitoring.scrapeTimeout }}
      relabelings:
        - targetLabel: job
          replacement: @JOB@
{{- else }}
{{- fail (printf "gateway.monitor: expected PodMonitor or ServiceMonitor, got %q" $g.monitor) }}
{{- end }}
---
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: {{ include "sglang-exporter.fullname" . }}-gateway-rules
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "sglang-exporter.monitoringLabels" . | nindent 4 }}
@SPEC@{{- end }}
"""


def helm_files(settings: RuleSettings, board: str) -> dict[str, str]:
    spec = yaml.dump({"spec": rule_file(settings)}, Dumper=BlockDumper, sort_keys=False, width=120,
                     allow_unicode=True, default_flow_style=False)
    template = (DEPLOY_HEADER.format(src=f"alerts/{RULES}") + HELM_TEMPLATE.replace("@JOB@", GATEWAY_JOB)
                .replace("@SPEC@", spec.replace("{{", '{{ "{{" }}')))
    return {f"{CHART}/templates/gateway.yaml": template, f"{CHART}/files/dashboards/{UID}.json": board}


def component_files(settings: RuleSettings, board: str) -> dict[str, str]:
    labels = {"app.kubernetes.io/name": "sglang-gateway", "app.kubernetes.io/part-of": "sglang-exporter"}
    monitor = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
               "metadata": {"name": "sglang-gateway", "labels": labels},
               "spec": {"selector": {"matchLabels": {GATEWAY_LABEL: "true"}},
                        "podMetricsEndpoints": [{"targetPort": METRICS_PORT, "path": "/metrics", "interval": "15s",
                                                 "scrapeTimeout": "10s", "relabelings": [
                                                     {"targetLabel": "job", "replacement": GATEWAY_JOB}]}]}}
    rule = {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "sglang-gateway", "labels": labels}, "spec": rule_file(settings)}
    board_cm = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "sglang-gateway-dashboard", "labels": {**labels, "grafana_dashboard": "1"},
                             "annotations": {"grafana_folder": "SGLang"}},
                "data": {f"{UID}.json": board}}
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component",
                     "resources": ["podmonitor.yaml", "prometheusrule.yaml", "dashboard-configmap.yaml"]}
    note = (f"# Label your gateway pods `{GATEWAY_LABEL}: \"true\"` (its metrics on :{METRICS_PORT}, the default "
            "--prometheus-port)\n# and list this directory under `components:` (docs/gateway.md).\n")
    return {f"{COMPONENT}/kustomization.yaml": DEPLOY_HEADER.format(src="exporter/catalog_gateway.py") + note
            + _yaml(kustomization),
            f"{COMPONENT}/podmonitor.yaml": DEPLOY_HEADER.format(src="exporter/generate/gateway.py") + _yaml(monitor),
            f"{COMPONENT}/prometheusrule.yaml": DEPLOY_HEADER.format(src=f"alerts/{RULES}") + _yaml(rule),
            f"{COMPONENT}/dashboard-configmap.yaml": DEPLOY_HEADER.format(src=f"dashboards/{UID}.json")
            + _yaml(board_cm)}


def _yaml(obj) -> str:
    return yaml.dump(obj, Dumper=BlockDumper, sort_keys=False, width=1000, allow_unicode=True)


# ---- docs/gateway.md: the signals and the compatibility table, from the catalog and the release data ----

def doc(settings: RuleSettings) -> str:
    from exporter.releases import gateway as rel
    lines = ["# Monitoring SGLang's gateway", "",
             "<!-- Generated by exporter/generate/gateway.py from exporter/catalog_gateway.py and "
             "exporter/releases/gateway.json; do not edit by hand. Run `sglang-exporter generate`. -->", "",
             "SGLang's gateway (the SGLang Model Gateway, `smg_*` metrics, and the older sglang-router, "
             "`sgl_router_*` before its 0.3.0) serves Prometheus metrics on its own port (`--prometheus-port`, "
             f"default {METRICS_PORT}). No sidecar runs beside it: Prometheus scrapes that port and the rules "
             f"below judge it. Files: `alerts/{RULES}` (promtool tests in `alerts/{TESTS}`), "
             f"`dashboards/{UID}.json` (links to the engine boards), the chart's `gateway:` values, the kustomize "
             f"Component `{COMPONENT}` (label the gateway pods `{GATEWAY_LABEL}: \"true\"`).", "",
             "Each rule reads a family under every spelling that carries its meaning (`smg_` first, then "
             "`sgl_router_`), with the label names the gateway's code emits: `status_code` (not `status`), "
             "`result` (not `decision`), `worker`. Worker health is 1 healthy, 0 unhealthy, -1 removed (the "
             "gateway cannot delete a series); pool size counts workers, it is not their health.", "",
             "## Signals", "", "| alert | severity | for | fires when | families |", "|---|---|---|---|---|"]
    for a in alerts(settings):
        s = GATEWAY_SIGNALS_BY_ID[a.signal or ""]
        fams = ", ".join(f"`{n}`" for f in s.families for n in spellings(f))
        lines.append(f"| [{a.name}](runbooks/{a.name}.md) | {a.severity} | {a.for_} | {s.meaning} | {fams} |")
    lines += ["", "## Families per release", "",
              f"Read by `scripts/gateway-releases` from the gateway's source at its release tags "
              f"({', '.join(rel.releases('gateway'))}) and from the PyPI `sglang-router` wheels "
              f"({', '.join(rel.releases('router'))}; names from the compiled extension's strings). "
              "`-`: still defined by the newest release of that line.", "",
              "| family | type | labels | gateway (smg tags) | sglang-router wheels |", "|---|---|---|---|---|"]
    for name, f in sorted(rel.families().items()):
        spans = [rel.span(name, line) for line in rel.LINES]
        cells = ["" if sp is None else f"{sp[0]} – {sp[1] or '-'}" for sp in spans]
        lines.append(f"| `{name}` | {f.type} | {', '.join(f.labels)} | {cells[0]} | {cells[1]} |")
    lines += ["", "Renamed (the same meaning): " + ", ".join(f"`{o}` → `{n}`" for o, n in rel.renames().items())
              + ".", "", "## Refresh", "", "```sh",
              "pip download --no-deps --only-binary=:all: sglang-router==X -d WHEELS/X   # per version",
              "scripts/gateway-releases refresh --source <git dir of lightseekorg/smg> --wheels WHEELS",
              "sglang-exporter generate", "```", "",
              "## Rehearse", "",
              "`exporter/simulate/gateway.py` serves a gateway's /metrics in a release's names and labels "
              "(`GatewaySimulator(\"1.9.0\")`, or `\"0.2.4\"` for `sgl_router_*`), with workers going unhealthy "
              "and breakers opening; `tests/test_gateway_e2e.py` pages SGLangGatewayNoHealthyWorker through a "
              "real Prometheus and Alertmanager with it.", "",
              "## Not yet", "",
              "Cache-aware routing degraded and joined judgements (a gateway page naming the engine's own "
              "verdict, with inhibition so one incident pages once) are not built yet.", ""]
    return "\n".join(lines)
