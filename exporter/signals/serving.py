"""Judges of the serving signals (catalog_serving): admission at the queue cap, a scheduler idle while requests
wait, PD transfer failures, HiCache dropped tokens with the hit rate per tier, DP-attention imbalance and
start-up regressions. They read state.serving (ServingFeed) and the latency histograms the scraper keeps."""
from __future__ import annotations

from exporter.signals.tuning import quantile

_NOT_SCRAPED = "read from SGLang's /metrics; it is not being scraped"


def _admission(state, p, sources, now, window):
    if not (sources.log_up if state.log_fed else sources.metrics_up):
        return None, None, "no live source of batch samples"
    cap, where = state.queued_cap()
    if where == "unbounded":
        return False, 0.0, ("no --max-queued-requests in server_args (unset, or a release before 0.4.9): the queue "
                            "is unbounded, nothing is rejected at a cap")
    if cap is None:
        return None, None, ("--max-queued-requests not known: the server_args line was not seen and "
                            "admission_blocked.max_queued_requests is not set (no release exports the cap on "
                            "/metrics)")
    total, hits = state.admission.count(0), state.admission.count(1)
    if total < p["min_samples"]:
        return None, None, ("{} samples in the window, {} needed", total, p["min_samples"])
    share = hits / total
    return share >= p["fraction"], share, ("{} of {} samples with a scheduler's queue at {:.0f} of its "
                                           "--max-queued-requests {:.0f} ({})", hits, total, p["fill"] * cap,
                                           cap, where)


def _window_samples(state, now, window):
    edge = now - window
    return [(t, x) for t, x in state.serving_samples if t >= edge]


def _idle_waiting(state, p, sources, now, window):
    if not sources.metrics_up:
        return None, None, _NOT_SCRAPED
    samples = [x for _, x in _window_samples(state, now, window) if x["idle"] is not None]
    if len(samples) < p["min_samples"]:
        return None, None, ("{} scrapes with the scheduler's idle time in the window, {} needed", len(samples),
                            p["min_samples"])
    # per scheduler: its idle share of the time its queue held requests (summed over the window, so a scrape
    # that lands early or late does not decide), and the share of scrapes that found its queue non-empty
    worst = None
    for rank in {r for x in samples for r in x["idle"]}:
        queued = [(x["idle"][rank], x["dt"]) for x in samples if rank in x["idle"] and x["idle"][rank][1] > 0]
        if not queued:
            continue
        idle = min(1.0, sum(g for (g, _), _ in queued) / sum(dt for _, dt in queued))
        waiting = len(queued) / len(samples)
        key = (waiting >= p["fraction"], idle)
        if worst is None or key > worst[0]:
            worst = (key, rank, idle, waiting, max(q for (_, q), _ in queued))
    if worst is None:
        return False, 0.0, ("no scheduler had requests queued in {} scrapes", len(samples))
    _, rank, idle, waiting, queue = worst
    return (idle >= p["min_idle"] and waiting >= p["fraction"], idle,
            ("{} idle {:.0%} of the time with {:.0f} queued (queue non-empty in {:.0%} of {} scrapes)",
             rank or "the scheduler", idle, queue, waiting, len(samples)))


def _span(samples, window: float) -> float:
    """Seconds the samples cover (their scrape intervals), at most the window."""
    return min(window, sum(x["dt"] for _, x in samples))


def _pd_failures(state, p, sources, now, window):
    if not sources.metrics_up:
        return None, None, _NOT_SCRAPED
    samples = _window_samples(state, now, window)
    fed = [(t, x) for t, x in samples if x["transfer_failed"] is not None or x["bootstrap_failed"] is not None]
    if not fed:
        return None, None, "no PD failure counter has grown a first time yet (a counter appears with its first " \
                           "failure on most releases)"
    span = _span(fed, window)
    if span <= 0:
        return None, None, "no time observed"
    transfer = sum(x["transfer_failed"] or 0.0 for _, x in fed)
    bootstrap = sum(x["bootstrap_failed"] or 0.0 for _, x in fed)
    retries = sum(x["prefill_retries"] or 0.0 for _, x in samples)
    per_minute = (transfer + bootstrap) / (span / 60.0)
    latency = _kv_transfer_p99(state, now, window)
    return per_minute >= p["per_minute"], per_minute, (
        "{:.0f} transfers and {:.0f} bootstraps failed in {:.0f} s, {:.0f} prefills retried; p99 KV transfer "
        "latency {}", transfer, bootstrap, span, retries, latency)


def _kv_transfer_p99(state, now: float, window: float) -> str:
    h = state.histograms.get("kv_transfer_latency_ms")
    if not h or len(h.snapshots) < 2 or not h.snapshots[-1][1]:
        return "not exported (a histogram from 0.5.10; a last-value gauge before, not read)"
    _, first = next(((t, b) for t, b in h.snapshots if t >= now - window), h.snapshots[0])
    _, last = h.snapshots[-1]
    delta = {le: last[le] - first.get(le, 0.0) for le in last}
    p99 = quantile(0.99, delta)
    return "no transfer in the window" if p99 is None else f"{p99:.0f} ms"


def tier_hit_rates(samples) -> dict | None:
    """Hit rate per cache tier over the samples: {tier: share of prefill tokens it served}, from
    prefill_effective_tokens_total{mode} (0.5.18+), else cached_tokens_total{cache_source} over nothing more
    (shares of the cached tokens); None without either."""
    modes: dict[str, float] = {}
    for x in samples:
        for mode, v in (x["tiers"] or {}).items():
            modes[mode] = modes.get(mode, 0.0) + v
    total = sum(modes.values())
    if total > 0:
        return {tier: modes.get(mode, 0.0) / total for mode, tier in (("device_hit", "device"),
                                                                      ("host_hit", "host"),
                                                                      ("storage_hit", "storage"))}
    sources: dict[str, float] = {}
    for x in samples:
        for src, v in (x["sources"] or {}).items():
            if src not in ("", "total"):
                sources[src] = sources.get(src, 0.0) + v
    cached = sum(sources.values())
    if cached > 0:
        return {tier: sources.get(tier, 0.0) / cached for tier in ("device", "host", "storage")}
    return None


