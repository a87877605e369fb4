"""End to end: simulated SGLang -> sglang-exporter serve -> real Prometheus (generated rules, short windows)
-> real Alertmanager (the example routing) -> webhook receivers. One shared stack; see docs/e2e.md and
tests/e2e_harness.py."""
from __future__ import annotations

import re
import subprocess
import urllib.parse
from collections import Counter

import pytest
import yaml
from e2e_harness import (
    AM_EXAMPLE,
    JOB,
    NAMESPACE,
    OTHER_CLUSTER,
    RECEIVERS,
    STALL_SECONDS,
    Stack,
    alertmanager_config,
    cases,
    documented_signals,
    get_json,
    receiver_for,
    routing_tree,
)
from helpers import PROMETHEUS_RELEASES, require_tool, wait_until

from exporter import catalog
from exporter.generate import records
from exporter.generate import rules as gen
from exporter.generate.promql import parse_duration
from exporter.simulate import CRASH_CAUSE, REQUEST_ERROR_CAUSE
from exporter.web.expose import cause_label

pytestmark = pytest.mark.real

CASES = cases()
CASE_IDS = [c.name for c in CASES]
HEALTHY = {c.name for c in CASES if not c.signals}
TUNING = {"too_conservative", "queue_overloaded", "cuda_graph_off", "headroom_high", "headroom_low",
          "concurrency_capped"}


# torn down after this file's tests of one release: its ~20 exporters, Prometheus and Alertmanager, and the
# threads feeding them in this process, must not run (and allocate) under later tests. Both Prometheus stacks
# (helpers.PROMETHEUS_RELEASES): the machine's own, and the 3.x and Alertmanager 0.3x clusters run today
@pytest.fixture(scope="module", params=PROMETHEUS_RELEASES)
def stack(request):
    s = Stack(CASES, release=request.param)
    request.addfinalizer(s.close)      # runs even when start() fails half way
    s.start()
    s.settle()
    return s


