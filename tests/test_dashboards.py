"""Static checks of the generated Grafana dashboards: queries parse, use known metrics and every variable, panels
have units and descriptions, layouts do not overlap, no datasource uid is hard-coded, thresholds follow the
catalog and the config, SGLang-only panels say which release exports them, the shared fields come from one
pass, and the committed files are exactly what the generator makes."""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import promql_parser as pp
import pytest
import yaml

from exporter import catalog, releases
from exporter.catalog import slo as catalog_slo
from exporter.config import Config
from exporter.generate import dashboards as gen
from exporter.generate import stale, write
from exporter.generate.dashboards import house
from exporter.generate.records import events_record, firing_rule, latency_record_sources, server_rules
from exporter.generate.settings import RuleSettings

ROOT = Path(__file__).resolve().parents[1]
UIDS = list(gen.UIDS)
SGLANG_METRICS = gen.sglang_metrics()
# the latency records the panels read instead of raw buckets -> the SGLang families each is computed from
RECORDS = latency_record_sources(RuleSettings())

# Sentinels substituted for Grafana variables before parsing.
SUBST = {"$__rate_interval": "4242s", "$namespace": "__NS__", "$instance": "__HOST__", "$model": "__MODEL__"}
RATE_RANGE_SECONDS = 4242
HIST_SUFFIXES = ("_bucket", "_sum", "_count")


def substitute(expr: str) -> str:
    for key in sorted(SUBST, key=len, reverse=True):
        expr = expr.replace(key, SUBST[key])
    assert "$" not in expr, f"unknown variable left in {expr!r}"
    return expr


@pytest.fixture(scope="module", params=UIDS)
def dashboard(request):
    return json.loads((ROOT / "dashboards" / f"{request.param}.json").read_text())


def data_panels(board):
    return [panel for panel in board["panels"] if panel["type"] != "row"]


def all_targets():
    for uid in UIDS:
        board = gen.build_dashboard(uid)
        for panel in data_panels(board):
            for target in panel["targets"]:
                yield pytest.param(panel, target, id=f"{uid}:{panel['title']}:{target['refId']}")


def walk(expr):
    nodes = []
    pp.walk(expr, nodes.append)
    return nodes


def _has_model_label(name: str) -> bool:
    """Whether the newest release's family carries model_name (its collector's base labels, or a list naming it)."""
    for family in releases.metric_families().values():
        if "sglang:" + family.short == name:
            return not family.labels or any("model_name" in label or "labels" in label for label in family.labels)
    return True


def base_name(name: str) -> str:
    if name.startswith("sglang:"):
        for suffix in HIST_SUFFIXES:
            if name.endswith(suffix) and name[: -len(suffix)] in SGLANG_METRICS:
                return name[: -len(suffix)]
    return name


def matchers(selector) -> dict:
    return {matcher.name: (matcher.op, matcher.value) for matcher in selector.matchers.matchers}


# ------------------------------------------------------------------------------------------------------ files


def test_committed_files_are_fresh():
    assert stale(gen.render(Config()), ROOT) == [], "run: sglang-exporter generate"


def test_generation_is_deterministic(tmp_path):
    first = gen.render(Config())
    write(first, tmp_path)
    assert stale(first, tmp_path) == []
    assert gen.render(Config()) == first
    for rel, text in first.items():
        if rel.endswith(".json"):
            assert text == json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def test_check_reports_stale_files(tmp_path):
    files = gen.render(Config())
    write(files, tmp_path)
    (tmp_path / "dashboards/sglang-detail.json").write_text("{}\n")
    (tmp_path / "docs/dashboards.md").unlink()
    assert sorted(stale(files, tmp_path)) == ["dashboards/sglang-detail.json", "docs/dashboards.md"]


def test_render_is_the_only_entry_point():
    """No module main or argparse: `sglang-exporter generate` writes render(config)."""
    for path in (ROOT / "exporter/generate/dashboards").glob("*.py"):
        source = path.read_text()
        assert "__main__" not in source and "argparse" not in source, path.name
    assert set(gen.render(Config())) == {f"dashboards/{uid}.json" for uid in gen.ALL_UIDS} | {
        "dashboards/provisioning/dashboards.yaml", "dashboards/provisioning/datasources.yaml",
        "dashboards/sglang-dashboards.configmap.yaml", "docs/dashboards.md"}


