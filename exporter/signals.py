"""Pure evaluation of every catalog signal from (state, thresholds, sources, now).

No clocks, no I/O, no mutation: the same function judges a live server (arrival time) and a replayed log
(the log's own timestamps). A signal whose inputs are missing is unknown (firing=None), never healthy: with
/metrics as the only source, a signal whose inputs the scraped release does not export (catalog_native.
SIGNAL_METRICS) is unknown with that reason, and its Judgement says `unsupported`.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from exporter.catalog import SIGNALS
from exporter.catalog_native import METRICS_ONLY, missing_metrics
from exporter.failures import STAGE_TEXT
from exporter.state import ServerState

# why a signal needing start-up facts is unknown when the sidecar joined SGLang after its start-up
STARTUP_NOT_SEEN = "start-up not seen (joined a running server)"


@dataclass(frozen=True)
class Sources:
    """Which inputs are configured and currently readable."""
    log_up: bool = False
    metrics_up: bool = False


@dataclass(frozen=True)
class Judgement:
    id: str
    severity: str
    firing: bool | None      # None: cannot be judged now
    value: float | None
    detail: str = ""
    cause: tuple | None = None     # a firing failure signal's (cause class, cause line)
    unsupported: bool = False      # unknown because the only live source cannot feed it (the release's
                                   # /metrics lacks its inputs, or it is read from logs only)


_NO_METRICS = (None, None, "read from SGLang's /metrics only, and it is not scraped (no --sglang-url, or never "
               "reached)", None, True)


def evaluate(state: ServerState, params: dict, sources: Sources, now: float) -> dict[str, Judgement]:
    return Evaluator(params)(state, sources, now)


class Evaluator:
    """evaluate() for one set of thresholds, as the engine calls it every few seconds.

    Judges say (firing, value, detail); a detail is a string or, to be formatted only when needed, a tuple
    (template, *args). Each signal's last judgement is kept: when its judge says the same again, that
    Judgement object is returned again. The answer is equal either way (judges give values as floats or
    None, so == is exact); an unchanged judgement is just not rebuilt, and `changed` (the signals whose
    judgement was built anew by the last call) lets the engine skip the others in the history."""

    def __init__(self, params: dict):
        self._plan = tuple((s.id, s.severity, s.window_seconds, _JUDGES[s.id], params[s.id])
                           for s in SIGNALS if params.get(s.id) is not None)
        self._last: dict[str, tuple] = {}      # signal id -> (what its judge said, the Judgement)
        self._gates: dict[tuple, tuple | None] = {}    # _missing's answers
        self.changed: list[str] = []

    def __call__(self, state: ServerState, sources: Sources, now: float) -> dict[str, Judgement]:
        out = {}
        last = self._last
        self.changed = changed = []
        gate = not state.log_fed and sources.metrics_up and not sources.log_up
        logs_only = sources.log_up and not sources.metrics_up and not state.metrics_seen
        for sid, severity, window, judge, p in self._plan:
            if gate:
                said = self._missing(sid, state)
            elif logs_only and sid in METRICS_ONLY:
                said = _NO_METRICS
            else:
                said = None
            if said is None:
                said = judge(state, p, sources, now, window)
            seen = last.get(sid)
            if seen is None or seen[0] != said:
                firing, value, detail = said[:3]
                if detail.__class__ is not str:
                    detail = detail[0].format(*detail[1:])
                seen = last[sid] = (said, Judgement(sid, severity, firing, value, detail,
                                                    said[3] if len(said) > 3 else None,
                                                    len(said) > 4 and said[4]))
                changed.append(sid)
            out[sid] = seen[1]
        return out

    def _missing(self, sid: str, state: ServerState) -> tuple | None:
        """/metrics alone feeds the state: (unknown, reason, unsupported) when the scrape lacks the signal's
        inputs, else None. Kept per (signal, what the scrape carried), which changes with the release only."""
        key = (sid, state.native_present, state.native_seen)
        said = self._gates.get(key, False)
        if said is False:
            reason = missing_metrics(sid, state.native_present, state.native_seen)
            said = (None, None, reason, None, True) if reason else None
            if len(self._gates) > 4096:
                self._gates.clear()
            self._gates[key] = said
        return said


def _fed_by_batches(state: ServerState, sources: Sources) -> bool:
    return sources.log_up if state.log_fed else sources.metrics_up


def _fraction(sid: str, want: str):
    template = "{} of {} samples " + want

    def judge(state, p, sources, now, window):
        if not (sources.log_up if state.log_fed else sources.metrics_up):     # _fed_by_batches, inline
            return None, None, "no live source of batch samples"
        if sid == "concurrency_capped" and not state.memory_config.get("max_running_requests"):
            if not state.startup_seen:
                return None, None, STARTUP_NOT_SEEN + ": max_running_requests is not known"
            return None, None, "max_running_requests not known yet (capacity line not seen)"
        w = state.fraction[sid]
        total = w.total
        if total < p["min_samples"]:
            return None, None, ("{} samples in the window, {} needed", total, p["min_samples"])
        hits = w.hits
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


def _retractions(strict: bool):
    def judge(state, p, sources, now, window):
        if not (sources.log_up or (sources.metrics_up and not state.log_fed)):
            return None, None, "no live source of retraction events"
        if state.log_fed and not state.events_total:
            return None, None, "no SGLang log record read yet"
        if not state.clock_known:
            return None, None, "no timestamps: a rate needs the time between events"
        span = observed_window(state, now, window, p.get("min_span_seconds", window))
        rate = state.retractions_per_minute(now, span)
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
    w = state.graph_off
    if not _fed_by_batches(state, sources) or w.total == 0:
        return None, None, "no decode samples that report CUDA graph state"
    hits = w.hits
    return hits >= p["min_samples"], float(hits), ("{} small decode batches without CUDA graph", hits)


def _oom(phase: str):
    def judge(state, p, sources, now, window):
        if not sources.log_up:
            return None, None, "OOMs are read from logs; no log source is up"
        if not state.events_total:
            return None, None, "no SGLang log record read yet"
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
    if state.log_fed:
        # a decode line is printed every 40 steps, so the last one may still show running requests that
        # finished since; only a waiting queue proves work is pending
        waiting = sum(rv.queue or 0 for rv in state.schedulers().values())
    else:
        waiting = state.pending() or 0
    stuck = age > p["stall_seconds"] and waiting > 0
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


_LATENCY = (("ttft_p99_seconds", ("time_to_first_token_seconds",)),
            ("itl_p99_seconds", ("inter_token_latency_seconds", "time_per_output_token_seconds")),
            ("e2e_p99_seconds", ("e2e_request_latency_seconds",)))


def quantile(q: float, buckets: dict[float, float]) -> float | None:
    """histogram_quantile over cumulative buckets {le: count}, as Prometheus interpolates it."""
    items = sorted(buckets.items())
    if not items or items[-1][1] <= 0:
        return None
    total = items[-1][1]
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in items:
        if count >= rank:
            if math.isinf(le):
                return prev_le
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return prev_le


def _latency(state, p, sources, now, window):
    if not sources.metrics_up:
        return None, None, "latency comes from SGLang's /metrics; it is not being scraped"
    worst, worst_text = None, ""
    for key, names in _LATENCY:
        objective = p.get(key)
        if not objective:
            continue
        for name in names:
            h = state.histograms.get(name)
            if not h or len(h.snapshots) < 2:
                continue
            t0, first = next(((t, b) for t, b in h.snapshots if t >= now - window), h.snapshots[0])
            _, last = h.snapshots[-1]
            if max(last.values(), default=0.0) < max(first.values(), default=0.0):
                delta = dict(last)     # counters reset (SGLang restarted): everything since counts
            else:
                delta = {le: last[le] - first.get(le, 0.0) for le in last}
            p99 = quantile(0.99, delta)
            if p99 is None:
                continue
            ratio = p99 / objective
            if worst is None or ratio > worst:
                worst, worst_text = ratio, f"{name} p99 {p99:.3f} s vs objective {objective} s"
            break
    if worst is None:
        return None, None, "no requests completed in the window"
    return worst > 1.0, worst, worst_text


def _p99_in_window(state, name: str, now: float, window: float) -> float | None:
    """p99 of SGLang histogram `name` over what was observed in the window (None: nothing observed)."""
    h = state.histograms.get(name)
    if not h or len(h.snapshots) < 2:
        return None
    _, first = next(((t, b) for t, b in h.snapshots if t >= now - window), h.snapshots[0])
    _, last = h.snapshots[-1]
    if max(last.values(), default=0.0) < max(first.values(), default=0.0):
        delta = dict(last)     # counters reset (SGLang restarted): everything since counts
    else:
        delta = {le: last[le] - first.get(le, 0.0) for le in last}
    return quantile(0.99, delta)


def _queue_wait(state, p, sources, now, window):
    if not sources.metrics_up:
        return None, None, "queue wait comes from SGLang's /metrics; it is not being scraped"
    for name in ("queue_time_seconds", "queue_time_s"):
        p99 = _p99_in_window(state, name, now, window)
        if p99 is not None:
            return p99 > p["p99_seconds"], p99, ("p99 queue wait {:.2f} s vs objective {} s", p99, p["p99_seconds"])
    return None, None, "no request left the queue in the window"


def _scrape_fraction(what: str, applies, hit, none_reason: str):
    """A share of the window's scrape samples (state.scrape_samples) that `hit`, among those `applies` to."""
    def judge(state, p, sources, now, window):
        if not sources.metrics_up:
            return None, None, "read from SGLang's /metrics; it is not being scraped"
        edge = now - window
        samples = [x for t, x in state.scrape_samples if t >= edge and applies(x)]
        if not samples:
            return None, None, none_reason
        if len(samples) < p["min_samples"]:
            return None, None, ("{} samples in the window, {} needed", len(samples), p["min_samples"])
        hits = sum(1 for x in samples if hit(x, p))
        share = hits / len(samples)
        return share >= p["fraction"], share, ("{} of {} samples " + what, hits, len(samples))
    return judge


