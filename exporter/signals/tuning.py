"""Judges of the latency and tuning signals (catalog_tuning): SGLang's latency histograms, and the tuning
signals that /metrics samples or, without them, the leaders' batch lines (state.tuning) feed."""
from __future__ import annotations

import math

# why a signal needing start-up facts is unknown when the sidecar joined SGLang after its start-up
STARTUP_NOT_SEEN = "start-up not seen (joined a running server)"


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
        total, hits = series(state.tuning).counts()
        if total == 0:
            return None, None, none_reason
        if total < p["min_samples"]:
            return None, None, ("{} samples in the window, {} needed", total, p["min_samples"])
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



TUNING_JUDGES = {
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
    "latency_high": _latency,
}
