"""The fleet board: which of many SGLang servers need attention now, and where. Every query reads the small
per-server records of the `sglang-exporter.servers` and latency rule groups (one series per server, or per
firing signal), never every signal of every server; the variables chain cluster -> namespace -> model -> server
over the inventory record, so each loads a few label values even at 1,000 servers."""
from __future__ import annotations

from exporter.catalog.native import native_metric_names
from exporter.generate.dashboards.grafana import DATASOURCE
from exporter.generate.dashboards.model import DashboardSpec, Limits, Panel, Target, row
from exporter.generate.promql import by
from exporter.generate.records import SEVERITY_RANK, firing_record, model_labels, quantile_record, server_level
from exporter.generate.series import M_FIRING, M_INFO
from exporter.generate.settings import RuleSettings

UID = "sglang-fleet"
TITLE = "SGLang / Fleet"
DESCRIPTION = ("Which SGLang servers need attention now, counted by cluster, namespace, model and release, with "
               "links to each server's detail board and status page. Reads recording rules only. Generated from "
               "the signal catalog; do not edit by hand.")
DETAIL_UID = "sglang-detail"
TOP = 50      # rows of the attention table: the worst first


class Records:
    """The record names and label names of one configuration."""

    def __init__(self, settings: RuleSettings):
        lvl = server_level(settings)
        self.settings = settings
        self.worst = f"{lvl}:{M_FIRING}:max_severity"
        self.firing_count = f"{lvl}:{M_FIRING}:sum"
        self.firing = firing_record(settings)
        self.inventory = f"{lvl}:{M_INFO}:max"
        *self.outer, self.server = settings.identity_labels
        self.join = by(settings.join_labels)

    def selector(self) -> str:
        """The variables as matchers on the identity labels (model is matched on the inventory, in `with_model`)."""
        variables = {**{label: f"${label}" for label in self.outer}, self.server: "$server"}
        return ", ".join(f'{label}=~"{value}"' for label, value in variables.items())

    def with_model(self, expr: str, labels: str = "model, format, version") -> str:
        """`expr` (per server) limited to the selected models, carrying the inventory's labels."""
        return (f"(\n  {expr}\n)\n* on ({self.join}) group_left ({labels})\n"
                f'{self.inventory}{{{self.selector()}, model=~"$model"}}')


def variables(r: Records) -> list[dict]:
    def query_variable(name: str, label: str, query: str) -> dict:
        return {"allValue": ".*", "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                "datasource": DATASOURCE, "hide": 0, "includeAll": True, "label": label, "multi": True,
                "name": name, "options": [], "query": query, "refresh": 2, "regex": "", "skipUrlSync": False,
                "sort": 1, "type": "query"}
    chain: list[str] = []
    out = [
        {"current": {"selected": False, "text": "${DS_PROMETHEUS}", "value": "${DS_PROMETHEUS}"},
         "hide": 0, "includeAll": False, "label": "Data source", "multi": False, "name": "datasource",
         "options": [], "query": "prometheus", "refresh": 1, "regex": "", "skipUrlSync": False,
         "type": "datasource"}]
    for label in (*r.outer, "model", r.server):
        name = "server" if label == r.server else label
        inner = ", ".join(chain)
        out.append(query_variable(name, name.capitalize(), f"label_values({r.inventory}{{{inner}}}, {label})"))
        chain.append(f'{label}=~"${name}"')
    return out


def _links(r: Records) -> list[dict]:
    """Per row: the server's detail board (its host, the instance without the port) and its status page."""
    ns = next((label for label in r.outer if label == "namespace"), r.outer[-1] if r.outer else r.server)
    detail = (f"/d/{DETAIL_UID}/?var-namespace=${{__data.fields.{ns}}}&var-instance=${{__data.fields.host}}"
              "&${__url_time_range}")
    return [{"matcher": {"id": "byName", "options": r.server},
             "properties": [{"id": "links", "value": [
                 {"title": "Detail board", "url": detail},
                 {"title": "Status page", "url": "http://${__data.fields.instance}/", "targetBlank": True}]}]}]


def _host(expr: str) -> str:
    return f'label_replace(\n{expr},\n"host", "$1", "instance", "(.*):[0-9]+")'