def _log_fraction(series, what: str, none_reason: str):
    """A share of the window's log samples in a LogTuning series (expired by ServerState.expire)."""
    def judge(state, p, sources, now, window):
        w = series(state.tuning)
        total = w.total
        if total == 0:
            return None, None, none_reason
        if total < p["min_samples"]:
            return None, None, ("{} samples in the window, {} needed", total, p["min_samples"])
        hits = w.hits
        share = hits / total
        return share >= p["fraction"], share, ("{} of {} batch lines " + what, hits, total)
    return judge


def _metrics_then_logs(from_metrics, from_logs):
    """/metrics' judgement when its samples in the window can judge; else the batch lines' (logs up), else the
    reason /metrics gave."""
    def judge(state, p, sources, now, window):
        said = from_metrics(state, p, sources, now, window) if sources.metrics_up else None
        if said is not None and said[0] is not None:
            return said
        if sources.log_up and state.log_fed:
            logs = from_logs(state, p, sources, now, window)
            if logs[0] is not None or said is None:
                return logs
        return said if said is not None else (None, None, "no live source")
    return judge


def _prefix_reuse(state, p, sources, now, window):
    policy = state.server_args.get("schedule_policy")
    if isinstance(policy, str) and policy.strip("'\"") not in ("fcfs", ""):
        return False, 0.0, ("schedule policy is {}: it already orders by prefix", policy)
    said = _PREFIX(state, p, sources, now, window)
    if said[0] is not None and policy is None:     # /metrics does not say the policy: the advice says "if fcfs"
        return said[0], said[1], (said[2][0] + " (schedule policy not known: the advice holds if it is fcfs)",
                                  *said[2][1:])
    return said


