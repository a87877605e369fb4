"""Pure evaluation of every catalog signal from (state, thresholds, sources, now).

No clocks, no I/O, no mutation: the same function judges a live server (arrival time) and a replayed log
(the log's own timestamps). A signal whose inputs are missing is unknown (firing=None), never healthy: with
/metrics as the only source, a signal whose inputs the scraped release does not export (catalog_native.
SIGNAL_METRICS) is unknown with that reason, and its Judgement says `unsupported`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

from exporter.catalog import SIGNALS, SIGNALS_BY_ID
from exporter.catalog.native import METRICS_ONLY, missing_metrics
from exporter.signals.errors import ERROR_JUDGES
from exporter.signals.serving import SERVING_JUDGES
from exporter.signals.tuning import STARTUP_NOT_SEEN, TUNING_JUDGES
from exporter.state import ServerState
from exporter.state.failures import STAGE_TEXT


@dataclass(frozen=True)
class Sources:
    """Which inputs are configured and currently readable."""
    log_up: bool = False
    metrics_up: bool = False


class Judgement(NamedTuple):
    """What a signal's judge said at one evaluation. A tuple: built for every judgement that changed, at every
    evaluation (a frozen dataclass took three times as long to build)."""
    id: str
    severity: str
    firing: bool | None      # None: cannot be judged now
    value: float | None
    detail: str = ""
    cause: tuple | None = None     # a firing failure signal's (cause class, cause line)
    unsupported: bool = False      # unknown because the only live source cannot feed it (the release's
                                   # /metrics lacks its inputs, or it is read from logs only)


# said by the sidecar and by analyze alike: name what reads /metrics, not a flag the command at hand lacks
_NO_METRICS = (None, None, "read from SGLang's /metrics only, and none is read here (a log replay has none; "
               "the sidecar scrapes it when given SGLang's URL)", None, True)


def evaluate(state: ServerState, params: dict, sources: Sources, now: float) -> dict[str, Judgement]:
    return Evaluator(params)(state, sources, now)


class Evaluator:
    """evaluate() for one set of thresholds, as the engine calls it every few seconds.

    Judges say (firing, value, detail[, cause[, unsupported]]); a detail is a string or a tuple (template,
    *args) of numbers and strings, compared as it is. An evaluation has two halves. `judge` runs the judges
    and keeps what each said (`said`), listing in `changed` the signals that said something new (judges
    give values as floats or None, so == is exact); the engine's history reads those sayings. `judgements`
    turns the sayings into Judgements, building only those of signals that said something new since it last
    ran: a replay (`analyze`) reads the history at every evaluation and the Judgements once, at the end, so
    its evaluations build none.

    The signals whose answer is fixed by the sources (read from /metrics only, and logs alone are up) are
    judged once, when that mode begins."""

    def __init__(self, params: dict):
        self._plan = tuple((s.id, s.severity, s.window_seconds, _JUDGES[s.id], params[s.id])
                           for s in SIGNALS if params.get(s.id) is not None)
        self._severity = {sid: severity for sid, severity, *_ in self._plan}
        # what each signal's judge said last, in catalog order (set by the first call)
        self.said: dict[str, tuple] = dict.fromkeys(self._severity)  # type: ignore[assignment]
        self._built: dict[str, Judgement] = {}     # the Judgements of the sayings, but for `_unbuilt`
        self._unbuilt: set[str] = set()            # signals that said something new since `judgements` ran
        self._mode: tuple | None = None
        self._judging: tuple = ()   # _plan_for(the current mode)
        self._gates: dict[tuple, tuple | None] = {}    # _missing's answers
        self.changed: list[str] = []
        # the firing signals of the last evaluation, in catalog order (what advice is about); None: to be
        # listed again, because a signal started or stopped firing
        self.firing: tuple[str, ...] | None = None

    def __call__(self, state: ServerState, sources: Sources, now: float) -> dict[str, Judgement]:
        self.judge(state, sources, now)
        return self.judgements()

    def judge(self, state: ServerState, sources: Sources, now: float) -> None:
        """Run the judges at `now`: `said` holds what each said, `changed` lists those that said something new."""
        gate = not state.log_fed and sources.metrics_up and not sources.log_up
        logs_only = sources.log_up and not sources.metrics_up and not state.metrics_seen
        said_last = self.said
        changed: list[str] = []
        self.changed = changed
        if (gate, logs_only) != self._mode:
            self._mode = (gate, logs_only)
            self._judging = self._plan_for(gate, logs_only)
            for sid, *_ in self._plan:     # the fixed answers, once per mode
                if logs_only and sid in METRICS_ONLY and said_last[sid] != _NO_METRICS:
                    self._take(sid, _NO_METRICS, changed)
        take = self._take
        for sid, judge, p, window in self._judging:
            said = judge(state, p, sources, now, window)
            if said != said_last[sid]:
                take(sid, said, changed)
        if self.firing is None:
            self.firing = tuple([sid for sid, said in said_last.items() if said[0]])

    def _take(self, sid: str, said: tuple, changed: list) -> None:
        """A signal's judge said something new."""
        last = self.said[sid]
        if last is None or bool(last[0]) != bool(said[0]):
            self.firing = None
        self.said[sid] = said
        self._unbuilt.add(sid)
        changed.append(sid)

    def judgements(self) -> dict[str, Judgement]:
        """Every signal's Judgement of the last `judge`, in catalog order (a new dict: the caller keeps it)."""
        built = self._built
        for sid in self._unbuilt:
            built[sid] = _judgement(sid, self._severity[sid], self.said[sid])
        self._unbuilt.clear()
        return {sid: built[sid] for sid in self.said}

    def _plan_for(self, gate: bool, logs_only: bool) -> tuple:
        """(id, judge, thresholds, window) of each signal judged in this mode: with /metrics alone, a judge runs
        only when the scrape carries the signal's inputs (_missing)."""
        plan = []
        for sid, _, window, judge, p in self._plan:
            if logs_only and sid in METRICS_ONLY:
                continue
            if gate:
                judge = self._gated(sid, judge)
            plan.append((sid, judge, p, window))
        return tuple(plan)

    def _gated(self, sid: str, judge):
        def gated(state, p, sources, now, window):
            return self._missing(sid, state) or judge(state, p, sources, now, window)
        return gated

    def _missing(self, sid: str, state: ServerState) -> tuple | None:
        """/metrics alone feeds the state: (unknown, reason, unsupported) when the scrape lacks the signal's
        inputs, else None. Kept per (signal, what the scrape carried), which changes with the release only."""
        key = (sid, state.native_present, state.native_seen)
        said: tuple | bool | None = self._gates.get(key, False)
        if said is False:
            reason = missing_metrics(sid, state.native_present, state.native_seen)
            said = (None, None, reason, None, True) if reason else None
            if len(self._gates) > 4096:
                self._gates.clear()
            self._gates[key] = said
        return said  # type: ignore[return-value]  # (False only before the store above)


