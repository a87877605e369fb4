"""The gateway's rules and board select only series the gateway really emits (names and label names from the
release data, exporter/releases/gateway.json), under both spellings where both carry the meaning."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from exporter.catalog.gateway import GATEWAY_SIGNALS
from exporter.catalog.metrics import METRICS
from exporter.config import Config
from exporter.generate import gateway as gen
from exporter.generate.gateway_rules import joined_record
from exporter.generate.settings import RuleSettings
from exporter.releases import gateway as releases

RENDERED = gen.render(Config())
GROUP = yaml.safe_load(RENDERED[f"alerts/{gen.RULES}"])["groups"][0]["rules"]
RECORDED = {r["record"]: r["expr"] for r in GROUP if "record" in r}
# an alert that reads a record of its own group is checked on the join that record computes
RULES = [{**r, "expr": RECORDED.get(r["expr"].strip(), r["expr"])} for r in GROUP if "alert" in r]
BOARD = json.loads(RENDERED[f"dashboards/{gen.UID}.json"])
GATEWAY_NAME = re.compile(r"\b((?:smg|sgl_router)_[a-z0-9_]+)(\{[^}]*\})?")
SUFFIXES = ("_bucket", "_sum", "_count")


def _family(name: str) -> str:
    if name in releases.families():
        return name
    for suffix in SUFFIXES:
        if name.endswith(suffix) and name.removesuffix(suffix) in releases.families():
            return name.removesuffix(suffix)
    raise AssertionError(f"{name}: no gateway release emits it")


def _selections(expr: str):
    """(family, label names its matchers use) for every gateway series selector of a PromQL expression."""
    for name, matchers in GATEWAY_NAME.findall(expr):
        yield _family(name), set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!=|!~|=)", matchers or ""))


EXPRS = [(r["alert"], r["expr"]) for r in RULES] + [
    (p["title"], t["expr"]) for p in BOARD["panels"] for t in p.get("targets", [])]


@pytest.mark.parametrize(("where", "expr"), EXPRS, ids=[w for w, _ in EXPRS])
def test_every_selector_names_a_family_and_labels_the_gateway_emits(where, expr):
    identity = set(RuleSettings().join_labels) | {"namespace"}
    for family, labels in _selections(expr):
        emitted = set(releases.family(family).labels)
        assert labels - identity <= emitted, f"{where}: {family} has labels {sorted(emitted)}, not {labels}"
    # a `by`/`on` label beyond the target's identity must be one the grouped families carry (worker, le)
    grouped = set()
    for clause in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
        grouped |= {x.strip() for x in clause.split(",") if x.strip()}
    families = {f for f, _ in _selections(expr)}
    made = set(re.findall(r'"(\w+)",\s*"\$1"', expr))           # labels the rule writes with label_replace
    exporter = {lab for m in METRICS if m.name in expr for lab in m.labels}   # the sidecar's, in a joined rule
    for label in grouped - identity - made - exporter - {"le"}:
        assert any(label in releases.family(f).labels for f in families), f"{where}: no family carries {label}"


def test_the_joined_rules_read_only_what_the_sidecar_and_the_native_rules_provide():
    """The engine side of a joined rule: the sidecar's own families, and the per-model latency the native rules
    record (alerts/sglang-native.rules.yml)."""
    from exporter.generate.records import latency_record_sources
    settings = RuleSettings()
    recorded = set(latency_record_sources(settings))
    sidecar = {m.name for m in METRICS}
    for rule in RULES:
        for name in re.findall(r"\bsglang_exporter_[a-z_]+", rule["expr"]):
            assert name in sidecar, f"{rule['alert']}: the sidecar exports no {name}"
        for name in re.findall(r"\b[a-z_]+:[a-z_]+:[a-z0-9_]+\b", rule["expr"]):
            assert name in recorded, f"{rule['alert']}: no native rule records {name}"


def test_the_joined_alerts_carry_no_churny_label():
    """The cause line and the gateway's state change within one incident: as labels they would end the alert and
    start another (a second page). They are read into the description; the labels are the engine's identity, the
    worker and the engine's verdict (a signal id)."""
    joined = [s for s in GATEWAY_SIGNALS if s.engine_signals]
    assert {s.alert for s in joined} >= {"SGLangGatewayWorkerEngineCrashed", "SGLangGatewayWorkerEngineFailing",
                                         "SGLangGatewayCutsOffHealthyEngine"}
    for s in joined:
        rule = next(r for r in RULES if r["alert"] == s.alert)
        copied = " ".join(re.findall(r"group_left \(([^)]*)\)", rule["expr"]))
        assert "cause" not in copied and "state" not in copied, copied
        assert not re.search(r"\bby \([^)]*cause", rule["expr"])
        assert set(re.findall(r"group_left \(([^)]*)\)", rule["expr"])) <= {
            "namespace, pod, instance, job", "pod, instance, job", "namespace, pod, instance, job, engine_signal",
            "pod, instance, job, engine_signal"}
    crashed = next(r for r in RULES if r["alert"] == "SGLangGatewayWorkerEngineCrashed")
    assert "| query" in crashed["annotations"]["description"]
    assert "circuit open" in crashed["annotations"]["description"]