def _tiers_text(rates: dict | None, of: str) -> str:
    if rates is None:
        return "hit rate per tier not known"
    return "hit rate " + ", ".join(f"{tier} {share:.0%}" for tier, share in rates.items()) + of


def _hicache_dropped(state, p, sources, now, window):
    if not sources.metrics_up:
        return None, None, _NOT_SCRAPED
    samples = [x for _, x in _window_samples(state, now, window)]
    fed = [x for x in samples if x["dropped"] is not None]
    rates = tier_hit_rates(samples)
    of = " of prefill tokens" if any(x["tiers"] for x in samples) else " of cached tokens"
    if not fed:
        return None, None, ("no dropped-token counter seen twice yet (HiCache off, or nothing dropped); {}",
                            _tiers_text(rates, of))
    dropped = sum(x["dropped"] for x in fed)
    backup = [x["backup"] for x in samples if x["backup"] is not None]
    if backup:
        base, what = dropped + sum(backup), "evicted tokens (dropped + backed up)"
    else:
        base, what = sum(sum((x["tiers"] or {}).values()) for x in samples), "prefill tokens"
    if base <= 0:
        return False, 0.0, ("no tokens evicted or prefilled in the window; {}", _tiers_text(rates, of))
    share = dropped / base
    return (share >= p["max_drop_share"] and dropped >= p["min_tokens"], share,
            ("{:.0f} tokens dropped, {:.1%} of {}; {}", dropped, share, what, _tiers_text(rates, of)))


def _dp_imbalance(state, p, sources, now, window):
    if not sources.metrics_up:
        return None, None, _NOT_SCRAPED
    samples = [x for _, x in _window_samples(state, now, window)]
    per_rank: dict[str, float] = {}
    for x in samples:
        for rank, v in (x["dp_tokens"] or {}).items():
            per_rank[rank] = per_rank.get(rank, 0.0) + v
    busiest, skew = None, None
    if len(per_rank) > 1 and sum(per_rank.values()) > 0:
        busiest = max(per_rank, key=lambda r: per_rank[r])
        skew = per_rank[busiest] / (sum(per_rank.values()) / len(per_rank))
    where = f"busiest DP rank {busiest} ({skew:.2f}x the mean tokens)" if busiest is not None else \
        "busiest DP rank not known"
    ratio, steps = _median_ratio(state, now, window)
    if ratio is not None and steps >= p["min_steps"]:
        return ratio >= p["max_ratio"], ratio, ("median imbalance ratio {:.2f} over {:.0f} steps; {}", ratio,
                                                steps, where)
    if skew is not None:
        return skew >= p["max_ratio"], skew, ("{} (the imbalance histogram has {:.0f} steps, {} needed)", where,
                                              steps, p["min_steps"])
    return None, None, ("{:.0f} DP-attention steps in the window, {} needed (DP attention off, or idle)", steps,
                        p["min_steps"])


def _median_ratio(state, now: float, window: float) -> tuple[float | None, float]:
    h = state.histograms.get("dp_attention_token_imbalance_ratio")
    if not h or len(h.snapshots) < 2:
        return None, 0.0
    _, first = next(((t, b) for t, b in h.snapshots if t >= now - window), h.snapshots[0])
    _, last = h.snapshots[-1]
    if max(last.values(), default=0.0) < max(first.values(), default=0.0):
        delta = dict(last)
    else:
        delta = {le: last[le] - first.get(le, 0.0) for le in last}
    steps = max(delta.values(), default=0.0)
    return quantile(0.5, delta), steps


_WHAT = {"startup": "start-up", "weight_load": "weight loading", "weight_update": "weight update"}


def _startup_regression(state, p, sources, now, window):
    if not (sources.log_up or sources.metrics_up):
        return None, None, "no live source"
    worst = None
    for kind in _WHAT:      # (in this order: the first of equally bad ones is named)
        compared = state.duration_baselines.get(kind)
        if compared is None:
            continue
        t_end, latest, baseline, n = compared
        ratio = latest / baseline if baseline > 0 else float("inf") if latest > 0 else 1.0
        recent = now - t_end <= window
        regressed = recent and latest >= p["factor"] * baseline and latest - baseline >= p["min_seconds"]
        if worst is None or (regressed, ratio) > (worst[0], worst[1]):
            worst = (regressed, ratio, kind, latest, baseline, n)
    if worst is None:
        seen = [f"{_WHAT[kind]}: {len(state.durations[kind])}" for kind in _WHAT if state.durations.get(kind)]
        if not seen:
            return None, None, "no start-up seen (from the server_args line to the ready line, or on /metrics)"
        return None, None, ("only one of each seen ({}): nothing to compare with yet", ", ".join(seen))
    regressed, ratio, kind, latest, baseline, n = worst
    return regressed, min(ratio, 1e6), ("latest {} took {:.0f} s, the median of the {} before {:.0f} s", _WHAT[kind],
                                        latest, n, baseline)


SERVING_JUDGES = {
    "admission_blocked": _admission,
    "scheduler_idle_waiting": _idle_waiting,
    "pd_transfer_failures": _pd_failures,
    "hicache_tokens_dropped": _hicache_dropped,
    "dp_attention_imbalance": _dp_imbalance,
    "startup_regression": _startup_regression,
}
