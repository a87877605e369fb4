"""Objectives users set (`slo:`): validation, the generated burn-rate rules under real promtool (including
mutated rules the generated tests must catch), the runbooks, and the Helm chart's objective values."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from helm_render import CHART, NAMESPACE, RELEASE, template, value_sets
from helm_render import helm as run_helm
from helpers import PROMETHEUS_RELEASES, require_tool

from exporter.catalog import slo as catalog_slo
from exporter.config import Config, ConfigError, build
from exporter.generate import helm, render, write
from exporter.generate.settings import RuleSettings
from exporter.generate.slo import SLO_RULES, alerts

ROOT = Path(__file__).resolve().parents[1]
ALL = """\
slo:
  ttft: {target: 0.99, threshold_seconds: 2}
  inter_token_latency: {target: 0.99, threshold_seconds: 0.1}
  error_ratio: {target: 0.999}
  availability: {target: 0.995}
"""


def _config(tmp_path: Path, text: str) -> Config:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return build({}, environ={}, config_file=str(path))


def _errors(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        _config(tmp_path, text)
    return str(info.value).splitlines()


# ---------------------------------------------------------------- validation

def test_objectives_load(tmp_path):
    cfg = _config(tmp_path, ALL)
    assert cfg.slo["ttft"] == {"target": 0.99, "threshold_seconds": 2.0}
    assert list(RuleSettings(cfg).objectives()) == [k.id for k in catalog_slo.KINDS]


def test_every_mistake_named_by_file_line_and_key(tmp_path):
    errors = _errors(tmp_path, """\
slo:
  ttft: {target: 99, threshold_seconds: 2}
  inter_token_latency:
    target: 0.99
    threshold_seconds: 0.05
  error_ratio: {target: 0.999, threshold_seconds: 1}
  latency: {target: 0.9}
  availability: {}