def _judgement(sid: str, severity: str, said: tuple) -> Judgement:
    """The Judgement of what a signal's judge said (a template detail is formatted here)."""
    firing, value, detail = said[:3]
    if detail.__class__ is not str:
        detail = detail[0].format(*detail[1:])
    return Judgement(sid, severity, firing, value, detail, said[3] if len(said) > 3 else None,
                     len(said) > 4 and said[4])


def _fed_by_batches(state: ServerState, sources: Sources) -> bool:
    return sources.log_up if state.log_fed else sources.metrics_up


def _fraction(sid: str, want: str):
    template = "{} of {} samples " + want

    def judge(state, p, sources, now, window):
        if not _fed_by_batches(state, sources):
            return None, None, "no live source of batch samples"
        if sid == "concurrency_capped" and not state.memory_config.get("max_running_requests"):
            if not state.startup_seen:
                return None, None, STARTUP_NOT_SEEN + ": max_running_requests is not known"
            return None, None, "max_running_requests not known yet (capacity line not seen)"
        total, hits = state.fraction[sid].counts()
        if total < p["min_samples"]:
            return None, None, ("{} samples in the window, {} needed", total, p["min_samples"])
        share = hits / total
        return share >= p["fraction"], share, (template, hits, total)
    return judge


def observed_window(state: ServerState, now: float, window: float, min_span: float) -> float:
    """The span a rate is taken over: the signal's window, or, when observation (the log, the sidecar's life)
    began less than a window ago, the span observed, but never less than `min_span`: a burst in the first
    seconds of a short log is rated over what was seen, not diluted over minutes nobody watched."""
    if state.observed_from is None:
        return window
    return min(window, max(now - state.observed_from, min_span))


def retraction_rate(state: ServerState, now: float, window: float, min_span: float) -> tuple[float, float]:
    """(retraction events per minute, the span in seconds it is taken over): the one definition of the rate.
    The retraction signals' values, the gauge sglang_exporter_retractions_per_minute (via
    `retractions_per_minute`) and the report's chart all come from here, so they agree at every instant."""
    span = observed_window(state, now, window, min_span)
    # retractions_per_minute() of an empty window is 0.0 over any positive span: most evaluations see no
    # retraction, and the two retraction judges run at each
    rate = state.retractions_per_minute(now, span) if state.retractions.items or not span > 0 else 0.0
    return rate, span