_PREFIX = _metrics_then_logs(
    _scrape_fraction("queue with a high prefix cache hit rate",
                     lambda x: x["queue"] is not None and x["hit"] is not None,
                     lambda x, p: x["queue"] > 0 and x["hit"] >= p["min_hit_rate"],
                     "no sample with both a queue and a cache hit rate"),
    _log_fraction(lambda t: t.prefix, "queue with a high share of cached prompt tokens",
                  "no prefill batch line in the window"))


def _pressured(x, p) -> bool:
    if x["paused"]:
        return True
    if x["usage"] is None or x["evictable"] is None or not x["capacity"]:
        return False
    return x["usage"] >= p["min_usage"] and x["evictable"] < p["max_evictable"] * x["capacity"]


def _spec_metrics(state, p, sources, now, window):
    edge = now - window
    vals = [x["spec"] for t, x in state.scrape_samples if t >= edge and x["spec"] is not None]
    if not vals:
        return None, None, "speculative decoding not in use (no accept length reported)"
    return _spec_mean(p, sum(vals) / len(vals), len(vals), "samples")


def _spec_logs(state, p, sources, now, window):
    mean, n = state.tuning.spec_mean(now - window)
    if not n:
        return None, None, "speculative decoding not in use (no decode batch line with an accept length)"
    return _spec_mean(p, mean, n, "decode batch lines")