""")
    path = tmp_path / "c.yaml"
    assert errors == [
        f"{path}:2: slo.ttft.target: expected the share of good events between 0 and 1 (e.g. 0.99 for 99 %), got 99",
        f"{path}:5: slo.inter_token_latency.threshold_seconds: 0.05 s is not a bucket bound of SGLang's inter-token "
        "latency histogram, so no bucket counts the requests under it (bounds: 0.002, 0.004, 0.006, 0.008, 0.01, "
        "0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8); pick one, or "
        "set custom_buckets: true if your server sets its own buckets with this bound",
        f"{path}:6: slo.error_ratio.threshold_seconds: unknown key (known: target)",
        f"{path}:7: slo.latency: unknown objective (known: ttft, inter_token_latency, error_ratio, availability)",
        f"{path}:8: slo.availability: missing target",
    ]


def test_custom_buckets_accept_another_bound(tmp_path):
    cfg = _config(tmp_path, "slo:\n  inter_token_latency: {target: 0.99, threshold_seconds: 0.05, "
                            "custom_buckets: true}\n")
    rules = render(cfg)[f"alerts/{SLO_RULES}"]
    assert 'le=~"0.05|0.05\\\\.0"' in rules


def test_alert_for_takes_the_objectives_alerts(tmp_path):
    cfg = _config(tmp_path, ALL + "alerts:\n  for: {SGLangSLOTTFTFastBurn: 5m}\n")
    by_name = {a.name: a for a in alerts(RuleSettings(cfg))}
    assert by_name["SGLangSLOTTFTFastBurn"].for_ == "5m"
    assert by_name["SGLangSLOTTFTSlowBurn"].for_ == catalog_slo.TICKET_FOR


def test_no_objectives_no_rules():
    files = render(Config())
    assert f"alerts/{SLO_RULES}" not in files and "alerts/tests/sglang-slo.test.yml" not in files
    # the runbooks exist all the same: the chart can switch objectives on and its alerts link there
    for kind in catalog_slo.KINDS:
        for name in catalog_slo.alert_names(kind):
            page = files[f"docs/runbooks/{name}.md"]
            assert "## Meaning" in page and "## Impact" in page and "## Diagnosis" in page and "## Mitigation" in page


def test_rules_group_like_the_native_rules(tmp_path):
    """The identity labels of `alerts.join_labels` reach every aggregation (the paging work changes them)."""
    cfg = _config(tmp_path, ALL + "alerts:\n  join_labels: [cluster, namespace, pod]\n")
    text = render(cfg)[f"alerts/{SLO_RULES}"]
    assert text.count("by (cluster, namespace, pod, model_name)") > 20
    assert "by (namespace, pod, instance, job" not in text


# ---------------------------------------------------------------- promtool

def _bundle(tmp_path: Path, cfg: Config) -> Path:
    out = tmp_path / "bundle"
    files = {k: v for k, v in render(cfg).items() if k.startswith("alerts/")}
    write(files, out)
    return out / "alerts"


def _promtool_test(alerts_dir: Path, release: str = "installed") -> subprocess.CompletedProcess:
    return subprocess.run([require_tool("promtool", release), "test", "rules", "tests/sglang-slo.test.yml"],
                          cwd=alerts_dir, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("release", PROMETHEUS_RELEASES)
def test_generated_promtool_tests_pass(tmp_path, release):
    alerts_dir = _bundle(tmp_path, _config(tmp_path, ALL))
    check = subprocess.run([require_tool("promtool", release), "check", "rules", SLO_RULES], cwd=alerts_dir,
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    tests = yaml.safe_load((alerts_dir / "tests" / "sglang-slo.test.yml").read_text())["tests"]
    names = [t["name"] for t in tests]
    for kind in catalog_slo.KINDS:       # every objective: fires, quiet under each burn rate, both windows needed
        page = catalog_slo.alert_names(kind)[0].removesuffix("FastBurn")
        mine = [n for n in names if n.startswith(page + ":")]
        assert any("pages after" in n for n in mine) and any("does not page" in n for n in mine), mine
        assert any("stays quiet" in n for n in mine) and any("not the 1h one" in n for n in mine), mine
        assert any("not the 5m one" in n for n in mine), mine
    r = _promtool_test(alerts_dir, release)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("mutation,alert,old,new", [
    ("no short window", "SGLangSLOErrorRatioFastBurn",
     '\n  and\n  instance:sglang_slo_errors:ratio_rate5m{slo="error_ratio"} / (1 - 0.999) > 14.4', ""),
    ("6h pair at burn 5", "SGLangSLOErrorRatioFastBurn", "(1 - 0.999) > 6\n", "(1 - 0.999) > 5\n"),
    ("ticket at burn 0.8", "SGLangSLOErrorRatioSlowBurn", "(1 - 0.999) > 1\n", "(1 - 0.999) > 0.8\n"),
])
def test_generated_tests_catch_wrong_rules(tmp_path, mutation, alert, old, new):
    alerts_dir = _bundle(tmp_path, _config(tmp_path, "slo:\n  error_ratio: {target: 0.999}\n"))
    path = alerts_dir / SLO_RULES
    doc = yaml.safe_load(path.read_text())
    rule = next(r for g in doc["groups"] for r in g["rules"] if r.get("alert") == alert)
    assert old in rule["expr"], mutation
    rule["expr"] = rule["expr"].replace(old, new)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    r = _promtool_test(alerts_dir)
    assert r.returncode != 0, f"{mutation}: the generated tests still pass"


def test_kubernetes_copy(tmp_path):
    files = render(_config(tmp_path, ALL))
    kustomization = yaml.safe_load(files["deploy/kubernetes/base/kustomization.yaml"])
    assert "prometheusrule-sglang-slo.yaml" in kustomization["resources"]


# ---------------------------------------------------------------- Helm

def test_chart_objective_override_reaches_the_rule():
    docs = template(value_sets()["zero-touch"], "--set", "rules.slo.objectives.ttft.enabled=true",
                    "--set", "rules.slo.objectives.ttft.target=0.95",
                    "--set", "rules.slo.objectives.ttft.threshold_seconds=1")
    rule = next(d for d in docs if d["kind"] == "PrometheusRule" and d["metadata"]["name"].endswith("-slo-rules"))
    groups = rule["spec"]["groups"]
    assert [g["name"] for g in groups] == ["sglang-slo.ttft"]
    by_name = {r.get("alert") or r["record"]: r for r in groups[0]["rules"]}
    assert 'le=~"1|1\\\\.0"' in by_name["instance:sglang_slo_errors:ratio_rate5m"]["expr"]
    assert by_name["slo:sglang_objective:ratio"]["expr"] == "vector(0.95)"
    page = by_name["SGLangSLOTTFTFastBurn"]
    assert "/ (1 - 0.95) > 14.4" in page["expr"]
    assert "{{ with $labels.pod }}" in page["annotations"]["description"]   # the server named by its identity
    assert "target 0.95: a request gets its first token within 1 s" in page["annotations"]["description"]


def test_chart_has_no_objective_by_default():
    docs = template(value_sets()["zero-touch"])
    assert not [d for d in docs if d["metadata"]["name"].endswith("-slo-rules")]


def test_chart_refuses_a_threshold_that_is_no_bucket_bound():
    r = run_helm("template", "r", str(CHART), "-f", str(value_sets()["zero-touch"]),
                 "--set", "rules.slo.objectives.ttft.enabled=true",
                 "--set", "rules.slo.objectives.ttft.threshold_seconds=1.5")
    assert r.returncode != 0
    assert "rules.slo.objectives.ttft.threshold_seconds: 1.5 is not a bucket bound" in r.stderr


def test_chart_generated_from_a_config_renders_its_rules(tmp_path):
    """Generated from a config with objectives, the chart's default values give exactly the rule file."""
    cfg = _config(tmp_path, ALL)
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    files = render(cfg)
    for rel, text in files.items():
        if rel.startswith(helm.CHART + "/"):
            (chart / rel.removeprefix(helm.CHART + "/")).write_text(text)
    r = run_helm("template", RELEASE, str(chart), "--namespace", NAMESPACE, "-f",
                 str(value_sets()["zero-touch"]))
    assert r.returncode == 0, r.stderr
    rendered = [d for d in yaml.safe_load_all(r.stdout) if d and d["metadata"]["name"].endswith("-slo-rules")]
    want = yaml.safe_load(files[f"alerts/{SLO_RULES}"])["groups"]
    assert len(rendered) == 1 and rendered[0]["spec"]["groups"] == want