def retractions_per_minute(state: ServerState, now: float, params: dict,
                           signal: str = "retractions_frequent") -> float:
    """The rate a face shows for `signal` (the gauge and the chart: retractions_frequent's, whose window the
    gauge documents): its value by `retraction_rate`, with the thresholds in force (`params`, per signal;
    the catalog's when the profile or the configuration turns the signal off)."""
    sig = SIGNALS_BY_ID[signal]
    p = params.get(signal) or sig.defaults
    return retraction_rate(state, now, sig.window_seconds, p.get("min_span_seconds", sig.window_seconds))[0]


# A followed log that has not shown one SGLang record may not be SGLang's (a wrong path, a server not yet
# started, stderr sent elsewhere): its silence is no evidence that no OOM or retraction happened.
_NO_RECORD_YET = "no SGLang record read from the log yet: its silence says nothing"


def _retractions(strict: bool):
    def judge(state, p, sources, now, window):
        if not (sources.log_up or (sources.metrics_up and not state.log_fed)):
            return None, None, "no live source of retraction events"
        if state.log_fed and not state.events_total:
            return None, None, _NO_RECORD_YET
        if not state.clock_known:
            return None, None, "no timestamps: a rate needs the time between events"
        rate, span = retraction_rate(state, now, window, p.get("min_span_seconds", window))
        firing = rate >= p["per_minute"] if strict else rate > p["per_minute"]
        if span < window:
            return firing, rate, ("{:.2f} retractions per minute over the {:.0f} s observed (shorter than the "
                                  "{:.0f} min window)", rate, span, window / 60)
        return firing, rate, ("{:.2f} retractions per minute over {:.0f} min", rate, window / 60)
    return judge


def _headroom(low: bool):
    def judge(state, p, sources, now, window):
        h = state.headroom_bytes
        if h is None:
            if not state.startup_seen:
                return None, None, STARTUP_NOT_SEEN + ": free GPU memory after start-up is not known"
            return None, None, "available_gpu_mem not seen in this epoch"
        firing = h < p["min_bytes"] if low else h > p["max_bytes"]
        # the rule is per GPU: the GPU with the least memory left is the one judged (and named)
        gpus = len(state.memory_by_rank)
        if gpus > 1:
            return firing, float(h), ("{:.2f} GiB left after start-up on {} (the least of {} GPUs)", h / 2**30,
                                      state.headroom_rank or "the unprefixed rank", gpus)
        return firing, float(h), ("{:.2f} GiB left after start-up", h / 2**30)
    return judge


def _graph_off(state, p, sources, now, window):
    total, hits = state.graph_off.counts()
    if not _fed_by_batches(state, sources) or total == 0:
        return None, None, "no decode samples that report CUDA graph state"
    return hits >= p["min_samples"], float(hits), ("{} small decode batches without CUDA graph", hits)


def _oom(phase: str):
    def judge(state, p, sources, now, window):
        if not sources.log_up:
            return None, None, "OOMs are read from logs; no log source is up"
        if not state.events_total:
            return None, None, _NO_RECORD_YET
        n = state.ooms[phase].count_since(now - window)
        return n >= p["min_events"], float(n), ("{} {} OOM events in {:.0f} min", n, phase, window / 60)
    return judge


def _stalled(state, p, sources, now, window):
    if not (sources.log_up or sources.metrics_up):
        return None, None, "no live source"
    if not state.clock_known:
        return None, None, "no timestamps: a stall is time without progress"
    dogs = state.watchdogs.count_since(now - window)
    if state.last_progress_t is None:
        if dogs:
            return True, None, ("{} watchdog timeouts", dogs)
        return None, None, "no progress seen yet"
    age = max(0.0, now - state.last_progress_t)
    drained = False
    if state.log_fed:
        scraped = state.scraped_queue() if state.metrics_seen else None
        if scraped is not None:
            waiting = scraped          # SGLang's own queue gauge, scraped now: it wins over an old batch line
        elif state.outcomes.last_disconnect_t is not None and \
                state.outcomes.last_disconnect_t >= state.last_progress_t:
            # clients left after the last batch line: SGLang aborted their requests, and a client that goes
            # takes all it queued (SGLang logs only some of the aborts): the queue that line showed is gone
            waiting, drained = 0, True
        else:
            # a decode line is printed every 40 steps, so the last one may still show running requests that
            # finished since; only a waiting queue proves work is pending
            waiting = sum(rv.queue or 0 for rv in state.schedulers().values())
    else:
        waiting = state.pending() or 0
    stuck = age > p["stall_seconds"] and waiting > 0
    if drained and not dogs:
        return False, age, ("no progress for {:.0f} s; clients disconnected after the last batch line, so its "
                            "queue was aborted", age)
    if dogs:
        return True, age, ("no progress for {:.0f} s with {:.0f} requests pending; {} watchdog timeouts", age,
                           waiting, dogs)
    return stuck, age, ("no progress for {:.0f} s with {:.0f} requests pending", age, waiting)


