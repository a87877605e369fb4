"""The detail dashboard's row of the objectives users set (`slo:`): burn rates against the page lines and the
error budget left, read from the objectives' recording rules (exporter/generate/slo.py)."""
from __future__ import annotations

from exporter.catalog import slo as catalog_slo
from exporter.generate.dashboards.model import Panel, Target, dashed, num, row
from exporter.generate.dashboards.queries import EXPORTER_SELECTOR

NO_OBJECTIVES = ("No objective is set: add an `slo:` section and run `sglang-exporter generate --config`, or "
                 "enable rules.slo.objectives in the Helm chart.")


def _budget(expr: str) -> str:
    """`expr` (a bad-event share per server and objective) over the objective's error budget."""
    return f"{expr}\n/ on (slo) group_left ()\n(1 - {catalog_slo.OBJECTIVE_RECORD})"


def objective_panels() -> list[Panel]:
    record = catalog_slo.ERROR_RATIO_RECORD
    page_long = [b.long for b in catalog_slo.PAGE_WINDOWS]
    days = catalog_slo.PERIOD_DAYS
    return [
        row("Objectives (slo:)"),
        Panel("Error budget burn rate", "timeseries", "short", min=0,
              shows="Per server and objective, how fast the error budget burns over the page alerts' long windows "
                    f"({', '.join(page_long)}); 1 spends exactly the {days}-day budget. Dashed: the page lines "
                    + ", ".join(f"{num(b.burn_rate)} ({b.long})" for b in catalog_slo.PAGE_WINDOWS) + ".",
              good="below 1 most of the time.",
              bad=f"above {num(catalog_slo.PAGE_WINDOWS[1].burn_rate)} for hours or "
                  f"{num(catalog_slo.PAGE_WINDOWS[0].burn_rate)} for an hour pages: open the objective's runbook "
                  "(SGLangSLO…FastBurn).",
              targets=[Target(_budget(f"{record.format(window=w)}{{{EXPORTER_SELECTOR}}}"),
                              "{{instance}} {{slo}} " + w) for w in page_long],
              steps=[(None, "transparent"), *((b.burn_rate, "red") for b in catalog_slo.PAGE_WINDOWS[::-1])],
              style="dashed", overrides=[dashed("/ 6h$/")], no_value=NO_OBJECTIVES),
        Panel(f"Error budget left ({days} d)", "timeseries", "percentunit", max=1,
              shows=f"Per server and objective, the share of the {days}-day error budget not yet spent: 1 minus "
                    f"the {days}-day average of the 5-minute bad-event share over the budget (each 5 minutes "
                    "weighs the same, however many requests it had).",
              good="well above 0, falling slowly.",
              bad="below 0: the objective was missed this period; falling fast: see the burn rate.",
              targets=[Target("1 - " + _budget(f"avg_over_time({record.format(window='5m')}{{{EXPORTER_SELECTOR}}}"
                                               f"[{days}d])"), "{{instance}} {{slo}}")],
              steps=[(None, "red"), (0, "orange"), (0.25, "green")], no_value=NO_OBJECTIVES),
    ]
