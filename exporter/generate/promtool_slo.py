"""alerts/tests/sglang-slo.test.yml: generated promtool tests of the objectives' burn-rate alerts and records.

Every objective gets the same scenarios, written as the share of bad events per minute and turned into the
series SGLang really exposes (histogram buckets with SGLang's `le` spelling, `http_responses_total` by endpoint,
method and status code, `up` of the target):
  steady burn      15x the budget (a down server for availability): the page fires after its `for:`, not
                   one evaluation earlier, with the burn rate as its value; the ticket fires after its own
  under the page   5.7x (just under the 6x page pair, above the ticket's 1x): no page, the ticket fires
  under the ticket 0.9x: nothing fires
  long only        a burst that ended before the short windows: the long windows burn, no page
  short only       a burst in the last minutes: the short windows burn, no page
Each scenario is checked against a model of the rules first (both Prometheus 2's closed range and 3's
left-open range), so a test that could pass for the wrong reason is not written.
"""
from __future__ import annotations

import math

from exporter.catalog import slo as catalog_slo
from exporter.catalog.slo import KINDS_BY_ID, ObjectiveKind
from exporter.generate.promql import fmt_duration, num, parse_duration
from exporter.generate.promtool_common import (
    POD_A,
    alert_case,
    expected_alert,
    series_text,
    target_labels,
    values_text,
)
from exporter.generate.rules import Alert
from exporter.generate.settings import RuleSettings
from exporter.generate.slo import alerts, record_name

STEP = 60.0              # rule evaluation, and one sample a minute of the counters
UP_STEP = 15.0           # `up` every 15 s (the chart's scrape interval): at one a minute a single failed scrape
                         # in an hour would already burn a 99.9 % budget 16x


def sample_step(kind: ObjectiveKind) -> float:
    return UP_STEP if kind.id == "availability" else STEP
EVENTS = 1000            # events a minute (counters)
BASE = {"model_name": "m", "engine_type": "unified"}


def _up_pattern(fractions: list[float]) -> list[int]:
    """`up` samples whose share of zeros follows `fractions` (error diffusion)."""
    out, acc = [], 0.0
    for f in fractions:
        acc += f
        if acc >= 1 - 1e-9:
            out.append(0)
            acc -= 1
        else:
            out.append(1)
    return out


def _bad_ratio(kind: ObjectiveKind, fractions: list[float], k: int, window: float, left_open: bool) -> float | None:
    """The recorded bad-event ratio at sample k (a model of the rules; rate()'s extrapolation cancels out
    in a ratio of two counters sampled together from zero)."""
    n = int(window / sample_step(kind))
    first = max(0, k - n + (1 if left_open else 0))
    if kind.id == "availability":
        ups = _up_pattern(fractions)[first:k + 1]
        return 1 - sum(ups) / len(ups)
    if k - first < 1:
        return None
    bad = sum(fractions[first + 1:k + 1])
    return bad / (k - first)


def _burn(kind, fractions, k, window: str, budget: float) -> float | None:
    """The burn rate over `window` at minute k (Prometheus 2's closed range)."""
    ratio = _bad_ratio(kind, fractions, k, parse_duration(window), False)
    return None if ratio is None else ratio / budget


def _value(kind, fractions, k, window: str, budget: float) -> float:
    """An alert's value for its description, refused when Prometheus 3's left-open range would print another."""
    both = [_bad_ratio(kind, fractions, k, parse_duration(window), left_open) for left_open in (False, True)]
    assert None not in both and len({f"{x / budget:.1f}" for x in both if x is not None}) == 1, (kind.id, k)
    return both[0] / budget         # type: ignore[operator]


