"""The fleet board reads only the small per-server and per-model records (never raw signal or bucket series),
its variables chain cluster -> namespace -> model -> server over the inventory record, and each server links to
its detail board and status page."""
from __future__ import annotations

import promql_parser as pp

from exporter.config import Config
from exporter.generate import dashboards as gen
from exporter.generate.rules import rule_files
from exporter.generate.settings import RuleSettings

SUBST = {"$cluster": "c", "$namespace": "n", "$model": "m", "$server": "s", "$__rate_interval": "5m"}


def _selectors(expr: str) -> list:
    for var, value in SUBST.items():
        expr = expr.replace(var, value)
    out, stack = [], [pp.parse(expr)]
    while stack:
        node = stack.pop()
        if isinstance(node, pp.VectorSelector):
            out.append(node)
        for attr in ("expr", "lhs", "rhs", "param", "vector_selector"):
            child = getattr(node, attr, None)
            if child is not None and not isinstance(child, (str, int, float)):
                stack.append(child)
        stack.extend(getattr(node, "args", None) or [])
    return out


def test_every_query_reads_a_record_of_our_rules():
    records = {r["record"] for doc in rule_files(RuleSettings()).values() for g in doc["groups"]
               for r in g["rules"] if "record" in r}
    board = gen.build_dashboard("sglang-fleet")
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(queries) >= 10
    for expr in queries:
        names = {s.name for s in _selectors(expr)}
        assert names and names <= records, (names - records, expr)
        assert "instance=~" not in expr


def test_variables_chain_over_the_inventory_record():
    board = gen.build_dashboard("sglang-fleet")
    variables = {v["name"]: v["query"] for v in board["templating"]["list"] if v["type"] == "query"}
    assert list(variables) == ["cluster", "namespace", "model", "server"]
    inventory = "cluster_namespace_pod:sglang_exporter_sglang_info:max"
    assert variables["cluster"] == f"label_values({inventory}{{}}, cluster)"
    assert variables["server"] == (f'label_values({inventory}{{cluster=~"$cluster", namespace=~"$namespace", '
                                   'model=~"$model"}, pod)')


def test_servers_link_to_their_detail_board_and_status_page():
    board = gen.build_dashboard("sglang-fleet")
    table = next(p for p in board["panels"] if p["title"].startswith("Servers needing attention"))
    links = [link for o in table["fieldConfig"]["overrides"] if o["matcher"]["options"] == "pod"
             for prop in o["properties"] if prop["id"] == "links" for link in prop["value"]]
    assert {link["title"] for link in links} == {"Detail board", "Status page"}
    assert any("/d/sglang-detail/" in link["url"] and "var-instance=${__data.fields.host}" in link["url"]
               for link in links)
    assert 'topk(50' in table["targets"][0]["expr"]
    # no stat tile per server: every stat is one number over the selection
    for panel in board["panels"]:
        if panel["type"] == "stat":
            assert panel["targets"][0]["expr"].startswith(("count(", "sum("))


def test_identity_labels_follow_the_configuration():
    from exporter.config import AlertSettings
    config = Config(alerts=AlertSettings(identity_labels=("region", "namespace", "pod")))
    board = gen.build_dashboards(config)["sglang-fleet"]
    names = [v["name"] for v in board["templating"]["list"] if v["type"] == "query"]
    assert names == ["region", "namespace", "model", "server"]
