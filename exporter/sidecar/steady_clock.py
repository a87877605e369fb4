"""The live sidecar's clock: the system's wall-clock time when it started, moved on by the monotonic clock, so a
step of the system clock (an NTP correction, a VM resumed, a date set by hand) never moves it.

Arrival times feed the windows and rates every signal judges. Stepped back an hour, a wall clock would count
the retractions of the last ten minutes as still to come for that hour (measured: retraction_storm firing out
of a quiet minute, and still firing 20 minutes later); stepped forward, it would age every window at once and
take a server that printed nothing during the step for stalled. The dates the sidecar shows are off by the step
until it restarts, and its log says so once per step.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

STEP_TOLD = 30.0      # seconds the system clock must move from ours before the log says so


class SteadyClock:
    """Seconds since the epoch as the system clock read at start, plus the monotonic time elapsed since."""

    def __init__(self, wall: Callable[[], float] = time.time, mono: Callable[[], float] = time.monotonic):
        self._wall, self._mono = wall, mono
        self._anchor = wall() - mono()
        self._told = 0.0       # the step last logged

    def __call__(self) -> float:
        return self._anchor + self._mono()

    def step(self) -> float:
        """How far the system clock has moved from this one since start, in seconds (+: it is ahead)."""
        return self._wall() - self()

    def tell_step(self) -> None:
        """Log once per step of the system clock (a move of STEP_TOLD seconds or more since the last one told)."""
        step = self.step()
        if abs(step - self._told) >= STEP_TOLD:
            self._told = step
            log.warning("the system clock moved %+.0f s from the one sglang-exporter keeps since it started: "
                        "windows and rates keep their own time (a clock step raises no storm and no stall), "
                        "the dates it shows are %.0f s %s until it restarts", step, abs(step),
                        "behind the system's" if step > 0 else "ahead of the system's")