def test_examples_are_valid_objectives(tmp_path):
    """The chart's disabled examples pass the same validation as a user's `slo:`."""
    from exporter.generate.slo import example_objectives
    text = "slo:\n" + "".join(f"  {k}: {yaml.safe_dump(v, default_flow_style=True).strip()}\n"
                              for k, v in example_objectives().items())
    assert set(_config(tmp_path, text).slo) == {k.id for k in catalog_slo.KINDS}


def test_rules_lint(tmp_path):
    """The house rules of tests/test_alerts.py, on the objectives' rules: names, severities, annotations,
    rate() over counters only and before any aggregation, groups of at most 20 rules."""
    import promql_parser as pp
    from test_alerts import ALERT_NAME, RECORD_NAME, SEVERITIES, calls
    doc = yaml.safe_load(render(_config(tmp_path, ALL))[f"alerts/{SLO_RULES}"])
    counters = {f"{catalog_slo.TTFT}_bucket", f"{catalog_slo.TTFT}_count", f"{catalog_slo.ITL}_bucket",
                f"{catalog_slo.ITL}_count", f"{catalog_slo.ITL_BEFORE_0_4_4}_bucket",
                f"{catalog_slo.ITL_BEFORE_0_4_4}_count", catalog_slo.HTTP_RESPONSES}
    for group in doc["groups"]:
        assert len(group["rules"]) <= 20 and len(group["name"]) <= 40
        for rule in group["rules"]:
            for c in calls(rule["expr"]):
                if c.func.name == "rate":
                    assert isinstance(c.args[0], pp.MatrixSelector)
                    assert c.args[0].vector_selector.name in counters
            if "record" in rule:
                assert RECORD_NAME.match(rule["record"]), rule["record"]
                continue
            assert ALERT_NAME.match(rule["alert"]) and len(rule["alert"]) <= 40
            assert rule["labels"]["severity"] in SEVERITIES and rule["labels"]["slo"]
            assert (rule["labels"]["severity"] == "critical") == rule["alert"].endswith("FastBurn")
            ann = rule["annotations"]
            assert ann["summary"].endswith(".") and "{{" not in ann["summary"]
            assert "{{ $value" in ann["description"]
            assert (ROOT / "docs" / "runbooks" / f"{rule['alert']}.md").is_file()


def test_bucket_bounds_match_the_simulated_sglang():
    """The simulator writes SGLang's default buckets; the objectives validate against the same bounds."""
    from exporter.simulate import ITL_BUCKETS, TTFT_BUCKETS
    assert catalog_slo.DEFAULT_BUCKETS == {"ttft": TTFT_BUCKETS, "inter_token_latency": ITL_BUCKETS}
