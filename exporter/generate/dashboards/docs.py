"""docs/dashboards.md: how to install the dashboards, their variables and conventions, the SGLang metrics they
read with the releases that export them, and every panel's sentences and queries."""
from __future__ import annotations

import re

from exporter import releases
from exporter.catalog import NS
from exporter.catalog.native import family_span
from exporter.generate.dashboards.files import FOLDER, GRAFANA_PATH, LOCAL_PROMETHEUS, LOCAL_SCRAPE_INTERVAL
from exporter.generate.dashboards.model import LATENCY_PROFILE, THROUGHPUT_PROFILE, DashboardSpec, gib, num
from exporter.generate.dashboards.queries import INSTANCE_MATCH, base_family, family_of
from exporter.releases import short_metric

SGLANG_NAME = re.compile(r"\bsglang:[A-Za-z0-9_]+")


def sglang_metrics_read(specs: list[DashboardSpec]) -> dict[str, str]:
    """SGLang's own families the dashboards query (exposed name -> type), in order of first use."""
    read: dict[str, str] = {}
    for spec in specs:
        for panel in spec.panels:
            for target in panel.targets:
                for name in [*SGLANG_NAME.findall(target.expr), *target.reads]:
                    family = family_of(base_family(name))
                    if family is None:
                        raise ValueError(f"panel {panel.title!r} reads {name}, which no SGLang release exports")
                    read.setdefault(base_family(name), family.type)
    return read


def _releases_text(name: str) -> str:
    short = short_metric(name)
    span = family_span(short[: -len("_total")] if short.endswith("_total") else short)
    if span is None:
        raise ValueError(f"no SGLang release exports {name}")
    return f"{span[0]} – {span[1] or 'current'}"


def _thresholds_text(steps, unit: str) -> str:
    """[(None, a), (v1, b), (v2, c)] -> 'below v1: a; from v1: b; from v2: c'."""
    formatted = gib if unit == "bytes" else num
    parts = [f"below {formatted(steps[1][0])}: {steps[0][1]}"]
    parts += [f"from {formatted(value)}: {color}" for value, color in steps[1:]]
    return "; ".join(parts).replace("transparent", "no colour")


def _variable_rows() -> str:
    return "\n".join([
        f"| `namespace` | `label_values({NS}_build_info, namespace)`; All = `.*` (also matches series without the "
        "label, e.g. bare VMs) | every query |",
        f"| `model` | `label_values({NS}_sglang_info, model)` | SGLang's own series (`model_name`), the servers "
        "table, and the `instance` list |"])


INSTALLING = f"""## Installing

- **Grafana UI**: Dashboards → New → Import, upload the JSON, pick your Prometheus data source for the
  `DS_PROMETHEUS` input. The dashboards never hard-code a data-source uid: every panel uses the
  `datasource` variable.
- **Provisioning** (the local stack): mount `dashboards/provisioning/datasources.yaml` and
  `dashboards/provisioning/dashboards.yaml` into `/etc/grafana/provisioning/{{datasources,dashboards}}/`,
  and the JSON files into `{GRAFANA_PATH}` (folder "{FOLDER}"). The data source points at
  `{LOCAL_PROMETHEUS}` with `timeInterval: {LOCAL_SCRAPE_INTERVAL}` (the local stack's scrape interval); set it to your
  scrape interval so `$__rate_interval` covers at least four scrapes.
- **Kubernetes (kube-prometheus-stack)**: `kubectl apply --server-side -f dashboards/sglang-dashboards.configmap.yaml`
  in a namespace the Grafana sidecar watches. The ConfigMap carries `grafana_dashboard: "1"` (the
  sidecar's default label) and the folder annotations `grafana_folder` and `k8s-sidecar-target-directory`
  ("{FOLDER}"; set `grafana.sidecar.dashboards.folderAnnotation` to use one).

## Variables

| variable | values | used by |
|---|---|---|
| `datasource` | Prometheus data sources | every panel and query |
{_variable_rows()}
| `instance` | hosts: the `instance` label without its port | every query, as `instance=~"{INSTANCE_MATCH}"` |

`instance` holds the host rather than host:port because the sidecar and the SGLang server it watches are two
scrape targets on the same host (pod IP) with different ports: selecting a host shows both the
exporter's series and SGLang's own `/metrics` series (latency histograms, token counters).

## Conventions

- Rates and increases use `$__rate_interval`; rates are taken per series before any `sum`; ratios are
  sums divided by sums; latency quantiles are per server:
  read from the latency recording rules (`cluster_namespace_pod:<histogram>:p50_5m`, `p90_5m`, `p99_5m`, over the
  `alerts.rate_window`, not `$__rate_interval`): the ruler reads every bucket once per evaluation instead of each
  viewer reading them again (seconds per panel at 1,000 servers). The means still use `_sum`/`_count`.
- Batch gauges are reported per rank (`dp`, `tp`, `pp` labels). Only one TP rank per DP rank prints
  batch lines, but to avoid counting a rank twice the dashboards take the max per DP rank and then sum
  over DP ranks.
- Bands and lines come from the catalog: throughput-side values from the `{THROUGHPUT_PROFILE}` profile, latency
  objectives from the `{LATENCY_PROFILE}` profile, with the `signals:` overrides of the configuration generation
  runs with. The exporter's signals use the profile it runs with.
- A panel fed only by SGLang metrics that a release does not export says "not exported by this release" with
  the first release that does, instead of "No data".
"""