def test_the_joined_alerts_name_engine_verdicts_and_inhibit_their_pages():
    from exporter import catalog
    from exporter.generate import alertmanager
    for s in GATEWAY_SIGNALS:
        for sid in s.engine_signals:
            assert catalog.SIGNALS_BY_ID[sid].alert, f"{s.id}: {sid} is no engine alert"
    failing = next(s for s in GATEWAY_SIGNALS if s.id == "gateway_worker_engine_failing")
    verdict_alerts = {catalog.SIGNALS_BY_ID[sid].alert.name for sid in failing.engine_signals}
    assert verdict_alerts <= set(alertmanager.GATEWAY_FAILING_TARGETS)
    names = {s.alert for s in GATEWAY_SIGNALS}
    assert set(alertmanager.GATEWAY_JOINED) <= names
    cfg = alertmanager.alertmanager_config(RuleSettings())
    sources = {m for rule in cfg["inhibit_rules"] for m in rule["source_matchers"]}
    for name in alertmanager.GATEWAY_JOINED + ("SGLangGatewayTTFTAboveEngines",):
        assert any(name in m for m in sources), f"{name} inhibits nothing"
    # the breaker alert and the joined ones share the worker and the cluster, not the namespace (it may differ)
    breaker = next(r for r in cfg["inhibit_rules"] if r["target_matchers"] == ['alertname="SGLangGatewayCircuitOpen"'])
    assert breaker["equal"] == ["cluster", "worker"]


def test_the_local_stacks_load_the_gateway_rules():
    """deploy/local: Prometheus reads every alerts/*.rules.yml (compose mounts alerts/; the Docker-less script points
    the same glob at the checkout's alerts/), so the gateway's rules are loaded beside the engine's."""
    import fnmatch
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    prom = yaml.safe_load((root / "deploy/local/prometheus.yml").read_text())
    mounted = yaml.safe_load((root / "deploy/local/compose.yaml").read_text())["services"]["prometheus"]["volumes"]
    assert "../../alerts:/etc/prometheus/rules:ro" in mounted
    assert any(fnmatch.fnmatch(f"/etc/prometheus/rules/{gen.RULES}", g) for g in prom["rule_files"])
    assert '"/etc/prometheus/rules/", f"{repo}/alerts/"' in (root / "deploy/local/run-local-stack.sh").read_text()
    assert (root / "alerts" / gen.RULES).is_file()


def test_the_peers_label_mistakes_are_absent():
    """The gateway says status_code (not status) and result (not decision)."""
    text = RENDERED[f"alerts/{gen.RULES}"] + RENDERED[f"dashboards/{gen.UID}.json"]
    assert not re.search(r"\bstatus\s*=", text)
    assert not re.search(r"\bdecision\s*=", text)
    assert 'status_code=~\\"5..\\"' in RENDERED[f"dashboards/{gen.UID}.json"]


