"""Grafana dashboards, their provisioning files, a ConfigMap and docs/dashboards.md, generated from the catalog.

Every panel is defined once as data (`model.Panel`): its query, unit, thresholds and the three sentences an SRE
needs (what it shows, what good looks like, what to do when it looks bad). The dashboard JSON and the per-panel
documentation are both rendered from those definitions, so they cannot drift; thresholds are read from the
catalog through the runtime Config (its `signals:` overrides move the lines too) and SGLang's metric names and
releases from exporter.catalog.native and exporter.releases.

    render(config) -> {repo-relative path: text}

Modules: `model` (panel data, thresholds), `queries` (PromQL pieces, SGLang names), `overview`, `detail`,
`native`, `health` (the panels), `grafana` (panel and dashboard JSON), `house` (fields every dashboard shares),
`files` (provisioning, ConfigMap), `docs` (docs/dashboards.md).
"""
from __future__ import annotations

from exporter.config import Config
from exporter.generate.dashboards.detail import detail
from exporter.generate.dashboards.docs import render_docs, sglang_metrics_read
from exporter.generate.dashboards.files import FOLDER, GRAFANA_PATH, configmap, dashboard_json, datasource, provider
from exporter.generate.dashboards.fleet import fleet
from exporter.generate.dashboards.grafana import DATASOURCE, dashboard_content
from exporter.generate.dashboards.house import decorate
from exporter.generate.dashboards.model import UNITS, DashboardSpec, Limits
from exporter.generate.dashboards.overview import overview

__all__ = ["ALL_UIDS", "DATASOURCE", "FOLDER", "GRAFANA_PATH", "UIDS", "UNITS", "build_dashboard", "build_dashboards",
           "check", "generate", "render", "sglang_metrics", "specs"]

UIDS = ("sglang-overview", "sglang-detail")      # the per-server boards (their variables: namespace, host)
ALL_UIDS = (*UIDS, "sglang-fleet")                # and the fleet board (cluster, namespace, model, server)


def specs(config: Config) -> list[DashboardSpec]:
    """Every dashboard's panels, thresholds drawn from `config`."""
    limits = Limits(config)
    return [overview(limits), detail(limits), fleet(limits)]


def build_dashboards(config: Config) -> dict[str, dict]:
    """uid -> the complete Grafana dashboard."""
    return decorate({spec.uid: dashboard_content(spec) for spec in specs(config)})


def build_dashboard(uid: str, config: Config | None = None) -> dict:
    return build_dashboards(config or Config())[uid]


def sglang_metrics(config: Config | None = None) -> dict[str, str]:
    """SGLang's own families the dashboards read (exposed name -> type)."""
    return sglang_metrics_read(specs(config or Config()))


def render(config: Config) -> dict[str, str]:
    """Every generated file of the dashboards: path relative to the repository root -> content."""
    dashboards = build_dashboards(config)
    json_by_file = {f"{uid}.json": dashboard_json(dashboard) for uid, dashboard in dashboards.items()}
    files = {f"dashboards/{name}": text for name, text in json_by_file.items()}
    files["dashboards/provisioning/dashboards.yaml"] = provider()
    files["dashboards/provisioning/datasources.yaml"] = datasource()
    files["dashboards/sglang-dashboards.configmap.yaml"] = configmap(json_by_file)
    files["docs/dashboards.md"] = render_docs(specs(config))
    return files