BUILDING = """## How they are built

The panels are Python data (`exporter/generate/dashboards/`: `overview.py`, `detail.py`, `native.py`,
`health.py`), rendered to Grafana JSON by hand-written builders (`grafana.py`); the fields every dashboard shares
(uid, tags, links, time settings, refresh, schema version) are laid over all of them in one pass (`house.py`).
SGLang metric names and the releases that export them come from `exporter/catalog/native.py` and
`exporter/releases/`. `scripts/check-grafana-schema` type-checks the output against `@grafana/schema` of Grafana
10.4, 11, 12 and 13.

Grafana's dashboards-as-code library `grafana-foundation-sdk` (PyPI) was tried and is not used. Its Python
builds follow Grafana lines 10.1 to 11.6 and "next" (which adds the v2 dashboard schema, Grafana 12+ only), none
for 12 or 13, and a plain `pip install` picks the 10.1 line (the version epoch is a build time), so it must be
pinned. Porting the time series and stat panels to its 11.6 builders (`1769699379!11.6.0`) took as many lines
of builder chains as the option tables of `grafana.py` it replaced (the panel data stays either way), added
`repeatDirection` and `transparent` to every panel, and made every stat panel fail Grafana 10.4's schema (the
builder always writes `percentChangeColorMode`); 11, 12 and 13 passed. Its table builder still offers the
`footer` option that 12 and 13 dropped. The schema check above is what keeps the output valid for 10.4-13.
"""


def render_docs(specs: list[DashboardSpec]) -> str:
    lines = ["# Dashboards", "",
             "<!-- Generated by `sglang-exporter generate` from the panel definitions in exporter/generate/dashboards/",
             "     and the thresholds in exporter/catalog/. Do not edit. -->", "",
             "Grafana dashboards ship in `dashboards/`, generated from the signal catalog (the fleet board reads "
             "recording rules only: load alerts/*.rules.yml where it queries):", ""]
    lines += [f"- `dashboards/{spec.uid}.json` — **{spec.title}** (uid `{spec.uid}`): {spec.description}"
              for spec in specs]
    lines += ["", *INSTALLING.splitlines()]
    lines += ["- SGLang metrics used, with the SGLang releases that export them (from the release data in "
              f"`exporter/releases/`; the oldest extracted release is {releases.releases()[0]}):", "",
              "| SGLang metric | type | releases |", "|---|---|---|"]
    lines += [f"| `{name}` | {kind} | {_releases_text(name)} |" for name, kind in sglang_metrics_read(specs).items()]
    lines += ["", *BUILDING.splitlines()]
    for spec in specs:
        lines += ["", f"## {spec.title} (`{spec.uid}`)"]
        for panel in spec.panels:
            if panel.type == "row":
                lines += ["", f"### {panel.title}"]
                continue
            lines += ["", f"#### {panel.title}", "", f"*{panel.type}, unit `{panel.unit}`*", "",
                      f"- **Shows**: {panel.shows}", f"- **Good**: {panel.good}", f"- **When bad**: {panel.bad}"]
            if panel.steps and len(panel.steps) > 1:
                lines.append(f"- **Thresholds**: {_thresholds_text(panel.steps, panel.unit)}")
            if panel.no_value:
                lines.append(f"- **Empty**: {panel.no_value}")
            lines += ["", "```promql", "\n\n".join(target.expr for target in panel.targets), "```"]
    return "\n".join(lines) + "\n"
