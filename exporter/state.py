"""What we know about one SGLang server: latest values per rank, start-up facts per epoch, and bounded time
windows of the samples and events the signals judge.

State changes only through `apply_event`, `apply_scrape` and `expire`; it never reads a clock. Window
tallies are classified against the thresholds in force when the sample arrives (the profile is fixed for a
process), so evaluation stays O(1) per signal however long the window.
"""
from __future__ import annotations

import bisect
from collections import Counter, deque
from dataclasses import dataclass, field

from exporter.catalog import SIGNALS_BY_ID
from exporter.ingest.events import Event

MAX_RANKS = 64            # distinct rank label sets kept; more fold into "other" (bounded label sets)
MAX_WINDOW_SAMPLES = 20000  # per window; a window never holds more, whatever the input rate
OTHER_RANK = ("other", None, None)
FRACTION_SIGNALS = ("queue_below_range", "queue_above_range", "kv_cache_underused", "concurrency_capped")


@dataclass(slots=True)
class RankValues:
    queue: float | None = None
    running: float | None = None
    usage: float | None = None
    throughput: float | None = None
    cuda_graph: bool | None = None
    t: float = 0.0


class HitWindow:
    """Samples in the last `seconds`, each a hit or not; counts kept incrementally."""
    __slots__ = ("seconds", "items", "hits")

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.items: deque = deque()
        self.hits = 0

    def push(self, t: float, hit: bool) -> None:
        self.items.append((t, hit))
        self.hits += hit
        if len(self.items) > MAX_WINDOW_SAMPLES:
            self.hits -= self.items.popleft()[1]

    def expire(self, now: float) -> None:
        edge = now - self.seconds
        items = self.items
        while items and items[0][0] < edge:
            self.hits -= items.popleft()[1]

    @property
    def total(self) -> int:
        return len(self.items)

    def clear(self) -> None:
        self.items.clear()
        self.hits = 0


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

    def weight_since(self, t0: float) -> float:
        """Total weight of events at or after t0 (items are in time order)."""
        times = [t for t, _ in self.items]
        i = bisect.bisect_left(times, t0)
        return sum(w for _, w in list(self.items)[i:])

    def count_since(self, t0: float) -> int:
        return sum(1 for t, _ in self.items if t >= t0)


@dataclass
class Histogram:
    """Cumulative bucket snapshots of one SGLang latency histogram, summed over its series."""
    snapshots: deque = field(default_factory=deque)   # (t, {le: cumulative count})


def rank_key(rank: dict) -> tuple:
    return (rank.get("dp"), rank.get("tp"), rank.get("pp"))


