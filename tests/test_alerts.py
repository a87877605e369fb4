"""Alert and recording rules: generated fresh, valid for promtool, unit-tested, and linted offline the way
mixtool and pint would (names, severities, annotations, counters, comparisons, metric names, runbook links)."""
from __future__ import annotations

import filecmp
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from helpers import require_tool

from exporter import catalog
from exporter.generate import alerts as gen

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


def known_metric(name: str, recorded: set[str]) -> bool:
    if name in catalog.METRICS_BY_NAME or name in PROMETHEUS_OWN or name in recorded:
        return True
    if name in gen.SGLANG_METRICS:
        return True
    for suf in HIST_SUFFIXES:
        base = name[: -len(suf)]
        if name.endswith(suf) and gen.SGLANG_METRICS.get(base, (None, None, None))[2] == "histogram":
            return True
    return False


def is_counter(name: str) -> bool:
    spec = catalog.METRICS_BY_NAME.get(name)
    if spec is not None:
        return spec.type == "counter"
    if name in gen.SGLANG_METRICS:
        return gen.SGLANG_METRICS[name][2] == "counter"
    if name.endswith("_bucket") and gen.SGLANG_METRICS.get(name[:-7], (0, 0, ""))[2] == "histogram":
        return True
    return name.endswith("_total")


# ------------------------------------------------------------------------------------------ freshness

def test_generated_files_are_fresh(tmp_path):
    """Regenerate into a tmp dir and compare with the committed files (kubernetes-mixin practice)."""
    out, docs = tmp_path / "alerts", tmp_path / "docs"
    written = gen.generate(out, gen.Params(), docs_dir=docs)
    assert written
    stale = []
    for path in written:
        rel = path.relative_to(tmp_path)
        committed = REPO / rel
        if not committed.exists() or not filecmp.cmp(path, committed, shallow=False):
            stale.append(str(rel))
    # committed runbooks for alerts that no longer exist
    stale += [f"docs/runbooks/{p.name}" for p in RUNBOOKS.glob("*.md") if not (docs / "runbooks" / p.name).exists()]
    assert not stale, f"stale generated files (run `sglang-exporter generate`): {stale}"
    assert gen.check() == []


