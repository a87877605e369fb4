"""The fields every generated dashboard shares (uid, tags, links, time settings, refresh, schema version, import
inputs), applied in one pass over all dashboards after their content is built."""
from __future__ import annotations

import copy

from exporter.generate.dashboards.model import PANEL_TYPES

TAGS = ["sglang", "sglang-exporter"]
LINK_TAG = "sglang-exporter"
OLDEST_GRAFANA = "10.4.0"     # the oldest release the dashboards are checked against (scripts/check-grafana-schema)
SCHEMA_VERSION = 39           # Grafana 10.4's; newer releases migrate it on load

SHARED_FIELDS = {
    "annotations": {"list": []},
    "editable": True,
    "fiscalYearStartMonth": 0,
    "graphTooltip": 1,
    "id": None,
    "links": [{"asDropdown": False, "icon": "external link", "includeVars": True, "keepTime": True,
               "tags": [LINK_TAG], "targetBlank": False, "title": "SGLang dashboards", "tooltip": "",
               "type": "dashboards", "url": ""}],
    "refresh": "30s",
    "schemaVersion": SCHEMA_VERSION,
    "tags": TAGS,
    "time": {"from": "now-3h", "to": "now"},
    "timepicker": {},
    "timezone": "",
    "version": 1,
    "weekStart": "",
}
IMPORT_INPUTS = [{"description": "Prometheus that scrapes sglang-exporter and SGLang's /metrics",
                  "label": "Prometheus", "name": "DS_PROMETHEUS", "pluginId": "prometheus",
                  "pluginName": "Prometheus", "type": "datasource"}]


def _requires(content: dict) -> list[dict]:
    """What Grafana's import screen checks for: Grafana itself, Prometheus, and each panel type used."""
    used = sorted({panel["type"] for panel in content["panels"] if panel["type"] != "row"})
    return ([{"id": "grafana", "name": "Grafana", "type": "grafana", "version": OLDEST_GRAFANA},
             {"id": "prometheus", "name": "Prometheus", "type": "datasource", "version": "1.0.0"}]
            + [{"id": panel_type, "name": PANEL_TYPES[panel_type], "type": "panel", "version": ""}
               for panel_type in used])


def decorate(contents: dict[str, dict]) -> dict[str, dict]:
    """uid -> dashboard content, to uid -> complete dashboard: the shared fields over every one of them."""
    return {uid: copy.deepcopy({**content, **SHARED_FIELDS, "uid": uid, "__inputs": IMPORT_INPUTS,
                                "__requires": _requires(content)})
            for uid, content in contents.items()}