def test_shared_fields_are_laid_over_every_dashboard_in_one_pass(monkeypatch):
    dashboards = gen.build_dashboards(Config())
    for uid, dashboard in dashboards.items():
        assert dashboard["uid"] == uid
        for key, value in house.SHARED_FIELDS.items():
            assert dashboard[key] == value, (uid, key)
    monkeypatch.setitem(house.SHARED_FIELDS, "refresh", "1m")
    monkeypatch.setitem(house.SHARED_FIELDS, "time", {"from": "now-6h", "to": "now"})
    assert {board["refresh"] for board in gen.build_dashboards(Config()).values()} == {"1m"}
    assert {board["time"]["from"] for board in gen.build_dashboards(Config()).values()} == {"now-6h"}


# -------------------------------------------------------------------------------------------------- structure


def test_import_ready(dashboard):
    assert dashboard["uid"] in UIDS
    assert dashboard["schemaVersion"] >= 39
    assert dashboard["id"] is None
    assert [entry["name"] for entry in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus"
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert set(variables) == {"datasource", "namespace", "instance", "model"}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    for name in ("namespace", "instance", "model"):
        variable = variables[name]
        assert variable["type"] == "query" and variable["datasource"] == gen.DATASOURCE
        assert variable["includeAll"] and variable["allValue"] == ".*"


def test_no_hard_coded_datasource_uid(dashboard):
    def visit(obj, path):
        if isinstance(obj, dict):
            if "datasource" in obj:
                assert obj["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, path
            if "uid" in obj and path != "$":
                assert obj["uid"] == "${datasource}", f"{path}: uid {obj['uid']!r}"
            for key, value in obj.items():
                visit(value, f"{path}.{key}")
        elif isinstance(obj, list):
            for index, value in enumerate(obj):
                visit(value, f"{path}[{index}]")

    visit(dashboard, "$")
    for panel in data_panels(dashboard):
        assert panel["datasource"] == gen.DATASOURCE
        for target in panel["targets"]:
            assert target["datasource"] == gen.DATASOURCE


def test_panels_have_unit_and_description(dashboard):
    for panel in data_panels(dashboard):
        unit = panel["fieldConfig"]["defaults"].get("unit")
        assert unit in gen.UNITS, f"{panel['title']}: unit {unit!r}"
        desc = panel.get("description", "")
        assert "Good:" in desc and "When bad:" in desc and len(desc) > 60, panel["title"]
        assert panel["targets"], panel["title"]


def test_panel_ids_unique_and_grid_not_overlapping(dashboard):
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells = {}
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_titles_unique(dashboard):
    titles = [panel["title"] for panel in dashboard["panels"]]
    assert len(titles) == len(set(titles))


# ---------------------------------------------------------------------------------------------------- queries


SLO_RECORDS = {catalog_slo.ERROR_RATIO_RECORD.format(window=w) for w in catalog_slo.RATE_WINDOWS}
SERVER_RECORDS = {rule["record"] for rule in [firing_rule(RuleSettings()), *server_rules(RuleSettings())]}  # per server
SERVER_RECORDS.add(events_record(RuleSettings()))          # a fleet record kept per server (the detail board)


@pytest.mark.parametrize("panel,target", list(all_targets()))
def test_query(panel, target):
    expr = target["expr"]
    assert "$__rate_interval" in expr or not re.search(r"\b(rate|increase|irate)\(", expr)
    tree = pp.parse(substitute(expr))
    nodes = walk(tree)
    selectors = [node for node in nodes if isinstance(node, pp.VectorSelector)]
    assert selectors, expr
    for node in nodes:
        assert not isinstance(node, pp.SubqueryExpr), "no subqueries"
        if isinstance(node, pp.MatrixSelector) and node.vector_selector.name not in SLO_RECORDS:
            assert node.range.total_seconds() == RATE_RANGE_SECONDS, f"range must be $__rate_interval: {expr}"
        if isinstance(node, pp.Call) and node.func.name in ("rate", "increase", "irate"):
            assert isinstance(node.args[0], pp.MatrixSelector), "rate of a selector (rate before sum)"
        if isinstance(node, pp.Call) and node.func.name == "histogram_quantile":
            aggregation = node.args[1]
            assert isinstance(aggregation, pp.AggregateExpr) and str(aggregation.op) .lower().endswith("sum"), expr
            assert aggregation.modifier.type == pp.AggModifierType.By
            assert {"le", "namespace", "instance"} <= set(aggregation.modifier.labels), "per-instance quantiles"
    for selector in selectors:
        name = selector.name
        assert name, f"selector without a metric name in {expr}"
        if name == catalog_slo.OBJECTIVE_RECORD:
            continue        # one constant per objective, no server labels
        label_matchers = matchers(selector)
        assert label_matchers.get("namespace") == (pp.MatchOp.Re, "__NS__"), f"{name}: namespace variable"
        assert label_matchers.get("instance") == (pp.MatchOp.Re, "__HOST__(:[0-9]+)?"), f"{name}: instance variable"
        if name.startswith("sglang:") or name in RECORDS:
            assert name in RECORDS or base_name(name) in SGLANG_METRICS, f"unknown SGLang metric {name}"
            if name in RECORDS or _has_model_label(base_name(name)):
                assert label_matchers.get("model_name") == (pp.MatchOp.Re, "__MODEL__"), f"{name}: model variable"
            else:       # (http_responses_total: endpoint, method, status_code only) a filter would match nothing
                assert "model_name" not in label_matchers, f"{name} has no model_name label"
        elif name in SERVER_RECORDS:        # per server: they keep the identity labels the variables match
            continue
        elif name not in SLO_RECORDS:       # the objectives' records (their budget panel averages over 30 d)
            assert name in catalog.METRICS_BY_NAME, f"{name} is not exported by sglang-exporter"
            if name == f"{catalog.NS}_sglang_info":
                assert label_matchers.get("model") == (pp.MatchOp.Re, "__MODEL__")
            for label in set(label_matchers) - {"namespace", "instance", "model"}:
                assert label in catalog.METRICS_BY_NAME[name].labels, f"{name} has no label {label}"


def test_variable_queries_parse_and_chain(dashboard):
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]
                 if variable["type"] == "query"}
    uses = {"namespace": set(), "model": {"namespace"}, "instance": {"namespace", "model"}}
    for name, variable in variables.items():
        assert "definition" not in variable     # not in the dashboard schema of Grafana 10.4-13 (the query is enough)
        query = re.fullmatch(r"label_values\((.*), (\w+)\)", variable["query"])
        assert query, variable["query"]
        inner = query.group(1)
        for dep in uses[name]:
            assert f"${dep}" in inner, f"{name} must depend on {dep}"
        selector = pp.parse(substitute(inner))
        assert isinstance(selector, pp.VectorSelector) and selector.name in catalog.METRICS_BY_NAME
        label = query.group(2)
        assert label in catalog.METRICS_BY_NAME[selector.name].labels or label in ("namespace", "instance")
    assert re.fullmatch(variables["instance"]["regex"].strip("/"), "10.0.0.5:10060").group(1) == "10.0.0.5"


