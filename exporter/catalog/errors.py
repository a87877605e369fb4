"""The error-rate signals: requests that fail while the server keeps serving. A ticket when the share of failed
requests is above the objective, a page only when nearly everything fails (then users see an outage, whatever
the process says). Catalog entries like any other (catalog.SIGNALS holds them); they live here to keep each
module short. A request error is never a crash (catalog_failures.server_crashed): SGLang answered it and kept
serving.

What is counted, best source first (exporter/state/errors.py): SGLang's `http_responses_total{status_code}`
(0.5.23+), else its `num_aborted_requests_total` (0.4.7+) against finished requests, else uvicorn's access
lines in the log (the POSTs and their 5xx). The log's handled request errors (`Error in request: ...` and the
others of ingest.grammar.patterns.REQUEST_ERRORS) give the cause line; client disconnects are counted apart,
as aborts (a client that left is not a server error).
"""
from __future__ import annotations

from exporter.catalog.model import AlertSpec, Signal

_INPUTS = ("http_access", "request_error", "sglang:http_responses_total", "sglang:num_aborted_requests_total",
           "sglang:num_requests_total")
_FORMULA = ("failed over answered inference requests in the window, from the best source: 5xx of "
            "sglang:http_responses_total (POST, 0.5.23+), else aborted requests of "
            "sglang:num_aborted_requests_total (0.4.7+) over finished ones, else the 5xx of the access log's POST "
            "lines; > `max_ratio` with at least `min_requests` answered")
_MEANING_TAIL = (" The cause line is the latest handled request error the log shows (`Error in request: ...`, "
                 "`[http_server] Error: ...`); client disconnects (`Request is disconnected from the client "
                 "side ... Abort request`) are counted apart, as aborts. Unknown without a source of response "
                 "counts: SGLang 0.5.23+ `/metrics` (http_responses_total), 0.4.7+ (num_aborted_requests_total), "
                 "or uvicorn's access log in the log file.")

ERROR_SIGNALS: tuple[Signal, ...] = (
    Signal(
        id="error_rate",
        title="Error rate above objective",
        meaning="More inference requests fail than the objective allows, while the server keeps serving the "
                "others: SGLang answers them with a server error (5xx) or aborts them." + _MEANING_TAIL,
        impact="Some users get errors. The server is up: a ticket, not a page, unless nearly every request fails "
               "(`errors_nearly_all`).",
        severity="warning",
        inputs=_INPUTS,
        formula=_FORMULA,
        value_unit="ratio",
        window_seconds=600,
        defaults={"max_ratio": 0.05, "min_requests": 20},
        profiles={},
        advice=(),
        alert=AlertSpec("SGLangErrorRate", "10m", "SGLang answers more requests with errors than the objective.",
                        "{{ $labels.instance }}: {{ $value | humanizePercentage }} of requests failed. The cause "
                        "line is in sglang_exporter_failure_cause_info and the runbook's log search.", page=False),
        guide="(Not in the guide) a request error is answered and logged; the server goes on serving.",
        family="errors",
    ),
    Signal(
        id="errors_nearly_all",
        title="Nearly every request fails",
        meaning="Nearly every inference request fails while the process is up: to users this is an outage."
                + _MEANING_TAIL,
        impact="Users get errors for (nearly) every request. Pages.",
        severity="critical",
        inputs=_INPUTS,
        formula=_FORMULA.replace("`max_ratio`", "`min_ratio`").replace("> ", ">= ", 1),
        value_unit="ratio",
        window_seconds=300,
        defaults={"min_ratio": 0.95, "min_requests": 20},
        profiles={},
        advice=(),
        alert=AlertSpec("SGLangErrorsNearlyAll", "5m", "Nearly every request to SGLang fails.",
                        "{{ $labels.instance }}: {{ $value | humanizePercentage }} of requests failed. The cause "
                        "line is in sglang_exporter_failure_cause_info and the runbook's log search.", page=True),
        guide="(Not in the guide) when nearly every request fails the service is down for its users.",
        family="errors",
    ),
)
