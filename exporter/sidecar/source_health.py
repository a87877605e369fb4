"""Whether each source (a followed log file, SGLang's /metrics) is up: one log line when it goes down or comes
back, with the reason, and each source's last error with the time it was last seen."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass
class SourceStatus:
    kind: str                             # "log" (a followed file) or "metrics" (SGLang's /metrics)
    label: str                            # how a log line names it
    up: bool | None = None                # None until first observed
    reason: str = ""                      # why it is down; "" while up
    since: float | None = None            # clock time up last changed
    last_error: str = ""                  # the last problem seen, kept after the source recovers
    last_error_time: float | None = None  # clock time that problem was last seen

    def to_json(self, name: str) -> dict:
        """One entry of the `sources` list of /api/v1/signals (docs/api.md)."""
        return {"source": name, "kind": self.kind, "up": bool(self.up), "reason": self.reason or None,
                "since": self.since, "last_error": self.last_error or None,
                "last_error_time": self.last_error_time}


class SourceHealth:
    """The sources' up/down history, fed by the sidecar each time it judges a source (under its lock)."""

    def __init__(self) -> None:
        self.sources: dict[str, SourceStatus] = {}

    def observe(self, name: str, kind: str, label: str, up: bool, problem: str, now: float) -> None:
        """Record a judgement of source `name`. `problem` says why it is down, or what is wrong while it is
        still read (a stale log); "" when nothing is. Logs one line when `up` differs from the last
        judgement (the first one included: an operator sees each source's state at start-up)."""
        st = self.sources.get(name)
        if st is None:
            st = self.sources[name] = SourceStatus(kind, label)
        if problem:
            st.last_error, st.last_error_time = problem, now
        st.reason = "" if up else (problem or "unknown")
        if up == st.up:
            return
        st.up, st.since = up, now
        extra = {"source": name, "state": "up" if up else "down", "reason": st.reason or None}
        if up:
            log.info("%s is up", label, extra=extra)
        else:
            log.warning("%s is down: %s", label, st.reason, extra=extra)

    def forget(self, kind: str, keep) -> None:
        """Drop the sources of `kind` not in `keep`: a glob match no longer followed on its own (a rotated copy,
        exporter/ingest/follower.py) is no source, and must not stay listed as it was last seen."""
        for name in [n for n, st in self.sources.items() if st.kind == kind and n not in keep]:
            del self.sources[name]

    def snapshot(self) -> dict[str, SourceStatus]:
        """A copy, for a View taken under the same lock."""
        return {name: SourceStatus(**vars(st)) for name, st in self.sources.items()}


def log_source_problem(path: str, up: bool, stale: bool, rotations: int, last_error: str | None,
                       stuck_for: float | None) -> str:
    """What is wrong with a followed log file, from the follower's view of it, as `<category>: <detail>`
    (missing, rotated, stale, stuck, or the follower's own error); "" when nothing is."""
    if stuck_for is not None:
        return f"stuck: the follow thread finished no poll for {stuck_for:.0f} s"
    if not up:
        if not os.path.lexists(path):
            return "rotated: nothing at the path since the file was moved away" if rotations else \
                "missing: no such file"
        if last_error:
            return f"error: {last_error}"
        return "not open: the path names no file the follower could open"
    if stale:
        return ("stale: the file rotated away is still written to; the writer does not reopen its log "
                "(runbook SGLangLogSourceStale)")
    return ""
