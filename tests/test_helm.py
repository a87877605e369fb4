"""The Helm chart (deploy/helm/sglang-exporter) and the kustomize sidecar Component, rendered by the real tools.

helm 3 and kubectl come from the layer scripts/test unpacks (tests/helm_render.py); under CI=true a missing one
fails. Every value set under ci/ (one per way in of docs/deploy.md) is linted with `--strict`, rendered with
`helm template` and validated: kubernetes-validate for the kinds it knows (1.29, the oldest with native sidecars
on by default, and 1.33), the structure of the CRD objects here (PodMonitor, ServiceMonitor, PrometheusRule,
GrafanaDashboard, and LeaderWorkerSet, whose pod templates are validated as PodTemplates).
"""
from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from helm_render import (
    CHART,
    KUSTOMIZE_EXAMPLES,
    NAMESPACE,
    helm,
    helm_renderings,
    kustomize,
    template,
    tool,
    value_sets,
)
from helpers import require_tool

from exporter.config import build
from exporter.generate import component, kubernetes
from exporter.ingest.handoff import parse_size

ROOT = Path(__file__).resolve().parents[1]
K8S_VERSIONS = ["1.29.0", "1.33.0"]
MONITORING = "monitoring.coreos.com/v1"
CRDS = {"PodMonitor": MONITORING, "ServiceMonitor": MONITORING, "PrometheusRule": MONITORING,
        "GrafanaDashboard": "grafana.integreatly.org/v1beta1", "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1"}
WAYS = {"sidecar", "leaderworkerset", "zero-touch", "metrics-only", "new-deployment"}
EXAMPLE = KUSTOMIZE_EXAMPLES["own-workload"]


@pytest.fixture(scope="module")
def renderings() -> dict[str, list[dict]]:
    return dict(helm_renderings())


def kinds(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def one(docs, kind):
    found = kinds(docs, kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def pod_templates(obj: dict) -> list[dict]:
    if obj["kind"] == "LeaderWorkerSet":
        lwt = obj["spec"]["leaderWorkerTemplate"]
        return [lwt["leaderTemplate"], lwt["workerTemplate"]]
    tmpl = obj.get("spec", {}).get("template")
    return [tmpl] if tmpl and "spec" in tmpl else []


def exporter_containers(docs):
    """(pod template, the sidecar) of every rendered pod."""
    return [(t, c) for o in docs for t in pod_templates(o) for c in t["spec"].get("initContainers", [])
            if c["name"] == "sglang-exporter"]


def test_every_way_in_has_a_value_set():
    assert set(value_sets()) == WAYS


@pytest.mark.parametrize("name", sorted(WAYS))
def test_lint_strict(name):
    r = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, "-f", str(value_sets()[name]))
    assert r.returncode == 0, r.stdout + r.stderr


def test_bad_values_fail_naming_the_value():
    r = helm("template", "x", str(CHART))
    assert r.returncode != 0 and "sglang.podSelector" in r.stderr, r.stderr
    r = helm("template", "x", str(CHART), "--set", "workload.create=true", "--set", "workload.kind=Job")
    assert r.returncode != 0 and 'workload.kind: expected Deployment or LeaderWorkerSet, got "Job"' in r.stderr
    r = helm("template", "x", str(CHART), "--set", "workload.create=true", "--set", "exporter.readLogs=false")
    assert r.returncode != 0 and "it needs exporter.enabled and exporter.readLogs true" in r.stderr, r.stderr


# ---------------------------------------------------------------- schemas and CRD structure


def check_crd(o: dict, version: str) -> None:
    assert o["apiVersion"] == CRDS[o["kind"]], o["apiVersion"]
    assert o["metadata"]["name"] and o["metadata"]["namespace"] == NAMESPACE
    spec = o["spec"]
    if o["kind"] in ("PodMonitor", "ServiceMonitor"):
        assert spec["selector"]["matchLabels"]
        endpoints = spec["podMetricsEndpoints" if o["kind"] == "PodMonitor" else "endpoints"]
        for e in endpoints:
            assert ("port" in e) != ("targetPort" in e), e
            assert e["path"] == "/metrics" and _seconds(e["scrapeTimeout"]) < _seconds(e["interval"])
    elif o["kind"] == "PrometheusRule":
        names = [g["name"] for g in spec["groups"]]
        assert names and len(names) == len(set(names))
        assert all(r.get("alert") or r.get("record") for g in spec["groups"] for r in g["rules"])
    elif o["kind"] == "GrafanaDashboard":
        assert spec["instanceSelector"]["matchLabels"]
        dashboard = json.loads(spec["json"])
        assert {i["name"] for i in dashboard["__inputs"]} == {d["inputName"] for d in spec["datasources"]}
    elif o["kind"] == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        assert isinstance(lwt["size"], int) and lwt["size"] >= 2
        assert lwt["restartPolicy"] in ("RecreateGroupOnPodRestart", "None")
        for t in pod_templates(o):      # a pod template is a PodTemplate's `template`
            kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate",
                                          "metadata": {"name": o["metadata"]["name"]}, "template": copy.deepcopy(t)},
                                         version, strict=True)


