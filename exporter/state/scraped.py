"""What SGLang's own /metrics feeds into ServerState: per-rank gauges, counter increases, retractions,
start-up facts and the server-wide samples the tuning signals judge."""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from exporter.catalog.native import family_values
from exporter.state.errors import RequestOutcomes
from exporter.state.parts import StatePart
from exporter.state.ranks import MAX_RANKS, RankValues, rank_label
from exporter.state.windows import MAX_WINDOW_SAMPLES, Histogram, TimeWindow

MAX_COUNTER_SERIES = 256  # series kept per scraped counter, to tell a reset of one from the others (apply_scrape)


class ScrapeFeed(StatePart):
    """ServerState's /metrics part: folds scrapes in, and forgets what they alone told once they go stale."""

    # what it keeps of the scrapes (ServerState.__init__ sets them)
    metrics_seen: bool
    native_present: frozenset
    native_seen: frozenset
    native: dict[tuple, dict]
    scrape_samples: deque
    histograms: dict[str, Histogram]
    _last_counter: dict[str, dict]
    _last_retracted_gauge: float | None
    # what it feeds of the rest of ServerState (the log's part, when log_fed is False)
    log_fed: bool
    model: str
    last_progress_t: float | None
    latency_window: float
    retractions: TimeWindow
    retractions_total: int
    retracted_requests_total: int
    outcomes: RequestOutcomes

    if TYPE_CHECKING:
        def _new_rank(self, key: tuple) -> RankValues: ...

        def classify(self, now: float, queue, running, usage, cuda_graph) -> None: ...

        def serving_scrape(self, scrape, now: float) -> None: ...

        def forget_serving(self) -> None: ...

    def apply_scrape(self, scrape, now: float) -> None:
        """Fold one successful scrape of SGLang's /metrics (exporter.ingest.scrape.ScrapeResult) into state. Its numbers
        were checked at the edge (scrape.py drops what is not finite or out of range); SGLang's counters reach
        our own totals only through `_increase`, so what we export never goes backwards."""
        self.metrics_seen = True
        present = frozenset(getattr(scrape, "present", ()) or _present_of(scrape))
        if present != self.native_present:
            self.native_present = present
        seen = frozenset(getattr(scrape, "seen", ()))
        if seen != self.native_seen:
            self.native_seen = seen
        self.native = {key: dict(vals) for key, vals in list(scrape.ranks.items())[:MAX_RANKS]}
        if scrape.model and not self.model:
            self.model = scrape.model
        # CUDA graph from the pass counters (0.5.7+): any decode pass without a graph since the last scrape
        # says more than is_cuda_graph, which is the last batch's only
        eager = self._increase("decode_eager_passes", scrape)
        graphed = self._increase("decode_graph_passes", scrape)
        passes_graph = False if eager else (True if graphed else None)
        for key, vals in scrape.ranks.items():
            if passes_graph is not None and "running" in vals:
                vals = {**vals, "cuda_graph": passes_graph}
            if not self.log_fed:
                rv = self._ranks.get(key)
                if rv is None:
                    rv = self._new_rank(key)
                if rv.unread:
                    rv.read()
                usage = pool_usage(vals)
                for attr, v in (("queue", vals.get("queue")), ("running", vals.get("running")), ("usage", usage),
                                ("throughput", vals.get("throughput")), ("cuda_graph", vals.get("cuda_graph"))):
                    if v is not None:
                        setattr(rv, attr, v)
                self.classify(now, vals.get("queue"), vals.get("running"), usage, vals.get("cuda_graph"))
        self._scrape_facts(scrape)
        # progress: generated or prefilled tokens advancing (frozen gauges cannot show a hang)
        progressed = False
        growth = {}
        for name in ("generation_tokens", "prompt_tokens", "cached_tokens"):
            growth[name] = grew = self._increase(name, scrape)
            progressed = progressed or (bool(grew) and name != "cached_tokens")
        if scrape.ranks:
            sample = scrape_sample(scrape.ranks)
            # the prefix hit rate of the prompts since the last scrape: cached_tokens_total over
            # prompt_tokens_total; the cache_hit_rate gauge (the last prefill batch's, zeroed by every decode
            # report on 0.4.4-0.5.19) only when the counters did not move
            if growth["prompt_tokens"] and growth["cached_tokens"] is not None:
                sample["hit"] = min(1.0, growth["cached_tokens"] / growth["prompt_tokens"])
            self.scrape_samples.append((now, sample))
            if len(self.scrape_samples) > MAX_WINDOW_SAMPLES:
                self.scrape_samples.popleft()
        pending = sum((v.get("queue") or 0) + (v.get("running") or 0) for v in scrape.ranks.values())
        if (progressed or pending == 0 or self.last_progress_t is None) and not self.log_fed:
            self.last_progress_t = now
        if not self.log_fed:
            self._scrape_retractions(scrape, now)
        self.outcomes.scrape(now, self._increase("responses", scrape), self._increase("responses_5xx", scrape),
                             self._increase("aborted_requests", scrape), self._increase("requests", scrape))
        self.serving_scrape(scrape, now)
        for name, buckets in scrape.histograms.items():
            h = self.histograms.setdefault(name, Histogram())
            h.snapshots.append((now, buckets))
            while len(h.snapshots) > 2 and h.snapshots[1][0] <= now - self.latency_window:
                h.snapshots.popleft()
            while len(h.snapshots) > 1000:
                h.snapshots.popleft()

    def _scrape_facts(self, scrape) -> None:
        """Start-up facts /metrics carries on newer releases: the log's, when there is one, come first."""
        if scrape.max_running_requests and not self.memory_config.get("max_running_requests"):
            self.memory_config["max_running_requests"] = scrape.max_running_requests
            self._limits()
        capacity = [v["max_total_num_tokens"] for v in scrape.ranks.values() if v.get("max_total_num_tokens")]
        if capacity and not self.memory_config.get("max_total_num_tokens"):
            self.memory_config["max_total_num_tokens"] = int(min(capacity))
        # sglang:startup_available_gpu_memory_gb (0.5.11+) is the capacity line's available_gpu_mem, per rank,
        # in GiB: each rank is read as its capacity line would be, so the worst GPU is judged and named alike
        if not self.log_fed or not self.memory_by_rank:
            # (0 is a gauge not set yet, as a scheduler still starting shows it: no start-up ends with no memory)
            ranks = [key for key, vals in scrape.ranks.items() if vals.get("headroom_gb")]
            # spelt as the log's prefix would: a rank tag only where the server has more than one of that rank
            tags = [i for i in range(3) if any(k[i] for k in ranks)]
            for key in ranks:
                label = rank_label({("dp", "tp", "pp")[i]: key[i] for i in tags})
                self._memory_reading(label, "memory_config", scrape.ranks[key]["headroom_gb"] * 2**30)

    def _scrape_retractions(self, scrape, now: float) -> None:
        """Retractions from whichever metric the release has: the counter (0.5.7+; total_retracted_reqs, a
        gauge counting since start-up, on 0.4.9-0.5.2), else the gauge num_retracted_reqs (0.5.2+: requests
        retracted since the scheduler's last stats report, then reset to 0). The gauge is a sample: a
        non-zero value that differs from the last scrape's is a new retraction event of that many requests
        (two reports between scrapes count as one; equal non-zero values in a row as one)."""
        # per DP rank (its scheduler group), not summed over its TP/PP ranks: with
        # --enable-metrics-for-all-schedulers every TP rank reports the same retracted requests
        grew = self._increase("retracted_requests", scrape, per_dp_rank=True)
        weight = grew
        if "retracted_requests" not in scrape.counters:
            # per scheduler, as the log's retraction lines are counted: the TP ranks of a DP rank retract the
            # same requests, and with --enable-metrics-for-all-schedulers each of them reports them
            values = [v["retracted_gauge"] for v in leaders(scrape.ranks).values()
                      if v.get("retracted_gauge") is not None]
            if not values:
                return
            now_value = sum(values)
            last, self._last_retracted_gauge = self._last_retracted_gauge, now_value
            grew = now_value if now_value > 0 and now_value != last else None
            weight = 1       # one report with retractions: at least one event, as a log line is one
        if grew:
            assert weight is not None     # the counter's growth (grew), or 1 for a gauge report
            self.retractions.push(now, weight)
            self.retractions_total += 1
            self.retracted_requests_total += round(grew)

    def _increase(self, name: str, scrape, per_dp_rank: bool = False) -> float | None:
        """How much SGLang's counter `name` grew since the last scrape that had it, as Prometheus' increase()
        counts: per series, a value below the last one is a reset (the server restarted and counts from 0
        again, so all of the new value is growth), never a decrease; a series seen for the first time only
        sets its base. None when the scrape lacks the counter or this is its first sight. `per_dp_rank`: series
        that differ only in tp_rank/pp_rank are one scheduler group's and count once (the largest growth among
        them); other labels (dp_rank, is_streaming, ...) still add up, as the native rules count."""
        series = scrape.counter_series.get(name)
        if series is None:
            if name not in scrape.counters:
                return None
            series = {(): scrape.counters[name]}     # a result built by hand: its sum as one series
        last = self._last_counter.get(name)
        # bounded whatever labels the target invents: series past the cap are neither kept nor counted
        kept = dict(list(series.items())[:MAX_COUNTER_SERIES])
        self._last_counter[name] = kept
        if last is None:
            return None
        growth: dict = {}
        for key, value in kept.items():
            prev = last.get(key)
            if prev is not None:
                group = tuple(kv for kv in key if kv[0] not in _TP_PP) if per_dp_rank else key
                step = value - prev if value >= prev else value
                growth[group] = max(growth.get(group, 0.0), step) if per_dp_rank else step
        return float(sum(growth.values()))

    def forget_scrape(self) -> None:
        """SGLang's /metrics has failed for longer than the staleness time: what it alone told us is no longer
        current, so it goes (not exported; the signals reading it go unknown). The counters' bases stay, so
        the next good scrape counts what happened meanwhile, or a reset."""
        if not self.log_fed:
            self._ranks.clear()
            self._unread.clear()
            self._schedulers = None
            self._forget_row_slots()
            self._leader_tp.clear()
        self.histograms.clear()
        self.native = {}
        self.native_present = frozenset()
        self.scrape_samples.clear()
        self.forget_serving()


