"""Every way the bundle can be deployed, rendered to the Kubernetes documents a cluster would receive.

`renderings()` is what the tests of the manifests and of the image iterate over: the kustomizations under
deploy/kubernetes (by a small resolver of the kustomize features they use, checked against `kubectl
kustomize` in tests/test_deploy.py), the sidecar Component's worked example and every Helm value set under
deploy/helm/sglang-exporter/ci/ (both by the real kubectl and helm, tests/helm_render.py). Adding a way in is
one entry in RENDERINGS, a name and a function returning its documents.

`exporter_runs(docs)` finds, in one rendering, each container that runs the exporter image, with what it
needs to be started elsewhere: its args, its env and the files its ConfigMap mounts hold.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import helm_render
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "kubernetes"
EXPORTER_IMAGE = "sglang-exporter"  # the image repository's last path part, whatever the registry
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "Pod", "LeaderWorkerSet"}


def load_docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kustomize(directory: Path) -> list[dict]:
    """kustomize build, for the subset of kustomize our kustomizations use (asserted)."""
    k = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unsupported = set(k) - {"apiVersion", "kind", "resources", "patches", "images"}
    assert not unsupported, f"{directory}: the test resolver does not support {unsupported}"
    objs: list[dict] = []
    for res in k.get("resources", []):
        p = (directory / res).resolve()
        assert p.is_relative_to(directory.resolve()) or p.is_dir(), f"{res}: file outside the kustomization root"
        objs += kustomize(p) if p.is_dir() else load_docs(p)
    for patch in k.get("patches", []):
        body = yaml.safe_load(patch["patch"])
        assert body.pop("$patch", None) == "delete", "only `$patch: delete` patches are supported"
        before = len(objs)
        objs = [o for o in objs if not (o["kind"] == body["kind"] and o["apiVersion"] == body["apiVersion"]
                                        and o["metadata"]["name"] == body["metadata"]["name"])]
        assert len(objs) == before - 1, f"patch matched nothing: {body}"
    for img in k.get("images", []):
        for o in objs:
            for c in pod_containers(o):
                name, _, tag = c["image"].partition(":")
                if name == img["name"]:
                    c["image"] = f"{img.get('newName', name)}:{img.get('newTag', tag)}"
    return objs


RENDERINGS: dict[str, Callable[[], list[dict]]] = {
    "kustomize-base": lambda: kustomize(K8S / "base"),
    "kustomize-servicemonitor": lambda: kustomize(K8S / "variants" / "servicemonitor"),
    # the sidecar Component on its worked example, as a real kubectl kustomize renders it
    "kustomize-own-workload": lambda: helm_render.kustomize(helm_render.KUSTOMIZE_EXAMPLES["own-workload"]),
    **{f"helm-{name}": (lambda path=path: helm_render.template(path))
       for name, path in helm_render.value_sets().items()},
}


@functools.cache
def renderings() -> list[tuple[str, list[dict]]]:
    """(name, rendered documents) for every way the bundle can be deployed.

    Renderings that need helm or kubectl are left out where those are missing outside CI (helm_render.tool
    skips); under CI=true the missing tool fails the collection instead, so nothing goes untested there."""
    out = []
    for name, render in RENDERINGS.items():
        try:
            out.append((name, render()))
        except pytest.skip.Exception as why:
            print(f"deploy_render: {name} not rendered: {why}")
    return out


def pod_specs(obj: dict) -> dict[str, dict]:
    """The pod specs of a workload by role ("" for the only one; LeaderWorkerSet: "leader", "worker")."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Pod":
        return {"": spec}
    if obj.get("kind") == "LeaderWorkerSet":
        lws = spec.get("leaderWorkerTemplate") or {}
        return {role: t["spec"] for role in ("leader", "worker")
                if (t := lws.get(f"{role}Template")) and t.get("spec")}
    template = (spec.get("template") or {}).get("spec")
    return {"": template} if template else {}


def pod_spec_of(obj: dict) -> dict | None:
    """The pod spec of a single-template workload (Deployment, StatefulSet, ...), or None."""
    return pod_specs(obj).get("")


def pod_containers(obj: dict) -> list[dict]:
    return [c for spec in pod_specs(obj).values()
            for c in spec.get("initContainers", []) + spec.get("containers", [])]


@dataclass
class ExporterRun:
    """One exporter container of a rendered workload, as a container runtime needs it."""
    workload: str            # Kind/name, and /role for a LeaderWorkerSet's leader or worker pods
    pod: dict                # the pod spec it runs in (volumes, pod securityContext)
    container: dict
    files: dict[str, str]    # absolute path in the container -> content, from its ConfigMap mounts

    @property
    def args(self) -> list[str]:
        return [str(a) for a in self.container.get("command", []) + self.container.get("args", [])]

    @property
    def env(self) -> dict[str, str]:
        return {e["name"]: str(e["value"]) for e in self.container.get("env", []) if "value" in e}


def image_repository(image: str) -> str:
    """registry.example.com:5000/sglang-exporter:0.1.0@sha256:... -> registry.example.com:5000/sglang-exporter"""
    name = image.split("@", 1)[0]
    head, slash, last = name.rpartition("/")
    return head + slash + last.split(":", 1)[0]


def runs_exporter(container: dict) -> bool:
    return image_repository(container["image"]).rsplit("/", 1)[-1] == EXPORTER_IMAGE


def exporter_runs(docs: list[dict]) -> list[ExporterRun]:
    """Each container of the rendered workloads whose image is the exporter's."""
    configmaps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d.get("kind") == "ConfigMap"}
    runs = []
    for obj, role, spec in [(o, r, p) for o in docs if o.get("kind") in WORKLOAD_KINDS
                            for r, p in pod_specs(o).items()]:
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in spec.get("initContainers", []) + spec.get("containers", []):
            if not runs_exporter(c):
                continue
            files = {}
            for mount in c.get("volumeMounts", []):
                source = volumes[mount["name"]].get("configMap")
                if source is None:
                    continue
                data = configmaps[source["name"]]
                items = source.get("items") or [{"key": k, "path": k} for k in data]
                for item in items:
                    if "subPath" in mount:
                        if item["path"] == mount["subPath"]:
                            files[mount["mountPath"]] = data[item["key"]]
                    else:
                        files[f"{mount['mountPath'].rstrip('/')}/{item['path']}"] = data[item["key"]]
            workload = f"{obj['kind']}/{obj['metadata']['name']}" + (f"/{role}" if role else "")
            runs.append(ExporterRun(workload, spec, c, files))
    return runs