def test_every_exported_metric_is_on_a_dashboard():
    used = set()
    for uid in UIDS:
        for panel in data_panels(gen.build_dashboard(uid)):
            for target in panel["targets"]:
                used |= {node.name for node in walk(pp.parse(substitute(target["expr"])))
                         if isinstance(node, pp.VectorSelector)}
    if events_record(RuleSettings()) in used:        # the log event counters, shown through their per-server record
        used.add("sglang_exporter_log_events_total")
    missing = {metric.name for metric in catalog.METRICS if not metric.deprecated} - used   # deprecated: on their way out
    assert not missing, f"exported but shown nowhere: {sorted(missing)}"
    read = {base_name(name) for name in used if name.startswith("sglang:")}
    read |= {family for name in used if name in RECORDS for family in RECORDS[name]}     # through a record
    assert read == set(SGLANG_METRICS)


def test_sglang_metric_table_matches_the_release_data():
    """Each SGLang family a panel reads is defined by some release, with the type the docs table gives."""
    doc = (ROOT / "docs/dashboards.md").read_text()
    for name, kind in SGLANG_METRICS.items():
        defined = {family.name: family.type for release in releases.releases()
                   for family in releases.metric_families(release).values()}
        assert defined.get(name, defined.get(name.removesuffix("_total"))) == kind, name
        assert re.search(rf"^\| `{re.escape(name)}` \| {kind} \| [0-9][0-9a-z.]* – ", doc, re.MULTILINE), name