def _explain(stack, name=None) -> str:
    lines = [f"settled: {stack.settled} {stack.settle_error}", f"timings: {stack.timings}"]
    missing = stack.want_notified() - stack.notified()
    if missing:
        lines.append(f"missing notifications: {sorted(missing)}")
    if name is not None:
        r = stack.running[name]
        lines.append(f"exporter signals before Prometheus: {r.signals_before_prometheus}")
        lines.append(f"exporter output:\n{r.proc.tail(15)}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ static: the inputs

def test_every_documented_scenario_is_covered():
    names = set(CASE_IDS)
    assert set(documented_signals()) <= names
    # the brief's groups are all there
    assert {"healthy_offline", "restart", "retraction_storm", "stalled", "oom_prefill", "oom_decode"} <= names
    assert names >= TUNING
    for c in CASES:
        for sid in c.signals:
            assert catalog.SIGNALS_BY_ID[sid].alert, sid


def test_alertmanager_config_changes_only_urls_and_timings():
    example = yaml.safe_load(AM_EXAMPLE.read_text())
    cfg = alertmanager_config(example, "http://127.0.0.1:1")
    assert routing_tree(cfg) == routing_tree(example)
    assert cfg["inhibit_rules"] == example["inhibit_rules"]
    urls = {r["name"]: [w["url"] for w in r["webhook_configs"]] for r in cfg["receivers"]}
    assert urls == {n: [f"http://127.0.0.1:1/{n}"] for n in RECEIVERS}
    assert cfg["route"]["group_wait"] != example["route"]["group_wait"]   # it was shortened


def test_transformed_config_passes_amtool(tmp_path):
    amtool = require_tool("amtool")
    cfg = alertmanager_config(yaml.safe_load(AM_EXAMPLE.read_text()), "http://127.0.0.1:1")
    (tmp_path / "am.yml").write_text(yaml.safe_dump(cfg))
    r = subprocess.run([amtool, "check-config", str(tmp_path / "am.yml")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


# ------------------------------------------------------------------------------ the running stack

def test_running_alertmanager_has_the_example_routing(stack):
    status = get_json(f"{stack.am_url}/api/v2/status")
    running = yaml.safe_load(status["config"]["original"])
    example = yaml.safe_load(AM_EXAMPLE.read_text())
    # Alertmanager prints its defaults too: compare what the example sets
    def strip(route):
        return {k: ([strip(c) for c in v] if k == "routes" else sorted(v) if k == "matchers" else v)
                for k, v in route.items()
                if k in ("receiver", "group_by", "matchers", "routes", "continue") and v not in (False, None)}
    assert strip(running["route"]) == strip(routing_tree(example)["route"])
    def rule(r):   # Alertmanager sorts the matchers it prints
        return {k: sorted(r[k]) if k != "equal" else r[k] for k in ("source_matchers", "target_matchers", "equal")}
    assert [rule(r) for r in running["inhibit_rules"]] == [rule(r) for r in example["inhibit_rules"]]
    assert {r["name"] for r in running["receivers"]} == set(RECEIVERS)


def test_prometheus_loaded_the_generated_rules(stack):
    groups = get_json(f"{stack.prom_url}/api/v1/rules")["data"]["groups"]
    loaded = {r["name"] for g in groups for r in g["rules"] if r["type"] == "alerting"}
    params = stack.params
    assert loaded == {a.name for a in gen.all_alerts(params)}
    assert {s.alert.name for s in catalog.SIGNALS if s.alert} <= loaded
    health = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r.get("health") == "err"]
    assert not health, health
    # the short windows are in force
    stalled = next(r for g in groups for r in g["rules"] if r["name"] == "SGLangStalled")
    assert stalled["duration"] == parse_duration(params.short_for)


def test_every_exporter_is_a_target_with_join_labels(stack):
    targets = get_json(f"{stack.prom_url}/api/v1/targets")["data"]["activeTargets"]
    got = {t["labels"]["instance"]: t for t in targets if t["labels"]["job"] == JOB}
    for name, r in stack.running.items():
        t = got.get(r.instance)
        assert t, f"{name}: {r.instance} is not a target"
        assert t["health"] == "up", (name, t.get("lastError"))
        assert {k: t["labels"][k] for k in ("job", "namespace", "pod")} == \
            {"job": JOB, "namespace": NAMESPACE, "pod": name}
    assert len(got) == len(stack.running)


@pytest.mark.parametrize("name", CASE_IDS)
def test_exporter_signals(stack, name):
    """The exporter itself judges what the scenario is meant to show (before Prometheus is involved)."""
    r = stack.running[name]
    doc = get_json(f"http://{r.instance}/api/v1/signals")
    firing = {s["id"] for s in doc["signals"] if s["state"] == "firing"}
    assert doc["profile"] == r.case.profile
    assert firing == r.case.signals, _explain(stack, name)


@pytest.mark.parametrize("name", CASE_IDS)
def test_scenario_alerts(stack, name):
    """Exactly the expected alerts fire for this instance, each reaches its receiver (or is inhibited by the
    expected alert), with the catalog's labels and texts."""
    r = stack.running[name]
    inst = r.instance
    expected = stack.expected[name]
    why = _explain(stack, name)

    # Prometheus: the alerts firing for this instance are exactly the expected ones (none pending either)
    prom = [a for a in stack.prom_alerts() if a["labels"].get("instance") == inst]
    states = {a["labels"]["alertname"]: a["state"] for a in prom}
    assert states == {n: "firing" for n in expected}, f"{name}: Prometheus alerts {states}\n{why}"

    # Alertmanager: inhibited exactly as the inhibit rules say, by the expected alert of the same instance
    am = {a["labels"]["alertname"]: a for a in stack.am_alerts() if a["labels"].get("instance") == inst}
    assert set(am) == set(expected), f"{name}: Alertmanager holds {sorted(am)}\n{why}"
    fingerprints = {a["fingerprint"]: n for n, a in am.items()}
    for n, e in expected.items():
        by = sorted(fingerprints.get(fp, fp) for fp in am[n]["status"]["inhibitedBy"])
        if e.inhibited_by:
            assert am[n]["status"]["state"] == "suppressed" and by == [e.inhibited_by], (n, am[n]["status"])
        else:
            assert am[n]["status"]["state"] == "active" and not by, (n, am[n]["status"])

    # Receivers: each visible alert notified at its receiver, nothing else for this instance
    notes = [(path, note, a) for path, note, a in stack.webhook.alerts() if a["labels"].get("instance") == inst]
    got = Counter((path, a["labels"]["alertname"], a["status"]) for path, _, a in notes)
    want = {(e.receiver, n) for n, e in expected.items() if not e.inhibited_by}
    assert {(p, n) for p, n, _ in got} == want, f"{name}: notified {dict(got)}\n{why}"
    assert all(st == "firing" for _, _, st in got), f"{name}: resolved notifications {dict(got)}"
    for path, note, a in notes:
        e = expected[a["labels"]["alertname"]]
        assert note["receiver"] == path
        assert a["labels"] == e.labels, (a["labels"], e.labels)
        assert a["annotations"]["summary"] == e.summary
        assert a["annotations"]["runbook_url"] == e.runbook_url
        assert e.description_re.fullmatch(a["annotations"]["description"]), \
            (a["annotations"]["description"], e.description_re.pattern)


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_healthy_pages_nobody(stack, name):
    inst = stack.running[name].instance
    assert not stack.expected[name]
    notes = [(p, a["labels"]["alertname"]) for p, _, a in stack.webhook.alerts()
             if a["labels"].get("instance") == inst]
    assert not notes, notes


@pytest.mark.parametrize("name", ["retraction_storm", "retraction_storm_metrics_only"])
def test_retraction_storm_pages_and_inhibits_frequent(stack, name):
    """From the log, and from SGLang's /metrics alone (an exporter given no log)."""
    inst = stack.running[name].instance
    notes = {(p, a["labels"]["alertname"]) for p, _, a in stack.webhook.alerts()
             if a["labels"].get("instance") == inst}
    assert {n for p, n in notes if p == "page"} == {"SGLangRetractionStorm"}, _explain(stack, name)
    # the full KV cache behind the storm is also a ticket (kv_pressure, judged from /metrics), nothing else
    tickets = {n for n, e in stack.expected[name].items() if e.receiver != "page" and not e.inhibited_by}
    assert {n for p, n in notes if p != "page"} == tickets == {"SGLangKVPressure"}, _explain(stack, name)
    am = {a["labels"]["alertname"]: a for a in stack.am_alerts() if a["labels"].get("instance") == inst}
    freq = am["SGLangRetractionsFrequent"]["status"]
    assert freq["state"] == "suppressed"
    assert freq["inhibitedBy"] == [am["SGLangRetractionStorm"]["fingerprint"]]


@pytest.mark.parametrize("name", ["stalled", "stalled_tuning"])
def test_stalled_pages_and_inhibits_its_tuning_alerts(stack, name):
    inst = stack.running[name].instance
    am = {a["labels"]["alertname"]: a for a in stack.am_alerts() if a["labels"].get("instance") == inst}
    assert "SGLangStalled" in am, _explain(stack, name)
    stalled_fp = am["SGLangStalled"]["fingerprint"]
    others = {n: a for n, a in am.items() if n != "SGLangStalled"}
    assert others, f"{name}: no tuning alert to inhibit: {sorted(am)}"
    if name == "stalled_tuning":
        assert "SGLangKVCacheUnderused" in others
    for n, a in others.items():
        assert a["labels"]["severity"] in ("warning", "info")
        assert a["status"]["inhibitedBy"] == [stalled_fp], (n, a["status"])
    notes = {(p, a["labels"]["alertname"]) for p, _, a in stack.webhook.alerts()
             if a["labels"].get("instance") == inst}
    assert notes == {("page", "SGLangStalled")}


def test_a_crash_pages_with_its_cause_line(stack):
    """server_crash: a scheduler traceback (NCCL error) and `Received sigquit`, then silence. The exporter
    judges server_crashed with the traceback's last line; Prometheus fires SGLangServerCrashed with its class
    as a label and the line in its description; Alertmanager pages."""
    r = stack.running["server_crash"]
    doc = get_json(f"http://{r.instance}/api/v1/signals")
    crashed = next(s for s in doc["signals"] if s["id"] == "server_crashed")
    assert crashed["state"] == "firing", _explain(stack, "server_crash")
    assert crashed["cause"] == {"class": "nccl", "line": CRASH_CAUSE}
    assert doc["verdict"] == "failed"
    pages = [a for p, _, a in stack.webhook.alerts()
             if p == "page" and a["labels"].get("instance") == r.instance]
    assert [a["labels"]["alertname"] for a in pages] == ["SGLangServerCrashed"], _explain(stack, "server_crash")
    # the class is a label (a short fixed list, for routing); the line only in the text: a label would
    # split the incident each time the line changed
    assert pages[0]["labels"]["cause_class"] == "nccl" and "cause" not in pages[0]["labels"]
    # the label (read by the description) has its numbers as N: one series per kind of failure
    assert f"Cause (nccl): {cause_label(CRASH_CAUSE)}." in pages[0]["annotations"]["description"]
    assert pages[0]["annotations"]["description"].startswith(f"{NAMESPACE}/server_crash ({r.instance}): ")


def _ratio_in(description: str) -> float:
    """The share a description names ("... 19.87% of requests failed ..."), as a ratio."""
    found = re.search(r": ([0-9.]+)% of requests failed", description)
    assert found, description
    return float(found.group(1)) / 100


def test_nearly_all_errors_page_once_naming_the_ratio(stack):
    """errors_nearly_all: every inference request is answered 500 (SGLang 0.5.23's http_responses_total, and
    `Error in request: ...` lines) while batch lines and health checks go on. The exporter judges
    errors_nearly_all (the GET /health 200s would dilute the share to ~94 % if counted), not a crash;
    Prometheus fires SGLangErrorsNearlyAll and SGLangErrorRate; Alertmanager pages once and inhibits the
    ticket."""
    name = "errors_nearly_all"
    r = stack.running[name]
    doc = get_json(f"http://{r.instance}/api/v1/signals")
    by_id = {s["id"]: s for s in doc["signals"]}
    assert by_id["errors_nearly_all"]["state"] == "firing", _explain(stack, name)
    assert by_id["errors_nearly_all"]["value"] == 1.0, by_id["errors_nearly_all"]
    assert "http_responses_total" in by_id["errors_nearly_all"]["detail"], by_id["errors_nearly_all"]
    assert REQUEST_ERROR_CAUSE in by_id["errors_nearly_all"]["detail"], by_id["errors_nearly_all"]
    assert by_id["server_crashed"]["state"] != "firing", by_id["server_crashed"]
    notes = [(p, note, a) for p, note, a in list(stack.webhook.received)
             for a in note["alerts"] if note["groupLabels"].get("pod") == name]
    pages = [(note, a) for p, note, a in notes if p == "page"]
    assert [a["labels"]["alertname"] for _, a in pages] == ["SGLangErrorsNearlyAll"], _explain(stack, name)
    assert pages[0][1]["annotations"]["description"].startswith(f"{NAMESPACE}/{name} ({r.instance}): ")
    assert _ratio_in(pages[0][1]["annotations"]["description"]) == 1.0
    assert not [a for p, _, a in notes if p == "ticket"], "the ticket is inhibited by the page"
    am = {a["labels"]["alertname"]: a for a in stack.am_alerts() if a["labels"].get("instance") == r.instance}
    assert am["SGLangErrorRate"]["status"]["inhibitedBy"] == [am["SGLangErrorsNearlyAll"]["fingerprint"]]


def test_elevated_errors_ticket_without_a_page(stack):
    """errors_elevated: one request in five fails: error_rate (above 5 %) opens a ticket naming the share;
    errors_nearly_all (95 %) does not fire, and nothing pages."""
    name = "errors_elevated"
    r = stack.running[name]
    doc = get_json(f"http://{r.instance}/api/v1/signals")
    by_id = {s["id"]: s for s in doc["signals"]}
    assert by_id["error_rate"]["state"] == "firing", _explain(stack, name)
    assert 0.17 <= by_id["error_rate"]["value"] <= 0.23, by_id["error_rate"]
    assert by_id["errors_nearly_all"]["state"] == "ok", by_id["errors_nearly_all"]
    notes = [(p, a) for p, _, a in stack.webhook.alerts() if a["labels"].get("instance") == r.instance]
    assert [(p, a["labels"]["alertname"]) for p, a in notes] == [("ticket", "SGLangErrorRate")], \
        _explain(stack, name)
    assert 0.17 <= _ratio_in(notes[0][1]["annotations"]["description"]) <= 0.23, notes[0][1]["annotations"]


def test_stall_is_seen_from_silence_alone(stack):
    """stalled_tuning has no watchdog line: the exporter sees the stall from the silence (queue > 0, no
    batch line for stall_seconds of wall time)."""
    r = stack.running["stalled_tuning"]
    assert not any("atchdog" in line for line in r.log.read_text().splitlines())
    doc = get_json(f"http://{r.instance}/api/v1/signals")
    st = next(s for s in doc["signals"] if s["id"] == "stalled")
    assert st["state"] == "firing" and st["value"] > STALL_SECONDS, st
    assert "watchdog" not in st["detail"], st


@pytest.mark.parametrize("name", sorted(TUNING))
def test_tuning_scenarios_ticket(stack, name):
    inst = stack.running[name].instance
    notes = {(p, a["labels"]["alertname"]) for p, _, a in stack.webhook.alerts()
             if a["labels"].get("instance") == inst}
    assert notes and {p for p, _ in notes} == {"ticket"}, f"{notes}\n{_explain(stack, name)}"


def test_watchdog_reaches_deadmansswitch_only(stack):
    dogs = [(p, a) for p, _, a in stack.webhook.alerts() if a["labels"]["alertname"] == gen.WATCHDOG]
    assert dogs, _explain(stack)
    for p, a in dogs:
        assert p == "deadmansswitch"
        assert a["labels"] == {"alertname": gen.WATCHDOG, "severity": "info"}
        assert receiver_for(a["labels"]) == "deadmansswitch"


def test_nothing_else_was_notified(stack):
    """Every notification belongs to an expected (instance, alert) or is the watchdog; none resolved."""
    want = stack.want_notified()
    stray = [(p, a["labels"], a["status"]) for p, _, a in stack.webhook.alerts()
             if (p, a["labels"].get("instance", ""), a["labels"]["alertname"]) not in want
             or a["status"] != "firing"]
    assert not stray, stray
    # and in Prometheus: no alert outside the expected ones (e.g. an instance-less absent() alert)
    fired = {(stack.running[n].instance, a) for n, exp in stack.expected.items() for a in exp}
    extra = [(a["labels"], a["state"]) for a in stack.prom_alerts()
             if a["labels"]["alertname"] != gen.WATCHDOG
             and (a["labels"].get("instance", ""), a["labels"]["alertname"]) not in fired]
    assert not extra, extra
    assert stack.settled, _explain(stack)


def test_every_process_still_running(stack):
    dead = [(p.name, p.proc.returncode, p.tail(10)) for p in stack.procs if not p.alive()]
    assert not dead, dead


def test_one_page_per_incident_with_both_rule_sets(stack):
    """Both rule files are loaded and both of every pod's targets scraped (the sidecar's and the simulator's
    own /metrics, same namespace and pod): each paging scenario reaches the page receiver in exactly one
    notification, grouped by the pod, and no native alert fires for a pod whose sidecar is scraped, though
    SGLang's own numbers show the storm (the native rule's input is over its threshold)."""
    assert stack.settled, _explain(stack)
    notes = [note for path, note, _ in list(stack.webhook.received) if path == "page"]
    pages = Counter(note["groupLabels"].get("pod", "") for note in notes if note.get("status") == "firing")
    paging = {name for name, exp in stack.expected.items()
              if any(e.receiver == "page" and not e.inhibited_by for e in exp.values())}
    assert {"retraction_storm", "oom_decode", "server_crash", "errors_nearly_all"} <= paging, sorted(paging)
    assert {pod: n for pod, n in pages.items() if n != 1} == {}, (dict(pages), _explain(stack))
    assert set(pages) == paging, (dict(pages), sorted(paging))
    for note in notes:
        assert set(note["groupLabels"]) <= {"cluster", "namespace", "pod"}, note["groupLabels"]
    # the native storm rule had its input: SGLang's own retraction rate is a storm there
    record = next(r["record"] for r in records.native_recording_rules(stack.params) if "retracted" in r["record"])
    query = urllib.parse.quote(f'max_over_time({record}{{pod="retraction_storm"}}[5m])')
    rate = get_json(f"{stack.prom_url}/api/v1/query?query={query}")["data"]["result"]
    storm = catalog.SIGNALS_BY_ID["retraction_storm"].defaults["per_minute"]
    assert rate and float(rate[0]["value"][1]) * 60 >= storm, rate
    native = [a["labels"] for a in stack.prom_alerts() if a["labels"]["alertname"].startswith("SGLangNative")]
    assert not native, native


def test_a_vanished_cluster_pages_alone(stack):
    """Runs last (it changes the stack). A second cluster, whose one sidecar is the twin of a healthy pod
    (same namespace, pod and address), stayed quiet so far; its service discovery now finds nothing. The
    whole fleet still reports (`absent()` would stay silent), yet SGLangExportersVanished pages for that
    cluster, once, and for no other."""
    assert not [a for a in stack.prom_alerts() if a["labels"].get("cluster") == OTHER_CLUSTER]
    stack.vanish_cluster()

    def paged():
        return [n for p, n, _ in list(stack.webhook.received)
                if p == "page" and n["groupLabels"].get("cluster") == OTHER_CLUSTER]
    pages = wait_until(paged, timeout=90, interval=0.5, what=f"the page for cluster {OTHER_CLUSTER}")
    assert len(pages) == 1, pages
    assert [a["labels"] for a in pages[0]["alerts"]] == [
        {"alertname": "SGLangExportersVanished", "cluster": OTHER_CLUSTER, "severity": "critical"}]
    assert pages[0]["alerts"][0]["annotations"]["description"].startswith(f"{OTHER_CLUSTER}: none of the ")
    vanished = [a["labels"] for a in stack.prom_alerts() if a["labels"]["alertname"] == "SGLangExportersVanished"]
    assert vanished == [{"alertname": "SGLangExportersVanished", "cluster": OTHER_CLUSTER, "severity": "critical"}]
