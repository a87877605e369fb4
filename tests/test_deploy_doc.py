"""docs/deploy.md opens with the three ways in; each is at most three steps, and its steps name what the tests
render: the chart's value sets (tests/test_helm.py renders every ci/*-values.yaml) and the kustomize example."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

from helm_render import CHART, value_sets

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "deploy.md"
EXAMPLE = "deploy/kubernetes/examples/own-workload"     # rendered by tests/test_helm.py


def ways() -> dict[str, str]:
    text = DOC.read_text()
    assert text.split("\n## ", 2)[1].startswith("Three ways in"), "docs/deploy.md must open with the ways in"
    section = text.split("\n## Three ways in", 1)[1].split("\n## ", 1)[0]
    parts = re.split(r"^### \((\w)\) .*$", section, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_three_ways_of_at_most_three_steps():
    found = ways()
    assert list(found) == ["a", "b", "c"]
    for way, body in found.items():
        steps = [int(n) for n in re.findall(r"^(\d+)\. ", body, flags=re.M)]
        assert steps and max(steps) <= 3, f"way ({way}): steps {steps}"


def test_every_path_named_exists():
    for way, body in ways().items():
        for path in re.findall(r"(?<![\w/])deploy/[\w./-]*[\w/]", body):
            assert (ROOT / path).exists(), f"way ({way}) names {path}, which does not exist"


def commands(body: str) -> list[list[str]]:
    return [shlex.split(c) for c in re.findall(r"`((?:helm|kubectl) [^`]+)`", body)]


def test_commands_use_what_the_tests_render():
    values_used = set()
    for way, body in ways().items():
        cmds = commands(body)
        assert cmds, f"way ({way}) has no command"
        for argv in cmds:
            if argv[:2] == ["helm", "install"]:
                assert (ROOT / argv[3]).resolve() == CHART
                values = Path(argv[argv.index("-f") + 1])
                assert values.name.removesuffix("-values.yaml") in value_sets(), values
                values_used.add(values.name.removesuffix("-values.yaml"))
            elif argv[:3] == ["kubectl", "apply", "-k"]:
                assert argv[3] == EXAMPLE
    # every value set but the new-install one is a way's step (that one is named in way (a)'s text)
    assert values_used == set(value_sets()) - {"new-deployment"}
    assert "ci/new-deployment-values.yaml" in ways()["a"]
