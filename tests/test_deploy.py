"""Kubernetes manifests (deploy/kubernetes), the image (Dockerfile) and their generated parts.

Rendering: tests/deploy_render.py (a tiny resolver of the kustomizations we ship: resources, `$patch: delete`
patches, images), checked against `kubectl kustomize` where kubectl is installed; its `renderings()` lists every
way the bundle can be deployed. Schemas: kubernetes-validate, strict, for the oldest
Kubernetes with native sidecars on by default (1.29) and for their GA release (1.33). CRDs (PodMonitor,
ServiceMonitor, PrometheusRule) have no schema there; their structure is checked here.
"""
from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from deploy_render import WORKLOAD_KINDS, exporter_runs, kustomize, load_docs, pod_containers, renderings
from helpers import IN_CI, require_tool

from exporter import generate
from exporter.config import Config
from exporter.generate import kubernetes

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "kubernetes"
BASE = K8S / "base"
VARIANTS = {"base": BASE, "servicemonitor": K8S / "variants" / "servicemonitor"}
K8S_VERSIONS = ["1.29.0", "1.33.0"]
MONITORING = "monitoring.coreos.com/v1"
CRD_KINDS = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}


# ---------------------------------------------------------------- rendering


@pytest.fixture(scope="module", params=list(VARIANTS))
def rendered(request) -> tuple[str, list[dict]]:
    return request.param, kustomize(VARIANTS[request.param])


def one(objs, kind, name=None):
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def pod_spec(objs):
    return one(objs, "Deployment", "sglang")["spec"]["template"]["spec"]


def exporter_container(objs):
    spec = pod_spec(objs)
    assert not [c for c in spec["containers"] if c["name"] == "sglang-exporter"], "not a regular container"
    return next(c for c in spec["initContainers"] if c["name"] == "sglang-exporter")


def sglang_container(objs):
    return next(c for c in pod_spec(objs)["containers"] if c["name"] == "sglang")


