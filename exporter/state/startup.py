"""Start-up facts per epoch: which start-up lines each rank printed, the evidence that SGLang started again,
each GPU's free memory after start-up, and the rank layout."""
from __future__ import annotations

from collections import deque

from exporter.ingest.events import Event
from exporter.releases import flags
from exporter.state.failures import FailureTracker
from exporter.state.parts import StatePart
from exporter.state.ranks import MAX_RANKS, parse_rank_label, rank_label
from exporter.state.tuning import LogTuning
from exporter.state.windows import HitWindow

MAX_RESTART_EVIDENCE = 32  # restarts kept with their evidence (the newest; the count goes on)
CLOCK_STEP_BACK = 300      # seconds a source's start-up line may lie before its latest line (ranks interleave)
_MEMORY_READINGS = ("memory_config", "graph_capture", "memory_pool")   # lines whose avail mem is a headroom
# per-rank lines a rank prints once per start of its process: printed again after its own batch lines, the
# process started again (memory pool and graph capture lines repeat for a draft model, so they are no evidence)
_RANK_STARTS = frozenset(("load_weight", "memory_config"))
_MAIN_LINES = ("server_args", "server_ready")    # printed by the launching process, not by a rank
_START_TEXT = {"load_weight": "load weight begin", "memory_config": "capacity line"}


class StartupFacts(StatePart):
    """ServerState's start-up part: the epoch's start-up lines, restarts and per-GPU headroom."""

    # its facts (ServerState.__init__ sets them)
    epoch: int
    epoch_started: float | None
    restarts: int
    restart_evidence: deque
    headroom_bytes: float | None
    headroom_rank: str | None
    _startup_ranks: dict[str, set]
    _batch_ranks: set
    _ready: bool
    _crashed: bool
    _source_t: dict[str, float]
    # what a new epoch resets of the rest of ServerState
    last_batch_t: float | None
    failures: FailureTracker
    samples: HitWindow
    tuning: LogTuning
    graph_off_peak: int

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
        back once the start-up block ended (ready, batch lines or a crash). Otherwise it joins the current
        start-up (or opens the first one)."""
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
                # inside one start-up block (not ready, no batch line, no crash yet) a clock going back is the
                # clock (an NTP step, a DST fall-back) and what the ranks already reported stays; once the
                # server served or crashed, a start-up line on a clock that went back is a new process's
                if self._ready or self._crashed or self.last_batch_t is not None:
                    evidence = f"the log's clock went back {last - ev.ts:.0f} s in {ev.source or 'the log'}"
                self._source_t[ev.source] = ev.ts     # the clock from here on
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
        self._forget_row_slots()
        self._leader_tp.clear()       # a restart may change the layout (dp=4 -> dp=2 moves DP1's leader to TP4)
        self.last_batch_t = None
        self.samples.clear()
        self.tuning.clear()
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
        release = flags.infer_release(self.server_args, family=self.format_family or None)
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
