"""Requests that failed while the server kept serving, and requests the client abandoned: what the error_rate
signals judge and what tells the stalled signal that the queue a batch line showed has drained.

Fed by the log (uvicorn's access lines, SGLang's handled request errors and client disconnects) and by
SGLang's /metrics (the increases of http_responses_total and num_aborted_requests_total per scrape). Each
source is kept apart: a share is taken within one source, never across two that count the same requests.
"""
from __future__ import annotations

from exporter.state.windows import CountWindow, TimeWindow

MAX_CAUSE = 200
BUCKET_SECONDS = 10.0    # counts closer than this share one item of a window (CountWindow)


class RequestOutcomes:
    """Responses, server errors, request errors and aborts over a time window, per source."""

    def __init__(self, window: float):
        # the log: inference responses (uvicorn access lines of POST requests) and the 5xx among them
        self.responses = CountWindow(window, BUCKET_SECONDS)
        self.responses_5xx = CountWindow(window, BUCKET_SECONDS)
        # "Error in request: ..." and the others (patterns.REQUEST_ERRORS)
        self.request_errors = CountWindow(window, BUCKET_SECONDS)
        self.disconnects = CountWindow(window, BUCKET_SECONDS)      # "Request is disconnected ... Abort request ..."
        # /metrics: the increases of SGLang's counters, per scrape
        self.scraped_responses = CountWindow(window, BUCKET_SECONDS)
        self.scraped_5xx = CountWindow(window, BUCKET_SECONDS)
        self.scraped_aborted = CountWindow(window, BUCKET_SECONDS)
        self.scraped_requests = CountWindow(window, BUCKET_SECONDS)
        self.responses_scraped = False     # the scrape carries http_responses_total (0.5.23+)
        self.aborts_scraped = False        # it carries num_aborted_requests_total (0.4.7+)
        self.last_error: tuple[float, str] | None = None       # (t, the latest request error's first line)
        self.last_disconnect_t: float | None = None
        self.request_errors_total = 0
        self.disconnects_total = 0

    @property
    def windows(self) -> tuple[TimeWindow, ...]:
        return (self.responses, self.responses_5xx, self.request_errors, self.disconnects, self.scraped_responses,
                self.scraped_5xx, self.scraped_aborted, self.scraped_requests)

    def access(self, method: str, status: int, now: float) -> None:
        """A uvicorn access line. Inference requests are POSTs; health checks and /metrics are GETs and would
        dilute the share."""
        if method != "POST":
            return
        self.responses.add(now)
        if status >= 500:
            self.responses_5xx.add(now)

    def request_error(self, fields: dict, now: float) -> None:
        if fields.get("disconnected"):
            self.disconnects.add(now)
            self.disconnects_total += 1
            self.last_disconnect_t = now
            return
        self.request_errors.add(now)
        self.request_errors_total += 1
        self.last_error = (now, " ".join(str(fields.get("message") or "").split())[:MAX_CAUSE])

    def scrape(self, now: float, responses, errors_5xx, aborted, requests) -> None:
        """One scrape's counter increases (None: the scrape lacks that counter, or saw it first)."""
        self.responses_scraped = self.responses_scraped or responses is not None
        self.aborts_scraped = self.aborts_scraped or aborted is not None
        for window, grew in ((self.scraped_responses, responses), (self.scraped_5xx, errors_5xx),
                             (self.scraped_aborted, aborted), (self.scraped_requests, requests)):
            if grew:
                window.add(now, grew)

    def share(self, now: float, window: float) -> tuple[float, float, str] | None:
        """(failed, answered, what was counted) over the last `window` seconds from the best source: SGLang's
        own response counter, else its aborted-request counter against finished requests, else the access log;
        None when no source counts responses."""
        t0 = now - window
        if self.responses_scraped:
            return (self.scraped_5xx.weight_since(t0), self.scraped_responses.weight_since(t0),
                    "5xx responses of sglang:http_responses_total")
        if self.aborts_scraped:
            aborted = self.scraped_aborted.weight_since(t0)
            # (whether num_requests_total counts an aborted request as finished differs by release: the larger)
            return (aborted, max(aborted, self.scraped_requests.weight_since(t0)),
                    "aborted requests of sglang:num_aborted_requests_total")
        answered = self.responses.weight_since(t0)
        if answered:
            return self.responses_5xx.weight_since(t0), answered, "5xx responses of the access log"
        return None
