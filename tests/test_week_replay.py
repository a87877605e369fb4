"""The Show test of trust at 3 a.m.: a week of each kind of deployment (tests/week_logs.py, seeded) replayed
through `analyze` (the engine `serve` runs), counting the pages each paging alert sends after its `for:` (read
from the catalog): none outside the incidents injected into the week, one per alert per incident, and every
incident paged."""
from __future__ import annotations

import re

import pytest
import week_logs

from exporter.catalog import SIGNALS
from exporter.config import Config
from exporter.report.analyze import analyze

PAGING = {s.id: s.alert.for_ for s in SIGNALS if s.alert is not None and s.alert.page}
_UNIT = {"s": 1, "m": 60, "h": 3600}


def seconds(duration: str) -> float:
    return float(sum(int(n) * _UNIT[u] for n, u in re.findall(r"(\d+)([smh])", duration)))


def pages(report: dict) -> list[tuple[str, float, float]]:
    """(signal, start, end) of every page: a firing interval at least as long as its alert's `for:` (a
    Prometheus alert sends nothing before), from its start."""
    out = []
    for sig in report["signals"]:
        if sig["id"] not in PAGING:
            continue
        hold = seconds(PAGING[sig["id"]])
        for iv in sig["intervals"]:
            if iv["end_ts"] - iv["start_ts"] >= hold:
                out.append((sig["id"], iv["start_ts"], iv["end_ts"]))
    return out


@pytest.mark.parametrize("kind", week_logs.KINDS, ids=lambda k: k.__name__)
def test_a_week_pages_once_per_incident_and_never_else(tmp_path, kind):
    week = kind(seed=30)
    path = tmp_path / "sglang.log"
    path.write_text("\n".join(week.lines) + "\n")
    # evaluated every 15 s, a common scrape interval: what Prometheus would see of the sidecar's gauges
    report = analyze([str(path)], Config(profile=week.profile, evaluate_interval=15.0), progress=False)
    assert report["lines"]["unparsed"].get("malformed", 0) == 0
    found = pages(report)
    outside = [p for p in found if not any(i.start - 60 <= p[1] <= i.end for i in week.incidents)]
    assert outside == [], f"{week.name}: pages outside the injected incidents: {outside}"
    for incident in week.incidents:
        inside = [sid for sid, start, _ in found if incident.start - 60 <= start <= incident.end]
        assert incident.pages <= set(inside), f"{week.name}: {incident.name} paged {inside}"
        assert len(inside) == len(set(inside)), f"{week.name}: {incident.name} paged an alert twice: {inside}"