def _seconds(d: str) -> float:
    m = re.fullmatch(r"(\d+)(s|m)", d)
    assert m, d
    return int(m.group(1)) * {"s": 1, "m": 60}[m.group(2)]


def validate_all(docs: list[dict], version: str) -> set[str]:
    """kubernetes-validate where it has a schema, our checks for the CRDs; the kinds seen."""
    for o in docs:
        try:
            kubernetes_validate.validate(copy.deepcopy(o), version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            assert o["kind"] in CRDS, f"{o['kind']}: neither a Kubernetes kind nor a CRD we check"
            check_crd(o, version)
    return {o["kind"] for o in docs}


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_schemas(renderings, version):
    seen = set()
    for _name, docs in renderings.items():
        seen |= validate_all(docs, version)
    assert seen >= {"ConfigMap", "Deployment", "Service", *CRDS} - {"ServiceMonitor"}   # its own test below


def test_service_monitor_variant():
    docs = template(value_sets()["new-deployment"], "--set", "monitoring.monitor=ServiceMonitor")
    validate_all(docs, K8S_VERSIONS[-1])
    sm, svc = one(docs, "ServiceMonitor"), one(docs, "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert {e["port"] for e in sm["spec"]["endpoints"]} == {p["name"] for p in svc["spec"]["ports"]}
    assert not kinds(docs, "PodMonitor")


# ---------------------------------------------------------------- what each way in renders


def test_rules_equal_the_generated_alerts(renderings, tmp_path):
    docs = renderings["sidecar"]
    rules = {r["metadata"]["name"].removesuffix("-rules").rsplit("-", 1)[-1]: r for r in kinds(docs, "PrometheusRule")}
    for short, src in (("exporter", "sglang-exporter.rules.yml"), ("native", "sglang-native.rules.yml")):
        want = yaml.safe_load((ROOT / "alerts" / src).read_text())["groups"]
        assert rules[short]["spec"]["groups"] == want, f"{src}: run `sglang-exporter generate`"
        assert rules[short]["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    # zero-touch: SGLang's own /metrics only, so only the native rules
    assert [r["metadata"]["name"] for r in kinds(renderings["zero-touch"], "PrometheusRule")] == [
        "sglang-exporter-native-rules"]


def test_native_thresholds_are_values(tmp_path):
    docs = template(value_sets()["zero-touch"], "--set", "rules.native.thresholds.queue_above_range.max_queue=500",
                    "--set", "rules.native.thresholds.latency_high.ttft_p99_seconds=0.75")
    groups = one(docs, "PrometheusRule")["spec"]["groups"]
    by_name = {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}
    queue = by_name["SGLangNativeQueueAboveRange"]
    # the threshold closes the comparison; the rule's stand-down clause (`unless on (...)`) may follow it
    assert re.search(r"\) > 500\n", queue["expr"]) and "(healthy: up to 500)" in queue["annotations"]["description"]
    assert re.search(r" > 0\.75\n", by_name["SGLangNativeTTFTHigh"]["expr"])
    assert "{{ with $labels.pod }}" in queue["annotations"]["description"]   # Prometheus' templates kept
    f = tmp_path / "native.rules.yml"
    f.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    r = subprocess.run([require_tool("promtool"), "check", "rules", str(f)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_dashboards(renderings):
    docs = renderings["metrics-only"]
    cm = next(d for d in docs if d["metadata"]["name"].endswith("-dashboards"))
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    for name in ("sglang-overview.json", "sglang-detail.json"):
        assert cm["data"][name] == (ROOT / "dashboards" / name).read_text()
    operator = {d["metadata"]["name"]: d for d in kinds(docs, "GrafanaDashboard")}
    assert json.loads(operator["sglang-exporter-sglang-detail"]["spec"]["json"]) == json.loads(
        (ROOT / "dashboards" / "sglang-detail.json").read_text())


def exporter_config(docs, configmap: str, tmp_path: Path):
    cm = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == configmap)
    f = tmp_path / f"{configmap}.yaml"
    f.write_text(cm["data"]["config.yaml"])
    return build({}, environ={}, config_file=str(f))


@pytest.mark.parametrize("name", ["new-deployment", "leaderworkerset"])
def test_workload_wiring(renderings, name, tmp_path):
    """The sidecar reads the file the hand-off writes, from the config its volume mounts, and keeps its positions
    on a pod volume; the log volume holds the hand-off's bound; the monitor selects the pods."""
    docs = renderings[name]
    found = exporter_containers(docs)
    assert len(found) == (2 if name == "leaderworkerset" else 1)
    for tmpl, exp in found:
        spec = tmpl["spec"]
        vols = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["name"]: m["mountPath"] for m in exp["volumeMounts"]}
        assert exp["args"] == ["serve", "--config", mounts["exporter-config"] + "/config.yaml"]
        cfg = exporter_config(docs, vols["exporter-config"]["configMap"]["name"], tmp_path)
        sg = next(c for c in spec["containers"] if c["name"] == "sglang")
        cmd = sg["command"]
        assert cmd[:2] == ["python3", "/opt/sglang-exporter/handoff.py"] and "--" in cmd
        opts = dict(a.lstrip("-").split("=", 1) for a in cmd[2:cmd.index("--")])
        assert list(cfg.log_files) == [opts["file"]] and opts["file"].startswith(mounts["logs"] + "/")
        bound = (int(opts["backups"]) + 1) * parse_size(opts["max-bytes"])
        assert bound < parse_size(vols["logs"]["emptyDir"]["sizeLimit"].replace("Mi", "MiB"))
        assert cfg.positions_file.startswith(mounts["exporter-state"] + "/") and "emptyDir" in vols["exporter-state"]
        assert vols["handoff"]["configMap"]["name"] in {d["metadata"]["name"] for d in kinds(docs, "ConfigMap")}
        assert "--enable-metrics" in sg["args"]
    selector = one(docs, "PodMonitor")["spec"]["selector"]["matchLabels"]
    assert all(selector.items() <= t["metadata"]["labels"].items() for t, _ in found)


def test_leaderworkerset_roles(renderings, tmp_path):
    """Leader: node rank 0, the HTTP server (probes, the port the monitor scrapes). Worker: its node rank from LWS,
    no SGLang port (nothing to scrape there by default), a log-only sidecar that does not wait for a ready line."""
    docs = renderings["leaderworkerset"]
    leader, worker = pod_templates(one(docs, "LeaderWorkerSet"))
    sg = {role: next(c for c in t["spec"]["containers"] if c["name"] == "sglang")
          for role, t in (("leader", leader), ("worker", worker))}
    assert "--node-rank=0" in sg["leader"]["args"] and "--node-rank=$(LWS_WORKER_INDEX)" in sg["worker"]["args"]
    for c in sg.values():
        assert "--nnodes=$(LWS_GROUP_SIZE)" in c["args"]
        assert any(a.startswith("--dist-init-addr=$(LWS_LEADER_ADDRESS):") for a in c["args"])
    assert sg["leader"]["ports"][0]["containerPort"] == 30000 and "readinessProbe" in sg["leader"]
    assert "ports" not in sg["worker"] and "readinessProbe" not in sg["worker"]
    worker_cfg = exporter_config(docs, "sglang-exporter-worker-config", tmp_path)
    assert worker_cfg.sglang_url is None and worker_cfg.signals["startup_stalled"] == {"enabled": False}
    leader_cfg = exporter_config(docs, "sglang-exporter-config", tmp_path)
    assert leader_cfg.sglang_url == "http://127.0.0.1:30000"


def test_zero_touch_and_metrics_only(renderings, tmp_path):
    zero = renderings["zero-touch"]
    assert not exporter_containers(zero) and not [d for d in zero if d["metadata"]["name"].endswith("-config")]
    endpoints = one(zero, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert [e["targetPort"] for e in endpoints] == [30000]
    assert [r["replacement"] for r in endpoints[0]["relabelings"]] == ["sglang"]
    only = renderings["metrics-only"]
    cfg = exporter_config(only, "sglang-exporter-config", tmp_path)
    assert cfg.log_files == () and cfg.sglang_url == "http://127.0.0.1:30000" and cfg.positions_file is None
    assert not [d for d in only if d["metadata"]["name"].endswith("-handoff")]
    assert {e.get("port") or e.get("targetPort") for e in one(only, "PodMonitor")["spec"]["podMetricsEndpoints"]} == {
        "metrics", 30000}


def test_one_sidecar_everywhere(renderings):
    """The chart's sidecar, the component's and the kustomize base's are the same container (but the image)."""
    base = yaml.safe_load_all((ROOT / "deploy" / "kubernetes" / "base" / "deployment.yaml").read_text())
    base_exp = next(c for d in base if d and d["kind"] == "Deployment"
                    for c in d["spec"]["template"]["spec"]["initContainers"] if c["name"] == "sglang-exporter")

    def without_image(c):
        return {k: v for k, v in c.items() if k != "image"}
    assert without_image(component.SIDECAR) == without_image(base_exp)
    (_, chart_exp), = exporter_containers(renderings["new-deployment"])
    assert without_image(chart_exp) == without_image(base_exp)
    assert chart_exp["image"] == f"{kubernetes.EXPORTER_IMAGE}:{kubernetes.EXPORTER_IMAGE_TAG}"
    assert yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"] == kubernetes.EXPORTER_IMAGE_TAG


# ---------------------------------------------------------------- the kustomize component, way (a)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_component_on_the_example_workload(version, tmp_path):
    docs = kustomize(EXAMPLE)
    validate_all(docs, version)
    dep = one(docs, "Deployment")
    (tmpl, exp), = exporter_containers(docs)
    assert exp["image"] == "registry.example.com/sglang-exporter:0.1.0"
    sg = tmpl["spec"]["containers"][0]
    user = yaml.safe_load((EXAMPLE / "sglang.yaml").read_text())["spec"]["template"]["spec"]["containers"][0]
    assert sg["command"] == ["python3", "/opt/sglang-exporter/handoff.py", *component.HANDOFF_ARGS, "--",
                             *user["command"], "--enable-metrics"]
    assert sg["args"] == user["args"]
    vols = {v["name"] for v in tmpl["spec"]["volumes"]}
    assert {"logs", "handoff", "exporter-config", "exporter-tmp", "exporter-state", "shm"} <= vols
    cfg = exporter_config(docs, "sglang-exporter-config", tmp_path)
    assert list(cfg.log_files) == [component.LOG_FILE]
    pm = one(docs, "PodMonitor")
    assert pm["spec"]["selector"]["matchLabels"].items() <= tmpl["metadata"]["labels"].items()
    assert dep["spec"]["selector"]["matchLabels"] == {"app": "my-sglang"}      # selector untouched
    for o in docs:
        assert o["metadata"]["namespace"] == "llm"
    for kind in ("PodMonitor", "PrometheusRule"):
        assert all(o["metadata"]["labels"]["release"] == "kube-prometheus-stack" for o in kinds(docs, kind))


def _overlay(tmp_path: Path, workload: dict) -> Path:
    d = tmp_path / "overlay"
    d.mkdir()
    (d / "sglang.yaml").write_text(yaml.safe_dump(workload))
    (d / "kustomization.yaml").write_text(yaml.safe_dump({       # kustomize takes relative paths only
        "resources": ["sglang.yaml"], "components": [os.path.relpath(ROOT / component.COMPONENT, d)]}))
    return d


def test_component_patches_only_the_annotated_workload_and_statefulsets(tmp_path):
    user = yaml.safe_load((EXAMPLE / "sglang.yaml").read_text())
    sts = copy.deepcopy(user)
    sts["kind"], sts["spec"]["serviceName"] = "StatefulSet", "my-sglang"
    del sts["spec"]["strategy"]
    other = copy.deepcopy(user)
    other["metadata"] = {"name": "web"}
    d = _overlay(tmp_path, sts)
    (d / "web.yaml").write_text(yaml.safe_dump(other))
    k = yaml.safe_load((d / "kustomization.yaml").read_text())
    k["resources"].append("web.yaml")
    (d / "kustomization.yaml").write_text(yaml.safe_dump(k))
    docs = kustomize(d)
    patched = one(docs, "StatefulSet")["spec"]["template"]["spec"]
    assert patched["initContainers"][0]["name"] == "sglang-exporter"
    assert one(docs, "Deployment")["spec"]["template"]["spec"] == other["spec"]["template"]["spec"]


def test_component_refuses_a_workload_laid_out_otherwise(tmp_path):
    user = yaml.safe_load((EXAMPLE / "sglang.yaml").read_text())
    user["spec"]["template"]["spec"]["containers"][0]["name"] = "server"
    r = subprocess.run([tool("kubectl"), "kustomize", str(_overlay(tmp_path, user))], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "/spec/template/spec/containers/0/name" in r.stderr, r.stderr


def test_exporter_thresholds_are_values(tmp_path):
    """The exporter's own thresholds are its config's `signals:` (its alerts read the firing flag it exports)."""
    docs = template(value_sets()["sidecar"], "--set", "exporter.config.signals.queue_above_range.max_queue=500",
                    "--set", "exporter.config.profile=offline")
    cfg = exporter_config(docs, "sglang-exporter-config", tmp_path)
    assert cfg.signals["queue_above_range"] == {"max_queue": 500} and cfg.profile == "offline"
    assert list(cfg.log_files) == ["/logs/sglang.log"]


def notes(values: Path, tmp_path: Path) -> str:
    """NOTES.txt as `helm install` prints it: `helm template` leaves it out, so a copy of the chart gets one more
    template that includes it (every template file is a named template under its path)."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    (chart / "templates" / "notes-preview.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes-preview\ndata:\n  notes: |\n"
        '    {{- include "sglang-exporter/templates/NOTES.txt" . | nindent 4 }}\n')
    r = helm("template", "sglang-exporter", str(chart), "--namespace", NAMESPACE, "-f", str(values),
             "--show-only", "templates/notes-preview.yaml")
    assert r.returncode == 0, r.stderr
    return yaml.safe_load(r.stdout)["data"]["notes"]


def test_printed_snippet_is_the_charts_own_sidecar(renderings, tmp_path):
    """What NOTES.txt tells a user to paste (way (a) with Helm) is what the chart's own workload runs."""
    text = notes(value_sets()["sidecar"], tmp_path)
    blocks = [yaml.safe_load(b) for b in text.split("\n\n") if b.startswith(("initContainers:", "command:"))]
    pod, wrap = blocks
    (tmpl, sidecar), = exporter_containers(renderings["new-deployment"])
    assert pod["initContainers"] == [sidecar]
    own = [v for v in tmpl["spec"]["volumes"] if v["name"] not in ("dshm", "models")]
    assert pod["volumes"] == own
    sg = tmpl["spec"]["containers"][0]
    assert wrap["command"] == sg["command"]
    assert wrap["volumeMounts"] == [m for m in sg["volumeMounts"] if m["name"] in ("logs", "handoff")]


def test_zero_touch_notes_name_what_it_cannot_judge(tmp_path):
    text = notes(value_sets()["zero-touch"], tmp_path)
    assert "initContainers" not in text and "docs/signal-sources.md" in text