def _pair_fires(kind, fractions, k, pairs, budget) -> bool:
    """Whether any window pair fires at minute k; refused when the outcome hangs on a window within 2 % of its
    burn rate or on the range semantics (Prometheus 2 closed, 3 left-open)."""
    outcomes = set()
    for left_open in (False, True):
        fires = False
        for b in pairs:
            ratios = [_bad_ratio(kind, fractions, k, parse_duration(w), left_open) for w in (b.long, b.short)]
            if None in ratios:
                continue
            burns = [x / budget for x in ratios if x is not None]
            if all(x > b.burn_rate for x in burns):
                assert all(x > b.burn_rate * 1.02 for x in burns), f"{kind.id}: minute {k} on the burn rate"
                fires = True
            else:
                assert any(x < b.burn_rate * 0.98 for x in burns), f"{kind.id}: minute {k} on the burn rate"
        outcomes.add(fires)
    assert len(outcomes) == 1, f"{kind.id}: Prometheus 2 and 3 disagree at minute {k}"
    return outcomes.pop()


def _series(kind: ObjectiveKind, spec: dict, settings: RuleSettings, fractions: list[float]) -> list[dict]:
    lab = {**target_labels(settings, POD_A, 30000, settings.sglang_selector, settings.sglang_test_labels)}
    if kind.id == "availability":
        return [{"series": series_text("up", lab), "values": values_text(_up_pattern(fractions))}]
    bad = [0.0]
    for f in fractions[1:]:
        bad.append(bad[-1] + EVENTS * f)
    total = [EVENTS * k for k in range(len(fractions))]
    good = [t - b for t, b in zip(total, bad)]
    if kind.id == "error_ratio":
        http = {**lab, "endpoint": "/generate", "method": "POST"}
        return [{"series": series_text(catalog_slo.HTTP_RESPONSES, {**http, "status_code": "200"}),
                 "values": values_text(good)},
                {"series": series_text(catalog_slo.HTTP_RESPONSES, {**http, "status_code": "500"}),
                 "values": values_text(bad)}]
    metric = catalog_slo.TTFT if kind.id == "ttft" else catalog_slo.ITL
    thr = spec["threshold_seconds"]
    out = []
    # two streaming modes (SGLang 0.5.17+ labels TTFT by is_streaming), each half the events: the rules sum them
    for streaming in ("true", "false"):
        h = {**lab, **BASE, "is_streaming": streaming}
        for le, values in ((repr(thr / 2), [0.0] * len(total)), (repr(float(thr)), good), ("+Inf", total)):
            out.append({"series": series_text(metric + "_bucket", {**h, "le": le}),
                        "values": values_text([v / 2 for v in values])})
        out.append({"series": series_text(metric + "_count", h), "values": values_text([v / 2 for v in total])})
    return out


def _out_labels(kind: ObjectiveKind, settings: RuleSettings) -> dict:
    lab = target_labels(settings, POD_A, 30000, settings.sglang_selector, settings.sglang_test_labels)
    keep = set(settings.join_labels) | set(settings.native_keep_labels)
    if kind.id in ("ttft", "inter_token_latency"):
        lab = {**lab, **BASE}
    return {k: v for k, v in lab.items() if k in keep}