def _key(o):
    return (o["kind"], o["metadata"]["name"])


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_resolver_agrees_with_kubectl_kustomize(variant):
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.skip("kubectl not installed; the Python resolver alone renders the kustomizations")
    r = subprocess.run([kubectl, "kustomize", str(VARIANTS[variant])], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    theirs = sorted((d for d in yaml.safe_load_all(r.stdout) if d), key=_key)
    ours = sorted(kustomize(VARIANTS[variant]), key=_key)
    assert [_key(o) for o in theirs] == [_key(o) for o in ours]
    assert theirs == ours


# ---------------------------------------------------------------- generated parts


def test_generated_files_are_fresh():
    """Stale generated files fail (handoff ConfigMap, PrometheusRules, dashboards copy, resource list)."""
    manifests = kubernetes.render(Config())
    assert set(manifests) >= {f"deploy/kubernetes/base/{n}" for n in ("handoff-configmap.yaml",
                                                                      "kustomization.yaml")}
    assert generate.stale(manifests, ROOT) == [], "run `sglang-exporter generate`"


def test_handoff_configmap_is_the_product_module():
    cm = one(kustomize(BASE), "ConfigMap", "sglang-handoff")
    assert cm["data"]["handoff.py"] == (ROOT / "exporter" / "ingest" / "handoff.py").read_text()


def _extract_groups_and_check(groups: list, tmp_path: Path, name: str) -> None:
    promtool = require_tool("promtool")
    f = tmp_path / f"{name}.rules.yml"
    f.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    r = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_prometheusrule_generator_on_a_crafted_rules_file(tmp_path):
    """The generator itself, independent of alerts/ being there: groups carried over verbatim and valid."""
    rules = {"groups": [{"name": "sglang-exporter.test", "rules": [
        {"record": "instance:sglang_exporter_up:max", "expr": "max by (instance) (up{job=\"sglang-exporter\"})"},
        {"alert": "SGLangExporterDown", "expr": "up{job=\"sglang-exporter\"} == 0", "for": "5m",
         "labels": {"severity": "warning"},
         "annotations": {"summary": "The exporter is down.",
                         "description": "{{ $labels.instance }} has been down for 5 minutes.\nCheck it.",
                         "runbook_url": "https://example.invalid/runbooks/exporter-down.md"}}]}]}
    obj = yaml.safe_load(kubernetes.prometheus_rule("alerts/sglang-exporter.rules.yml",
                                                    yaml.safe_dump(rules, sort_keys=False)))
    assert obj["apiVersion"] == MONITORING and obj["kind"] == "PrometheusRule"
    assert obj["metadata"]["name"] == "sglang-exporter"
    assert obj["spec"]["groups"] == rules["groups"]
    _extract_groups_and_check(obj["spec"]["groups"], tmp_path, "crafted")


@pytest.mark.parametrize("name", ["sglang-exporter", "sglang-native"])
def test_prometheusrule_equals_generated_alerts(name, tmp_path):
    src = ROOT / "alerts" / f"{name}.rules.yml"
    if not src.exists():
        if IN_CI:
            pytest.fail(f"{src.relative_to(ROOT)} is missing")
        pytest.skip(f"{src.relative_to(ROOT)} not generated yet")
    rule = one(kustomize(BASE), "PrometheusRule", name)
    assert rule["apiVersion"] == MONITORING
    assert rule["spec"]["groups"] == yaml.safe_load(src.read_text())["groups"], "stale: run `sglang-exporter generate`"
    names = [g["name"] for g in rule["spec"]["groups"]]
    assert len(names) == len(set(names))
    _extract_groups_and_check(rule["spec"]["groups"], tmp_path, name)


def test_dashboards_configmap_matches_generated():
    src = ROOT / "dashboards" / "sglang-dashboards.configmap.yaml"
    if not src.exists():
        if IN_CI:
            pytest.fail("dashboards/sglang-dashboards.configmap.yaml is missing")
        pytest.skip("dashboards ConfigMap not generated yet")
    want = load_docs(src)
    got = [o for o in kustomize(BASE) if o["kind"] == "ConfigMap" and o["metadata"]["name"] in
           {d["metadata"]["name"] for d in want}]
    assert sorted(got, key=_key) == sorted(want, key=_key)
    for cm in got:
        assert cm["metadata"]["labels"].get("grafana_dashboard") == "1"  # kube-prometheus-stack sidecar


# ---------------------------------------------------------------- schemas and structure


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_schemas(rendered, version):
    import kubernetes_validate

    _, objs = rendered
    checked = 0
    for o in objs:
        if o["kind"] in CRD_KINDS:
            assert o["apiVersion"] == MONITORING
            continue
        kubernetes_validate.validate(copy.deepcopy(o), version, strict=True)
        checked += 1
    assert checked >= 5


def test_monitor_selects_the_pod_and_port(rendered):
    variant, objs = rendered
    pod_labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    monitors = [o for o in objs if o["kind"] in ("PodMonitor", "ServiceMonitor")]
    assert len(monitors) == 1
    mon = monitors[0]
    assert mon["kind"] == {"base": "PodMonitor", "servicemonitor": "ServiceMonitor"}[variant]
    assert mon["apiVersion"] == MONITORING
    sel = mon["spec"]["selector"]["matchLabels"]
    if mon["kind"] == "PodMonitor":
        assert sel.items() <= pod_labels.items()
        container_ports = {p["name"] for c in pod_containers(one(objs, "Deployment")) for p in c.get("ports", [])}
        endpoints = mon["spec"]["podMetricsEndpoints"]
        assert {e["port"] for e in endpoints} <= container_ports
    else:
        svc = one(objs, "Service", "sglang")
        assert sel.items() <= svc["metadata"]["labels"].items()
        endpoints = mon["spec"]["endpoints"]
        assert {e["port"] for e in endpoints} <= {p["name"] for p in svc["spec"]["ports"]}
    by_port = {e["port"]: e for e in endpoints}
    assert by_port["metrics"]["path"] == "/metrics"
    jobs = {e["port"]: [r["replacement"] for r in e.get("relabelings", []) if r.get("targetLabel") == "job"]
            for e in endpoints}
    assert jobs == {"metrics": ["sglang-exporter"], "http": ["sglang"]}  # same jobs as deploy/local
    for e in endpoints:
        assert _seconds(e["scrapeTimeout"]) < _seconds(e["interval"])


def _seconds(d: str) -> float:
    m = re.fullmatch(r"(\d+)(ms|s|m)", d)
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[m.group(2)]


def test_service_exposes_metrics_port(rendered):
    _, objs = rendered
    svc = one(objs, "Service", "sglang")
    pod_labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    ports = {p["name"]: p for p in svc["spec"]["ports"]}
    assert ports["metrics"]["port"] == 10060 and ports["metrics"]["targetPort"] == "metrics"
    exp = exporter_container(objs)
    assert {"name": "metrics", "containerPort": 10060, "protocol": "TCP"} in exp["ports"]


def test_exporter_is_a_native_sidecar(rendered):
    _, objs = rendered
    exp = exporter_container(objs)
    assert exp["restartPolicy"] == "Always"
    assert exp["args"][0] == "serve"
    assert exp["image"] == f"{kubernetes.EXPORTER_IMAGE}:{kubernetes.EXPORTER_IMAGE_TAG}"


def test_exporter_security_context(rendered):
    _, objs = rendered
    sc = exporter_container(objs)["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod_spec(objs)["automountServiceAccountToken"] is False  # hand-off needs no API access
    assert not any("hostPath" in v for v in pod_spec(objs)["volumes"])  # and no host access


def test_exporter_probes_and_resources(rendered):
    _, objs = rendered
    exp = exporter_container(objs)
    assert exp["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    # a native sidecar's readiness and startup gate the Pod: the exporter must never take SGLang out of
    # service nor hold its start, so it has neither probe (docs/deploy.md)
    assert "readinessProbe" not in exp and "startupProbe" not in exp
    assert exp["resources"] == {"requests": {"cpu": "20m", "memory": "48Mi"},
                                "limits": {"cpu": "200m", "memory": "128Mi"}}


def test_exporter_config(rendered, tmp_path):
    """The ConfigMap is a valid exporter config that points at the hand-off file and at SGLang in the pod."""
    from exporter.config import build

    _, objs = rendered
    cm = one(objs, "ConfigMap", "sglang-exporter-config")
    f = tmp_path / "config.yaml"
    f.write_text(cm["data"]["config.yaml"])
    cfg = build({}, environ={}, config_file=str(f))
    exp = exporter_container(objs)
    mounts = {m["name"]: m for m in exp["volumeMounts"]}
    assert exp["args"] == ["serve", "--config", mounts["exporter-config"]["mountPath"] + "/config.yaml"]
    assert cfg.sglang_url == "http://127.0.0.1:30000"
    assert cfg.listen_host_port[1] == 10060
    sg = sglang_container(objs)
    assert {"name": "http", "containerPort": 30000, "protocol": "TCP"} in sg["ports"]
    handoff_file = next(a.split("=", 1)[1] for a in sg["command"] if a.startswith("--file="))
    assert list(cfg.log_files) == [handoff_file]
    # the positions file lives on a volume of the pod (it survives container restarts), writable
    state_dir = os.path.dirname(cfg.positions_file)
    assert mounts["exporter-state"]["mountPath"] == state_dir and not mounts["exporter-state"].get("readOnly")
    assert "emptyDir" in {v["name"]: v for v in pod_spec(objs)["volumes"]}["exporter-state"]
    assert mounts["logs"]["readOnly"] is True and handoff_file.startswith(mounts["logs"]["mountPath"] + "/")


def test_sglang_container(rendered):
    _, objs = rendered
    sg = sglang_container(objs)
    name, _, tag = sg["image"].partition(":")
    assert name == "lmsysorg/sglang" and re.fullmatch(r"v\d+\.\d+\.\d+.*", tag), "pin a release tag"
    assert sg["command"][-3:] == ["python3", "-m", "sglang.launch_server"]
    assert "--enable-metrics" in sg["args"]
    assert "--port=30000" in sg["args"]
    assert sg["resources"]["limits"]["nvidia.com/gpu"] == 1
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert sg[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert {"name": "PYTHONUNBUFFERED", "value": "1"} in sg["env"]


def test_log_handoff_wiring_and_disk_bound(rendered):
    """SGLang runs under handoff.py from the ConfigMap; the emptyDir can hold (backups+1) x max-bytes."""
    from exporter.ingest.handoff import parse_size

    _, objs = rendered
    spec = pod_spec(objs)
    sg = sglang_container(objs)
    mounts = {m["name"]: m for m in sg["volumeMounts"]}
    vols = {v["name"]: v for v in spec["volumes"]}
    assert sg["command"][:2] == ["python3", mounts["handoff"]["mountPath"] + "/handoff.py"]
    assert vols["handoff"]["configMap"]["name"] == "sglang-handoff"
    assert "--" in sg["command"]
    opts = dict(a.lstrip("-").split("=", 1) for a in sg["command"][2:sg["command"].index("--")])
    bound = (int(opts["backups"]) + 1) * parse_size(opts["max-bytes"])
    limit = parse_size(vols["logs"]["emptyDir"]["sizeLimit"].replace("Mi", "MiB").replace("Gi", "GiB"))
    assert bound < limit, f"hand-off bound {bound} must stay below the emptyDir sizeLimit {limit}"
    assert mounts["logs"]["mountPath"] == "/logs"


# ---------------------------------------------------------------- image


def dockerfile_instruction(text: str, name: str) -> list[str]:
    """The exec-form (JSON) argument list of the last `name` instruction of the Dockerfile."""
    found = re.findall(rf"^{name}\s+(\[.*?\])\s*$", text, re.M)
    assert found, f"Dockerfile: no exec-form {name}"
    return json.loads(found[-1])


def test_dockerfile():
    text = (ROOT / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
    froms = [re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], f)
             for f in re.findall(r"^FROM\s+(\S+)", text, re.M)]
    assert froms and all(re.search(r":\d+\.\d+(\.\d+)?-slim", f) for f in froms), f"pin the base: {froms}"
    assert re.search(r"^USER\s+65532(:65532)?\s*$", text, re.M)
    # the image runs the CLI; its arguments are a whole command line, as the manifests give them
    assert dockerfile_instruction(text, "ENTRYPOINT") == ["sglang-exporter"]
    assert dockerfile_instruction(text, "CMD") == ["serve"]
    hc = re.search(r"^HEALTHCHECK.*?CMD\s+(\[.*?\])\s*$", text, re.M | re.S)
    code = "\n".join(x for x in text.splitlines() if not x.lstrip().startswith("#"))
    assert hc and json.loads(hc.group(1)) == ["sglang-exporter", "healthcheck"]
    assert "curl" not in code and "wget" not in code
    assert "EXPOSE 10060" in text
    for label in ("org.opencontainers.image.source", "org.opencontainers.image.version",
                  "org.opencontainers.image.licenses", "org.opencontainers.image.revision"):
        assert label in text
    # a label may only use an ARG declared in its own stage (one declared before the first FROM is not)
    final_stage = text[text.rindex("\nFROM "):]
    for used in re.findall(r'^\s+org\.opencontainers\.[\w.]+="\$\{(\w+)\}"', final_stage, re.M):
        assert re.search(rf"^ARG\s+{used}\b", final_stage, re.M), f"ARG {used} is empty in the final stage"
    # one version everywhere: the image's label, the package, the tag the manifests pull
    version = re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert args["VERSION"] == version == kubernetes.EXPORTER_IMAGE_TAG
    lock = ROOT / "deploy" / "docker" / "requirements.txt"
    pins = [x for x in lock.read_text().splitlines() if x.strip() and not x.startswith("#")]
    assert pins and all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][^ ]*( \\)?", p.strip()) or
                        p.strip().startswith("--hash") for p in pins), pins
    names = {p.split("==")[0].lower() for p in pins if "==" in p}
    assert {"prometheus-client", "watchdog", "pyyaml"} <= names
    # the build backend is pinned and used as installed (no isolated build fetching an unpinned one)
    backend = (ROOT / "deploy" / "docker" / "build-requirements.txt").read_text()
    assert re.search(r"^setuptools==\d+\.\d+\.\d+$", backend, re.M)
    assert "--no-build-isolation" in text and "build-requirements.txt" in text
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert ".git" in ignore and "tests" in ignore
    assert {"!deploy/docker/requirements.txt", "!deploy/docker/build-requirements.txt"} <= set(ignore)


@pytest.mark.parametrize("name, docs", renderings(), ids=[name for name, _ in renderings()])
def test_every_rendered_exporter_container_is_a_command_of_the_image(name, docs):
    """The image's ENTRYPOINT followed by each rendered container's args is a command line the CLI accepts (the
    image test runs them for real). The bug this keeps out: ENTRYPOINT `sglang-exporter serve` with args
    `serve ...` exits 2 at once and the pod crash-loops."""
    from exporter.cli import build_parser

    entrypoint = dockerfile_instruction((ROOT / "Dockerfile").read_text(), "ENTRYPOINT")
    runs = exporter_runs(docs)
    # value sets that render no workload (the chart's sidecar snippet is printed by NOTES.txt, held equal to the
    # new-deployment rendering's sidecar by tests/test_helm.py) have nothing to start
    workloads = [d["kind"] for d in docs if d.get("kind") in WORKLOAD_KINDS]
    assert runs or not workloads, f"{name}: workloads {workloads} but no exporter container"
    for run in runs:
        assert "command" not in run.container, f"{name} {run.workload}: the image's ENTRYPOINT is the command"
        argv = (entrypoint + run.args)[1:]
        parsed = build_parser(argv[0]).parse_args(argv)
        assert parsed.command == "serve", (name, run.workload, argv)
