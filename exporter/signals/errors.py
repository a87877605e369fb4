"""Judges of the error-rate signals (catalog_errors): the share of inference requests that failed."""
from __future__ import annotations


def _error_share(paging: bool):
    key = "min_ratio" if paging else "max_ratio"

    def judge(state, p, sources, now, window):
        if not (sources.log_up or sources.metrics_up):
            return None, None, "no live source"
        out = state.outcomes
        counted = out.share(now, window)
        errors = int(out.request_errors.weight_since(now - window))
        gone = int(out.disconnects.weight_since(now - window))
        if counted is None:
            return None, None, ("no response counts: SGLang's /metrics has them from 0.4.7 "
                                "(num_aborted_requests_total) and 0.5.23 (http_responses_total), the log in "
                                "uvicorn's access lines; {} request errors and {} client disconnects logged in "
                                "{:.0f} min", errors, gone, window / 60)
        failed, answered, what = counted
        cause = None
        if out.last_error is not None and out.last_error[0] >= now - window:
            cause = ("request_error", out.last_error[1])
        if answered < p["min_requests"]:
            return None, None, ("{:.0f} requests answered in {:.0f} min, {} needed ({})", answered, window / 60,
                                p["min_requests"], what)
        share = min(1.0, failed / answered)
        firing = share >= p[key] if paging else share > p[key]
        detail = ("{:.0f} of {:.0f} requests failed ({}); {} request errors, {} client disconnects logged{}",
                  failed, answered, what, errors, gone, "; latest: " + cause[1] if cause else "")
        if firing and cause is not None:
            return firing, share, detail, cause
        return firing, share, detail
    return judge


ERROR_JUDGES = {
    "error_rate": _error_share(paging=False),
    "errors_nearly_all": _error_share(paging=True),
}