def test_renamed_families_are_all_read():
    """A value SGLang renamed across releases is queried under each spelling the native table lists."""
    from exporter.catalog.native import native_metric_names
    for value in ("itl", "queue_time", "prefill_inflight_queue"):
        for name in native_metric_names(value):
            assert name in SGLANG_METRICS, name


def test_panels_fed_only_by_newer_sglang_metrics_say_so():
    """A panel reading only SGLang families that some release lacks says 'not exported by this release' and the
    first release that exports one of them, instead of an unexplained 'No data'."""
    oldest = releases.releases()[0]
    checked = 0
    for uid in UIDS:
        for panel in data_panels(gen.build_dashboard(uid)):
            found = {name for target in panel["targets"]
                     for name in re.findall(r"[a-z_:][a-z0-9_:]*(?=\{)", target["expr"])}
            names = {base_name(name) for name in found if name not in RECORDS}
            names |= {family for name in found if name in RECORDS for family in RECORDS[name]}
            if not names or not all(name.startswith("sglang:") for name in names):
                continue
            # a counter spelt without _total in older releases' code is exposed with it all the same
            firsts = [min((r for r in (releases.first_release(name), releases.first_release(name.removesuffix("_total")))
                           if r), key=releases.version_key) for name in names]
            if min(firsts, key=releases.version_key) == oldest:
                continue
            checked += 1
            no_value = panel["fieldConfig"]["defaults"].get("noValue", "")
            first = min(firsts, key=releases.version_key)
            assert no_value.startswith(f"not exported by this release (SGLang {first}+"), (panel["title"], no_value)
    assert checked >= 9


@pytest.mark.parametrize("title", ["Prefix cache hit rate", "Queue wait", "KV pools per rank (hybrid models)",
                                   "Speculative decoding acceptance", "PD disaggregation queues",
                                   "KV memory pressure"])
def test_native_metric_panels_exist(title):
    """Issue 24: what the exporter now reads from /metrics has a panel on the detail dashboard."""
    panel = _panel("sglang-detail", title)
    assert panel["type"] == "timeseries" and panel["targets"]


# ------------------------------------------------------------------------------------------------- thresholds


def _panel(uid, title):
    for panel in gen.build_dashboard(uid)["panels"]:
        if panel["title"] == title:
            return panel
    raise KeyError(title)


def _steps(panel):
    return [step["value"] for step in panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
            if step["value"] is not None]


def test_bands_come_from_the_catalog():
    signals = catalog.SIGNALS_BY_ID
    off = "offline"
    assert _steps(_panel("sglang-detail", "Queue")) == [signals["queue_below_range"].params(off)["min_queue"],
                                                        signals["queue_above_range"].params(off)["max_queue"]]
    assert _steps(_panel("sglang-detail", "KV cache token usage")) == [signals["kv_cache_underused"].params(off)["min_usage"]]
    assert _steps(_panel("sglang-detail", "Retractions per minute")) == [
        signals["retractions_frequent"].params(off)["per_minute"], signals["retraction_storm"].params(off)["per_minute"]]
    assert _steps(_panel("sglang-detail", "GPU memory headroom")) == [
        signals["gpu_headroom_low"].params(off)["min_bytes"], signals["gpu_headroom_high"].params(off)["max_bytes"]]
    assert _steps(_panel("sglang-detail", "Time to first token")) == [
        signals["latency_high"].params("online")["ttft_p99_seconds"]]
    for title in ("Queue", "GPU memory headroom"):
        assert _panel("sglang-detail", title)["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"]\
            .endswith("area")


def test_changing_the_catalog_moves_the_lines(monkeypatch):
    for sid, key, value in [("queue_above_range", "max_queue", 1234), ("kv_cache_underused", "min_usage", 0.77),
                            ("retraction_storm", "per_minute", 17.0)]:
        sig = catalog.SIGNALS_BY_ID[sid]
        monkeypatch.setitem(catalog.SIGNALS_BY_ID, sid,
                            dataclasses.replace(sig, defaults={**sig.defaults, key: value}))
    assert 1234 in _steps(_panel("sglang-detail", "Queue"))
    assert _steps(_panel("sglang-detail", "KV cache token usage")) == [0.77]
    assert 17.0 in _steps(_panel("sglang-detail", "Retractions per minute"))
    assert "1234" in _panel("sglang-overview", "Queue")["description"]