@pytest.mark.parametrize("signal", GATEWAY_SIGNALS, ids=[s.id for s in GATEWAY_SIGNALS])
def test_every_signal_reads_families_a_release_defines_and_tolerates_the_old_spelling(signal):
    rule = next(r for r in RULES if r["alert"] == signal.alert)
    for fam in signal.families:
        # an old router's family only where no gateway release carries its meaning (it is not renamed)
        assert releases.family(fam).line == "gateway" or fam not in releases.renames(), fam
        for name in releases.spellings(fam):
            assert re.search(rf"\b{name}(_sum|_count|_bucket)?\b", rule["expr"]), f"{signal.alert} does not read {name}"


def test_release_data_is_consistent():
    assert releases.check() == []
    assert releases.releases("gateway")[0] == "1.0.1"
    assert releases.family("sgl_router_cb_state").last == "0.2.4"     # renamed in sglang-router 0.3.0
    assert releases.family("smg_http_responses_total").labels == ("error_code", "path", "status_code")
    assert releases.family("smg_http_rate_limit_total").labels == ("result",)


def test_board_links_to_the_engine_boards():
    urls = [link.get("url", "") for link in BOARD["links"]]
    for _, uid in gen.ENGINE_BOARDS:
        assert any(f"/d/{uid}" in u for u in urls)


# ---- the simulator's expositions and the deploy objects ----

@pytest.mark.parametrize("release", ["1.9.0", "1.0.1", "0.3.2", "0.2.4"])
def test_simulator_speaks_the_release_names_and_its_incidents_show(release):
    from exporter.simulate.gateway import GatewaySimulator, uses_old_names
    sim = GatewaySimulator(release, workers=2)
    sim.advance(10)
    sim.set_healthy(0, False)
    sim.open_breaker(1)
    sim.advance(10)
    text = sim.metrics_text()
    names = {line.split("{")[0].split()[0] for line in text.splitlines() if line and not line.startswith("#")}
    prefix = "sgl_router_" if uses_old_names(release) else "smg_"
    assert all(n.startswith(prefix) for n in names)
    for n in names:
        _family(n)                                   # every served name is one a release defines
    health = "sgl_router_worker_health" if prefix == "sgl_router_" else "smg_worker_health"
    cb = "sgl_router_cb_state" if prefix == "sgl_router_" else "smg_worker_cb_state"
    assert f'{health}{{worker="http://10.0.1.1:30000"}} 0' in text
    assert f'{cb}{{worker="http://10.0.1.2:30000"}} 1' in text


def test_simulator_rejects_an_unknown_release():
    from exporter.simulate.gateway import GatewaySimulator
    with pytest.raises(ValueError, match="9.9.9: not a gateway release"):
        GatewaySimulator("9.9.9")


def _helm(*sets: str):
    import subprocess

    from helm_render import CHART, tool
    args = [tool("helm"), "template", "t", str(CHART), "--set", "sglang.podSelector.matchLabels.app=sglang"]
    for s in sets:
        args += ["--set", s]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def test_chart_scrapes_the_gateway_port_and_ships_its_rules_only_when_enabled():
    off = _helm()
    assert off.returncode == 0, off.stderr
    docs = [d for d in yaml.safe_load_all(off.stdout) if d]
    assert not [d for d in docs if d["metadata"]["name"].endswith("-gateway") or "gateway-rules" in d["metadata"]["name"]]
    board = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-dashboards"))
    assert f"{gen.UID}.json" in board["data"]
    on = _helm("gateway.enabled=true", "gateway.podSelector.matchLabels.app=smg")
    assert on.returncode == 0, on.stderr
    docs = [d for d in yaml.safe_load_all(on.stdout) if d]
    monitor = next(d for d in docs if d["kind"] == "PodMonitor" and d["metadata"]["name"].endswith("-gateway"))
    endpoint = monitor["spec"]["podMetricsEndpoints"][0]
    assert endpoint["targetPort"] == gen.METRICS_PORT
    assert endpoint["relabelings"][0]["replacement"] == gen.GATEWAY_JOB
    rule = next(d for d in docs if d["kind"] == "PrometheusRule" and d["metadata"]["name"].endswith("gateway-rules"))
    assert rule["spec"] == gen.rule_file(gen.RuleSettings(Config()))
    svc = _helm("gateway.enabled=true", "gateway.monitor=ServiceMonitor", "gateway.service.selector.matchLabels.app=smg")
    assert svc.returncode == 0, svc.stderr
    assert any(d["kind"] == "ServiceMonitor" and d["metadata"]["name"].endswith("-gateway")
               for d in yaml.safe_load_all(svc.stdout) if d)
    missing = _helm("gateway.enabled=true")
    assert missing.returncode != 0 and "gateway.podSelector" in missing.stderr