def pool_usage(vals: dict):
    """KV usage of a scraped rank: the fullest of token_usage and a hybrid model's pools (full, SWA, mamba),
    so a hybrid model is judged on the pool that runs out first."""
    best = None
    for key in ("usage", "full_usage", "swa_usage", "mamba_usage"):
        v = vals.get(key)
        if v is not None and (best is None or v > best):
            best = v
    return best


_PD = ("prefill_bootstrap_queue", "prefill_prealloc_queue", "prefill_inflight_queue", "decode_prealloc_queue",
       "decode_transfer_queue")


def scrape_sample(ranks: dict) -> dict:
    """One server-wide sample of a scrape's per-rank gauges: sums over schedulers (the lowest TP rank of each
    DP rank: TP ranks of one DP rank repeat its numbers), the fullest pool, the best hit rate, the mean accept
    length of the ranks that speculate; None where no rank reported the value."""
    leading = leaders(ranks)

    def total(name):
        vals = [v[name] for v in leading.values() if v.get(name) is not None]
        return sum(vals) if vals else None

    usages = [u for u in (pool_usage(v) for v in ranks.values()) if u is not None]
    hits = [v["cache_hit_rate"] for v in ranks.values() if v.get("cache_hit_rate") is not None]
    spec = [v["spec_accept_length"] for v in ranks.values() if v.get("spec_accept_length")]
    pd = [total(name) for name in _PD]
    pd = [x for x in pd if x is not None]
    return {"queue": total("queue"), "usage": max(usages) if usages else None, "hit": max(hits) if hits else None,
            "evictable": total("kv_evictable_tokens"), "capacity": total("max_total_num_tokens"),
            "paused": total("paused"), "spec": sum(spec) / len(spec) if spec else None,
            "pd": sum(pd) if pd else None}


# ranks of one scheduler group: they report the same requests
_TP_PP = ("tp_rank", "pp_rank")


def leaders(ranks: dict) -> dict:
    """DP rank -> the scraped values of its lowest TP rank (the scheduler group's; TP ranks repeat them)."""
    out: dict = {}
    for key in sorted(ranks, key=lambda k: tuple(-1 if v is None else v if isinstance(v, int) else 1 << 30
                                                 for v in k)):
        out.setdefault(key[0], ranks[key])
    return out


def _present_of(scrape) -> set:
    """The values a ScrapeResult built by hand (without `present`) fed."""
    out = {k for vals in scrape.ranks.values() for k in vals}
    out.update(scrape.counters)
    out.update(family_values().get(name, name) for name in scrape.histograms)
    return out

