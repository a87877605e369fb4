"""Grafana JSON of one dashboard's content: panels laid out on the grid, their field config and options per
panel type, queries and template variables (the fields every dashboard shares are added by `house`)."""
from __future__ import annotations

from exporter.catalog import NS
from exporter.generate.dashboards.model import DashboardSpec, Panel, Target

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_COLUMNS = 24


def _layout(panels: list[Panel]) -> list[tuple[int, int]]:
    """(x, y) for each panel: left to right, wrapping at 24 columns; rows take a full line."""
    positions, x, y, line_height = [], 0, 0, 0
    for panel in panels:
        if panel.type == "row" or x + panel.width > GRID_COLUMNS:
            y, x, line_height = y + line_height, 0, 0
        positions.append((x, y))
        x += panel.width
        line_height = max(line_height, panel.height)
        if panel.type == "row":
            y, x, line_height = y + panel.height, 0, 0
    return positions


def _thresholds(steps) -> dict:
    return {"mode": "absolute",
            "steps": [{"color": color, "value": value} for value, color in (steps or [(None, "green")])]}


def _mappings(mappings) -> list:
    if not mappings:
        return []
    return [{"type": "value",
             "options": {str(value): {"color": color, "index": index, "text": text}
                         for index, (value, text, color) in enumerate(mappings)}}]


def _target(target: Target, ref_id: str) -> dict:
    query: dict[str, object] = {"datasource": DATASOURCE, "editorMode": "code", "expr": target.expr,
                                "refId": ref_id}
    if target.table:
        query.update({"format": "table", "instant": True, "range": False, "legendFormat": "__auto"})
    else:
        query.update({"instant": False, "range": True, "legendFormat": target.legend or "__auto"})
    return query


def _options_and_custom(panel: Panel) -> tuple[dict, dict | None]:
    """The panel type's options and fieldConfig.defaults.custom (None: the type has none)."""
    legend = {"calcs": ["lastNotNull", "max"], "displayMode": "table", "placement": "bottom", "showLegend": True}
    tooltip = {"mode": "multi", "sort": "desc"}
    if panel.type == "timeseries":
        custom = {"axisBorderShow": False, "axisPlacement": "auto", "drawStyle": "line", "fillOpacity": 10,
                  "gradientMode": "none", "lineInterpolation": "linear", "lineWidth": 1, "pointSize": 4,
                  "showPoints": "never", "spanNulls": False, "stacking": {"group": "A", "mode": "none"},
                  "thresholdsStyle": {"mode": panel.style}}
        return {"legend": legend, "tooltip": tooltip}, custom
    if panel.type == "stat":
        return {"colorMode": "value", "graphMode": "area", "justifyMode": "auto", "orientation": "auto",
                "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                "showPercentChange": False, "textMode": "auto", "wideLayout": True}, None
    if panel.type == "state-timeline":
        return {"alignValue": "left", "legend": {"displayMode": "list", "placement": "bottom", "showLegend": False},
                "mergeValues": True, "rowHeight": 0.8, "showValue": "auto", "tooltip": tooltip}, \
            {"fillOpacity": 80, "lineWidth": 0}
    if panel.type == "table":
        # no footer: hidden by default in 10.4-13, and options.footer is not in the schema of 12 and later
        return {"cellHeight": "sm", "showHeader": True}, \
            {"align": "auto", "cellOptions": {"type": "auto"}, "filterable": True}
    raise ValueError(f"panel {panel.title!r}: unknown panel type {panel.type!r}")


def _table_transformations(panel: Panel) -> list[dict]:
    columns = panel.organize or {}
    transformations = [{"id": "merge", "options": {}}] if len(panel.targets) > 1 else []
    transformations.append({"id": "organize", "options": {
        "excludeByName": {name: True for name in columns.get("exclude", [])},
        "indexByName": {}, "renameByName": columns.get("rename", {})}})
    return transformations


def panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    grid = {"h": panel.height, "w": panel.width, "x": x, "y": y}
    if panel.type == "row":
        return {"collapsed": False, "gridPos": grid, "id": panel_id, "panels": [], "title": panel.title,
                "type": "row"}
    defaults: dict[str, object] = {
        "color": {"mode": "palette-classic" if panel.type == "timeseries" else "thresholds"},
        "mappings": _mappings(panel.mappings), "thresholds": _thresholds(panel.steps), "unit": panel.unit}
    for key, value in (("min", panel.min), ("max", panel.max), ("noValue", panel.no_value)):
        if value is not None:
            defaults[key] = value
    options, custom = _options_and_custom(panel)
    if custom is not None:
        defaults["custom"] = custom
    rendered = {
        "datasource": DATASOURCE,
        "description": panel.description,
        "fieldConfig": {"defaults": defaults, "overrides": panel.overrides},
        "gridPos": grid,
        "id": panel_id,
        "options": options,
        "targets": [_target(target, chr(ord("A") + index)) for index, target in enumerate(panel.targets)],
        "title": panel.title,
        "type": panel.type,
    }
    if panel.type == "table":
        rendered["transformations"] = _table_transformations(panel)
    return rendered


def _query_variable(name: str, label: str, query: str, regex: str = "") -> dict:
    return {"allValue": ".*", "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
            "datasource": DATASOURCE, "hide": 0, "includeAll": True, "label": label, "multi": True, "name": name,
            "options": [], "query": query, "refresh": 2, "regex": regex, "skipUrlSync": False, "sort": 1,
            "type": "query"}


def variables() -> list[dict]:
    return [
        {"current": {"selected": False, "text": "${DS_PROMETHEUS}", "value": "${DS_PROMETHEUS}"},
         "hide": 0, "includeAll": False, "label": "Data source", "multi": False, "name": "datasource",
         "options": [], "query": "prometheus", "refresh": 1, "regex": "", "skipUrlSync": False,
         "type": "datasource"},
        _query_variable("namespace", "Namespace", f"label_values({NS}_build_info, namespace)"),
        _query_variable("model", "Model", f'label_values({NS}_sglang_info{{namespace=~"$namespace"}}, model)'),
        # host part of the instance label (see queries.INSTANCE_MATCH)
        _query_variable("instance", "Host", f'label_values({NS}_sglang_info{{namespace=~"$namespace", '
                                            f'model=~"$model"}}, instance)', regex="/^(.*?)(:[0-9]+)?$/"),
    ]


def dashboard_content(spec: DashboardSpec) -> dict:
    """What is particular to one dashboard: title, description, panels and variables."""
    positions = _layout(spec.panels)
    return {
        "description": spec.description,
        "panels": [panel_json(panel, index + 1, x, y)
                   for index, (panel, (x, y)) in enumerate(zip(spec.panels, positions))],
        "templating": {"list": spec.variables if spec.variables is not None else variables()},
        "title": spec.title,
    }
