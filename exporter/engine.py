"""The engine both faces share: events and scrapes in, judgements, advice and their history out.

`serve` drives it with arrival time; `analyze` with the log's own timestamps. Same code, same answers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from exporter.advice import Recommendation, Reconciler
from exporter.config import Config
from exporter.ingest.events import Event
from exporter.signals import Evaluator, Judgement, Sources
from exporter.state import ServerState

MAX_INTERVALS = 1000   # per signal, in history; older ones are merged into a count


@dataclass
class SignalHistory:
    """A signal's current state, since when, and the intervals it fired (for analyze and the API)."""
    state: str = "unknown"          # firing | ok | unknown
    since: float | None = None
    intervals: list = field(default_factory=list)    # [start, end|None, worst]
    dropped_intervals: int = 0
    worst: float | None = None
    fired: bool = False


@dataclass(frozen=True)
class Snapshot:
    now: float
    judgements: dict[str, Judgement]
    advice: list[Recommendation]
    history: dict[str, SignalHistory]


class Engine:
    def __init__(self, config: Config, log_fed: bool = True):
        self.config = config
        self.params = config.signal_params()
        self.state = ServerState(self.params, log_fed=log_fed)
        self.sources = Sources(log_up=log_fed, metrics_up=False)
        self.history: dict[str, SignalHistory] = {sid: SignalHistory() for sid, p in self.params.items() if p}
        self.last: Snapshot | None = None
        self._evaluate = Evaluator(self.params)
        self._reconcile = Reconciler()
        # the hot path of `analyze` (one call per log record): the state's own methods, one call less per line
        self.ingest = self.state.apply_event
        self.ingest_row = self.state.apply_row

    def ingest(self, ev: Event, now: float) -> None:
        """Apply one log event at `now` (an instance attribute bound to the state's method replaces this)."""
        self.state.apply_event(ev, now)

    def ingest_row(self, row: tuple, now: float) -> None:
        """Apply one Row (events.py) at `now` (replaced by the state's method, as `ingest` is)."""
        self.state.apply_row(row, now)

    def ingest_items(self, items, now: float) -> None:
        """Events and rows, all at `now` (live mode: the time they arrived)."""
        apply_event, apply_row = self.state.apply_event, self.state.apply_row
        for item in items:
            if item.__class__ is tuple:
                apply_row(item, now)
            else:
                apply_event(item, now)

    def ingest_scrape(self, scrape, now: float) -> None:
        self.state.apply_scrape(scrape, now)

    def set_sources(self, log_up: bool | None = None, metrics_up: bool | None = None) -> None:
        self.sources = Sources(self.sources.log_up if log_up is None else log_up,
                               self.sources.metrics_up if metrics_up is None else metrics_up)

    def evaluate(self, now: float) -> Snapshot:
        st = self.state
        st.expire(now)
        judgements = self._evaluate(st, self.sources, now)
        for sid in self._evaluate.changed:    # an unchanged judgement was tracked already: nothing to record
            self._track(sid, judgements[sid], now)
        advice = self._reconcile(judgements, st.server_args, st.memory_config, st.headroom_bytes,
                                 st.total_gpu_bytes)
        self.last = Snapshot(now, judgements, advice, self.history)
        return self.last

    def _track(self, sid: str, j: Judgement, now: float) -> None:
        h = self.history[sid]
        new = "unknown" if j.firing is None else ("firing" if j.firing else "ok")
        if new != h.state:
            if h.state == "firing" and h.intervals:
                h.intervals[-1][1] = now
            if new == "firing":
                if len(h.intervals) >= MAX_INTERVALS:
                    h.intervals.pop(0)
                    h.dropped_intervals += 1
                h.intervals.append([now, None, j.value])
                h.fired = True
            h.state, h.since = new, now
        if new == "firing" and j.value is not None:
            iv = h.intervals[-1]
            iv[2] = j.value if iv[2] is None else _worse(sid, iv[2], j.value)
            h.worst = iv[2] if h.worst is None else _worse(sid, h.worst, iv[2])


def _worse(sid: str, a: float, b: float) -> float:
    """The worse of two values: lower is worse for headroom-low, higher for everything else."""
    return min(a, b) if sid == "gpu_headroom_low" else max(a, b)
