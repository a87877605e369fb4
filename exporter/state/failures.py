"""What the log says about the server failing: crashes and their cause line, out-of-memory at start-up and the
start-up stage it hit, whether the current start-up became ready, and a tally (count, first, last) of the
events a person reading a failing log looks for first.

A crash is a process or scheduler loop that died, shown by evidence: a "<X> hit an exception" traceback, a
sigquit, a child's exit, an NCCL watchdog kill, failed initialisation; a bare traceback or a failed health check
only when no batch line follows it (WEAK_KINDS), or a new start-up does. A request SGLang answered with an error
and kept serving is not one (the grammar's `request_error`, counted by state/errors.py). A crash is over at the
next ready line or when batch lines go on after its last failure line; a failure of a later start-up is a new
crash with its own cause, so each incident is its own alert.

ServerState owns one FailureTracker and hands it the events it needs; the failure signals (signals.py) read it.
Like the state, it never reads a clock.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# Start-up stages, in the order SGLang goes through them; the stage of a start-up OOM picks its advice
# (catalog_failures). "kv_pool_too_small": the weights left no room for any KV cache ("Not enough memory").
STAGES = ("weights", "kv_pool", "cuda_graph", "warmup", "kv_pool_too_small", "unknown")
STAGE_TEXT = {"weights": "loading the weights", "kv_pool": "allocating the KV cache pool",
              "cuda_graph": "capturing CUDA graphs", "warmup": "warming up",
              "kv_pool_too_small": "sizing the KV cache pool (no memory left after the weights)",
              "unknown": "starting (stage not shown in the log)"}
# event kind (and phase) -> the stage that runs next
_NEXT_STAGE = {("load_weight", "begin"): "weights", ("load_weight", "end"): "kv_pool",
               ("memory_pool", None): "cuda_graph", ("kv_cache_allocated", None): "cuda_graph",
               ("graph_capture", "begin"): "cuda_graph", ("graph_capture", "end"): "warmup"}
STAGE_KINDS = frozenset(k for k, _ in _NEXT_STAGE)
CRASH_KINDS = frozenset(("scheduler_exception", "traceback", "sigquit", "subprocess_crash", "init_failed",
                         "health_check_failed", "nccl_timeout"))
# Failure lines that do not prove a death by themselves: a bare traceback (whose process? a library may print
# one and carry on) and a health check that timed out (a long prefill can hold the detokenizer that long). They
# count as a crash only once confirmed: no batch line for `resume_seconds` after them, or a line that proves
# a death (the other CRASH_KINDS), or a new start-up.
WEAK_KINDS = frozenset(("traceback", "health_check_failed"))
# causes no request path of SGLang's handles: a bare traceback ending in one is a death by itself
_FATAL_CLASSES = frozenset(("cuda_oom", "nccl"))
# The counts every report lists (kind -> its name there).
TALLIED = ("retractions", "ooms", "exceptions", "watchdog_timeouts", "restarts")

# Cause classes, first match wins (an NCCL timeout is a communication error before it is a timeout).
_CLASSES = (
    ("cuda_oom", re.compile(r"out of memory|OutOfMemoryError|Not enough memory", re.I)),
    ("nccl", re.compile(r"NCCL|ProcessGroup|collective operation|DistBackendError|DistNetworkError|gloo|"
                        r"Connection (?:reset|refused|closed)|Broken pipe|torch\.distributed", re.I)),
    ("timeout", re.compile(r"timed? ?out|Timeout|deadline exceeded", re.I)),
    ("assertion", re.compile(r"^\s*(?:\w+\.)*AssertionError\b|\bassert(?:ion)? ?(?:failed|error)", re.I)),
    ("import_config", re.compile(r"^\s*(?:\w+\.)*(?:ImportError|ModuleNotFoundError|ValueError|KeyError|TypeError|"
                                 r"NotImplementedError|FileNotFoundError|AttributeError|OSError)\b|"
                                 r"not supported|unsupported|unrecognized argument|invalid (?:value|choice)",
                                 re.I)),
)
MAX_CAUSE = 200
# PyTorch's C++ log prefix on an NCCL watchdog line: "[rank5]:[E1017 03:20:08.512 ProcessGroupNCCL.cpp:607] "
_TORCH_PREFIX = re.compile(r"^\s*(?:\[rank\d+\]:)?\[[EWI]\d{4} [^\]]*\]\s*")


def classify_cause(line: str) -> str:
    """The class of a cause line: cuda_oom, nccl, timeout, assertion, import_config or other."""
    for name, rx in _CLASSES:
        if rx.search(line):
            return name
    return "other"


@dataclass
class Failure:
    t: float
    kind: str           # the event kind that told us
    cause: str          # the cause line, as the log printed it (cut to MAX_CAUSE)
    cause_class: str
    line: int | None = None

    def to_json(self) -> dict:
        return {"kind": self.kind, "cause": self.cause, "cause_class": self.cause_class, "line": self.line}


def _cause_of(kind: str, f: dict) -> tuple[str, str]:
    """(cause line, class) of one failure event."""
    if kind == "sigquit":
        return "Received sigquit from a child process (it died; its own error comes before this line)", "killed"
    if kind == "subprocess_crash":
        return (f"Subprocess {f.get('name')} (pid={f.get('pid')}) crashed with exit code {f.get('exit_code')}",
                "killed")
    text = " ".join(_TORCH_PREFIX.sub("", str(f.get("message") or "")).split())[:MAX_CAUSE]
    if kind == "health_check_failed":
        return text or "Health check failed", "health_check"
    if kind == "nccl_timeout":
        return text or "NCCL watchdog caught a collective operation timeout", "nccl"
    if not text:
        text = f"{f.get('component') or 'A process'} hit an exception (no message in the log)"
    return text, classify_cause(text)


def oom_cause(f: dict) -> str:
    asked = f.get("requested_bytes")
    src = f.get("source")
    if src == "startup":
        return "Not enough memory. Please try to increase --mem-fraction-static."
    if src == "kv_pool":
        return f"{str(f.get('phase', '')).capitalize()} out of memory (KV cache pool)"
    return "CUDA out of memory" + (f" (tried to allocate {asked / 2**30:.2f} GiB)" if asked else "")


class FailureTracker:
    """Failures since the last ready line, the current start-up's progress, and the tally."""

    def __init__(self):
        self.crash: Failure | None = None         # the failure whose cause explains the crash
        self.crash_events = 0                     # failure events of this crash
        self.crash_last_t: float | None = None    # the time of its latest failure event
        self.confirmed = False                    # a death is proven (see WEAK_KINDS)
        self.restarted = False                    # a start-up began after it: its own failures are a new crash
        self.startup_oom: Failure | None = None
        self.startup_oom_events = 0
        self.startup_oom_stage: str | None = None
        self.args_t: float | None = None          # server_args of a start-up that has not become ready
        self.ready = False                        # the current start-up printed its ready line
        self.stage = "unknown"                    # the start-up stage running now (STAGES)
        self.tally: dict[str, list] = {}          # TALLIED name -> [count, first t, last t]

    def count(self, name: str, now: float, n: int = 1) -> None:
        c = self.tally.get(name)
        if c is None:
            self.tally[name] = [n, now, now]
        else:
            c[0] += n
            c[2] = max(c[2], now)

    # ------------------------------------------------------------------ events
    def start(self) -> None:
        """A start-up line opened a new epoch (SGLang started again): a new start-up is under way. A crash
        before it stays until the ready line (it is what the restart recovers from), proven by the restart; a
        failure of the new start-up is another crash (its own cause, its own page)."""
        if self.crash is not None:
            self.confirmed = self.restarted = True
        self.ready = False
        self.stage = "unknown"
        self.args_t = None

    def server_args(self, now: float) -> None:
        if self.args_t is None:
            self.args_t = now

    def server_ready(self) -> None:
        """A ready line proves a (re)start worked: failures before it are over."""
        self.ready = True
        self.args_t = None
        self.stage = "unknown"
        self.end_crash()
        self.startup_oom, self.startup_oom_events, self.startup_oom_stage = None, 0, None

    def end_crash(self) -> None:
        self.crash, self.crash_events, self.crash_last_t = None, 0, None
        self.confirmed = self.restarted = False

    def resumed(self, last_batch_t: float | None, resume_seconds: float) -> bool:
        """Batch lines went on `resume_seconds` after the crash's last failure line: the scheduler loop lives,
        so the crash is over (or never was: a failure the server survived)."""
        return self.crash_last_t is not None and last_batch_t is not None and \
            last_batch_t >= self.crash_last_t + resume_seconds

    def stage_event(self, kind: str, f: dict) -> None:
        nxt = _NEXT_STAGE.get((kind, f.get("phase") if kind in ("load_weight", "graph_capture") else None))
        if nxt is not None and not self.ready:
            self.stage = nxt

    def failure(self, kind: str, f: dict, now: float, line: int | None, last_batch_t: float | None = None,
                resume_seconds: float = 30.0) -> None:
        """A failure line. It belongs to the crash under way unless that one is over: batches resumed after it,
        or a new start-up began since (then this one is a new crash, a new incident)."""
        if self.crash is not None and (self.restarted or self.resumed(last_batch_t, resume_seconds)):
            self.end_crash()
        cause, cls = _cause_of(kind, f)
        self.crash_events += 1
        self.crash_last_t = now
        if kind not in WEAK_KINDS or cls in _FATAL_CLASSES:
            self.confirmed = True
        if kind in ("scheduler_exception", "traceback", "init_failed"):
            self.count("exceptions", now)
        # the first failure is the cause; a later one replaces it only when it says more (a sigquit or a
        # killed child is the consequence of the exception that killed it)
        if self.crash is None or (self.crash.cause_class in ("killed", "health_check")
                                  and cls not in ("killed", "health_check")):
            self.crash = Failure(now, kind, cause, cls, line)
        if self.startup_oom is not None and cls == "cuda_oom":
            self.startup_oom.cause = cause

    def oom_phase(self, phase: str, batches: bool) -> str:
        """The phase an OOM event counts in. A traceback's OOM of unknown phase is a start-up OOM while the
        current start-up (its server_args line seen) has not printed its ready line (warm-up batches run before
        that line), and when no ready line and no batch line was seen at all: a serving server prints batch
        lines, so an OOM with none around it is most likely one of start-up."""
        if phase == "unknown" and not self.ready and (self.args_t is not None or not batches):
            return "startup"
        return phase

    def oom(self, f: dict, phase: str, now: float, line: int | None) -> None:
        self.count("ooms", now)
        if phase != "startup":
            return
        stage = "kv_pool_too_small" if f.get("source") == "startup" else self.stage
        self.startup_oom_events += 1
        if self.startup_oom is None:
            self.startup_oom = Failure(now, "oom", oom_cause(f), "cuda_oom", line)
            self.startup_oom_stage = stage
        if self.crash is not None and self.crash.cause_class == "cuda_oom":
            # the exception's own last line ("torch.OutOfMemoryError: CUDA out of memory. Tried ...") says more
            self.startup_oom.cause = self.crash.cause

    def stalled_for(self, now: float) -> float | None:
        """Seconds the current start-up has run without a ready line (None: not starting)."""
        if self.args_t is None or self.ready:
            return None
        return max(0.0, now - self.args_t)