def fleet(limits: Limits) -> DashboardSpec:
    r = Records(RuleSettings(limits.config))
    sel = r.selector()
    severity_names = {rank: name for name, rank in SEVERITY_RANK.items()}
    mappings = [(0, "ok", "green"), *((rank, name, {"info": "blue", "warning": "orange", "critical": "red"}[name])
                                      for rank, name in severity_names.items())]
    servers = r.with_model(f"{r.worst}{{{sel}}}")
    count_rows = []
    for label in (*r.outer, "model", "format"):
        count_rows.append(Panel(
            f"Servers by {label}", "table", "none", width=6, height=7,
            shows=f"Servers per {label} (format: SGLang's log format family, the release line the sidecar "
                  "detected) and how many need attention (a warning or critical signal firing).",
            good="the counts you deploy; 0 needing attention.",
            bad="many servers needing attention in one row: a shared cause there (a release, a cluster, a model).",
            targets=[Target(f"count by ({label}) (\n{servers}\n)", table=True),
                     Target(f"count by ({label}) (\n{r.with_model(f'{r.worst}{{{sel}}} >= 2')}\n)", table=True)],
            organize={"exclude": ["Time"], "rename": {label: label.capitalize(), "Value #A": "Servers",
                                                       "Value #B": "Needing attention"}}))
    latency = []
    for value, title in (("ttft", "Time to first token"), ("itl", "Inter-token latency")):
        record = quantile_record(r.settings, native_metric_names(value)[0], 0.99, model_labels(r.settings))
        model_sel = ", ".join([f'{label}=~"${label}"' for label in r.outer]
                              + [f'{label}=~"$model"' for label in model_labels(r.settings) if label not in r.outer])
        latency.append(Panel(
            f"{title} p99 per model", "timeseries", "s", width=12, height=8, min=0,
            shows=f"p99 {title.lower()} per model over its servers (the per-model latency record).",
            good="below the objective on the detail board.",
            bad="one model above its objective: open the attention table filtered to it.",
            targets=[Target(f"{record}{{{model_sel}}}",
                            "{{" + "}}/{{".join(model_labels(r.settings)) + "}}")]))
    panels = [
        row("Now"),
        Panel("Servers", "stat", "short", width=6, height=4,
              shows="Servers selected (one inventory series each).", good="what you deploy.",
              bad="fewer than deployed: see SGLangExportersVanished and SGLangExporterDown.",
              targets=[Target(f'count({r.inventory}{{{sel}, model=~"$model"}})')], steps=[(None, "blue")]),
        *(Panel(f"{name.capitalize()} servers", "stat", "short", width=6, height=4,
                shows=f"Servers whose worst firing signal is {name}.", good="0.",
                bad="open the attention table below.",
                targets=[Target(f"count(\n{r.with_model(f'{r.worst}{{{sel}}} == {rank}')}\n) or vector(0)")],
                steps=[(None, "green"), (1, "red" if name == "critical" else "orange")])
          for name, rank in SEVERITY_RANK.items() if name != "info"),
        Panel("Firing signals", "stat", "short", width=6, height=4,
              shows="Signals firing across the selected servers.", good="0.",
              bad="see the signals table below.",
              targets=[Target(f"sum(\n{r.with_model(f'{r.firing_count}{{{sel}}}')}\n) or vector(0)")],
              steps=[(None, "green"), (1, "orange")]),
        row("Needing attention"),
        Panel(f"Servers needing attention (worst {TOP})", "table", "none", width=24, height=10,
              shows="Servers with a firing signal, worst first: the worst severity firing (critical, warning, "
                    "info) and how many signals fire. A server name links to its detail board and its status "
                    "page (the sidecar's `/`).",
              good="empty.",
              bad="work down from the top: open the status page for the verdict and advice, the runbook of the "
                  "firing alert for the fix.",
              targets=[Target(_host(f"topk({TOP},\n{r.with_model(f'{r.worst}{{{sel}}} > 0')}\n)"), table=True),
                       Target(_host(r.with_model(f"{r.firing_count}{{{sel}}} > 0")), table=True)],
              organize={"exclude": ["Time", "job", "host"],
                        "rename": {"Value #A": "Worst", "Value #B": "Signals firing"}},
              overrides=_links(r) + [{"matcher": {"id": "byName", "options": "Worst"}, "properties": [
                  {"id": "mappings", "value": [{"type": "value", "options": {
                      str(value): {"color": color, "index": index, "text": text}
                      for index, (value, text, color) in enumerate(mappings)}}]}]}]),
        Panel("Firing signals by server", "table", "none", width=24, height=8,
              shows="Every firing signal of the selected servers (one series per firing signal: nothing is "
                    "read for the signals that are ok).",
              good="empty.", bad="the same signal on many servers: a shared cause; on one: that server.",
              targets=[Target(_host(r.with_model(f"{r.firing}{{{sel}}}", "model")), table=True)],
              organize={"exclude": ["Time", "Value", "job", "host"], "rename": {}}, overrides=_links(r)),
        row("Where"),
        *count_rows,
        row("Latency per model"),
        *latency,
    ]
    return DashboardSpec(UID, TITLE, DESCRIPTION, panels, variables(r))