def _spec_mean(p, mean: float, n: int, what: str) -> tuple:
    if n < p["min_samples"]:
        return None, None, ("{} samples in the window, {} needed", n, p["min_samples"])
    return mean < p["min_accept_length"], mean, ("mean accept length {:.2f} over {} " + what, mean, n)


def _long_prompts(state, p, sources, now, window):
    if not (sources.log_up and state.log_fed):
        return None, None, "prefill batch lines are read from SGLang's logs; no log source is up"
    chunk = state.chunk_size
    if chunk is None:
        if not state.startup_seen:
            return None, None, STARTUP_NOT_SEEN + ": chunked_prefill_size is not known"
        return None, None, "chunked_prefill_size not known yet (capacity line not seen)"
    if chunk <= 0:
        return False, 0.0, f"chunked prefill is off (chunked_prefill_size {chunk})"
    w = state.tuning.chunked
    total = w.total
    if total < p["min_samples"]:
        return None, None, ("{} prefill batch lines in the window, {} needed", total, p["min_samples"])
    cut = w.hits
    share = cut / total
    text = "{} of {} prefill batches at the chunk size ({})"
    if share < p["fraction"]:
        return False, share, (text, cut, total, chunk)
    # latency from /metrics when it is scraped; else the log's own sign: requests queued behind those batches
    slow = None
    if sources.metrics_up:
        ttft = _p99_in_window(state, "time_to_first_token_seconds", now, window)
        wait = next((q for q in (_p99_in_window(state, n, now, window) for n in ("queue_time_seconds",
                                                                                  "queue_time_s"))
                     if q is not None), None)
        if ttft is not None or wait is not None:
            slow = ((ttft is not None and ttft > p["ttft_p99_seconds"])
                    or (wait is not None and wait > p["queue_p99_seconds"]))
            return slow, share, (text + "; p99 time to first token {}, p99 queue wait {}", cut, total, chunk,
                                 _secs(ttft), _secs(wait))
    queued = state.tuning.chunked_queued
    slow = bool(queued.total) and queued.hits / queued.total >= p["fraction"]
    return slow, share, (text + "; requests queued behind {} of them", cut, total, chunk, queued.hits)


def _secs(x: float | None) -> str:
    return "not observed" if x is None else f"{x:.2f} s"


_JUDGES = {
    "queue_wait_high": _queue_wait,
    "prefix_reuse_missed": _prefix_reuse,
    "kv_pressure": _scrape_fraction("with a full KV cache and little evictable, or paused requests",
                                    lambda x: x["paused"] is not None or (x["usage"] is not None
                                                                          and x["evictable"] is not None),
                                    _pressured, "no sample with KV usage and evictable tokens"),
    "spec_accept_low": _metrics_then_logs(_spec_metrics, _spec_logs),
    "pd_backlog": _metrics_then_logs(
        _scrape_fraction("with a PD queue backlog", lambda x: x["pd"] is not None,
                         lambda x, p: x["pd"] > p["max_queue"], "no PD disaggregation queue reported"),
        _log_fraction(lambda t: t.pd, "with a PD queue backlog", "no batch line with PD disaggregation queues")),
    "long_prompts_dominate": _long_prompts,
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
    "latency_high": _latency,
    "server_crashed": _crashed,
    "startup_oom": _startup_oom,
    "startup_stalled": _startup_stalled,
}
assert set(_JUDGES) == {s.id for s in SIGNALS}, "every catalog signal needs a judge"
