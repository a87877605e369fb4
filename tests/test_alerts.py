"""Alert and recording rules: generated fresh, valid for promtool, unit-tested, and linted offline the way
mixtool and pint would (names, severities, annotations, counters, comparisons, metric names, runbook links)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from helpers import PROMETHEUS_RELEASES, require_tool

from exporter import catalog, generate
from exporter.catalog.native import NATIVE_VALUES, family_span, native_metric_names
from exporter.cli import main as cli_main
from exporter.config import AlertSettings, Config, ConfigError, build
from exporter.generate import rules as gen
from exporter.generate.gotemplate import render_template
from exporter.generate.promql import parse_duration
from exporter.generate.settings import RuleSettings

REPO = Path(__file__).resolve().parents[1]
ALERTS = REPO / "alerts"
RUNBOOKS = REPO / "docs" / "runbooks"
RULE_FILES = [ALERTS / gen.EXPORTER_RULES, ALERTS / gen.NATIVE_RULES]

promql_parser = pytest.importorskip("promql_parser")

COMPARISONS = {"==", "!=", ">", "<", ">=", "<="}
SEVERITIES = {"critical", "warning", "info"}
ALERT_NAME = re.compile(r"^SGLang(?:[A-Z][a-z0-9]*)+$")       # CamelCase; acronyms (OOM, KV, GPU) allowed
RECORD_NAME = re.compile(r"^[a-z][a-z0-9_]*:[a-z][a-z0-9_]*:[a-z][a-z0-9_]*$")
HIST_SUFFIXES = ("_bucket", "_sum", "_count")
PROMETHEUS_OWN = {"up"}
# SGLang's own families by exposed name -> kind, from the catalog's native table (spans in the release data)
SGLANG_METRICS = {n: v.kind for v in NATIVE_VALUES for n in native_metric_names(v.name)}


def alert_config(signals=None, **alerts) -> Config:
    return Config(signals=signals or {}, alerts=AlertSettings(**alerts))


def write_alert_bundle(root: Path, cfg: Config) -> Path:
    """The rules and their generated promtool tests for `cfg` under root/alerts (what promtool reads)."""
    files = {k: v for k, v in generate.render(cfg).items() if k.startswith("alerts/")}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root / "alerts"


def load_rules(path=None):
    rules = []
    for f in ([path] if path else RULE_FILES):
        for g in yaml.safe_load(Path(f).read_text())["groups"]:
            for r in g["rules"]:
                rules.append((Path(f).name, g["name"], r))
    return rules


def alert_rules():
    return [r for _, _, r in load_rules() if "alert" in r]


def record_rules():
    return [r for _, _, r in load_rules() if "record" in r]


# ------------------------------------------------------------------------------------------ PromQL walk

def walk(node):
    yield node
    for attr in ("lhs", "rhs", "expr", "param", "vector_selector"):
        child = getattr(node, attr, None)
        if child is not None and not isinstance(child, (str, int, float)):
            yield from walk(child)
    for child in getattr(node, "args", None) or []:
        yield from walk(child)


def selectors(expr: str) -> list[str]:
    return [n.name for n in walk(promql_parser.parse(expr))
            if type(n).__name__ == "VectorSelector" and n.name]


def calls(expr: str):
    return [n for n in walk(promql_parser.parse(expr)) if type(n).__name__ == "Call"]


def has_comparison(expr: str) -> bool:
    return any(type(n).__name__ == "BinaryExpr" and str(n.op) in COMPARISONS
               for n in walk(promql_parser.parse(expr)))


def is_set_difference(expr: str) -> bool:
    """The whole condition is `a unless b` (what was there and is gone, as the absence alert asks)."""
    node = promql_parser.parse(expr)
    return type(node).__name__ == "BinaryExpr" and str(node.op) == "unless"


def known_metric(name: str, recorded: set[str]) -> bool:
    if name in catalog.METRICS_BY_NAME or name in PROMETHEUS_OWN or name in recorded:
        return True
    if name in SGLANG_METRICS:
        return True
    for suf in HIST_SUFFIXES:
        base = name[: -len(suf)]
        if name.endswith(suf) and SGLANG_METRICS.get(base) == "histogram":
            return True
    return False


def is_counter(name: str) -> bool:
    spec = catalog.METRICS_BY_NAME.get(name)
    if spec is not None:
        return spec.type == "counter"
    if name in SGLANG_METRICS:
        return SGLANG_METRICS[name] == "counter"
    if name.endswith("_bucket") and SGLANG_METRICS.get(name[:-7]) == "histogram":
        return True
    return name.endswith("_total")


# ------------------------------------------------------------------------------------------ freshness

def test_generated_files_are_fresh():
    """Every committed generated file equals what `sglang-exporter generate` renders (kubernetes-mixin
    practice); runbooks of alerts that no longer exist count as stale."""
    stale = generate.stale(generate.render(Config()), REPO)
    assert not stale, f"stale generated files (run `sglang-exporter generate`): {stale}"


def test_check_names_stale_files_and_write_fixes_them(tmp_path, capsys):
    assert cli_main(["generate", "--out", str(tmp_path)]) == 0
    assert cli_main(["generate", "--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "alerts" / gen.EXPORTER_RULES).write_text("# edited by hand\n")
    (tmp_path / "docs" / "runbooks" / "SGLangGone.md").write_text("an alert that no longer exists\n")
    capsys.readouterr()
    assert cli_main(["generate", "--check", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"stale: alerts/{gen.EXPORTER_RULES}" in err and "stale: docs/runbooks/SGLangGone.md" in err
    assert cli_main(["generate", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / "docs" / "runbooks" / "SGLangGone.md").exists()
    assert cli_main(["generate", "--check", "--out", str(tmp_path)]) == 0


def test_generate_without_out_checks_the_checkout_from_any_directory(tmp_path, monkeypatch, capsys):
    """Run from elsewhere (a CI step's working directory), `generate --check` still checks this checkout: it
    once looked for pyproject.toml one folder too high after cli.py became a package and checked the
    current directory instead, where every file is missing."""
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert cli_main(["generate", "--check"]) == 0, capsys.readouterr().err
    assert "generated files are fresh" in capsys.readouterr().out
    assert not any(tmp_path.iterdir())


def test_generate_reads_the_runtime_config_and_its_errors(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("signals:\n  retraction_storm: {nope: 3}\nalerts:\n  no_such_key: 1\n")
    assert cli_main(["generate", "--config", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: signals.retraction_storm.nope: unknown parameter" in err
    assert f"{bad}:4: alerts.no_such_key: unknown setting" in err
    assert err.index(":2: signals") < err.index(":4: alerts")          # file order
    assert not (tmp_path / "o").exists()


def test_config_flows_into_rules(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({
        "signals": {"retraction_storm": {"per_minute": 20}},
        "alerts": {"exporter_selector": 'job="sidecar", cluster="c1"', "sglang_selector": 'job="llm"',
                   "runbook_base_url": "https://wiki.example.com/rb", "for": {"SGLangRetractionStorm": "5m"},
                   "max_unknown_ratio": 0.3},
    }))
    settings = RuleSettings(build({}, environ={}, config_file=str(path)))
    assert settings.thresholds("retraction_storm")["per_minute"] == 20
    assert settings.thresholds("retractions_frequent")["per_minute"] == 1.0       # untouched default
    rules = {r["alert"]: r for g in gen.rule_files(settings).values() for grp in g["groups"]
             for r in grp["rules"] if "alert" in r}
    storm = rules["SGLangRetractionStorm"]
    assert storm["for"] == "5m"
    assert 'job="sidecar", cluster="c1"' in storm["expr"]
    assert storm["annotations"]["runbook_url"] == "https://wiki.example.com/rb/SGLangRetractionStorm.md"
    assert ") * 60 >= 20\n)\n" in rules["SGLangNativeRetractionStorm"]["expr"]
    assert 'job="llm"' in rules["SGLangNativeRetractionStorm"]["expr"]
    assert rules["SGLangLogParserDrift"]["expr"].rstrip().endswith("> 0.3")
    # a profile drops the native alerts of signals it disables (offline: no latency objectives)
    off = RuleSettings(alert_config(profile="offline"))
    assert not [a for a in gen.native_alerts(off) if a.signal == "latency_high"]
    lc = RuleSettings(alert_config(profile="long-context"))
    ttft = [a for a in gen.native_alerts(lc) if a.name == "SGLangNativeTTFTHigh"][0]
    assert ":p99_5m > 10\n)\n" in ttft.expr
    # `enabled: false` in signals: drops the native alerts too (one spelling for thresholds and switches)
    no_storm = RuleSettings(alert_config(signals={"retraction_storm": {"enabled": False}}))
    assert "SGLangNativeRetractionStorm" not in {a.name for a in gen.native_alerts(no_storm)}
    bad = tmp_path / "bad.yaml"
    bad.write_text("alerts:\n  for: {SGLangNope: 1m}\n  drift_window: soon\n")
    with pytest.raises(ConfigError, match=r"(?s):2: alerts.for.SGLangNope: unknown alert.*:3: alerts.drift_window"):
        build({}, environ={}, config_file=str(bad))


def test_short_windows_shorten_for_and_ranges():
    short = RuleSettings(alert_config(short_windows=True))
    defaults = RuleSettings().alert_for
    for a in gen.all_alerts(short):
        base = defaults.get(a.name) or defaults[catalog.SIGNALS_BY_ID[a.signal].alert.name]
        assert a.for_ == ("10s" if parse_duration(base) > 0 else base), a.name
        for rng in re.findall(r"\[(\w+)\]", a.expr):
            assert rng == "1m", (a.name, rng)


# ------------------------------------------------------------------------------------------ promtool

def _promtool_ok(args, cwd, release="installed"):
    promtool = require_tool("promtool", release)
    r = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"promtool ({release}) {' '.join(args)}\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.mark.parametrize("release", PROMETHEUS_RELEASES)
def test_promtool_check_rules(release):
    out = _promtool_ok(["check", "rules", *[str(f) for f in RULE_FILES]], REPO, release)
    assert out.count("SUCCESS") == len(RULE_FILES)


@pytest.mark.parametrize("release", PROMETHEUS_RELEASES)
def test_promtool_unit_tests(release):
    """Every rule's tests pass on Prometheus 2.42 and on 3.x. A range selector of 3.x leaves out a sample on
    its left edge, which 2.x keeps: no test may have a change of value there at an evaluation."""
    tests = sorted(str(p) for p in (ALERTS / "tests").glob("*.test.yml"))
    assert len(tests) >= 4
    _promtool_ok(["test", "rules", *tests], REPO, release)


@pytest.mark.parametrize("cfg", [
    alert_config(short_windows=True),
    alert_config(signals={"retraction_storm": {"per_minute": 20}, "queue_above_range": {"max_queue": 500},
                          "latency_high": {"ttft_p99_seconds": 0.5}},
                 exporter_selector='job="sidecar", cluster="c1"', sglang_selector='job="llm"',
                 alert_for={"SGLangRetractionStorm": "5m", "SGLangStalled": "0m"}, max_unknown_ratio=0.05),
], ids=["short-windows", "custom-params"])
@pytest.mark.parametrize("release", PROMETHEUS_RELEASES)
def test_promtool_with_other_config(tmp_path, cfg, release):
    """The generated unit tests follow the configuration: they pass for short windows and custom values too."""
    out = write_alert_bundle(tmp_path, cfg)
    _promtool_ok(["check", "rules", gen.EXPORTER_RULES, gen.NATIVE_RULES], out, release)
    _promtool_ok(["test", "rules", *sorted(str(p) for p in (out / "tests").glob("*.test.yml"))], out, release)


ORACLE = ALERTS / "tests" / "oracle"


def test_oracle_has_a_file_per_rule_group():
    """The hand-written oracle (literal values from the tuning guide, not from the catalog) covers every
    rule group, and nothing generates it."""
    groups = {g for _, g, _ in load_rules()}
    assert {p.name.removesuffix(".test.yml") for p in ORACLE.glob("*.test.yml")} == groups
    assert not [rel for rel in generate.render(Config()) if rel.startswith("alerts/tests/oracle/")]


@pytest.mark.parametrize("release", PROMETHEUS_RELEASES)
def test_promtool_oracle_passes(release):
    out = _promtool_ok(["test", "rules", *sorted(str(p) for p in ORACLE.glob("*.test.yml"))], REPO, release)
    assert out.count("SUCCESS") == len(list(ORACLE.glob("*.test.yml")))


@pytest.mark.parametrize("signals,alerts,failing", [
    ({"queue_above_range": {"max_queue": 2500}}, {}, "SGLangNativeQueueAboveRange"),
    ({"kv_cache_underused": {"min_usage": 0.8}}, {}, "SGLangNativeKVCacheUnderused"),
    ({}, {"alert_for": {"SGLangRetractionStorm": "5m"}}, "SGLangRetractionStorm"),
], ids=["queue-threshold", "kv-threshold", "storm-for"])
def test_promtool_oracle_catches_a_wrong_catalog_value(tmp_path, signals, alerts, failing):
    """Rules rendered from a value that drifted from the guide fail the oracle, while the generated tests
    (made from the same values) still pass: the oracle is independent of the catalog."""
    promtool = require_tool("promtool")
    out = write_alert_bundle(tmp_path, alert_config(signals=signals, **alerts))
    (out / "tests" / "oracle").mkdir()
    for f in ORACLE.glob("*.test.yml"):
        (out / "tests" / "oracle" / f.name).write_text(f.read_text())
    oracle = sorted(str(p) for p in (out / "tests" / "oracle").glob("*.test.yml"))
    r = subprocess.run([promtool, "test", "rules", *oracle], cwd=out, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and failing in r.stdout + r.stderr, r.stdout + r.stderr
    _promtool_ok(["test", "rules", *sorted(str(p) for p in (out / "tests").glob("*.test.yml"))], out)


def test_every_alert_and_record_has_promtool_tests():
    tested_alerts, exprs, cases = {}, set(), 0
    for f in (ALERTS / "tests").glob("*.test.yml"):
        for t in yaml.safe_load(f.read_text())["tests"]:
            for c in t.get("alert_rule_test", []):
                tested_alerts.setdefault(c["alertname"], []).append(c)
                cases += 1
            for c in t.get("promql_expr_test", []):
                exprs.add(c["expr"])
    for r in alert_rules():
        cs = tested_alerts.get(r["alert"])
        assert cs, f"{r['alert']} has no promtool test"
        positives = [c for c in cs if c["exp_alerts"]]
        negatives = [c for c in cs if not c["exp_alerts"]]
        assert positives, f"{r['alert']}: no case where it fires"
        if r["alert"] != gen.WATCHDOG:
            assert negatives, f"{r['alert']}: no case before for: elapses"
        for c in positives:
            for e in c["exp_alerts"]:
                assert set(e["exp_annotations"]) == {"summary", "description", "runbook_url"}
                assert e["exp_annotations"]["runbook_url"] == r["annotations"]["runbook_url"]
                assert "{{" not in e["exp_annotations"]["description"]
    for r in record_rules():
        assert r["record"] in exprs, f"recording rule {r['record']} has no promql_expr_test"
    assert cases >= 2 * len(alert_rules())


# ------------------------------------------------------------------------------------------ lint

def test_catalog_alerts_all_present():
    names = {r["alert"] for r in alert_rules()}
    for s in catalog.SIGNALS:
        if s.alert:
            assert s.alert.name in names
    for m in catalog.META_ALERTS:
        assert m.alert.name in names
    by_name = {r["alert"]: r for r in alert_rules()}
    for s in catalog.SIGNALS:
        if s.alert:
            r = by_name[s.alert.name]
            assert r["labels"] == {"severity": s.severity, "signal": s.id, **(
                {"family": s.family} if s.family else {})}
            assert r["for"] == s.alert.for_
            assert r["annotations"]["summary"] == s.alert.summary
            # the catalog names the server by its address; the rule by its identity labels, then the address
            # and a failure's cause line by a lookup when it is rendered, not by a label
            assert r["annotations"]["description"] == s.alert.description.replace(
                "{{ $labels.instance }}", gen.server_ref(RuleSettings())).replace(
                "{{ $labels.cause }}", gen.cause_lookup(RuleSettings(), s.id))
            assert r["annotations"]["runbook_url"] == f"{catalog.RUNBOOK_BASE}/{s.alert.name}.md"
            assert f'signal="{s.id}"' in r["expr"]


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_lint(rule):
    name = rule["alert"]
    assert ALERT_NAME.match(name), f"{name}: not CamelCase starting with SGLang"
    assert len(name) <= 40
    labels, ann = rule.get("labels", {}), rule.get("annotations", {})
    assert labels.get("severity") in SEVERITIES
    assert all("$value" not in str(v) and "{{" not in str(v) for v in labels.values()), "templated label"
    summary, desc = ann.get("summary", ""), ann.get("description", "")
    # mixtool: ^[A-Z].+\.$ -- the product name `sglang-exporter` is a lower-case proper noun, allowed first
    assert summary and "{{" not in summary and re.match(r"^([A-Z]|sglang-exporter ).*\.$", summary), \
        f"summary: {summary!r}"
    if name != gen.WATCHDOG:   # the always-firing watchdog has nothing to template
        assert "{{" in desc and "}}" in desc, "description must be templated"
    assert "for" in rule and parse_duration(rule["for"]) >= 0
    if name != gen.WATCHDOG:
        assert has_comparison(rule["expr"]) or is_set_difference(rule["expr"]), f"{name}: no comparison in expr"
    # page <=> critical (the route tree pages on severity)
    spec = {a.name: a for a in gen.all_alerts(RuleSettings())}[name]
    assert spec.page == (labels["severity"] == "critical")
    if "signal" in labels:
        assert labels["signal"] in catalog.SIGNALS_BY_ID


@pytest.mark.parametrize("rule", load_rules(), ids=lambda r: r[2].get("alert") or r[2].get("record"))
def test_expr_lint(rule):
    _, _, r = rule
    recorded = {x["record"] for x in record_rules()}
    expr = r["expr"]
    for m in selectors(expr):
        assert known_metric(m, recorded), f"{m}: neither an exported metric (catalog.METRICS) nor a known " \
                                          f"SGLang metric (alerts.SGLANG_METRICS)"
    for c in calls(expr):
        if c.func.name in ("rate", "increase", "irate"):
            sel = c.args[0].vector_selector
            assert is_counter(sel.name), f"{c.func.name}() over non-counter {sel.name}"
            rng = c.args[0].range.total_seconds()
            assert rng >= 60, "range shorter than 2 scrape intervals at 30s"
    # rate() inside, aggregation outside (never rate(sum(...)))
    for c in calls(expr):
        if c.func.name in ("rate", "increase"):
            assert type(c.args[0]).__name__ == "MatrixSelector"


def test_groups_and_recording_names():
    for f in RULE_FILES:
        for g in yaml.safe_load(f.read_text())["groups"]:
            assert len(g["rules"]) <= 20, f"group {g['name']} has more than 20 rules"
            assert len(g["name"]) <= 40
    names = [r["record"] for r in record_rules()]
    assert len(names) == len(set(names))
    for n in names:
        assert RECORD_NAME.match(n), f"{n}: not level:metric:operations"
        level, metric, ops = n.split(":")
        assert not metric.endswith("_total"), f"{n}: strip _total from recorded names"
        if "rate" in ops or "increase" in ops:
            src = [m for m in selectors([r for r in record_rules() if r["record"] == n][0]["expr"])]
            assert any(is_counter(s) for s in src)


def test_runbook_urls_resolve():
    for r in alert_rules():
        url = r["annotations"]["runbook_url"]
        base = AlertSettings().runbook_base_url
        assert url.startswith(base + "/"), url
        rel = urlparse(url[len(base) + 1:])
        page = RUNBOOKS / rel.path
        assert page.is_file(), f"{r['alert']}: {page} missing"
        text = page.read_text()
        for section in ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation"):
            assert section in text, f"{page.name}: no {section}"
        if rel.fragment:
            slugs = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
                     for h in re.findall(r"^#+ (.+)$", text, re.M)}
            assert rel.fragment in slugs, f"{url}: no heading #{rel.fragment}"


def test_native_rules_read_only_families_of_the_native_table():
    """Every SGLang metric the native rules read is a family of exporter.catalog.native that some release
    defines (so its name and version span come from the one table)."""
    recorded = {r[2]["record"] for r in load_rules(ALERTS / gen.NATIVE_RULES) if "record" in r[2]}
    for r in load_rules(ALERTS / gen.NATIVE_RULES):
        for m in selectors(r[2]["expr"]):
            if m in PROMETHEUS_OWN:      # `up` of the sidecar's job: the native alerts stand down where it is
                continue
            if m in recorded:            # a record of these rules (its own expression is checked too)
                continue
            base = next((m[: -len(s)] for s in HIST_SUFFIXES if m.endswith(s)), m)
            name = base if base in SGLANG_METRICS else m
            assert name in SGLANG_METRICS, name
            assert family_span(name.removeprefix("sglang:").removesuffix("_total")) is not None, name


def test_drift_ignores_foreign_noise():
    r = {x["alert"]: x for x in alert_rules()}["SGLangLogParserDrift"]
    assert 'reason=~"unknown_message|malformed"' in r["expr"]
    assert 'reason="no_sglang_prefix"' in r["expr"]       # subtracted from the denominator only
    numerator = r["expr"].split("/\n")[0]
    assert "no_sglang_prefix" not in numerator


@pytest.mark.parametrize("tmpl,value,expected", [
    ("{{ $value | humanizePercentage }}", 0.75, "75%"),
    ("{{ $value | humanizePercentage }}", 0.225, "22.5%"),
    ("{{ $value | humanize1024 }}B", 3 * 2 ** 30, "3GiB"),
    ("{{ $value | humanize1024 }}", 1536, "1.5ki"),
    ("{{ $value | humanizeDuration }}", 95, "1m 35s"),
    ("{{ $value | humanizeDuration }}", 0.25, "250ms"),
    ("{{ $value | humanizeDuration }}", 90061, "1d 1h 1m 1s"),
    ('{{ $value | printf "%.1f" }}', 12.5, "12.5"),
    ("{{ $value }}", 3.0, "3"),
    ("{{ $labels.instance }}/{{ $labels.missing }}", 1, "i/"),
])
def test_template_renderer(tmpl, value, expected):
    assert render_template(tmpl, {"instance": "i"}, value) == expected


def test_template_renderer_label_blocks_and_cause_query():
    ref = gen.server_ref(RuleSettings())
    full = {"cluster": "eu-1", "namespace": "llm", "pod": "sglang-0", "instance": "10.0.0.7:10060"}
    assert render_template(ref, full, 1) == "eu-1/llm/sglang-0 (10.0.0.7:10060)"
    # cluster only an external label (a per-cluster Prometheus): left out, no stray separator
    assert render_template(ref, {k: v for k, v in full.items() if k != "cluster"}, 1) == "llm/sglang-0 (10.0.0.7:10060)"
    lookup = gen.cause_lookup(RuleSettings(), "server_crashed")
    assert render_template(f"Cause: {lookup}.", full, 1, {"cause": "RuntimeError: x"}) == "Cause: RuntimeError: x."
    assert render_template(f"Cause: {lookup}.", full, 1) == "Cause: ."


def _clauses(expr: str) -> list[list[str]]:
    return [[x.strip() for x in m.group(2).split(",")]
            for m in re.finditer(r"\b(on|by|group_left|group_right)\s*\(([^)]*)\)", expr)]


@pytest.mark.parametrize("rule", load_rules(), ids=lambda r: r[2].get("alert") or r[2].get("record"))
def test_every_join_and_aggregation_keeps_clusters_apart(rule):
    """Two clusters with the same namespace and pod names: a clause naming the namespace (a server or a
    namespace, not a global roll-up) must name the cluster too, or the two meet in one match group."""
    for labels in _clauses(rule[2]["expr"]):
        if "namespace" in labels:
            assert "cluster" in labels, (rule[2].get("alert") or rule[2].get("record"), labels)


def test_nothing_relates_two_targets_by_instance():
    """A pod's sidecar (podIP:10060) and SGLang (podIP:30000) differ in `instance`: the native stand-down and
    every inhibition match on the identity labels, never on the address."""
    import yaml as _yaml
    am = _yaml.safe_load((ALERTS / "alertmanager.yml").read_text())
    assert am["route"]["group_by"] == ["cluster", "namespace", "pod"]
    for rule in am["inhibit_rules"]:
        assert "instance" not in rule["equal"], rule
    for r in alert_rules():
        if r["alert"].startswith("SGLangNative"):
            assert "unless on (cluster, namespace, pod)\nup{" in r["expr"], r["alert"]
