"""Bounded time windows of samples and events: hit tallies in 1-second buckets, weighted event times, and
latency histogram snapshots."""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

MAX_WINDOW_SAMPLES = 20000  # per event window (TimeWindow); it never holds more, whatever the input rate
MAX_WINDOW_BUCKETS = 3600   # per hit window (HitWindow): 1-second buckets, an hour; memory is bounded whatever
                            # the sample rate, and every catalog window (<= 15 min) fits whole


class HitWindow:
    """Samples of the last `seconds`, each counted in one or more hit series (a hit or not in each).

    The batch-sample signals share one window, so a sample is counted in all their series at once, in one
    `tally` [total_0, hits_0, total_1, hits_1, ...] of everything counted since the window began (or was
    cleared): counting is an increment of it, whatever the second. Time is cut in 1-second buckets (their
    starts in `starts`); each bucket in `items` holds the tally at its end (the newest, still counting, holds
    None until the next one starts). So a series' count in the window is "tally - the tally at the end of the
    last bucket that left": reading it and dropping a bucket are O(1), and memory is bounded by
    MAX_WINDOW_BUCKETS whatever the sample rate. (Starting a bucket only copies the tally: at about one sample
    a second per scheduler, a bucket starts for nearly every sample.)

    A bucket leaves when its start is older than `now - seconds`. With whole-second timestamps (SGLang's)
    that is exactly "a sample older than the edge leaves"; with sub-second timestamps a sample may leave up
    to 1 s early, which windows of minutes do not notice. A sample older than the newest bucket (interleaved
    ranks, a clock step back) is counted in the newest bucket."""
    __slots__ = ("seconds", "starts", "items", "tally", "_end", "_gone", "_zero")

    def __init__(self, seconds: float, series: int = 1):
        self.seconds = seconds
        self.starts: deque = deque()
        self.items: deque = deque()
        self._zero = [0] * (2 * series)
        self.tally = self._zero[:]   # one list for the window's life (clear() zeroes it): callers may keep it
        self._gone = self._zero      # the tally at the end of the last bucket that left
        self._end = -math.inf        # the end of the newest bucket

    def bucket(self, t: float) -> list:
        """The tally to count a sample at `t` in: add 1 to [2s] and the hit to [2s + 1] for series s. (Always
        the same list; callers that keep it call start(t) when `t` is not before `_end`, as this does.)"""
        if not t < self._end:
            self.start(t)
        return self.tally

    def start(self, t: float) -> None:
        """A sample at `t`, not before the newest bucket's end: the newest bucket closes, t's starts."""
        items = self.items
        if items:
            items[-1] = self.tally[:]
        start = math.floor(t)
        self._end = start + 1
        items.append(None)
        self.starts.append(start)
        if len(items) > MAX_WINDOW_BUCKETS:
            self.starts.popleft()
            self._gone = items.popleft()

    def push(self, t: float, hit: bool, series: int = 0) -> None:
        b = self.bucket(t)
        b[2 * series] += 1
        b[2 * series + 1] += hit

    def count(self, i: int) -> int:
        """Entry i of the window's tally (2s: samples of series s, 2s + 1: its hits)."""
        return self.tally[i] - self._gone[i]

    def series(self, s: int) -> HitSeries:
        return HitSeries(self, s)

    def expire(self, now: float) -> None:
        edge = now - self.seconds
        starts, items = self.starts, self.items
        while starts and starts[0] < edge:
            starts.popleft()
            end = items.popleft()
            if items:
                self._gone = end
            else:                    # the newest bucket left (every closed one did before it): none counts
                self._gone = self.tally[:]
                self._end = -math.inf

    def clear(self) -> None:
        self.starts.clear()
        self.items.clear()
        self.tally[:] = self._zero
        self._gone = self._zero
        self._end = -math.inf


class HitSeries:
    """One series of a HitWindow, read like a window of its own: `total` samples, `hits` of them."""
    __slots__ = ("window", "_i")

    def __init__(self, window: HitWindow, s: int):
        self.window = window
        self._i = 2 * s

    @property
    def total(self) -> int:
        return self.window.count(self._i)

    @property
    def hits(self) -> int:
        return self.window.count(self._i + 1)

    def counts(self) -> tuple[int, int]:
        """(total, hits) in one call: the judges read both at every evaluation."""
        w, i = self.window, self._i
        tally, gone = w.tally, w._gone
        return tally[i] - gone[i], tally[i + 1] - gone[i + 1]


class TimeWindow:
    """Event times (with a weight) in the last `seconds`."""
    __slots__ = ("seconds", "items")

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.items: deque = deque()

    def push(self, t: float, weight: float = 1.0) -> None:
        self.items.append((t, weight))
        if len(self.items) > MAX_WINDOW_SAMPLES:
            self.items.popleft()

    def expire(self, now: float) -> None:
        edge = now - self.seconds
        while self.items and self.items[0][0] < edge:
            self.items.popleft()

    def clear(self) -> None:
        self.items.clear()

    def weight_since(self, t0: float) -> float:
        """Total weight of events at or after t0. Items are in time order, so only those are visited (newest
        first; the weights are counts, whole numbers, so the order of the additions does not matter)."""
        total = 0.0
        for t, w in reversed(self.items):
            if t < t0:
                break
            total += w
        return total

    def count_since(self, t0: float) -> int:
        n = 0
        for t, _ in reversed(self.items):
            if t < t0:
                break
            n += 1
        return n


class CountWindow(TimeWindow):
    """A TimeWindow of counts (whole-number weights) merged in buckets of `bucket` seconds, that keeps their
    sum: the error judges read four of these windows, whole, at every evaluation, so the sum is kept as counts
    come and go instead of summed again each time. Exact: the sums of whole numbers below 2**53 do not round,
    in whatever order they are added."""
    __slots__ = ("bucket", "total")

    def __init__(self, seconds: float, bucket: float):
        super().__init__(seconds)
        self.bucket = bucket
        self.total = 0.0        # the weights of `items`

    def add(self, t: float, weight: float = 1.0) -> None:
        """Count `weight` at `t` in its bucket (a busy server answers hundreds of requests a second). Buckets
        start on multiples of `bucket` seconds, the same in every window: two windows fed at the same moments
        (every response, and the 5xx among them) keep the same edges, so over any span the part never counts
        more than its whole (a bucket begun at its window's first count could: "1204 of 1200 failed")."""
        items = self.items
        self.total += weight
        start = t - t % self.bucket
        if items and start <= items[-1][0]:        # this bucket (or a line a little out of order): the newest
            first, total = items[-1]
            items[-1] = (first, total + weight)
        else:
            items.append((start, weight))
            if len(items) > MAX_WINDOW_SAMPLES:
                self.total -= items.popleft()[1]

    def push(self, t: float, weight: float = 1.0) -> None:
        self.add(t, weight)

    def expire(self, now: float) -> None:
        edge = now - self.seconds
        items = self.items
        while items and items[0][0] < edge:
            self.total -= items.popleft()[1]

    def clear(self) -> None:
        self.items.clear()
        self.total = 0.0

    def weight_since(self, t0: float) -> float:
        items = self.items
        if not items or not items[0][0] < t0:      # the whole window: its sum
            return self.total
        return super().weight_since(t0)


@dataclass
class Histogram:
    """Cumulative bucket snapshots of one SGLang latency histogram, summed over its series."""
    snapshots: deque = field(default_factory=deque)   # (t, {le: cumulative count})