def test_kustomize_component_builds():
    import subprocess

    from helm_render import ROOT, tool
    out = subprocess.run([tool("kubectl"), "kustomize", str(ROOT / gen.COMPONENT)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(out.stdout) if d)
    assert kinds == ["ConfigMap", "PodMonitor", "PrometheusRule"]


def _emitted(name: str, release: str) -> bool:
    """Whether `release` (a gateway tag or an sglang-router wheel version) defines the family."""
    for line in releases.LINES:
        order = releases.releases(line)
        got = releases.span(name, line)
        if got is not None and release in order:
            first, last = got
            return order.index(first) <= order.index(release) <= order.index(last or order[-1])
    return False


ALL_RELEASES = releases.releases("gateway") + releases.releases("router")
# what an old sglang-router cannot say: worker health arrived in 0.1.9, breakers and retry exhaustion in 0.2.1
GAPS = {"0.1.5": {"SGLangGatewayNoHealthyWorker", "SGLangGatewayCircuitOpen", "SGLangGatewayRetriesExhausted",
                  "SGLangGatewayWorkerEngineCrashed"},
        "0.1.9": {"SGLangGatewayCircuitOpen", "SGLangGatewayRetriesExhausted"}}


@pytest.mark.parametrize("release", ALL_RELEASES)
def test_every_release_feeds_the_core_alerts(release):
    """Per release, not only over the union of releases: the paging alerts and the breaker's read at least one
    family that release emits (the rules `or` the spellings, so one is enough)."""
    core = ("SGLangGatewayNoHealthyWorker", "SGLangGatewayCircuitOpen", "SGLangGatewayRetriesExhausted",
            "SGLangGatewayErrorRatioHigh", "SGLangGatewayWorkerEngineCrashed")
    blind = set()
    for rule in RULES:
        if rule["alert"] in core and not any(_emitted(f, release) for f, _ in _selections(rule["expr"])):
            blind.add(rule["alert"])
    assert blind == GAPS.get(release, set())


@pytest.mark.parametrize("rule", RULES, ids=[r["alert"] for r in RULES])
def test_every_join_and_aggregation_keeps_clusters_apart(rule):
    """Two clusters with the same namespaces and pod names (and pod IPs): a `by`/`on` clause naming the namespace or
    the worker's host names the cluster too. (`group_left` lists copy the engine's labels across a match already
    made on the cluster.)"""
    for clause in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", rule["expr"]):
        labels = {x.strip() for x in clause.split(",")}
        if labels & {"namespace", "host"}:
            assert "cluster" in labels, (rule["alert"], sorted(labels))


def test_the_joins_are_recorded_once_and_read_by_their_alerts_and_panels():
    """Each join with the engines is computed once per evaluation, by a record its group writes before the alerts
    (rules of a group run in order at one timestamp); the alert and the board's panel read that record, so the
    board never runs the join over every sidecar target per step of its range."""
    joined = [s for s in GATEWAY_SIGNALS if s.engine_signals]
    order = [r.get("record") or r["alert"] for r in GROUP]
    panels = {p["title"]: [t["expr"] for t in p.get("targets", [])] for p in BOARD["panels"]}
    for s in joined:
        record = joined_record(s)
        assert order.index(record) < order.index(s.alert)
        alert = next(r for r in GROUP if r.get("alert") == s.alert)
        assert alert["expr"].strip() == record
        assert "label_replace" in RECORDED[record]
        assert panels[s.title] == [f'{record}{{namespace=~"$namespace"}}']
