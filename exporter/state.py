"""What we know about one SGLang server: latest values per rank, start-up facts per epoch, and bounded time
windows of the samples and events the signals judge.

State changes only through `apply_event`, `apply_row`, `apply_scrape`, `forget_scrape` and `expire`; it never
reads a clock.
Window tallies are classified against the thresholds in force when the sample arrives (the profile is fixed
for a process), so evaluation stays O(1) per signal however long the window.

Batch lines are the bulk of a log (every TP rank may print each one), so `apply_row` and `classify` are the
hot path of `analyze`: thresholds are read once at construction, a batch line is a sample once per scheduler
(not per TP rank), the sample windows are tallied in 1-second buckets, and the numbers of a line that is not
a sample are read only when someone reads the ranks (`ranks`, `schedulers`, `pending`).
"""
from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field

from exporter import flags
from exporter.catalog import COUNT_MAX, SIGNALS_BY_ID
from exporter.catalog_native import family_values
from exporter.failures import CRASH_KINDS, STAGE_KINDS, FailureTracker
from exporter.ingest.events import RANK_KEYS, Event

MAX_RANKS = 64            # distinct rank label sets kept; more fold into "other" (bounded label sets)
MAX_WINDOW_SAMPLES = 20000  # per event window (TimeWindow); it never holds more, whatever the input rate
MAX_WINDOW_BUCKETS = 3600   # per hit window (HitWindow): 1-second buckets, an hour; memory is bounded whatever
                            # the sample rate, and every catalog window (<= 15 min) fits whole
OTHER_RANK = ("other", None, None)
MAX_COUNTER_SERIES = 256  # series kept per scraped counter, to tell a reset of one from the others (apply_scrape)
_STATE_KINDS = frozenset(("retraction", "oom", "watchdog_timeout", "memory_config", "server_args", "load_weight",
                          "server_ready")) | CRASH_KINDS | STAGE_KINDS   # the other event kinds apply_event reads
MAX_RESTART_EVIDENCE = 32  # restarts kept with their evidence (the newest; the count goes on)
CLOCK_STEP_BACK = 300      # seconds a source's start-up line may lie before its latest line (ranks interleave)
_MEMORY_READINGS = ("memory_config", "graph_capture", "memory_pool")   # lines whose avail mem is a headroom
# per-rank lines a rank prints once per start of its process: printed again after its own batch lines, the
# process started again (memory pool and graph capture lines repeat for a draft model, so they are no evidence)
_RANK_STARTS = frozenset(("load_weight", "memory_config"))
_MAIN_LINES = ("server_args", "server_ready")    # printed by the launching process, not by a rank
_START_TEXT = {"load_weight": "load weight begin", "memory_config": "capacity line"}
FRACTION_SIGNALS = ("queue_below_range", "queue_above_range", "kv_cache_underused", "concurrency_capped")


@dataclass(slots=True)
class RankValues:
    queue: float | None = None
    running: float | None = None
    usage: float | None = None
    throughput: float | None = None
    cuda_graph: bool | None = None
    unread: dict | None = None      # row shape -> its latest batch line not yet read (see apply_row)

    def read(self) -> None:
        """Take in the batch lines apply_row left unread: the latest of each shape, in the order they came (a
        newer line of a shape sets everything an older one of that shape set), so the values end up as if
        every line had been read."""
        for shape, line in (self.unread or {}).items():
            self.take(*shape.values(line))
        self.unread = None

    def take(self, queue, running, usage, throughput, graph) -> None:
        """A batch line's numbers (None: the line does not print it, the last value stands)."""
        if queue is not None:
            self.queue = queue
        if running is not None:
            self.running = running
        if usage is not None:
            self.usage = usage
        if throughput is not None:
            self.throughput = throughput
        if graph is not None:
            self.cuda_graph = graph


class _Fields:
    """The `shape` of a batch Event in apply_row: its values come from the Event's fields, as a learned shape's
    come from its groups (events.Row)."""
    __slots__ = ("kind",)
    batch = True

    def __init__(self, kind: str):
        self.kind = kind

    def values(self, f: dict) -> tuple:
        usage = f.get("token_usage")
        if usage.__class__ is not float:
            usage = usage_of(f)     # an int, or a hybrid model's pools
        if self.kind == "decode_batch":
            return f.get("queue_req"), f.get("running_req"), usage, f.get("gen_throughput"), f.get("cuda_graph")
        return f.get("queue_req"), f.get("running_req"), usage, None, None


