"""The engine both faces share: events and scrapes in, judgements, advice and their history out.

`serve` drives it with arrival time; `analyze` with the log's own timestamps. Same code, same answers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from exporter.catalog import FAILURE_IDS, SIGNALS
from exporter.config import Config
from exporter.ingest.events import Event
from exporter.signals.advice import KV_FULL, Recommendation, Reconciler
from exporter.signals.judgement import Evaluator, Judgement, Sources
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
    known: bool = False             # judged (firing or ok) at least once


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
        self.failures_seen: list[dict] = []     # each failure signal's firing with its cause, in order (analyze)
        self.startup_oom_stage: str | None = None   # the stage of the last start-up OOM that fired
        self._evaluate = Evaluator(self.params)
        self._reconcile = Reconciler()
        # False: evaluations leave the snapshot's advice empty. `analyze` reads no snapshot's advice (its report
        # reconciles what fired over the whole log once), and the reconciler was a sixth of an evaluation
        self.advise = True
        # the hot path of `analyze` (one call per log record): the state's own methods, one call less per line
        self.ingest = self.state.apply_event  # type: ignore[method-assign]
        self.ingest_row = self.state.apply_row  # type: ignore[method-assign]

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
        if self.state.observed_from is None:
            self.state.observed_from = now
        self.state.apply_scrape(scrape, now)

    def set_sources(self, log_up: bool | None = None, metrics_up: bool | None = None) -> None:
        self.sources = Sources(self.sources.log_up if log_up is None else log_up,
                               self.sources.metrics_up if metrics_up is None else metrics_up)

    def judge(self, now: float) -> None:
        """An evaluation at `now` whose snapshot nobody reads: the judges run, and the history and the failures
        seen move with what they said. `analyze` replays a log with these and reads the Judgements once."""
        st = self.state
        if st.observed_from is None:
            st.observed_from = now
        st.expire(now)
        evaluator = self._evaluate
        evaluator.judge(st, self.sources, now)
        for sid in evaluator.changed:    # a signal that said the same again was tracked already
            said = evaluator.said[sid]
            self._track(sid, said[0], said[1], now)
            if said[0] and sid in FAILURE_IDS and len(said) > 3 and said[3] is not None:
                self._failure(sid, said[3], now)

    def evaluate(self, now: float) -> Snapshot:
        """`judge`, and the snapshot of it: every signal's Judgement and (when `advise`) the advice."""
        self.judge(now)
        st = self.state
        evaluator = self._evaluate
        judgements = evaluator.judgements()
        advice: list[Recommendation] = []
        if self.advise:
            firing = evaluator.firing
            advice = self._reconcile(judgements, st.server_args, st.memory_config, st.headroom_bytes,
                                     st.total_gpu_bytes, _advice_facts(st, firing), firing=firing)
        self.last = Snapshot(now, judgements, advice, self.history)
        return self.last

    def _failure(self, sid: str, cause: tuple, now: float) -> None:
        """A failure signal fired with its (cause class, cause line)."""
        fl = self.state.failures
        rec = {"crash": fl.crash, "oom": fl.startup_oom}.get({"server_crashed": "crash",
                                                              "startup_oom": "oom"}.get(sid, ""))
        entry: dict = {"signal": sid, "t": rec.t if rec is not None else now, "cause_class": cause[0],
                       "cause": cause[1], "line": rec.line if rec is not None else None}
        if sid == "startup_oom":
            entry["stage"] = self.startup_oom_stage = fl.startup_oom_stage
        same = next((e for e in reversed(self.failures_seen) if e["signal"] == sid), None)
        if same is not None and same["t"] == entry["t"]:
            same.update(entry)           # the same failure, its cause line improved
        elif len(self.failures_seen) < MAX_INTERVALS:
            self.failures_seen.append(entry)

    def _track(self, sid: str, firing: bool | None, value: float | None, now: float) -> None:
        h = self.history[sid]
        new = "unknown" if firing is None else ("firing" if firing else "ok")
        if new != h.state:
            if h.state == "firing" and h.intervals:
                h.intervals[-1][1] = now
            if new == "firing":
                if len(h.intervals) >= MAX_INTERVALS:
                    h.intervals.pop(0)
                    h.dropped_intervals += 1
                h.intervals.append([now, None, value])
                h.fired = True
            h.state, h.since = new, now
            h.known = h.known or new != "unknown"
        if new == "firing" and value is not None:
            iv = h.intervals[-1]
            iv[2] = value if iv[2] is None else _worse(sid, iv[2], value)
            h.worst = iv[2] if h.worst is None else _worse(sid, h.worst, iv[2])