def objective_tests(settings: RuleSettings, kind: ObjectiveKind, spec: dict, page: Alert, ticket: Alert) -> list:
    budget = 1 - spec["target"]
    page_for, ticket_for = (parse_duration(a.for_) for a in (page, ticket))
    out_labels = {**_out_labels(kind, settings), "slo": kind.id}
    step = sample_step(kind)
    per_eval = int(STEP / step)             # samples between two rule evaluations
    availability = kind.id == "availability"
    tests = []

    def samples(seconds: float) -> int:
        return int(seconds / step)

    def evaluated(n: int) -> int:
        """n samples, rounded up so that the last one falls on a rule evaluation."""
        return n + (-(n - 1)) % per_eval

    def case(name, fractions, checks):
        tests.append({"name": f"{page.name.removesuffix('FastBurn')}: {name}", "interval": fmt_duration(step),
                      "input_series": _series(kind, spec, settings, fractions), "alert_rule_test": checks})

    def quiet(fractions, pairs) -> bool:
        return not any(_pair_fires(kind, fractions, k, pairs, budget) for k in range(0, len(fractions), per_eval))

    # steady burn: both pairs fire from the first evaluation after sample 0 on
    steady = 1.0 if availability else min(1.0, 15 * budget)
    span = evaluated(samples(max(page_for, ticket_for) + 4 * STEP))
    fr = [0.0] + [steady] * (span - 1)       # sample 0 healthy: the alerts' conditions start at the next one
    assert all(_pair_fires(kind, fr, k, catalog_slo.PAGE_WINDOWS, budget) for k in range(per_eval, span, per_eval))
    assert not _pair_fires(kind, fr, 0, catalog_slo.PAGE_WINDOWS, budget)
    checks = []
    for a, f, pairs in ((page, page_for, catalog_slo.PAGE_WINDOWS), (ticket, ticket_for, catalog_slo.TICKET_WINDOWS)):
        fires = STEP * (1 + math.ceil(f / STEP))     # rules run once a minute: a `for:` ends at an evaluation
        if f > 0:
            checks.append(alert_case(a.name, fires - STEP, []))
        checks.append(alert_case(a.name, fires, [expected_alert(
            a, out_labels, _value(kind, fr, samples(fires), pairs[0].long, budget))]))
    case(f"{num(round(steady / budget, 1))}x the budget pages after {page.for_} and tickets after {ticket.for_}",
         fr, checks)

    # under the page's burn rate, above the ticket's: no page, the ticket fires
    under_page = (4.0 if availability else 5.7) * budget
    span = samples(ticket_for + 4 * STEP)
    if availability:                 # the ticket's `for:` after two periods of the down pattern
        span += 2 * round(1 / under_page)
    span = evaluated(span)
    fr = [under_page] * span
    t_eval = (span - 1) * step
    # availability above ~99.95 %: one failed scrape in an hour already burns faster than the page's 14.4x
    # (docs/configuration.md), so no sampled pattern stays under the page; counters always can
    if not availability or quiet(fr, catalog_slo.PAGE_WINDOWS):
        assert quiet(fr, catalog_slo.PAGE_WINDOWS)
        assert all(_pair_fires(kind, fr, k, catalog_slo.TICKET_WINDOWS, budget)
                   for k in range(span - 1 - samples(ticket_for) - per_eval, span, per_eval))
        ticket_value = _value(kind, fr, span - 1, catalog_slo.TICKET_WINDOWS[0].long, budget)
        case(f"{num(round(under_page / budget, 1))}x the budget (under the 6x page pair) does not page; the "
             "ticket fires", fr, [alert_case(page.name, t_eval, []),
                                  alert_case(ticket.name, t_eval, [expected_alert(ticket, out_labels, ticket_value)])])

    # under the ticket's: nothing
    if availability:                 # one down sample in 1 / (0.9 x budget): the share just under the budget
        span = evaluated(round(1 / (0.9 * budget)) + 1)
        t_eval = (span - 1) * step
    fr = [0.9 * budget] * span
    if not availability or quiet(fr, catalog_slo.PAGE_WINDOWS + catalog_slo.TICKET_WINDOWS):
        assert quiet(fr, catalog_slo.PAGE_WINDOWS + catalog_slo.TICKET_WINDOWS)
        case("0.9x the budget stays quiet", fr,
             [alert_case(page.name, t_eval, []), alert_case(ticket.name, t_eval, [])])

    # both windows required: a 20-minute burst that ended 35 minutes ago (the long windows burn, the short ones
    # do not) and errors in the last minutes (the short windows burn, the long ones do not)
    first = catalog_slo.PAGE_WINDOWS[0]
    n_long = samples(parse_duration(first.long))
    burst = 1.0 if availability else min(1.0, 60 * budget)
    start, end = n_long - samples(50 * 60), n_long - samples(30 * 60)
    ended = [burst if start <= k < end else 0.0 for k in range(n_long + samples(5 * 60) + 1)]
    k_eval = len(ended) - 1
    long_burn, short_burn = (_burn(kind, ended, k_eval, w, budget) for w in (first.long, first.short))
    if long_burn is not None and long_burn > first.burn_rate * 1.02 and short_burn == 0:
        assert not _pair_fires(kind, ended, k_eval, catalog_slo.PAGE_WINDOWS, budget)
        case(f"a burst that ended 35 min ago burns the {first.long} window, not the {first.short} one: no page",
             ended, [alert_case(page.name, k_eval * step, [])])
    history = samples(parse_duration(catalog_slo.PAGE_WINDOWS[-1].long))    # clean, so no long window burns
    for last in range(1, samples(5 * 60)):   # the shortest tail of errors that burns the short window
        recent = [0.0] * (history + 1)
        recent[-last:] = [1.0 if availability else min(1.0, 30 * budget)] * last
        k_eval = len(recent) - 1
        long_burn, short_burn = (_burn(kind, recent, k_eval, w, budget) for w in (first.long, first.short))
        if long_burn is None or short_burn is None or short_burn <= first.burn_rate * 1.02:
            continue
        if long_burn < first.burn_rate * 0.98:
            assert not _pair_fires(kind, recent, k_eval, catalog_slo.PAGE_WINDOWS, budget)
            case(f"errors in the last minutes burn the {first.short} window, not the {first.long} one: no page",
                 recent, [alert_case(page.name, k_eval * step, [])])
        break
    return tests