_FIELDS = {kind: _Fields(kind) for kind in ("decode_batch", "prefill_batch")}
_FIELDS_BY_PRINTED: dict[tuple, _Fields] = {}


def _fields_shape(kind: str, f: dict) -> _Fields:
    """The `shape` of a batch Event in apply_row: one per kind and set of the five numbers the line prints. A
    rank keeps the latest unread line of each shape; with one shape per kind, a line lacking a number (say
    "cuda graph") would hide an earlier unread line that printed it, as learned shapes (one per key set) never
    do."""
    printed = tuple(v is not None for v in _FIELDS[kind].values(f))
    shape = _FIELDS_BY_PRINTED.get((kind, printed))
    if shape is None:
        shape = _FIELDS_BY_PRINTED[(kind, printed)] = _Fields(kind)    # at most 2 x 32
    return shape


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
        w, i = self.window, self._i
        return w.tally[i] - w._gone[i]      # HitWindow.count(i), inline: read at every evaluation

    @property
    def hits(self) -> int:
        w, i = self.window, self._i + 1
        return w.tally[i] - w._gone[i]


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


@dataclass
class Histogram:
    """Cumulative bucket snapshots of one SGLang latency histogram, summed over its series."""
    snapshots: deque = field(default_factory=deque)   # (t, {le: cumulative count})


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
        self.headroom_bytes: float | None = None    # the worst rank's (memory_by_rank), or None
        self.headroom_rank: str | None = None       # that rank's label ("DP3 TP0"; "" for an unprefixed log)
        self.memory_by_rank: dict[str, dict] = {}   # rank label -> start-up memory facts of that GPU (epoch)
        self.total_gpu_bytes: float | None = None   # free memory before weights load ~ usable GPU memory
        self.restart_evidence: deque = deque(maxlen=MAX_RESTART_EVIDENCE)   # why each restart was counted
        self.model: str = ""
        self.format_family: str = ""
        self._ranks: dict[tuple, RankValues] = {}
        self._unread: list[RankValues] = []    # ranks that may hold unread lines (read_all skips the rest)
        self.last_batch_t: float | None = None
        self.last_progress_t: float | None = None
        self._startup_ranks: dict[str, set] = {}   # start-up kind -> rank labels that printed it (epoch)
        self._batch_ranks: set = set()    # rank labels that printed batch lines in this epoch
        self._ready = False               # this epoch printed its ready line
        self._crashed = False             # a crash line since this epoch's server_args
        self._source_t: dict[str, float] = {}    # source -> latest log time of its non-batch lines
        self._leader_tp: dict = {}     # DP rank -> the TP rank that prints its batch lines
        self._batch_slots: dict = {}   # id(rank dict) -> _batch_slot(rank)
        self._schedulers: dict | None = None   # per_scheduler(self.ranks), until the rank table changes
        window = {sid: (SIGNALS_BY_ID[sid].window_seconds) for sid in SIGNALS_BY_ID}
        # every batch sample is judged by these five signals over one window: one HitWindow counts them all
        sampled = (*FRACTION_SIGNALS, "cuda_graph_off_small_batch")
        assert len({window[sid] for sid in sampled}) == 1, f"{sampled} must share one window length"
        self.samples = HitWindow(window[sampled[0]], series=len(sampled))
        self.fraction = {sid: self.samples.series(i) for i, sid in enumerate(FRACTION_SIGNALS)}
        self.graph_off = self.samples.series(len(FRACTION_SIGNALS))
        # classify() runs for every batch sample: the thresholds (fixed for the process) are read here once;
        # None = the signal is inactive in this profile
        def param(sid, key):
            return p[key] if (p := params.get(sid)) else None
        self._min_queue = param("queue_below_range", "min_queue")
        self._max_queue = param("queue_above_range", "max_queue")
        self._min_usage = param("kv_cache_underused", "min_usage")
        self._cap_fraction = param("concurrency_capped", "running_fraction")
        self._cap_max_usage = param("concurrency_capped", "max_usage")
        self._graph_default_bs = param("cuda_graph_off_small_batch", "default_max_bs")
        self._tally = self.samples.tally     # classify counts in it (one list for the window's life)
        self._limits()
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
        self.events_total: dict[str, int] = {}     # kind -> events (a plain dict: a Counter is slower to bump)
        self.failures = FailureTracker()
        self.graph_off_peak = 0     # the largest decode batch of this epoch that ran without CUDA graph (advice)
        self.observed_from: float | None = None    # when observation began (the log's start, the sidecar's)
        self.clock_known = True     # False: a replayed log without timestamps (rates and ages cannot be judged)
        # /metrics-fed progress and retraction counters (metrics-only deployments)
        self._last_counter: dict[str, dict] = {}    # counter -> {series labels: last value} (apply_scrape)
        self.metrics_seen = False
        self.native_present: frozenset = frozenset()   # values the last good scrape fed (catalog_native)
        self.native_seen: frozenset = frozenset()      # SGLang families it carried: the releases it can be
        self.native: dict[tuple, dict] = {}            # rank -> the last scrape's gauges (all of them)
        self._last_retracted_gauge: float | None = None
        # one server-wide sample per scrape of what only /metrics tells (catalog_tuning's signals read them)
        self.scrape_samples: deque = deque()     # (t, {queue, usage, hit, evictable, capacity, paused, spec, pd})
        self.scrape_window = max(window[sid] for sid in ("prefix_reuse_missed", "kv_pressure", "spec_accept_low",
                                                          "pd_backlog"))

    @property
    def ranks(self) -> dict[tuple, RankValues]:
        """Latest values per rank label set, every batch line read."""
        if self._unread:
            self.read_all()
        return self._ranks

    def read_all(self) -> None:
        for rv in self._unread:
            if rv.unread:
                rv.read()
        self._unread.clear()

    # ------------------------------------------------------------------ events (logs)
    def apply_event(self, ev: Event, now: float) -> None:
        kind, f = ev.kind, ev.fields
        if self.observed_from is None:     # rows (apply_row) come through callers that set it (engine, analyze)
            self.observed_from = now
        if kind == "decode_batch" or kind == "prefill_batch":
            self.apply_row((_fields_shape(kind, f), f, ev.ts, ev.time, ev.rank, ev.line), now)
            return
        try:
            self.events_total[kind] += 1
        except KeyError:
            self.events_total[kind] = 1
        if kind not in _STATE_KINDS:
            return                    # access lines, request logs, ...: counted only
        if ev.ts is not None:
            last = self._source_t.get(ev.source)
            if last is None or ev.ts > last:
                if last is None and len(self._source_t) >= MAX_RANKS:
                    self._source_t.clear()
                self._source_t[ev.source] = ev.ts
        if kind == "retraction":
            if f.get("testing"):
                return
            # every TP rank of a scheduler group prints the same retraction; count it once per DP rank, from
            # the rank that prints that DP rank's batch lines (TP0 without DP attention; DP1 TP4 with it),
            # for the event counter and the retracted-requests sum alike
            tp = ev.rank.get("tp")
            if tp is None or tp == self._leader_tp.get(ev.rank.get("dp"), 0):
                # counters only grow: the grammar lets no count outside 0 <= n < COUNT_MAX through, and an
                # Event built elsewhere with another number adds nothing (never a negative, a bool, a float)
                n = f.get("retracted_reqs")
                if n.__class__ is int and 0 < n < COUNT_MAX:
                    self.retracted_requests_total += n
                self.retractions_total += 1
                self.retractions.push(now)
                self.failures.count("retractions", now)
        elif kind == "oom":
            phase = self.failures.oom_phase(f.get("phase", "unknown"), self.last_batch_t is not None)
            self.failures.oom(f, phase, now, ev.line)
            self.oom_total[phase] += 1
            if phase == "prefill":
                self.ooms["prefill"].push(now)
            elif phase in ("decode", "unknown"):
                self.ooms["decode"].push(now)
        elif kind == "watchdog_timeout":
            if not f.get("soft"):
                self.watchdog_total += 1
                self.watchdogs.push(now)
                self.failures.count("watchdog_timeouts", now)
        elif kind == "memory_config":
            label = rank_label(ev.rank)
            again = label in self._startup_ranks.get(kind, ())
            self._startup_line(kind, ev, now, f"a second capacity line on {label or 'the unprefixed rank'}"
                               if again else None)
            self.memory_config.update(f)
            self._limits()
            self._memory_reading(label, kind, f.get("available_gpu_mem_bytes"))
        elif kind == "server_args":
            self._startup_line(kind, ev, now, self._args_evidence(f))
            self.failures.server_args(now)
            self.server_args = dict(f)
            self._limits()
            self.model = str(f.get("served_model_name") or f.get("model_path") or "")[:200]
        elif kind == "server_ready":
            # warm-up batches run before the ready line, so batches alone do not mean a restart here
            self._startup_line(kind, ev, now, "a second ready line" if self._ready else None)
            self._ready = True
            self.failures.server_ready()
        elif kind in CRASH_KINDS:
            self._crashed = True
            self.failures.failure(kind, f, now, ev.line)
        elif kind in STAGE_KINDS:
            phase = f.get("phase")  # type: ignore[assignment]  # (None: a stage line without a phase)
            self._startup_line(kind, ev, now)
            if kind == "load_weight" and phase == "begin" and f.get("avail_mem_bytes"):
                self.total_gpu_bytes = max(self.total_gpu_bytes or 0, f["avail_mem_bytes"])
            elif kind in _MEMORY_READINGS and phase != "begin":
                self._memory_reading(rank_label(ev.rank), kind, f.get("avail_mem_bytes"))
            self.failures.stage_event(kind, f)

    # ------------------------------------------------------------------ start-up and restarts
    @property
    def startup_seen(self) -> bool:
        """Whether a start-up line of the running server was read (False: joined it mid-life, or nothing yet)."""
        return self.epoch_started is not None

    def _args_evidence(self, f: dict) -> str | None:
        """Why a server_args line means SGLang started again; None when it belongs to the current start-up
        (only the launching process prints it, once per launch)."""
        if self.last_batch_t is not None:
            return "server_args after batch lines"
        if self._ready:
            return "server_args after the ready line"
        if self._crashed:
            return "server_args after a crash"
        if self.server_args and dict(f) != self.server_args:
            return "server_args with other values"
        return None

    def _startup_line(self, kind: str, ev: Event, now: float, evidence: str | None = None) -> None:
        """A line of the start-up sequence: every rank prints its own (load weight, memory pool, capacity,
        CUDA graph), so a line is a restart only with evidence that the process started again: the caller's,
        a rank starting again after its own batch lines (or after a crash), or the source's clock going
        back. Otherwise it joins the current start-up (or opens the first one)."""
        label = rank_label(ev.rank)
        if evidence is None and kind in _RANK_STARTS and ev.fields.get("phase") != "end":
            if label in self._batch_ranks:
                evidence = f"{_START_TEXT[kind]} on {label or 'the unprefixed rank'} after its batch lines"
            elif self.epoch_started is None and self.last_batch_t is not None:
                evidence = f"{_START_TEXT[kind]} after batch lines of a server joined running"
            elif self._crashed and kind == "load_weight" and label in self._startup_ranks.get(kind, ()):
                evidence = f"{_START_TEXT[kind]} on {label or 'the unprefixed rank'} again after a crash"
        if evidence is None and ev.ts is not None:
            last = self._source_t.get(ev.source)
            if last is not None and last - ev.ts > CLOCK_STEP_BACK:
                evidence = f"the log's clock went back {last - ev.ts:.0f} s in {ev.source or 'the log'}"
                self._source_t[ev.source] = ev.ts     # the new process's clock from here on
        if evidence is not None:
            self._new_epoch(now, evidence, ev)
        elif self.epoch_started is None:
            self._new_epoch(now)
        seen = self._startup_ranks.setdefault(kind, set())
        if len(seen) < 4 * MAX_RANKS:
            seen.add(label)

    def _new_epoch(self, now: float, evidence: str | None = None, ev: Event | None = None) -> None:
        """SGLang (re)started (`evidence` says how we know; None: the first start-up seen): start-up facts and
        windows restart; counters keep counting."""
        if evidence is not None:
            self.restarts += 1
            self.failures.count("restarts", now)
            self.restart_evidence.append({"t": now, "time": ev.time if ev else None, "evidence": evidence,
                                          "source": ev.source if ev else "", "line": ev.line if ev else 0})
        self.failures.start()
        self.epoch += 1
        self.epoch_started = now
        self._startup_ranks = {}
        self._batch_ranks = set()
        self._ready = self._crashed = False
        self.server_args = {}
        self.memory_config = {}
        self._limits()
        self.headroom_bytes = self.headroom_rank = None
        self.memory_by_rank = {}
        self._ranks.clear()
        self._unread.clear()
        self._schedulers = None
        self._batch_slots.clear()
        self._leader_tp.clear()       # a restart may change the layout (dp=4 -> dp=2 moves DP1's leader to TP4)
        self.last_batch_t = None
        self.samples.clear()
        self.graph_off_peak = 0

    def _memory_reading(self, label: str, kind: str, avail) -> None:
        """A rank's free GPU memory as a start-up line printed it. Its headroom is the capacity line's reading
        (printed last, after CUDA graph capture) or, on ranks that print none (TP1.., releases before 0.4.7),
        the latest model-runner reading (graph capture end, memory pool end). The server's headroom is the
        worst rank's: the 5-8 GB rule is per GPU."""
        if not isinstance(avail, (int, float)) or isinstance(avail, bool):
            return
        m = self.memory_by_rank.get(label)
        if m is None:
            if len(self.memory_by_rank) >= MAX_RANKS:
                return
            m = self.memory_by_rank[label] = {}
        m["capacity_bytes" if kind == "memory_config" else "runner_bytes"] = avail
        m["headroom_bytes"] = m.get("capacity_bytes", m.get("runner_bytes"))
        worst = min(((v["headroom_bytes"], k) for k, v in self.memory_by_rank.items()), default=(None, None))
        self.headroom_bytes, self.headroom_rank = worst

    def facts(self) -> dict:
        """The server as a whole, JSON-ready (analyze's `server`, the API's `server`): whether its start-up was
        seen, the SGLang release range its server_args keys point to, its rank layout, restarts with their
        evidence, and each GPU's free memory after start-up (the least first)."""
        release = flags.infer_release(self.server_args) if self.server_args else None
        gpus = sorted(self.memory_by_rank.items(), key=lambda kv: (kv[1]["headroom_bytes"], kv[0]))
        return {
            "startup_seen": self.startup_seen,
            "release": {"first": release[0], "last": release[1]} if release else None,
            "layout": self.layout(),
            "restarts": self.restarts,
            "restart_evidence": [dict(e) for e in self.restart_evidence],
            "gpu_headroom": [{"rank": label, "bytes": m["headroom_bytes"]} for label, m in gpus],
            "gpu_headroom_worst_rank": self.headroom_rank,
        }

    def layout(self) -> dict:
        """The rank layout: sizes from server_args (any release's spelling), else counted from the ranks seen
        in this start-up."""
        a = self.server_args
        seen: dict[str, set] = {}
        ranks = set().union(*(labels for kind, labels in self._startup_ranks.items() if kind not in _MAIN_LINES))
        for label in ranks:
            for key, value in parse_rank_label(label).items():
                seen.setdefault(key, set()).add(value)
        out: dict = {}
        for key, names in (("tp", ("tp_size", "tensor_parallel_size")), ("dp", ("dp_size", "data_parallel_size")),
                           ("pp", ("pp_size", "pipeline_parallel_size")),
                           ("ep", ("ep_size", "expert_parallel_size"))):
            value = next((a[n] for n in names if isinstance(a.get(n), int) and not isinstance(a.get(n), bool)),
                         None)
            if value is None and seen.get(key):
                value = max(seen[key]) + 1
            out[key] = value
        dpa = a.get("enable_dp_attention")
        out["dp_attention"] = dpa if isinstance(dpa, bool) else None
        out["ranks_seen"] = len(ranks)
        return out

    def apply_row(self, row: tuple, now: float) -> None:
        """A line still in its learned layout (events.Row): what apply_event does with its Event, without
        building the Event. Batch lines are nearly all of a log, so this is the hot path of `analyze`. A batch
        line updates its rank's gauges; a decode line of a DP rank's leader is also a sample. An access line or
        request log is only counted."""
        shape = row[0]
        kind = shape.kind
        try:
            self.events_total[kind] += 1
        except KeyError:
            self.events_total[kind] = 1
        if not shape.batch:
            return                    # an access line or request log read by its layout: counted only
        rank = row[4]
        slot = self._batch_slots.get(id(rank))
        if slot is None or slot[0] is not rank:
            slot = self._batch_slot(rank)
        rv = slot[1]
        self.last_batch_t = self.last_progress_t = now
        if not slot[2] or kind != "decode_batch":
            # not a sample: nothing needs its numbers before someone reads the rank (`ranks`), and by then
            # only the latest line of each shape counts; most lines of a log end here, unread
            unread = rv.unread
            if unread is None:
                rv.unread = {shape: row[1]}
                self._unread.append(rv)
            else:
                unread.pop(shape, None)     # keep them in the order they came
                unread[shape] = row[1]
            return
        queue, running, usage, throughput, graph = values = shape.values(row[1])
        if rv.unread:
            # a leader's unread lines are (but for ranks folded into "other") its prefill lines since its last
            # sample; a line that sets all five numbers overwrites whatever reading them would set, so they are
            # dropped unread (the same result; reading them cost a sample as much as its own numbers)
            if None in values:
                rv.read()
            else:
                rv.unread = None
        rv.take(queue, running, usage, throughput, graph)
        self.classify(now, queue, running, usage, graph)

    def _batch_slot(self, rank: dict) -> tuple:
        """(rank, its RankValues, whether its batch lines are samples), kept per rank dict until the leaders or
        the rank table change.

        One sample per scheduler, not per TP rank. The TP ranks of a DP rank share one scheduler, and when they
        all print batch lines (--enable-metrics-for-all-schedulers) they repeat its queue, running and usage:
        every line still updates its rank's gauges, but only the lines of the DP rank's lowest TP rank (its
        leader: TP0, or DP1 TP4 with DP attention and tp=8, dp=2) are tallied, so a window holds the same samples
        (and min_samples means the same) whatever the TP size."""
        dp, tp = rank.get("dp"), rank.get("tp")
        sample = True
        if tp is not None:
            leaders = self._leader_tp
            leader = leaders.get(dp)
            if leader is None:
                if len(leaders) < MAX_RANKS:
                    leaders[dp] = tp
                    self._batch_slots.clear()
                # else the table is full: every line of this DP rank is a sample (per-rank sampling)
            elif tp < leader:
                leaders[dp] = tp      # a lower TP rank showed up: it leads from now on (the choice is stable)
                self._batch_slots.clear()
            elif tp != leader:
                sample = False
        if len(self._batch_ranks) < 4 * MAX_RANKS:
            self._batch_ranks.add(rank_label(rank))
        key = (dp, tp, rank.get("pp"))
        rv = self._ranks.get(key)
        if rv is None:
            rv = self._new_rank(key)
        if len(self._batch_slots) >= 4096:
            self._batch_slots.clear()
        slot = self._batch_slots[id(rank)] = (rank, rv, sample)
        return slot

    def _new_rank(self, key: tuple) -> RankValues:
        """A slot for a rank not seen yet; past MAX_RANKS - 1 distinct ranks they share the "other" slot, so
        the table (and the exported label sets) never exceed MAX_RANKS entries."""
        if len(self._ranks) >= MAX_RANKS - 1:
            key = OTHER_RANK
        self._schedulers = None
        return self._ranks.setdefault(key, RankValues())

    def _limits(self) -> None:
        """What classify reads of memory_config and server_args, read again whenever they change. Only this
        class writes them (apply_event, apply_scrape, _new_epoch), and each write is followed by this."""
        self._cap = self.memory_config.get("max_running_requests") if self._cap_fraction is not None else None
        # the release's name for it (cuda_graph_max_bs_decode from 0.5.14 on), else the profile's default
        max_bs = flags.value(self.server_args, "cuda_graph_max_bs") or self._graph_default_bs
        self._graph_max_bs = max_bs if isinstance(max_bs, (int, float)) else None    # None: any batch is small

    def classify(self, now: float, queue, running, usage, cuda_graph) -> None:
        """Count one batch sample in every series it is judged in. The tally's layout follows the series
        order of self.samples: (total, hits) x (queue_below_range, queue_above_range, kv_cache_underused,
        concurrency_capped, cuda_graph_off_small_batch); literal indices keep it fast, as do the limits read
        once per change (_limits), the window's bucket check inline (HitWindow.bucket) and a hit added only
        when there is one."""
        w = self.samples
        if not now < w._end:
            w.start(now)
        b = self._tally
        if queue is not None:
            if self._min_queue is not None:
                b[0] += 1
                if queue < self._min_queue:
                    b[1] += 1
            if self._max_queue is not None:
                b[2] += 1
                if queue > self._max_queue:
                    b[3] += 1
            if usage is not None:
                if self._min_usage is not None:
                    b[4] += 1
                    if queue > 0 and usage < self._min_usage:
                        b[5] += 1
                cap = self._cap
                if cap and running is not None:
                    b[6] += 1
                    if running >= self._cap_fraction * cap and queue > 0 and usage < self._cap_max_usage:
                        b[7] += 1
        if cuda_graph is not None and running is not None and self._graph_default_bs is not None:
            b[8] += 1
            max_bs = self._graph_max_bs
            if not cuda_graph and (max_bs is None or running <= max_bs) and running > 0:
                b[9] += 1
                if running > self.graph_off_peak:
                    self.graph_off_peak = running

    # ------------------------------------------------------------------ scrapes (/metrics)
    def apply_scrape(self, scrape, now: float) -> None:
        """Fold one successful scrape of SGLang's /metrics (exporter.scrape.ScrapeResult) into state. Its numbers
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
                usage = _pool_usage(vals)
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
        # sglang:startup_available_gpu_memory_gb (0.5.11+) is the log's available_gpu_mem, per rank, in GiB
        headroom = [v["headroom_gb"] for v in scrape.ranks.values() if v.get("headroom_gb") is not None]
        if headroom and (not self.log_fed or self.headroom_bytes is None):
            self.headroom_bytes = min(headroom) * 2**30

    def _scrape_retractions(self, scrape, now: float) -> None:
        """Retractions from whichever metric the release has: the counter (0.5.7+; total_retracted_reqs, a
        gauge counting since start-up, on 0.4.9-0.5.2), else the gauge num_retracted_reqs (0.5.2+: requests
        retracted since the scheduler's last stats report, then reset to 0). The gauge is a sample: a
        non-zero value that differs from the last scrape's is a new retraction event of that many requests
        (two reports between scrapes count as one; equal non-zero values in a row as one)."""
        grew = self._increase("retracted_requests", scrape)
        if "retracted_requests" not in scrape.counters:
            values = [v["retracted_gauge"] for v in scrape.ranks.values() if v.get("retracted_gauge") is not None]
            if not values:
                return
            now_value = sum(values)
            last, self._last_retracted_gauge = self._last_retracted_gauge, now_value
            grew = now_value if now_value > 0 and now_value != last else None
        if grew:
            self.retractions.push(now, grew)
            self.retractions_total += 1
            self.retracted_requests_total += round(grew)

    def _increase(self, name: str, scrape) -> float | None:
        """How much SGLang's counter `name` grew since the last scrape that had it, as Prometheus' increase()
        counts: per series, a value below the last one is a reset (the server restarted and counts from 0
        again, so all of the new value is growth), never a decrease; a series seen for the first time only
        sets its base. None when the scrape lacks the counter or this is its first sight."""
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
        grew = 0.0
        for key, value in kept.items():
            prev = last.get(key)
            if prev is not None:
                grew += value - prev if value >= prev else value
        return grew

    def forget_scrape(self) -> None:
        """SGLang's /metrics has failed for longer than the staleness time: what it alone told us is no longer
        current, so it goes (not exported; the signals reading it go unknown). The counters' bases stay, so
        the next good scrape counts what happened meanwhile, or a reset."""
        if not self.log_fed:
            self._ranks.clear()
            self._unread.clear()
            self._schedulers = None
            self._batch_slots.clear()
            self._leader_tp.clear()
        self.histograms.clear()
        self.native = {}
        self.native_present = frozenset()
        self.scrape_samples.clear()

    # ------------------------------------------------------------------ durability
    _COUNTERS = ("retractions_total", "retracted_requests_total", "watchdog_total", "restarts")
    _COUNTER_MAPS = ("oom_total", "events_total")

    def counters(self) -> dict:
        """Every cumulative count, for the positions file (checkpoint.py): restored after a sidecar restart,
        so our counters never go back and each line is counted once."""
        out: dict = {k: getattr(self, k) for k in self._COUNTERS}
        for k in self._COUNTER_MAPS:
            out[k] = dict(getattr(self, k))
        return out

    def restore_counters(self, saved: dict) -> None:
        """Set the counters to what `counters()` gave before a restart. A value that is not a count (a foreign
        or damaged file) is skipped: that counter starts from what this process counted."""
        def count(v) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 62
        for k in self._COUNTERS:
            if count(saved.get(k)):
                setattr(self, k, saved[k])
        for k in self._COUNTER_MAPS:
            m = saved.get(k)
            if isinstance(m, dict):
                target = getattr(self, k)
                target.clear()
                target.update({str(key): v for key, v in m.items() if count(v)})

    # ------------------------------------------------------------------ time
    def expire(self, now: float) -> None:
        self.samples.expire(now)
        edge = now - self.scrape_window
        while self.scrape_samples and self.scrape_samples[0][0] < edge:
            self.scrape_samples.popleft()
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
        if not self._ranks:
            return None
        return sum((rv.queue or 0) + (rv.running or 0) for rv in self.schedulers().values())

    def schedulers(self) -> dict:
        """per_scheduler(self.ranks), kept until a rank is added or the table is cleared (the RankValues in it
        are updated in place, so the mapping stays current in between)."""
        if self._schedulers is None:
            self._schedulers = per_scheduler(self.ranks)
        elif self._unread:
            # only these ranks' lines: the others wait until someone reads `ranks` (the stalled signal reads
            # this at every evaluation, and reading every TP rank's lines each time cost as much as the rest)
            for rv in self._schedulers.values():
                if rv.unread:
                    rv.read()
            if len(self._unread) > 4 * MAX_RANKS:   # a rank read here comes back to the list with its next line
                self._unread = list({id(rv): rv for rv in self._unread if rv.unread}.values())
        return self._schedulers


def per_scheduler(ranks: dict) -> dict:
    """One RankValues per DP rank (the lowest TP/PP rank's). TP ranks of one DP rank share one scheduler
    queue, and some versions print the same numbers on every TP rank: summing those would multiply them."""
    out: dict = {}
    for key in sorted(ranks, key=lambda k: tuple(-1 if v is None else v if isinstance(v, int) else 1 << 30
                                                 for v in k)):
        out.setdefault(key[0], ranks[key])
    return out


def _pool_usage(vals: dict):
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
    leaders: dict = {}
    for key in sorted(ranks, key=lambda k: tuple(-1 if v is None else v if isinstance(v, int) else 1 << 30
                                                 for v in k)):
        leaders.setdefault(key[0], ranks[key])

    def total(name):
        vals = [v[name] for v in leaders.values() if v.get(name) is not None]
        return sum(vals) if vals else None

    usages = [u for u in (_pool_usage(v) for v in ranks.values()) if u is not None]
    hits = [v["cache_hit_rate"] for v in ranks.values() if v.get("cache_hit_rate") is not None]
    spec = [v["spec_accept_length"] for v in ranks.values() if v.get("spec_accept_length")]
    pd = [total(name) for name in _PD]
    pd = [x for x in pd if x is not None]
    return {"queue": total("queue"), "usage": max(usages) if usages else None, "hit": max(hits) if hits else None,
            "evictable": total("kv_evictable_tokens"), "capacity": total("max_total_num_tokens"),
            "paused": total("paused"), "spec": sum(spec) / len(spec) if spec else None,
            "pd": sum(pd) if pd else None}


def _present_of(scrape) -> set:
    """The values a ScrapeResult built by hand (without `present`) fed."""
    out = {k for vals in scrape.ranks.values() for k in vals}
    out.update(scrape.counters)
    out.update(family_values().get(name, name) for name in scrape.histograms)
    return out


def rank_label(rank: dict) -> str:
    """A rank as SGLang's prefix spells it ("DP1 TP4 EP4"; "" for a line without a rank tag)."""
    return " ".join(f"{k.upper()}{rank[k]}" for k in RANK_KEYS if rank.get(k) is not None)


def parse_rank_label(label: str) -> dict:
    """rank_label's inverse: {"dp": 1, "tp": 4}."""
    out = {}
    for part in label.split():
        for k in sorted(RANK_KEYS, key=len, reverse=True):
            tag = k.upper()
            if part.startswith(tag) and part[len(tag):].isdigit():
                out[k] = int(part[len(tag):])
                break
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
