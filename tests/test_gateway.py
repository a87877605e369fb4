"""The gateway's rules and board select only series the gateway really emits (names and label names from the
release data, exporter/releases/gateway.json), under both spellings where both carry the meaning."""
from __future__ import annotations

import json
import re

import pytest
import yaml

from exporter.catalog_gateway import GATEWAY_SIGNALS
from exporter.config import Config
from exporter.generate import gateway as gen
from exporter.releases import gateway as releases

RENDERED = gen.render(Config())
RULES = yaml.safe_load(RENDERED[f"alerts/{gen.RULES}"])["groups"][0]["rules"]
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
    identity = set(Config().alerts.join_labels) | {"namespace"}
    for family, labels in _selections(expr):
        emitted = set(releases.family(family).labels)
        assert labels - identity <= emitted, f"{where}: {family} has labels {sorted(emitted)}, not {labels}"
    # a `by`/`on` label beyond the target's identity must be one the grouped families carry (worker, le)
    grouped = set()
    for clause in re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", expr):
        grouped |= {x.strip() for x in clause.split(",") if x.strip()}
    families = {f for f, _ in _selections(expr)}
    for label in grouped - identity - {"le"}:
        assert any(label in releases.family(f).labels for f in families), f"{where}: no family carries {label}"


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
        assert releases.family(fam).line == "gateway"
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