class ServerState:
    def __init__(self, params: dict[str, dict | None], log_fed: bool = True):
        """params: signal id -> thresholds in force (None = inactive), from Config.signal_params()."""
        self.params = params
        self.log_fed = log_fed
        self.epoch = 0
        self.restarts = 0
        self.epoch_started: float | None = None
        self.server_args: dict = {}
        self.memory_config: dict = {}
        self.headroom_bytes: float | None = None
        self.total_gpu_bytes: float | None = None   # free memory before weights load ~ usable GPU memory
        self.model: str = ""
        self.format_family: str = ""
        self.ranks: dict[tuple, RankValues] = {}
        self.last_batch_t: float | None = None
        self.last_progress_t: float | None = None
        self.first_t: float | None = None
        self._startup_seen: set = set()
        self._leader_tp: dict = {}     # DP rank -> the TP rank that prints its batch lines
        window = {sid: (SIGNALS_BY_ID[sid].window_seconds) for sid in SIGNALS_BY_ID}
        self.fraction = {sid: HitWindow(window[sid]) for sid in FRACTION_SIGNALS}
        self.graph_off = HitWindow(window["cuda_graph_off_small_batch"])
        self.retractions = TimeWindow(max(window["retractions_frequent"], window["retraction_storm"]))
        self.ooms = {"prefill": TimeWindow(window["oom_prefill"]), "decode": TimeWindow(window["oom_decode"])}
        self.watchdogs = TimeWindow(window["stalled"])
        self.histograms: dict[str, Histogram] = {}
        self.latency_window = window["latency_high"]
        # counters: never go backwards, across restarts too
        self.retractions_total = 0
        self.retracted_requests_total = 0
        self.oom_total: Counter = Counter()
        self.watchdog_total = 0
        self.events_total: Counter = Counter()
        # /metrics-fed progress and retraction counters (metrics-only deployments)
        self._last_counter: dict[str, float] = {}
        self.metrics_seen = False

    # ------------------------------------------------------------------ events (logs)
    def apply_event(self, ev: Event, now: float) -> None:
        if self.first_t is None:
            self.first_t = now
        self.events_total[ev.kind] += 1
        kind, f = ev.kind, ev.fields
        if kind == "decode_batch" or kind == "prefill_batch":
            self._batch(ev, now)
        elif kind == "retraction":
            if f.get("testing"):
                return
            # every TP rank of a scheduler group prints the same retraction; count it once per DP rank, from
            # the rank that prints that DP rank's batch lines (TP0 without DP attention; DP1 TP4 with it),
            # for the event counter and the retracted-requests sum alike
            tp = ev.rank.get("tp")
            if tp is None or tp == self._leader_tp.get(ev.rank.get("dp"), 0):
                self.retracted_requests_total += int(f.get("retracted_reqs") or 0)
                self.retractions_total += 1
                self.retractions.push(now)
        elif kind == "oom":
            phase = f.get("phase", "unknown")
            self.oom_total[phase] += 1
            if phase == "prefill":
                self.ooms["prefill"].push(now)
            elif phase in ("decode", "unknown"):
                self.ooms["decode"].push(now)
        elif kind == "watchdog_timeout":
            if not f.get("soft"):
                self.watchdog_total += 1
                self.watchdogs.push(now)
        elif kind == "memory_config":
            if ev.rank.get("tp") in (None, 0):
                self._startup_line("memory_config", now, restart_if_batches=True)
            self.memory_config.update(f)
            avail = f.get("available_gpu_mem_bytes")
            if avail is not None:
                self.headroom_bytes = avail if self.headroom_bytes is None else min(self.headroom_bytes, avail)
        elif kind == "server_args":
            self._startup_line("server_args", now, restart_if_batches=True, restart_if_any=True)
            self.server_args = dict(f)
            self.model = str(f.get("served_model_name") or f.get("model_path") or "")[:200]
        elif kind == "load_weight":
            if f.get("phase") == "begin" and f.get("avail_mem_bytes"):
                self.total_gpu_bytes = max(self.total_gpu_bytes or 0, f["avail_mem_bytes"])
        elif kind == "server_ready":
            # warm-up batches run before the ready line, so batches alone do not mean a restart here
            self._startup_line("server_ready", now)

    def _startup_line(self, kind: str, now: float, restart_if_batches: bool = False,
                      restart_if_any: bool = False) -> None:
        """A start-up line starts a new epoch when it cannot belong to the current start-up sequence."""
        after_batches = restart_if_batches and self.last_batch_t is not None
        if (self.epoch_started is None or kind in self._startup_seen or after_batches
                or (restart_if_any and self._startup_seen)):
            # batch lines before the first start-up line: we joined a running server and it restarted
            self._new_epoch(now, joined_running=after_batches)
        self._startup_seen.add(kind)

    def _new_epoch(self, now: float, joined_running: bool = False) -> None:
        """SGLang (re)started: start-up facts and windows restart; counters keep counting."""
        if self.epoch_started is not None or joined_running:
            self.restarts += 1
        self.epoch += 1
        self.epoch_started = now
        self._startup_seen: set = set()
        self.server_args = {}
        self.memory_config = {}
        self.headroom_bytes = None
        self.ranks.clear()
        self.last_batch_t = None
        for w in self.fraction.values():
            w.clear()
        self.graph_off.clear()

    def _new_rank(self, key: tuple) -> RankValues:
        """A slot for a rank not seen yet; past MAX_RANKS - 1 distinct ranks they share the "other" slot, so
        the table (and the exported label sets) never exceed MAX_RANKS entries."""
        if len(self.ranks) >= MAX_RANKS - 1:
            key = OTHER_RANK
        return self.ranks.setdefault(key, RankValues())

    def _batch(self, ev: Event, now: float) -> None:
        f = ev.fields
        tp = ev.rank.get("tp")
        if tp is not None:
            dp = ev.rank.get("dp")
            if tp < self._leader_tp.get(dp, 1 << 30) and len(self._leader_tp) < MAX_RANKS:
                self._leader_tp[dp] = tp     # batch lines come from each DP rank's lowest attention-TP rank
        key = rank_key(ev.rank)
        rv = self.ranks.get(key)
        if rv is None:
            rv = self._new_rank(key)
        rv.t = now
        queue = f.get("queue_req")
        running = f.get("running_req")
        usage = usage_of(f)
        if queue is not None:
            rv.queue = queue
        if running is not None:
            rv.running = running
        if usage is not None:
            rv.usage = usage
        self.last_batch_t = now
        self.last_progress_t = now
        if ev.kind != "decode_batch":
            return
        if "gen_throughput" in f:
            rv.throughput = f["gen_throughput"]
        if "cuda_graph" in f:
            rv.cuda_graph = f["cuda_graph"]
        self.classify(now, queue, running, usage, f.get("cuda_graph"))

    def classify(self, now: float, queue, running, usage, cuda_graph) -> None:
        """Tally one batch sample into every window it is judged in."""
        p = self.params
        if queue is not None:
            if p.get("queue_below_range"):
                self.fraction["queue_below_range"].push(now, queue < p["queue_below_range"]["min_queue"])
            if p.get("queue_above_range"):
                self.fraction["queue_above_range"].push(now, queue > p["queue_above_range"]["max_queue"])
            if usage is not None and p.get("kv_cache_underused"):
                self.fraction["kv_cache_underused"].push(
                    now, queue > 0 and usage < p["kv_cache_underused"]["min_usage"])
            cap = self.memory_config.get("max_running_requests")
            cp = p.get("concurrency_capped")
            if cp and cap and running is not None and usage is not None:
                self.fraction["concurrency_capped"].push(
                    now, running >= cp["running_fraction"] * cap and queue > 0 and usage < cp["max_usage"])
        gp = p.get("cuda_graph_off_small_batch")
        if gp and cuda_graph is not None and running is not None:
            max_bs = self.server_args.get("cuda_graph_max_bs") or gp["default_max_bs"]
            small = running <= max_bs if isinstance(max_bs, (int, float)) else True
            self.graph_off.push(now, (not cuda_graph) and small and running > 0)

    # ------------------------------------------------------------------ scrapes (/metrics)
    def apply_scrape(self, scrape, now: float) -> None:
        """Fold one successful scrape of SGLang's /metrics (exporter.scrape.ScrapeResult) into state."""
        if self.first_t is None:
            self.first_t = now
        self.metrics_seen = True
        if scrape.model and not self.model:
            self.model = scrape.model
        for key, vals in scrape.ranks.items():
            if not self.log_fed:
                rv = self.ranks.get(key)
                if rv is None:
                    rv = self._new_rank(key)
                rv.t = now
                for attr in ("queue", "running", "usage", "throughput", "cuda_graph"):
                    if vals.get(attr) is not None:
                        setattr(rv, attr, vals[attr])
                self.classify(now, vals.get("queue"), vals.get("running"), vals.get("usage"),
                              vals.get("cuda_graph"))
        if scrape.max_running_requests and not self.memory_config.get("max_running_requests"):
            self.memory_config["max_running_requests"] = scrape.max_running_requests
        # progress: generated or prefilled tokens advancing (frozen gauges cannot show a hang)
        progressed = False
        for name in ("generation_tokens", "prompt_tokens"):
            value = scrape.counters.get(name)
            if value is None:
                continue
            prev = self._last_counter.get(name)
            if prev is None or value != prev:
                progressed = progressed or prev is not None
            self._last_counter[name] = value
        pending = sum((v.get("queue") or 0) + (v.get("running") or 0) for v in scrape.ranks.values())
        if (progressed or pending == 0 or self.last_progress_t is None) and not self.log_fed:
            self.last_progress_t = now
        if not self.log_fed:
            value = scrape.counters.get("retracted_requests")
            if value is not None:
                prev = self._last_counter.get("retracted_requests")
                if prev is not None and value > prev:
                    self.retractions.push(now, value - prev)
                    self.retractions_total += 1
                    self.retracted_requests_total += int(value - prev)
                self._last_counter["retracted_requests"] = value
        for name, buckets in scrape.histograms.items():
            h = self.histograms.setdefault(name, Histogram())
            h.snapshots.append((now, buckets))
            while len(h.snapshots) > 2 and h.snapshots[1][0] <= now - self.latency_window:
                h.snapshots.popleft()
            while len(h.snapshots) > 1000:
                h.snapshots.popleft()

    # ------------------------------------------------------------------ time
    def expire(self, now: float) -> None:
        for w in self.fraction.values():
            w.expire(now)
        self.graph_off.expire(now)
        self.retractions.expire(now)
        for w in self.ooms.values():
            w.expire(now)
        self.watchdogs.expire(now)

    def retractions_per_minute(self, now: float, window: float) -> float:
        """Retraction events per minute over the last `window` seconds (full-window denominator: a burst
        right after start-up is not extrapolated)."""
        return self.retractions.weight_since(now - window) / (window / 60.0)

    def pending(self) -> float | None:
        """Queue + running of the server, from the latest value of each scheduler; None when unknown."""
        if not self.ranks:
            return None
        return sum((rv.queue or 0) + (rv.running or 0) for rv in per_scheduler(self.ranks).values())


def per_scheduler(ranks: dict) -> dict:
    """One RankValues per DP rank (the lowest TP/PP rank's). TP ranks of one DP rank share one scheduler
    queue, and some versions print the same numbers on every TP rank: summing those would multiply them."""
    out: dict = {}
    for key in sorted(ranks, key=lambda k: tuple(-1 if v is None else v if isinstance(v, int) else 1 << 30
                                                 for v in k)):
        out.setdefault(key[0], ranks[key])
    return out


def usage_of(fields: dict):
    """KV pool usage of a batch line: `token usage`, or the fullest pool of a hybrid model."""
    u = fields.get("token_usage")
    if isinstance(u, (int, float)):
        return u
    best = None
    for key in ("full_token_usage", "swa_token_usage", "mamba_usage", "gpu_token_usage"):
        v = fields.get(key)
        if isinstance(v, (int, float)) and (best is None or v > best):
            best = v
    return best