def test_config_overrides_move_the_lines():
    """Generation reads the runtime Config: a `signals:` override is the line the dashboards draw."""
    config = Config(signals={"queue_above_range": {"max_queue": 4321}, "kv_cache_underused": {"min_usage": 0.66}})
    detail = gen.build_dashboards(config)["sglang-detail"]
    queue = next(panel for panel in detail["panels"] if panel["title"] == "Queue")
    assert 4321 in _steps(queue)
    usage = next(panel for panel in detail["panels"] if panel["title"] == "KV cache token usage")
    assert _steps(usage) == [0.66]
    assert "4321" in gen.render(config)["docs/dashboards.md"]


def test_no_threshold_typed_by_hand():
    for path in (ROOT / "exporter/generate/dashboards").glob("*.py"):
        src = path.read_text()
        for literal in ("0.9", "2000", "5 * GIB", "8 * GIB", "10.0", "0.95"):
            assert not re.search(rf"(?<![\w.]){re.escape(literal)}(?![\w.])", src), (path.name, literal)


def test_no_sglang_metric_name_typed_in_a_query():
    """SGLang's metric names come from the native table (exporter.catalog.native): no query spells one."""
    for path in (ROOT / "exporter/generate/dashboards").glob("*.py"):
        for line in path.read_text().splitlines():
            assert not re.search(r"Target\(.*sglang:[a-z]", line), (path.name, line)


# ------------------------------------------------------------------------------------ provisioning, k8s, docs


def test_provisioning_files():
    prov = yaml.safe_load((ROOT / "dashboards/provisioning/dashboards.yaml").read_text())
    (provider,) = prov["providers"]
    assert provider["type"] == "file" and provider["options"]["path"] == gen.GRAFANA_PATH
    ds = yaml.safe_load((ROOT / "dashboards/provisioning/datasources.yaml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://127.0.0.1:9090"


def test_configmap_for_the_grafana_sidecar():
    path = ROOT / "dashboards/sglang-dashboards.configmap.yaml"
    cm = yaml.safe_load(path.read_text())
    assert cm["kind"] == "ConfigMap" and cm["apiVersion"] == "v1"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"]["grafana_folder"] == gen.FOLDER
    assert sorted(cm["data"]) == sorted(f"{u}.json" for u in gen.ALL_UIDS)
    for key, text in cm["data"].items():
        assert text == (ROOT / "dashboards" / key).read_text()
    # small enough for a plain `kubectl apply` (last-applied annotation limit 256 KiB)
    assert path.stat().st_size < 256 * 1024


def test_docs_cover_every_panel_and_query():
    doc = (ROOT / "docs/dashboards.md").read_text()
    for uid in UIDS:
        for panel in data_panels(gen.build_dashboard(uid)):
            assert f"#### {panel['title']}" in doc
            for target in panel["targets"]:
                assert target["expr"] in doc


# ------------------------------------------------------------------------------- Grafana 10.4, 11, 12, 13 schemas
def _schema_check():
    import importlib.machinery
    import importlib.util
    path = ROOT / "scripts" / "check-grafana-schema"
    loader = importlib.machinery.SourceFileLoader("check_grafana_schema", str(path))
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(mod)
    return mod


def test_dashboards_type_check_against_every_grafana_release_users_run(tmp_path):
    """Each dashboard, panel options and custom field config, against @grafana/schema 10.4, 11, 12 and 13 (npm,
    cached in .cache/grafana-schema). A key one release's schema lacks fails, as options.footer of a table
    does on 12 and 13 (the check's teeth)."""
    from tests.helpers import require_tool
    require_tool("npm")
    check = _schema_check()
    cache = ROOT / ".cache" / "grafana-schema"
    dashboards = sorted((ROOT / "dashboards").glob("*.json"))
    assert check.check(cache, dashboards) == []
    bad = json.loads(dashboards[0].read_text())
    tables = [panel for panel in bad["panels"] if panel["type"] == "table"]
    assert tables
    tables[0]["options"]["footer"] = {"show": False}
    (tmp_path / "footer.json").write_text(json.dumps(bad))
    errors = check.check(cache, [tmp_path / "footer.json"])
    assert errors and {e.split(":")[0] for e in errors} == {"Grafana 12", "Grafana 13"}
    assert all("footer" in e for e in errors)