def _round(v: float, to: float = 1e-9) -> float:
    """PromQL's round(v, to), operation for operation (Go and Python floats are the same IEEE doubles)."""
    inverse = 1.0 / to
    return math.floor(v * inverse + 0.5) / inverse


def recording_test(settings: RuleSettings, kind: ObjectiveKind, spec: dict) -> dict:
    """Every window's record and the objective, on a steady share of bad events (rounded to 1e-9: the ratio of
    two rates is exact only to the last bits)."""
    budget = 1 - spec["target"]
    steady = 1.0 if kind.id == "availability" else min(1.0, 15 * budget)
    step = sample_step(kind)
    span = int(9 * STEP / step) + 1
    fr = [0.0] + [steady] * (span - 1) if kind.id != "availability" else [steady] * span
    t_eval = (span - 1) * step
    labels = series_text("", {**_out_labels(kind, settings), "slo": kind.id})
    cases = []
    for w in catalog_slo.RATE_WINDOWS:
        ratio = _bad_ratio(kind, fr, span - 1, parse_duration(w), False)
        assert ratio is not None
        cases.append({"expr": f'round({record_name(w)}{{slo="{kind.id}"}}, 1e-9)', "eval_time": fmt_duration(t_eval),
                      "exp_samples": [{"labels": labels, "value": _round(ratio)}]})
    cases.append({"expr": f'{catalog_slo.OBJECTIVE_RECORD}{{slo="{kind.id}"}}', "eval_time": fmt_duration(t_eval),
                  "exp_samples": [{"labels": catalog_slo.OBJECTIVE_RECORD + f'{{slo="{kind.id}"}}',
                                   "value": spec["target"]}]})
    return {"name": f"{kind.id} recording rules", "interval": fmt_duration(step),
            "input_series": _series(kind, spec, settings, fr), "promql_expr_test": cases}


def test_file(settings: RuleSettings) -> dict | None:
    objectives = settings.objectives()
    if not objectives:
        return None
    by_name = {a.name: a for a in alerts(settings)}
    tests = []
    for kind_id, spec in objectives.items():
        kind = KINDS_BY_ID[kind_id]
        page, ticket = (by_name[n] for n in catalog_slo.alert_names(kind))
        tests += objective_tests(settings, kind, spec, page, ticket)
        tests.append(recording_test(settings, kind, spec))
    return {"evaluation_interval": fmt_duration(STEP), "tests": tests}
