"""The last hour of the numbers the status page charts (queue, token usage, retractions per minute), kept by
the sidecar at evaluation time in a small bounded ring. The page only reads a copy: nothing is computed for
it while nobody looks, and the ring's size does not grow with traffic or uptime."""
from __future__ import annotations

from collections import deque

from exporter.signals.judgement import retractions_per_minute
from exporter.state.ranks import per_scheduler

RECENT_SECONDS = 3600.0
RECENT_SAMPLES = 1200          # at most one sample every 3 s over the hour


class Recent:
    """(time, queue, token usage, retractions per minute) samples of the last `seconds`, at most `samples` of
    them, spaced at least seconds / samples apart."""

    def __init__(self, seconds: float = RECENT_SECONDS, samples: int = RECENT_SAMPLES):
        self.seconds = seconds
        self.spacing = seconds / samples
        self.ring: deque = deque(maxlen=samples)

    def record(self, state, now: float, params: dict) -> None:
        """One sample of `state` (a ServerState) at `now`, unless the last one is more recent than the spacing.
        The same numbers as the analyze report's charts and the gauges: the queue summed over schedulers (TP
        ranks of one DP rank share a queue), the fullest rank's token usage, the retraction rate of
        signals.retractions_per_minute with the thresholds in force (`params`)."""
        if self.ring and now - self.ring[-1][0] < self.spacing:
            return
        ranks = state.ranks
        schedulers = per_scheduler(ranks)
        queues = [r.queue for r in schedulers.values() if r.queue is not None]
        usages = [r.usage for r in ranks.values() if r.usage is not None]
        self.ring.append((now, sum(queues) if queues else None, max(usages) if usages else None,
                          retractions_per_minute(state, now, params)))

    def samples(self, now: float) -> list[tuple]:
        """A copy of the samples of the last `seconds` before `now`, oldest first."""
        since = now - self.seconds
        return [s for s in self.ring if s[0] >= since]