def _worse(sid: str, a: float, b: float) -> float:
    """The worse of two values: lower is worse for headroom-low, higher for everything else."""
    return min(a, b) if sid == "gpu_headroom_low" else max(a, b)


# Signals judged from serving (batch samples, retractions, /metrics): without one of them judged, a log that
# fired nothing is not shown healthy, only its start-up facts were seen.
SERVING_SIGNALS = ("queue_below_range", "queue_above_range", "kv_cache_underused", "concurrency_capped",
                   "cuda_graph_off_small_batch", "stalled", "latency_high")


# Of those, the ones judged over a window of samples: a report says healthy only once one of them was judged.
WINDOW_SIGNALS = ("queue_below_range", "queue_above_range", "kv_cache_underused", "latency_high")
# signals whose alert pages: a healthy verdict says when one of them cannot be judged
PAGING_IDS = frozenset(s.id for s in SIGNALS if s.alert and s.alert.page)


def verdict(fired, known, missing: str = "", unknown=()) -> tuple[str, str]:
    """(verdict, why) from the signals that fired and those that could be judged.

    failed: a failure signal fired; problems: another signal fired; healthy: a window of batch samples was
    judged and nothing fired; insufficient data: nothing fired and too little was judged (the reason says what).
    A healthy verdict names the paging signals among `unknown` (active but not judgeable): a metrics-only view
    of an old release cannot see a retraction storm, and "healthy" must not read as "no storm"."""
    fired, known = set(fired), set(known)
    failures = [sid for sid in FAILURE_IDS if sid in fired]
    if failures:
        return "failed", ", ".join(failures)
    if fired:
        return "problems", ", ".join(sorted(fired))
    if any(sid in known for sid in WINDOW_SIGNALS):
        blind = sorted(set(unknown) & PAGING_IDS)
        return "healthy", f"{len(known)} signals judged, none fired" + (
            f"; cannot be judged here: {', '.join(blind)}" if blind else "")
    if any(sid in known for sid in SERVING_SIGNALS):
        # a batch line or two judge CUDA graph and stalls, not the queue or the KV cache: not enough to say healthy
        return "insufficient data", (f"too few batch samples to judge the queue and the KV cache; {len(known)} "
                                     "signals judged, none fired")
    return "insufficient data", missing or "no serving signal could be judged"


def advice_facts(st: ServerState, judgements: dict | None = None) -> dict:
    """What advice needs beyond the judgements: the start-up OOM's stage, the largest decode batch that ran
    without CUDA graph, and whether a KV cache pool is full now. With `judgements`, only what the firing signals'
    advice reads (the reconciler's cache then holds while nothing relevant changes)."""
    return _advice_facts(st, None if judgements is None else {sid for sid, j in judgements.items() if j.firing})


def _advice_facts(st: ServerState, firing) -> dict:
    """advice_facts() for the ids of the firing signals (None: all of them), as the Evaluator lists them."""
    out: dict = {"format_family": st.format_family or None}
    if firing is None or "startup_oom" in firing:
        out["startup_oom_stage"] = st.failures.startup_oom_stage
    if firing is None or "cuda_graph_off_small_batch" in firing:
        out["graph_off_peak"] = st.graph_off_peak
    if firing is None or "queue_below_range" in firing:
        ranks = st.schedulers() if st.log_fed else st.ranks
        usages = [rv.usage for rv in ranks.values() if rv.usage is not None]
        # only whether it is full: a usage that moves each evaluation would defeat the reconciler's cache
        out["kv_full"] = bool(usages) and max(usages) >= KV_FULL
    return out
