"""ServerState: what we know about one SGLang server, changed only by what its logs and /metrics say.

State changes only through `apply_event`, `apply_row`, `apply_scrape`, `forget_scrape` and `expire`; it never
reads a clock. Window tallies are classified against the thresholds in force when the sample arrives (the
profile is fixed for a process), so evaluation stays O(1) per signal however long the window.

Batch lines are the bulk of a log (every TP rank may print each one), so what Rows do (rows.BatchRows:
`apply_row`, `apply_rows`, `classify`) is the hot path of `analyze`: thresholds are read once at construction,
a batch line is a sample once per scheduler (not per TP rank), the sample windows are tallied in 1-second
buckets, and the numbers of a line that is not a sample are read only when someone reads the ranks (`ranks`,
`schedulers`, `pending`).
"""
from __future__ import annotations

from collections import Counter, deque

from exporter.catalog import COUNT_MAX, SIGNALS_BY_ID
from exporter.ingest.events import Event
from exporter.releases import flags
from exporter.state.errors import RequestOutcomes
from exporter.state.failures import CRASH_KINDS, STAGE_KINDS, FailureTracker
from exporter.state.ranks import MAX_RANKS, RankValues, fields_shape, per_scheduler, rank_label
from exporter.state.rows import BatchRows
from exporter.state.scraped import ScrapeFeed
from exporter.state.serving import ServingFeed
from exporter.state.startup import _MEMORY_READINGS, MAX_RESTART_EVIDENCE, StartupFacts
from exporter.state.tuning import LogTuning
from exporter.state.windows import Histogram, HitWindow, TimeWindow

# the event kinds apply_event reads beyond batch lines
_STATE_KINDS = frozenset(("retraction", "oom", "watchdog_timeout", "memory_config", "server_args", "load_weight",
                          "server_ready", "http_access", "request_error")) | CRASH_KINDS | STAGE_KINDS
_SERVING_KINDS = frozenset(("server_args", "load_weight", "server_ready"))   # start-up durations (ServingFeed)
FRACTION_SIGNALS = ("queue_below_range", "queue_above_range", "kv_cache_underused", "concurrency_capped")


class ServerState(BatchRows, StartupFacts, ScrapeFeed, ServingFeed):
    """One SGLang server's state; Rows, the start-up and /metrics parts are its bases' jobs."""

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
        self.format_family: str = ""    # the batch lines' format family: the parser knows it, its reader sets it
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
        self._row_slots: dict = {}      # what a Row of a layout and rank does (BatchRows._row_slot)
        self._slot_ranks: list[dict] = []
        self._row_kinds: list[str] = []
        self._row_counts: list[int] = []
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
        self._resume_seconds = param("server_crashed", "resume_seconds") or 30.0
        self._tally = self.samples.tally     # classify counts in it (one list for the window's life)
        self.tuning = LogTuning(params)      # what leaders' batch lines say for the tuning signals
        self._tuning_shapes: dict = {}       # learned layout -> whether its lines feed self.tuning
        self._serving_init(params, window)
        self._limits()
        self.retractions = TimeWindow(max(window["retractions_frequent"], window["retraction_storm"]))
        self.ooms = {"prefill": TimeWindow(window["oom_prefill"]), "decode": TimeWindow(window["oom_decode"])}
        self.watchdogs = TimeWindow(window["stalled"])
        self.outcomes = RequestOutcomes(window["error_rate"])
        # the windows expire() drops from (made once: a new epoch clears them in place)
        tuning_time = tuple(w for w in self.tuning.windows if isinstance(w, TimeWindow))
        self._hit_windows = (self.samples, self.admission,
                             *(w for w in self.tuning.windows if not isinstance(w, TimeWindow)))
        self._time_windows = (self.retractions, *self.ooms.values(), self.watchdogs, *tuning_time,
                              *self.outcomes.windows)
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
            self.apply_row((fields_shape(kind, f), f, ev.ts, ev.time, ev.rank, ev.line), now)
            return
        try:
            self.events_total[kind] += 1
        except KeyError:
            self.events_total[kind] = 1
        if kind not in _STATE_KINDS:
            return                    # request logs, ...: counted only
        if kind == "http_access":     # a POST's status feeds the error rate; health checks and scrapes are GETs
            if f.get("method") == "POST":
                self.outcomes.access("POST", f.get("status", 0), now)
            return
        if kind in _SERVING_KINDS:
            self.serving_event(kind, ev, now)
        if ev.ts is not None:
            last = self._source_t.get(ev.source)
            if last is None or ev.ts > last:
                if last is None and len(self._source_t) >= MAX_RANKS:
                    self._source_t.clear()
                self._source_t[ev.source] = ev.ts
        if kind == "request_error":
            self.outcomes.request_error(f, now)
        elif kind == "retraction":
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
            self.failures.failure(kind, f, now, ev.line, self.last_batch_t, self._resume_seconds)
        elif kind in STAGE_KINDS:
            stage_phase = f.get("phase")
            self._startup_line(kind, ev, now)
            if kind == "load_weight" and stage_phase == "begin" and f.get("avail_mem_bytes"):
                self.total_gpu_bytes = max(self.total_gpu_bytes or 0, f["avail_mem_bytes"])
            elif kind in _MEMORY_READINGS and stage_phase != "begin":
                self._memory_reading(rank_label(ev.rank), kind, f.get("avail_mem_bytes"))
            self.failures.stage_event(kind, f)


    def _limits(self) -> None:
        """What classify reads of memory_config and server_args, read again whenever they change. Only this
        class writes them (apply_event, apply_scrape, _new_epoch), and each write is followed by this."""
        self._cap = self.memory_config.get("max_running_requests") if self._cap_fraction is not None else None
        # the release's name for it (cuda_graph_max_bs_decode from 0.5.14 on), else the profile's default
        max_bs = flags.value(self.server_args, "cuda_graph_max_bs") or self._graph_default_bs
        self._graph_max_bs = max_bs if isinstance(max_bs, (int, float)) else None    # None: any batch is small
        # the capacity line prints the chunk size in force (server_args may say None: SGLang's pick); -1: off.
        # (One spelling in every release: no flags.value, whose release inference costs milliseconds.)
        chunk = self.memory_config.get("chunked_prefill_size")
        if chunk is None:
            chunk = self.server_args.get("chunked_prefill_size")
        self.chunk_size = chunk if isinstance(chunk, int) and not isinstance(chunk, bool) else None
        self._admission_limits()

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
        """At every evaluation: what left each window's span is dropped."""
        for w in self._hit_windows:
            w.expire(now)
        for tw in self._time_windows:
            tw.expire(now)
        edge = now - self.scrape_window
        while self.scrape_samples and self.scrape_samples[0][0] < edge:
            self.scrape_samples.popleft()
        self.expire_serving(now)

    def retractions_per_minute(self, now: float, window: float) -> float:
        """Retraction events per minute over the last `window` seconds, exactly. Which span to take is the
        signals' rule (signals.retraction_rate, the one every face uses), not this method's."""
        return self.retractions.weight_since(now - window) / (window / 60.0)

    def pending(self) -> float | None:
        """Queue + running of the server, from the latest value of each scheduler; None when unknown."""
        if not self._ranks:
            return None
        return sum((rv.queue or 0) + (rv.running or 0) for rv in self.schedulers().values())

    def scraped_queue(self) -> float | None:
        """The waiting queue of SGLang's last scrape (num_queue_reqs, summed over ranks); None when not scraped."""
        queues = [v["queue"] for v in self.native.values() if v.get("queue") is not None]
        return float(sum(queues)) if queues else None

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


