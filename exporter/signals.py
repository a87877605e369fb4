"""Pure evaluation of every catalog signal from (state, thresholds, sources, now).

No clocks, no I/O, no mutation: the same function judges a live server (arrival time) and a replayed log
(the log's own timestamps). A signal whose inputs are missing is unknown (firing=None), never healthy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from exporter.catalog import SIGNALS
from exporter.state import ServerState, per_scheduler


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


def evaluate(state: ServerState, params: dict, sources: Sources, now: float) -> dict[str, Judgement]:
    out = {}
    for sig in SIGNALS:
        p = params.get(sig.id)
        if p is None:
            continue
        firing, value, detail = _JUDGES[sig.id](state, p, sources, now, sig.window_seconds)
        out[sig.id] = Judgement(sig.id, sig.severity, firing, value, detail)
    return out


def _fed_by_batches(state: ServerState, sources: Sources) -> bool:
    return sources.log_up if state.log_fed else sources.metrics_up


def _fraction(sid: str, want: str):
    def judge(state, p, sources, now, window):
        w = state.fraction[sid]
        if not _fed_by_batches(state, sources):
            return None, None, "no live source of batch samples"
        if sid == "concurrency_capped" and not state.memory_config.get("max_running_requests"):
            return None, None, "max_running_requests not known yet (capacity line not seen)"
        if w.total < p["min_samples"]:
            return None, None, f"{w.total} samples in the window, {p['min_samples']} needed"
        share = w.hits / w.total
        return share >= p["fraction"], share, f"{w.hits} of {w.total} samples {want}"
    return judge


def _retractions(strict: bool):
    def judge(state, p, sources, now, window):
        if not (sources.log_up or (sources.metrics_up and not state.log_fed)):
            return None, None, "no live source of retraction events"
        rate = state.retractions_per_minute(now, window)
        firing = rate >= p["per_minute"] if strict else rate > p["per_minute"]
        return firing, rate, f"{rate:.2f} retractions per minute over {window / 60:.0f} min"
    return judge


def _headroom(low: bool):
    def judge(state, p, sources, now, window):
        h = state.headroom_bytes
        if h is None:
            return None, None, "available_gpu_mem not seen in this epoch"
        firing = h < p["min_bytes"] if low else h > p["max_bytes"]
        return firing, float(h), f"{h / 2**30:.2f} GiB left after start-up"
    return judge


def _graph_off(state, p, sources, now, window):
    w = state.graph_off
    if not _fed_by_batches(state, sources) or w.total == 0:
        return None, None, "no decode samples that report CUDA graph state"
    return w.hits >= p["min_samples"], float(w.hits), f"{w.hits} small decode batches without CUDA graph"


def _oom(phase: str):
    def judge(state, p, sources, now, window):
        if not sources.log_up:
            return None, None, "OOMs are read from logs; no log source is up"
        n = state.ooms[phase].count_since(now - window)
        return n >= p["min_events"], float(n), f"{n} {phase} OOM events in {window / 60:.0f} min"
    return judge


def _stalled(state, p, sources, now, window):
    if not (sources.log_up or sources.metrics_up):
        return None, None, "no live source"
    dogs = state.watchdogs.count_since(now - window)
    if state.last_progress_t is None:
        if dogs:
            return True, None, f"{dogs} watchdog timeouts"
        return None, None, "no progress seen yet"
    age = max(0.0, now - state.last_progress_t)
    if state.log_fed:
        # a decode line is printed every 40 steps, so the last one may still show running requests that
        # finished since; only a waiting queue proves work is pending
        waiting = sum(rv.queue or 0 for rv in per_scheduler(state.ranks).values())
    else:
        waiting = state.pending() or 0
    stuck = age > p["stall_seconds"] and waiting > 0
    return stuck or dogs > 0, age, (f"no progress for {age:.0f} s with {waiting:.0f} requests pending"
                                    + (f"; {dogs} watchdog timeouts" if dogs else ""))


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
    "latency_high": _latency,
}
assert set(_JUDGES) == {s.id for s in SIGNALS}, "every catalog signal needs a judge"
