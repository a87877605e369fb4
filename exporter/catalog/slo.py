"""Objectives users set (the `slo:` section): the kinds of objective, their SLIs over SGLang's own /metrics, the
burn-rate alerting scheme, and the texts of their alerts and runbooks.

An objective is a promise one deployment makes ("99 % of requests get their first token within 2 s"); its
error budget is `1 - target` of the events over a 30-day period. The alerts follow the multi-window,
multi-burn-rate scheme of Google's SRE workbook ("Alerting on SLOs"): a window pair fires when both its long
window (is the budget really being spent?) and its short window (is it still being spent now?) burn faster
than the pair's rate, where a burn rate of 1 spends exactly the budget in the period.
"""
from __future__ import annotations

from dataclasses import dataclass

from exporter import releases
from exporter.catalog.native import native_metric_names

PERIOD_DAYS = 30             # the budget period the burn rates below are computed for


@dataclass(frozen=True)
class BurnWindow:
    long: str            # Prometheus durations
    short: str
    burn_rate: float     # budget spent per unit of time, relative to an even spend over the period
    budget_share: float  # share of the period's budget spent in `long` at that rate (documentation)


# Page: 2 % of the budget in 1 h or 5 % in 6 h; ticket: 10 % in 3 days (burn = share x period / long window).
PAGE_WINDOWS = (BurnWindow("1h", "5m", 14.4, 0.02), BurnWindow("6h", "30m", 6.0, 0.05))
TICKET_WINDOWS = (BurnWindow("3d", "6h", 1.0, 0.10),)
RATE_WINDOWS = ("5m", "30m", "1h", "6h", "3d")   # every window above, each recorded once per objective
assert {w for b in PAGE_WINDOWS + TICKET_WINDOWS for w in (b.long, b.short)} == set(RATE_WINDOWS)

# Recording rules (level:metric:operations): the bad-event ratio per server and window, labelled slo="<kind>";
# the objective itself, so dashboards read the target from Prometheus instead of a second copy.
ERROR_RATIO_RECORD = "instance:sglang_slo_errors:ratio_rate{window}"
OBJECTIVE_RECORD = "slo:sglang_objective:ratio"

# SGLang's default histogram bounds (its metrics collector; `--bucket-time-to-first-token` and
# `--bucket-inter-token-latency` replace them from 0.4.7). A latency SLI counts the requests at or under the
# threshold from the bucket whose `le` is the threshold, so the threshold must be one of the bounds.
DEFAULT_BUCKETS = {
    "ttft": (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0),
    "inter_token_latency": (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08,
                            0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0),
}


def _exposed(short: str) -> str:
    """A family's exposed name from the release data (never typed by hand)."""
    first = releases.first_release(short)
    if first is None:
        raise KeyError(f"{short}: no SGLang release defines it (exporter/releases/metrics.json)")
    return next(f.name for f in releases.metric_families(first).values() if f.short == short)


HTTP_RESPONSES = _exposed("http_responses_total")            # SGLang 0.5.23+
HTTP_RESPONSES_FIRST = releases.first_release("http_responses_total")
TTFT, = native_metric_names("ttft")
ITL, ITL_BEFORE_0_4_4 = native_metric_names("itl")


@dataclass(frozen=True)
class ObjectiveKind:
    id: str                      # the key under `slo:`
    camel: str                   # in alert names: SGLangSLO<camel>FastBurn / SlowBurn
    title: str
    good: str                    # what a good event is, with {threshold} for latency kinds
    source: str                  # where the SLI comes from
    latency: bool                # has threshold_seconds (a histogram bucket bound)
    example: dict                # the chart's disabled example objective (docs/configuration.md says why)
    diagnosis: str
    mitigation: str


KINDS: tuple[ObjectiveKind, ...] = (
    ObjectiveKind(
        "ttft", "TTFT", "time to first token",
        "a request gets its first token within {threshold} s",
        f"`{TTFT}` (the bucket `le` = threshold over `_count`)", True,
        {"target": 0.99, "threshold_seconds": 2.0},
        "Compare the TTFT percentiles with the queue: `SGLangQueueAboveRange` / `SGLangQueueWaitHigh` (requests "
        "wait before prefill) and `SGLangLongPromptsDominate` (long prompts fill the prefill chunk). A TTFT that "
        "rose with an unchanged queue points at prefill itself (longer prompts, a lower prefix-cache hit rate).",
        "Lower the request rate or route some of it elsewhere; lower `--max-running-requests` when decode "
        "batches crowd out prefill; raise `--chunked-prefill-size` when long prompts dominate. If the "
        "objective is simply wrong for this workload, change `slo.ttft` (a long-context deployment has "
        "longer first tokens by design)."),
    ObjectiveKind(
        "inter_token_latency", "InterTokenLatency", "inter-token latency",
        "a token follows the previous one within {threshold} s",
        f"`{ITL}` (`{ITL_BEFORE_0_4_4}` before 0.4.4; the bucket `le` = threshold over `_count`)", True,
        {"target": 0.99, "threshold_seconds": 0.1},
        "Large decode batches slow every token: compare `#running-req` and `token usage` with the times the "
        "budget burned, and look for retractions (`SGLangRetractionsFrequent`) and prefill interrupting "
        "decode (long prompts while the batch is full).",
        "Lower `--max-running-requests` (smaller decode batches), or lower the request rate; check that CUDA "
        "graph covers the batch sizes seen (`SGLangCUDAGraphOffSmallBatch`)."),
    ObjectiveKind(
        "error_ratio", "ErrorRatio", "error ratio",
        "an HTTP response is not a 5xx",
        f"`{HTTP_RESPONSES}` (SGLang {HTTP_RESPONSES_FIRST}+): `status_code=~\"5..\"` over all responses", False,
        {"target": 0.999},
        "Which endpoints fail: `sum by (endpoint, status_code) (rate(" + HTTP_RESPONSES + "[5m]))`. Grep "
        "SGLang's log for `Error in request` and tracebacks; a crash (`SGLangServerCrashed`) or OOMs answer "
        "5xx until the restart. The sidecar's own 5xx-share signal (`error_rate`, where present) judges the "
        "same responses against its threshold per server; this alert is the budget view of your objective.",
        "Fix the failing cause the log names (OOM: see the OOM runbooks; bad requests answered 5xx: the client). "
        "Shed load if errors rise with the request rate."),
    ObjectiveKind(
        "availability", "Availability", "availability",
        "Prometheus scrapes SGLang's /metrics successfully (`up` = 1)",
        "`up` of the SGLang scrape job (`alerts.sglang_selector`)", False,
        {"target": 0.995},
        "`up` of the SGLang target is 0: is the pod running (`kubectl get pod`, restarts), does `/metrics` answer "
        "(`curl http://<pod>:30000/metrics`), did it crash (`SGLangServerCrashed`, `SGLangTargetDown` from the "
        "sidecar)? Restarts and long start-ups (`SGLangStartupStalled`) spend this budget too.",
        "Restore the server (the crash and start-up runbooks name the causes); if restarts are planned, count "
        "them in the objective or pause the alert during maintenance."),
)
KINDS_BY_ID = {k.id: k for k in KINDS}


def alert_names(kind: ObjectiveKind) -> tuple[str, str]:
    """(page alert, ticket alert) of one objective kind."""
    return f"SGLangSLO{kind.camel}FastBurn", f"SGLangSLO{kind.camel}SlowBurn"


PAGE_FOR, TICKET_FOR = "2m", "15m"
