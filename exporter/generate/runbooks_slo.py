"""Runbook pages of the objectives' burn-rate alerts (`docs/runbooks/SGLangSLO*.md`).

They are written whether or not the configuration sets objectives: the chart can switch objectives on from its
values (without `sglang-exporter generate`), and its alerts link here. Without a `slo:` section the pages show
the chart's example objectives and say so.
"""
from __future__ import annotations

from dataclasses import replace

from exporter.catalog import slo as catalog_slo
from exporter.catalog.slo import KINDS_BY_ID
from exporter.generate.promql import sel
from exporter.generate.rules import Alert
from exporter.generate.settings import RuleSettings
from exporter.generate.slo import alerts, example_objectives, objective_text, record_name


def documented_settings(settings: RuleSettings) -> tuple[RuleSettings, bool]:
    """Settings whose objectives are the configured ones, or the chart's examples (then False)."""
    if settings.objectives():
        return settings, True
    return RuleSettings(replace(settings.config, slo=example_objectives())), False


def slo_alerts(settings: RuleSettings) -> tuple[list[Alert], bool]:
    documented, configured = documented_settings(settings)
    return alerts(documented), configured


def page(a: Alert, settings: RuleSettings, configured: bool, generated: str) -> str:
    documented, _ = documented_settings(settings)
    kind = KINDS_BY_ID[a.labels["slo"]]
    spec = documented.objectives()[kind.id]
    page_name, ticket_name = catalog_slo.alert_names(kind)
    other = ticket_name if a.name == page_name else page_name
    origin = ("From the `slo:` section of the configuration the rules were generated from." if configured else
              "This is the chart's example: no `slo:` section was configured when this page was generated; your "
              "values are in your configuration's `slo:` or the chart's `rules.slo.objectives`.")
    match = f'slo="{kind.id}"'
    sglang = sel(settings.sglang_selector)
    lines = [f"# {a.name}", "", generated, "",
             f"Severity: **{a.severity}**{' (pages)' if a.page else ' (ticket)'} · objective `{kind.id}` · "
             f"alert `for: {a.for_}` · source: SGLang's own `/metrics` and `up` (no sidecar needed)", "",
             "## Meaning", "", a.meaning, "",
             f"Objective: {objective_text(kind, spec)}; error budget: {1 - spec['target']:.6g} of the events over "
             f"{catalog_slo.PERIOD_DAYS} days. {origin}", "",
             "```promql", a.expr.rstrip(), "```", "",
             "## Impact", "", a.impact, "",
             "## Diagnosis", "",
             "1. Which servers burn, and since when (the bad-event share per window, and the budget it allows):", "",
             "```promql",
             *(f"{record_name(w)}{{{match}}}" for w in catalog_slo.RATE_WINDOWS),
             f"1 - {catalog_slo.OBJECTIVE_RECORD}{{{match}}}",
             "```", "",
             "2. " + kind.diagnosis, ""]
    if kind.latency:
        metric = catalog_slo.TTFT if kind.id == "ttft" else catalog_slo.ITL
        lines += ["3. The latency distribution behind it:", "", "```promql",
                  f"histogram_quantile(0.99, sum by (le, instance) (rate({metric}_bucket{sglang}[5m])))",
                  f"histogram_quantile(0.5, sum by (le, instance) (rate({metric}_bucket{sglang}[5m])))", "```", ""]
    lines += ["## Mitigation", "", kind.mitigation, "",
              f"`{other}` watches the same objective at the {'slower' if a.page else 'faster'} burn rate; when "
              "both fire, the page is the one to act on. An objective that pages for normal traffic is wrong for "
              "this deployment: change its target or threshold (docs/configuration.md, `slo:`), not the burn "
              "rates.", ""]
    return "\n".join(lines)


def render_pages(settings: RuleSettings, generated: str) -> tuple[dict[str, str], list[str]]:
    """docs/runbooks/<alert>.md of every objective alert, and their rows of the runbook index."""
    found, configured = slo_alerts(settings)
    pages, rows = {}, []
    for a in found:
        pages[f"docs/runbooks/{a.name}.md"] = page(a, settings, configured, generated)
        rows.append(f"| [{a.name}]({a.name}.md) | {a.severity} | slo | {a.summary} |")
    return pages, rows