def _crashed(state, p, sources, now, window):
    if not sources.log_up:
        return None, None, "crashes are read from logs; no log source is up"
    fl = state.failures
    if fl.crash is None:
        if not state.events_total:
            return None, None, "no SGLang log record read yet"
        return False, 0.0, "no failure since the last ready line"
    c = fl.crash
    resume = p["resume_seconds"]
    if fl.resumed(state.last_batch_t, resume):
        return False, 0.0, ("batch lines went on after the failure at {}: the server kept serving ({}: {})",
                            _clock(c.t), c.cause_class, c.cause)
    if not fl.confirmed:
        batch_after = state.last_batch_t is not None and state.last_batch_t > c.t
        # (a log without timestamps cannot wait: a failure line with no batch line after it counts)
        if batch_after or (now - c.t < resume and state.clock_known):
            return False, 0.0, ("a failure line at {} without proof of a death yet (batch lines after it: {}): "
                                "{}", _clock(c.t), "yes" if batch_after else "none", c.cause)
    return (fl.crash_events >= p["min_events"], float(fl.crash_events),
            ("{} failure events since {}; cause ({}): {}", fl.crash_events, _clock(c.t), c.cause_class, c.cause),
            (c.cause_class, c.cause))


def _startup_oom(state, p, sources, now, window):
    if not sources.log_up:
        return None, None, "OOMs are read from logs; no log source is up"
    fl = state.failures
    if fl.startup_oom is None:
        if not state.events_total:
            return None, None, "no SGLang log record read yet"
        return False, 0.0, "no out-of-memory during start-up since the last ready line"
    c = fl.startup_oom
    return (fl.startup_oom_events >= p["min_events"], float(fl.startup_oom_events),
            ("out of memory while {}; cause: {}", STAGE_TEXT.get(fl.startup_oom_stage, "starting"), c.cause),
            (c.cause_class, c.cause))


def _startup_stalled(state, p, sources, now, window):
    if not sources.log_up:
        return None, None, "start-up is read from logs; no log source is up"
    fl = state.failures
    if not state.clock_known:
        return None, None, "no timestamps: a start-up's duration is not known"
    age = fl.stalled_for(now)
    if age is None:
        if fl.ready:
            return False, 0.0, "the current start-up printed its ready line"
        if not state.startup_seen and state.last_batch_t is not None:
            return None, None, STARTUP_NOT_SEEN + ": it serves, its start-up is not judged"
        return None, None, "no server_args line of a start-up seen"
    limit = p["startup_seconds"]
    if age <= limit:
        return False, age, ("starting for {:.0f} s, no ready line yet (limit {:.0f} s)", age, limit)
    # the cause is a label of the alert and of failure_cause_info: it must not change with the age
    cause = f"no ready line within {limit:.0f} s of the server arguments (last stage: {STAGE_TEXT[fl.stage]})"
    return True, age, ("starting for {:.0f} s: {}", age, cause), ("startup_hung", cause)


def _clock(t: float) -> str:
    """A log time for a detail (time-only logs, SGLang 0.3.0-0.3.3, count seconds from their first day)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S" if t >= 10 * 86400 else "%H:%M:%S", time.gmtime(t))


_JUDGES = {
    "queue_below_range": _fraction("queue_below_range", "below the range"),
    "queue_above_range": _fraction("queue_above_range", "above the range"),
    "kv_cache_underused": _fraction("kv_cache_underused", "under-used with a queue"),
    "concurrency_capped": _fraction("concurrency_capped", "at the running cap"),
    "retractions_frequent": _retractions(strict=False),
    "retraction_storm": _retractions(strict=True),
    "gpu_headroom_low": _headroom(low=True),
    "gpu_headroom_high": _headroom(low=False),
    "cuda_graph_off_small_batch": _graph_off,
    "oom_prefill": _oom("prefill"),
    "oom_decode": _oom("decode"),
    "stalled": _stalled,
    "server_crashed": _crashed,
    "startup_oom": _startup_oom,
    "startup_stalled": _startup_stalled,
    **TUNING_JUDGES,
    **ERROR_JUDGES,
    **SERVING_JUDGES,
}
assert set(_JUDGES) == {s.id for s in SIGNALS}, "every catalog signal needs a judge"
