"""alerts/sglang-slo.rules.yml: the recording rules and burn-rate alerts of the objectives in `slo:`.

One rule group per objective (so the Helm chart can switch each on with a value): the bad-event ratio per server
over every window of the scheme (catalog_slo.RATE_WINDOWS), the objective as a constant, then the page alert
(both windows of either page pair above their burn rate) and the ticket alert (both windows of the 3-day pair).
Aggregations use the native rules' grouping (`alerts.join_labels` + `alerts.native_keep_labels`), so a change of
the identity labels reaches these rules too. Without a `slo:` section nothing is rendered.
"""
from __future__ import annotations

from exporter.catalog import slo as catalog_slo
from exporter.catalog.slo import KINDS, KINDS_BY_ID, ObjectiveKind, alert_names
from exporter.generate.promql import by, num, sel
from exporter.generate.rules import HEADER, Alert, decorate, dump
from exporter.generate.settings import RuleSettings

SLO_RULES = "sglang-slo.rules.yml"
GROUP_PREFIX = "sglang-slo."


def record_name(window: str) -> str:
    return catalog_slo.ERROR_RATIO_RECORD.format(window=window)


def le_matcher(threshold) -> str:
    """The bucket whose bound is the threshold. Prometheus 3 rewrites `le="2"` to `le="2.0"` at ingestion and
    SGLang (prometheus_client) already writes `2.0`; 2.x keeps either spelling, so both are matched."""
    t = threshold if isinstance(threshold, str) else num(threshold)
    return f'le=~"{t}|{t}\\\\.0"'


def sli_expr(kind: ObjectiveKind, spec: dict, settings: RuleSettings, window: str) -> str:
    """The share of bad events of one server over `window`."""
    group = by(settings.join_labels + settings.native_keep_labels)
    sglang = settings.sglang_selector
    # the scheme's windows are kept as they are under `alerts.short_windows` (end-to-end runs): shortened they
    # would all be one window
    w = window

    def rate_sum(metric, *extra):
        return f"sum by ({group}) (rate({metric}{sel(sglang, *extra)}[{w}]))"
    if kind.latency:
        le = le_matcher(spec["threshold_seconds"])
        if kind.id == "ttft":
            good, total = rate_sum(catalog_slo.TTFT + "_bucket", le), rate_sum(catalog_slo.TTFT + "_count")
        else:
            new, old = catalog_slo.ITL, catalog_slo.ITL_BEFORE_0_4_4
            good = (f"(\n    {rate_sum(new + '_bucket', le)}\n    # before SGLang 0.4.4\n    or\n"
                    f"    {rate_sum(old + '_bucket', le)}\n  )")
            total = (f"(\n    {rate_sum(new + '_count')}\n    or\n    {rate_sum(old + '_count')}\n  )")
        return f"1 - (\n  {good}\n  /\n  {total}\n)\n"
    if kind.id == "error_ratio":
        http = catalog_slo.HTTP_RESPONSES
        all_, bad = rate_sum(http), rate_sum(http, 'status_code=~"5.."')
        return (f"(\n  {bad}\n"
                f"  # no 5xx series yet (a labelled counter appears at its first increment): 0, not absent\n"
                f"  or\n  0 * {all_}\n)\n/\n{all_}\n")
    return f"1 - avg by ({group}) (avg_over_time(up{sel(sglang)}[{w}]))\n"


def recording_rules(kind: ObjectiveKind, spec: dict, settings: RuleSettings) -> list[dict]:
    out = [{"record": record_name(w), "expr": sli_expr(kind, spec, settings, w), "labels": {"slo": kind.id}}
           for w in catalog_slo.RATE_WINDOWS]
    out.append({"record": catalog_slo.OBJECTIVE_RECORD, "expr": f"vector({num(spec['target'])})",
                "labels": {"slo": kind.id}})
    return out


def _burn(kind: ObjectiveKind, spec: dict, settings: RuleSettings, pairs) -> str:
    budget = f"(1 - {num(spec['target'])})"
    match = f'slo="{kind.id}"'
    parts = []
    for b in pairs:
        long_, short = (f"{record_name(w)}{{{match}}} / {budget} > {num(b.burn_rate)}" for w in (b.long, b.short))
        parts.append(f"(\n  {long_}\n  and\n  {short}\n)")
    return "\nor\n".join(parts) + "\n"


def objective_text(kind: ObjectiveKind, spec: dict) -> str:
    good = kind.good.format(threshold=num(spec["threshold_seconds"]) if kind.latency else "")
    return f"target {num(spec['target'])}: {good}"


def _pairs_text(pairs) -> str:
    return " or ".join(f"{num(b.burn_rate)}x over {b.long} and {b.short}" for b in pairs)


def alerts(settings: RuleSettings) -> list[Alert]:
    out = []
    for kind_id, spec in settings.objectives().items():
        kind = KINDS_BY_ID[kind_id]
        page, ticket = alert_names(kind)
        for name, pairs, severity, is_page in ((page, catalog_slo.PAGE_WINDOWS, "critical", True),
                                               (ticket, catalog_slo.TICKET_WINDOWS, "warning", False)):
            long_ = pairs[0].long
            summary = (f"SGLang is spending its {kind.title} error budget fast enough to exhaust it within days."
                       if is_page else f"SGLang is spending its {kind.title} error budget faster than it lasts.")
            description = ("{{ $labels.instance }}: the " + kind.title + " objective (" + objective_text(kind, spec)
                           + ") burns its " + str(catalog_slo.PERIOD_DAYS) + "-day error budget "
                           "{{ $value | printf \"%.1f\" }}x faster than even spending over " + long_ +
                           f" (fires at {_pairs_text(pairs)}).")
            meaning = (f"The share of bad events of the {kind.title} objective ({objective_text(kind, spec)}) "
                       f"burns the error budget at {_pairs_text(pairs)}: at that rate "
                       + ", ".join(f"{b.budget_share:.0%} of the {catalog_slo.PERIOD_DAYS}-day budget is gone in "
                                   f"{b.long}" for b in pairs) + ". Both windows of a pair must burn: the long one "
                       "says the budget is really being spent, the short one that it still is. SLI: "
                       + kind.source + ".")
            impact = ("Users see " + ("slow first tokens" if kind.id == "ttft" else
                                      "slow streaming" if kind.id == "inter_token_latency" else
                                      "failed requests" if kind.id == "error_ratio" else "a server that is down") +
                      (" now, at a rate that breaks the objective within days if it continues." if is_page else
                       ": at this rate the objective is missed by the end of the period."))
            out.append(Alert(name, _burn(kind, spec, settings, pairs), settings.for_duration(name), severity,
                             summary, description, is_page, {"slo": kind.id}, "slo", None, meaning, impact))
    return decorate(out, settings)


def rule_groups(settings: RuleSettings) -> list[dict]:
    by_kind: dict[str, list] = {}
    for a in alerts(settings):
        by_kind.setdefault(a.labels["slo"], []).append(a.rule())
    return [{"name": GROUP_PREFIX + kind_id, "rules": recording_rules(KINDS_BY_ID[kind_id], spec, settings)
             + by_kind[kind_id]} for kind_id, spec in settings.objectives().items()]


def render(config) -> dict[str, str]:
    settings = RuleSettings(config)
    if not settings.objectives():
        return {}
    return {f"alerts/{SLO_RULES}": HEADER + dump({"groups": rule_groups(settings)})}


def example_objectives() -> dict:
    """The chart's objectives when the configuration sets none (disabled there; docs/configuration.md)."""
    return {k.id: dict(k.example) for k in KINDS}
