"""The panel model every dashboard is written in: a panel as data (query, unit, thresholds, the three sentences
an SRE needs) and the catalog thresholds its lines are drawn from, read through the runtime Config."""
from __future__ import annotations

from dataclasses import dataclass, field

from exporter.catalog import GIB, META_ALERTS, SIGNALS_BY_ID
from exporter.config import Config

# Profiles whose thresholds the (static) dashboards draw. The exporter's own signals use whatever profile it is
# configured with; the lines on the graphs are the guide's reference values, moved by the config's overrides.
THROUGHPUT_PROFILE = "offline"   # queue band, KV usage target
LATENCY_PROFILE = "online"       # latency objectives (latency_high is inactive offline)

# Grafana unit ids used here (validated by the tests).
UNITS = {"short", "none", "percentunit", "bytes", "s", "reqps", "cps", "cpm"}
PANEL_TYPES = {"timeseries": "Time series", "stat": "Stat", "state-timeline": "State timeline",
               "table": "Table"}


@dataclass
class Target:
    expr: str
    legend: str = ""
    table: bool = False          # instant query, table format
    reads: tuple = ()            # SGLang families read through a recording rule (the docs list them as read)


@dataclass
class Panel:
    title: str
    type: str                    # timeseries | stat | state-timeline | table | row
    unit: str = "short"
    shows: str = ""
    good: str = ""
    bad: str = ""
    targets: list[Target] = field(default_factory=list)
    width: int = 12
    height: int = 8
    steps: list | None = None    # [(value|None, color), ...] absolute thresholds
    style: str = "off"           # timeseries thresholdsStyle.mode
    mappings: list | None = None  # [(value, text, color), ...]
    min: float | None = None
    max: float | None = None
    overrides: list = field(default_factory=list)
    organize: dict | None = None  # table: {"exclude": [...], "rename": {...}}
    no_value: str | None = None   # shown instead of "No data": why the panel may be empty (release, feature)

    @property
    def description(self) -> str:
        return f"{self.shows} Good: {self.good} When bad: {self.bad}"


@dataclass(frozen=True)
class DashboardSpec:
    uid: str
    title: str
    description: str
    panels: list[Panel]
    variables: list | None = None     # Grafana template variables; None: the per-server boards' (grafana.py)


def row(title: str) -> Panel:
    return Panel(title=title, type="row", width=24, height=1)


def dashed(regex: str, color: str | None = None) -> dict:
    """A field override drawing the series whose name matches `regex` as a dashed line (a limit, not data)."""
    props = [{"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}},
             {"id": "custom.fillOpacity", "value": 0}]
    if color:
        props.append({"id": "color", "value": {"fixedColor": color, "mode": "fixed"}})
    return {"matcher": {"id": "byRegexp", "options": regex}, "properties": props}


def num(value: float) -> str:
    return f"{value:g}"


def gib(value: float) -> str:
    return f"{value / GIB:g} GiB"


class Limits:
    """The thresholds a dashboard draws: the catalog's reference profile for each kind of line, with the
    config's per-signal overrides (`signals:`) on top, so a tuned threshold moves the line too."""

    def __init__(self, config: Config):
        self.config = config

    def signal(self, signal_id: str, profile: str = THROUGHPUT_PROFILE) -> dict:
        params = SIGNALS_BY_ID[signal_id].params(profile)
        if params is None:
            raise ValueError(f"{signal_id} is inactive in profile {profile}: the dashboards cannot draw it")
        overrides = {key: value for key, value in (self.config.signals.get(signal_id) or {}).items()
                     if key != "enabled"}
        return {**params, **overrides}

    def latency(self, signal_id: str) -> dict:
        return self.signal(signal_id, LATENCY_PROFILE)

    def defaults(self, signal_id: str) -> dict:
        """A signal's catalog defaults (signals the profiles do not tune), with the config's overrides."""
        overrides = {key: value for key, value in (self.config.signals.get(signal_id) or {}).items()
                     if key != "enabled"}
        return {**SIGNALS_BY_ID[signal_id].defaults, **overrides}

    @staticmethod
    def meta_alert(name: str) -> dict:
        for meta in META_ALERTS:
            if meta.alert.name == name:
                return meta.params
        raise KeyError(name)