def test_check_reports_stale_and_cli_exit_codes(tmp_path):
    out = tmp_path / "a"
    gen.generate(out, gen.Params())
    assert gen.check(out) == []
    (out / gen.EXPORTER_RULES).write_text("# edited by hand\n")
    assert gen.check(out) == [str(out / gen.EXPORTER_RULES)]
    cli = [sys.executable, "-m", "exporter.generate.alerts"]
    r = subprocess.run(cli + ["--check", "--out", str(out)], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 1 and gen.EXPORTER_RULES in r.stderr
    r = subprocess.run(cli + ["--out", str(out)], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(cli + ["--check", "--out", str(out)], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(cli + ["--set", "no_such_key=1", "--out", str(out)], cwd=REPO, capture_output=True,
                       text=True)
    assert r.returncode == 2 and "no_such_key" in r.stderr
    r = subprocess.run(cli + ["--set", "thresholds.retraction_storm.nope=3"], cwd=REPO, capture_output=True,
                       text=True)
    assert r.returncode == 2 and "nope" in r.stderr


def test_params_flow_into_rules(tmp_path):
    pfile = tmp_path / "p.yaml"
    pfile.write_text(yaml.safe_dump({
        "exporter_selector": 'job="sidecar", cluster="c1"',
        "sglang_selector": 'job="llm"',
        "runbook_url_pattern": "https://wiki.example.com/rb/{alertname_lower}",
        "thresholds": {"retraction_storm": {"per_minute": 20}},
        "alert_for": {"SGLangRetractionStorm": "5m"},
    }))
    p = gen.load_params(pfile, ["max_unknown_ratio=0.3"])
    assert p.thresholds["retraction_storm"]["per_minute"] == 20
    assert p.thresholds["retractions_frequent"]["per_minute"] == 1.0       # untouched default
    rules = {r["alert"]: r for g in gen.rule_files(p).values() for grp in g["groups"] for r in grp["rules"]
             if "alert" in r}
    storm = rules["SGLangRetractionStorm"]
    assert storm["for"] == "5m"
    assert 'job="sidecar", cluster="c1"' in storm["expr"]
    assert storm["annotations"]["runbook_url"] == "https://wiki.example.com/rb/sglangretractionstorm"
    assert rules["SGLangNativeRetractionStorm"]["expr"].rstrip().endswith(">= 20")
    assert 'job="llm"' in rules["SGLangNativeRetractionStorm"]["expr"]
    assert rules["SGLangLogParserDrift"]["expr"].rstrip().endswith("> 0.3")
    # a profile drops the native alerts of signals it disables (offline: no latency objectives)
    off = gen.Params(profile="offline")
    assert not [a for a in gen.native_alerts(off) if a.signal == "latency_high"]
    lc = gen.Params(profile="long-context")
    ttft = [a for a in gen.native_alerts(lc) if a.name == "SGLangNativeTTFTHigh"][0]
    assert ttft.expr.rstrip().endswith("> 10")
    with pytest.raises(ValueError, match="unknown signal"):
        gen.Params(thresholds={"nope": {}})
    with pytest.raises(ValueError, match="unknown alert"):
        gen.Params(alert_for={"SGLangNope": "1m"})


def test_short_windows_shorten_for_and_ranges():
    p = gen.Params(short_windows=True)
    for a in gen.all_alerts(p):
        base = gen.Params().alert_for.get(a.name) or gen.Params().alert_for[
            catalog.SIGNALS_BY_ID[a.signal].alert.name]
        assert a.for_ == ("10s" if gen.parse_duration(base) > 0 else base), a.name
        for rng in re.findall(r"\[(\w+)\]", a.expr):
            assert rng == "1m", (a.name, rng)


# ------------------------------------------------------------------------------------------ promtool

def _promtool_ok(args, cwd):
    promtool = require_tool("promtool")
    r = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"promtool {' '.join(args)}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_promtool_check_rules():
    out = _promtool_ok(["check", "rules", *[str(f) for f in RULE_FILES]], REPO)
    assert out.count("SUCCESS") == len(RULE_FILES)


def test_promtool_unit_tests():
    tests = sorted(str(p) for p in (ALERTS / "tests").glob("*.test.yml"))
    assert len(tests) >= 4
    _promtool_ok(["test", "rules", *tests], REPO)


@pytest.mark.parametrize("params", [
    {"short_windows": True},
    {"exporter_selector": 'job="sidecar", cluster="c1"', "sglang_selector": 'job="llm"',
     "thresholds": {"retraction_storm": {"per_minute": 20}, "queue_above_range": {"max_queue": 500},
                    "latency_high": {"ttft_p99_seconds": 0.5}},
     "alert_for": {"SGLangRetractionStorm": "5m", "SGLangStalled": "0m"}, "max_unknown_ratio": 0.05},
], ids=["short-windows", "custom-params"])
def test_promtool_with_other_params(tmp_path, params):
    """The generated unit tests follow the parameters: they pass for short windows and custom values too."""
    gen.generate(tmp_path, gen.Params(**params))
    _promtool_ok(["check", "rules", gen.EXPORTER_RULES, gen.NATIVE_RULES], tmp_path)
    _promtool_ok(["test", "rules", *sorted(str(p) for p in (tmp_path / "tests").glob("*.test.yml"))], tmp_path)


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
                {"family": gen.FAMILIES[s.id]} if s.id in gen.FAMILIES else {})}
            assert r["for"] == s.alert.for_
            assert r["annotations"]["summary"] == s.alert.summary
            assert r["annotations"]["description"] == s.alert.description
            assert r["annotations"]["runbook_url"] == s.runbook_url
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
    assert "for" in rule and gen.parse_duration(rule["for"]) >= 0
    if name != gen.WATCHDOG:
        assert has_comparison(rule["expr"]), f"{name}: no comparison in expr"
    # page <=> critical (the route tree pages on severity)
    spec = {a.name: a for a in gen.all_alerts(gen.Params())}[name]
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
        assert url.startswith(catalog.RUNBOOK_BASE + "/"), url
        rel = urlparse(url[len(catalog.RUNBOOK_BASE) + 1:])
        page = RUNBOOKS / rel.path
        assert page.is_file(), f"{r['alert']}: {page} missing"
        text = page.read_text()
        for section in ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation"):
            assert section in text, f"{page.name}: no {section}"
        if rel.fragment:
            slugs = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
                     for h in re.findall(r"^#+ (.+)$", text, re.M)}
            assert rel.fragment in slugs, f"{url}: no heading #{rel.fragment}"


def test_native_metric_table_matches_rules():
    """Every SGLang metric the native rules read is in the version table, with its version range."""
    used = set()
    for r in load_rules(ALERTS / gen.NATIVE_RULES):
        for m in selectors(r[2]["expr"]):
            base = next((m[: -len(s)] for s in HIST_SUFFIXES if m.endswith(s)), m)
            used.add(base if base in gen.SGLANG_METRICS else m)
    assert used <= set(gen.SGLANG_METRICS), used - set(gen.SGLANG_METRICS)
    for name, (first, last, typ) in gen.SGLANG_METRICS.items():
        assert name.startswith("sglang:") and typ in ("gauge", "counter", "histogram")
        assert re.match(r"^\d+\.\d+\.\d+$", first) and (last is None or re.match(r"^\d+\.\d+\.\d+$", last))
        if typ == "counter":
            assert name.endswith("_total")


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
    assert gen.render_template(tmpl, {"instance": "i"}, value) == expected
