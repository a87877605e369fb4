"""An SGLang stand-in driven by scenario data files (exporter/scenarios/*.yaml).

It writes SGLang-shaped log lines (four format families, see FAMILIES) and serves a /metrics page of the
simulated state, so the exporter, its alerts and dashboards can be rehearsed without a GPU.

    sim = Simulator(load_scenario("retraction_storm"), start=datetime(2025, 8, 11, 17, 0, 0))
    sim.lines_until(60)        # the first simulated minute of log lines
    sim.metrics_text()         # /metrics text of the state at that moment

Timing model: simulated time advances in whole seconds. Second 0 (and the second of a `restart` event)
prints the start-up block; every other second of a non-silent phase prints one decode line per DP rank
(from its TP0 scheduler), a prefill line every PREFILL_EVERY seconds, the retractions due (every TP rank
prints them), and a few uvicorn access lines. Everything random comes from one random.Random(seed).
See docs/simulate.md for the scenario format.
"""
from __future__ import annotations

import argparse
import math
import os
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

if TYPE_CHECKING:
    from http.server import ThreadingHTTPServer

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"
FAMILIES = ("0.3", "0.4.7", "0.5.8", "0.5.23")
DEFAULT_FORMAT = "0.5.23"
PREFILL_EVERY = 5           # seconds between prefill lines
MAX_ACCESS_PER_SECOND = 4   # uvicorn access lines written per simulated second (a sample of completions)
GPU_TOTAL_GIB = 79.19
GPU_AVAIL_AT_BOOT = 79.10
WEIGHTS_GIB = 14.99         # Llama-3.1-8B bf16, split over TP ranks
GRAPH_GIB = 0.55            # CUDA graph buffers
KV_BYTES_PER_TOKEN = 131072  # Llama-3.1-8B: 32 layers x 8 kv heads x 128 dims x (K,V) x bf16
GIB = 1024 ** 3

DEFAULT_SERVER_ARGS = {
    "model_path": "meta-llama/Llama-3.1-8B-Instruct",
    "tp_size": 1,
    "mem_fraction_static": 0.88,
    "max_running_requests": 256,
    "chunked_prefill_size": 8192,
    "schedule_conservativeness": 1.0,
    "cuda_graph_max_bs": 160,
    "disable_cuda_graph": False,
}
EVENT_KINDS = ("oom_prefill", "oom_decode", "watchdog", "restart", "crash")
# the last line of the traceback a `crash` event prints (an NCCL error in the scheduler, then sigquit)
CRASH_CAUSE = ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled "
               "system error (run with NCCL_DEBUG=INFO for details)")
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
                400.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1, 0.2,
               0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
               400.0, 800.0)
LATENCY_SIGMA = 0.35        # log-normal spread of simulated latencies around the scenario's median


class ScenarioError(ValueError):
    """A scenario file is missing or invalid; the message names the file and the key."""


# ====================================================================== scenario model
@dataclass
class Event:
    at: float                 # seconds from the start of its phase
    kind: str
    source: str = ""          # oom_*: "kv_pool" (KV-pool OOM record) or "cuda" (scheduler traceback)


@dataclass
class Phase:
    duration: float = 60.0
    queue: object = (200, 1200)          # number or (lo, hi)
    running: object = (150, 200)
    token_usage: object = (0.90, 0.96)
    gen_throughput: object = None        # None: running / itl
    cuda_graph: bool | None = None       # None: True when running <= cuda_graph_max_bs and graphs enabled
    retractions_per_minute: float = 0.0
    latency: dict = field(default_factory=lambda: {"ttft": 0.3, "itl": 0.03, "e2e": 12.0})
    prompt_tokens: int = 1024
    cache_hit_rate: float = 0.25
    events: list = field(default_factory=list)
    silent: bool = False


@dataclass
class Scenario:
    name: str
    description: str = ""
    format: str = DEFAULT_FORMAT
    tp: int = 1
    dp: int = 1
    server_args: dict = field(default_factory=lambda: dict(DEFAULT_SERVER_ARGS))
    available_gpu_mem_gb: float = 6.5
    max_total_num_tokens: int | None = None
    phases: list = field(default_factory=lambda: [Phase()])
    path: str = ""

    @property
    def duration(self) -> float:
        return sum(p.duration for p in self.phases)


_PHASE_KEYS = {"duration", "queue", "running", "token_usage", "gen_throughput", "cuda_graph",
               "retractions_per_minute", "latency", "prompt_tokens", "cache_hit_rate", "events", "silent"}
_TOP_KEYS = {"description", "format", "layout", "server_args", "startup", "phases"}


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_value(fname: str, key: str, v, lo=None, hi=None, allow_range=True):
    """A number or [lo, hi] within bounds; returns a number or a (lo, hi) tuple."""
    what = "a number or [lo, hi]" if allow_range else "a number"
    if allow_range and isinstance(v, (list, tuple)):
        if len(v) != 2 or not all(_num(x) for x in v) or v[0] > v[1]:
            raise ScenarioError(f"{fname}: {key}: expected {what}")
        vals, out = list(v), (v[0], v[1])
    elif _num(v):
        vals, out = [v], v
    else:
        raise ScenarioError(f"{fname}: {key}: expected {what}")
    for x in vals:
        if (lo is not None and x < lo) or (hi is not None and x > hi):
            bounds = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
            raise ScenarioError(f"{fname}: {key}: expected values {bounds}, got {x}")
    return out


def _parse_phase(fname: str, i: int, raw) -> Phase:
    where = f"phases[{i}]"
    if not isinstance(raw, dict):
        raise ScenarioError(f"{fname}: {where}: expected a mapping")
    unknown = sorted(set(raw) - _PHASE_KEYS)
    if unknown:
        raise ScenarioError(f"{fname}: {where}.{unknown[0]}: unknown key (known: {', '.join(sorted(_PHASE_KEYS))})")
    p = Phase()
    if "duration" in raw:
        p.duration = _check_value(fname, f"{where}.duration", raw["duration"], lo=1, allow_range=False)
    if "queue" in raw:
        p.queue = _check_value(fname, f"{where}.queue", raw["queue"], lo=0)
    if "running" in raw:
        p.running = _check_value(fname, f"{where}.running", raw["running"], lo=0)
    if "token_usage" in raw:
        p.token_usage = _check_value(fname, f"{where}.token_usage", raw["token_usage"], lo=0, hi=1)
    if raw.get("gen_throughput") is not None:
        p.gen_throughput = _check_value(fname, f"{where}.gen_throughput", raw["gen_throughput"], lo=0)
    if raw.get("cuda_graph") is not None:
        if not isinstance(raw["cuda_graph"], bool):
            raise ScenarioError(f"{fname}: {where}.cuda_graph: expected true, false or null (automatic)")
        p.cuda_graph = raw["cuda_graph"]
    if "retractions_per_minute" in raw:
        p.retractions_per_minute = _check_value(fname, f"{where}.retractions_per_minute",
                                                raw["retractions_per_minute"], lo=0, allow_range=False)
    if "prompt_tokens" in raw:
        p.prompt_tokens = int(_check_value(fname, f"{where}.prompt_tokens", raw["prompt_tokens"], lo=1,
                                           allow_range=False))
    if "cache_hit_rate" in raw:
        p.cache_hit_rate = _check_value(fname, f"{where}.cache_hit_rate", raw["cache_hit_rate"], lo=0, hi=1,
                                        allow_range=False)
    if "latency" in raw:
        lat = raw["latency"]
        if not isinstance(lat, dict):
            raise ScenarioError(f"{fname}: {where}.latency: expected a mapping with ttft, itl, e2e (seconds)")
        bad = sorted(set(lat) - {"ttft", "itl", "e2e"})
        if bad:
            raise ScenarioError(f"{fname}: {where}.latency.{bad[0]}: unknown key (known: ttft, itl, e2e)")
        merged = dict(p.latency)
        for k, v in lat.items():
            if not _num(v) or v <= 0:
                raise ScenarioError(f"{fname}: {where}.latency.{k}: expected a positive number of seconds")
            merged[k] = float(v)
        p.latency = merged
    if "silent" in raw:
        if not isinstance(raw["silent"], bool):
            raise ScenarioError(f"{fname}: {where}.silent: expected true or false")
        p.silent = raw["silent"]
    events = raw.get("events") or []
    if not isinstance(events, list):
        raise ScenarioError(f"{fname}: {where}.events: expected a list")
    for j, ev in enumerate(events):
        ew = f"{where}.events[{j}]"
        if not isinstance(ev, dict):
            raise ScenarioError(f"{fname}: {ew}: expected a mapping with at and kind")
        bad = sorted(set(ev) - {"at", "kind", "source"})
        if bad:
            raise ScenarioError(f"{fname}: {ew}.{bad[0]}: unknown key (known: at, kind, source)")
        if ev.get("kind") not in EVENT_KINDS:
            raise ScenarioError(f"{fname}: {ew}.kind: expected one of {', '.join(EVENT_KINDS)}")
        at = _check_value(fname, f"{ew}.at", ev.get("at"), lo=0, hi=p.duration, allow_range=False)
        source = ev.get("source") or ("kv_pool" if ev["kind"] == "oom_prefill" else
                                      "cuda" if ev["kind"] == "oom_decode" else "")
        if ev["kind"].startswith("oom_") and source not in ("kv_pool", "cuda"):
            raise ScenarioError(f"{fname}: {ew}.source: expected kv_pool or cuda")
        p.events.append(Event(float(at), ev["kind"], source))
    return p


def parse_scenario(data, name: str, fname: str, path: str = "") -> Scenario:
    """Validate a scenario mapping (as read from YAML) into a Scenario. Errors name `fname` and the key."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(f"{fname}: expected a mapping at the top level")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ScenarioError(f"{fname}: {unknown[0]}: unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
    sc = Scenario(name=name, path=path)
    desc = data.get("description", "")
    if not isinstance(desc, str):
        raise ScenarioError(f"{fname}: description: expected text")
    sc.description = desc.strip()
    fmt = str(data.get("format", DEFAULT_FORMAT))
    if fmt not in FAMILIES:
        raise ScenarioError(f"{fname}: format: expected one of {', '.join(FAMILIES)}, got {fmt!r}")
    sc.format = fmt
    sargs = data.get("server_args") or {}
    if not isinstance(sargs, dict) or not all(isinstance(k, str) and k.isidentifier() for k in sargs):
        raise ScenarioError(f"{fname}: server_args: expected a mapping of argument names to values")
    layout = data.get("layout") or {}
    if not isinstance(layout, dict):
        raise ScenarioError(f"{fname}: layout: expected a mapping with tp and dp")
    bad = sorted(set(layout) - {"tp", "dp"})
    if bad:
        raise ScenarioError(f"{fname}: layout.{bad[0]}: unknown key (known: tp, dp)")
    for key in ("tp", "dp"):
        v = layout.get(key, sargs.get(f"{key}_size", 1))
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 64:
            raise ScenarioError(f"{fname}: layout.{key}: expected an integer between 1 and 64")
        setattr(sc, key, v)
    if "tp_size" in sargs and sargs["tp_size"] != sc.tp:
        raise ScenarioError(f"{fname}: server_args.tp_size: {sargs['tp_size']} disagrees with layout.tp {sc.tp}")
    merged = dict(DEFAULT_SERVER_ARGS)
    merged.update(sargs)
    merged["tp_size"] = sc.tp
    if sc.dp > 1:
        merged["dp_size"] = sc.dp
    for key in ("max_running_requests", "chunked_prefill_size", "cuda_graph_max_bs"):
        v = merged[key]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ScenarioError(f"{fname}: server_args.{key}: expected a positive integer")
    if not isinstance(merged["disable_cuda_graph"], bool):
        raise ScenarioError(f"{fname}: server_args.disable_cuda_graph: expected true or false")
    sc.server_args = merged
    startup = data.get("startup") or {}
    if not isinstance(startup, dict):
        raise ScenarioError(f"{fname}: startup: expected a mapping")
    bad = sorted(set(startup) - {"available_gpu_mem_gb", "max_total_num_tokens"})
    if bad:
        raise ScenarioError(f"{fname}: startup.{bad[0]}: unknown key (known: available_gpu_mem_gb, "
                            "max_total_num_tokens)")
    if "available_gpu_mem_gb" in startup:
        sc.available_gpu_mem_gb = float(_check_value(fname, "startup.available_gpu_mem_gb",
                                                     startup["available_gpu_mem_gb"], lo=0.1, hi=55,
                                                     allow_range=False))
    if "max_total_num_tokens" in startup:
        sc.max_total_num_tokens = int(_check_value(fname, "startup.max_total_num_tokens",
                                                   startup["max_total_num_tokens"], lo=1, allow_range=False))
    phases = data.get("phases")
    if phases is None:
        phases = [{}]
    if not isinstance(phases, list) or not phases:
        raise ScenarioError(f"{fname}: phases: expected a non-empty list")
    sc.phases = [_parse_phase(fname, i, p) for i, p in enumerate(phases)]
    return sc


def list_scenarios() -> list[str]:
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def load_scenario(name_or_path) -> Scenario:
    """A bundled scenario by name (`retraction_storm`) or any YAML file by path."""
    text_name = str(name_or_path)
    path = Path(text_name)
    if not (text_name.endswith((".yaml", ".yml")) or os.sep in text_name or path.is_file()):
        path = SCENARIO_DIR / f"{text_name}.yaml"
        if not path.is_file():
            raise ScenarioError(f"{text_name}.yaml: no such scenario (known: {', '.join(list_scenarios())})")
    fname = path.name
    try:
        raw = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{fname}: cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{fname}: invalid YAML: {exc}") from None
    return parse_scenario(data, path.stem, fname, str(path))


# ====================================================================== line writers
def _fmt_gb(x: float) -> str:
    return f"{x:.2f} GB"


class LineWriter:
    """Formats SGLang log lines of one format family for one tp x dp layout."""

    def __init__(self, family: str = DEFAULT_FORMAT, tp: int = 1, dp: int = 1):
        if family not in FAMILIES:
            raise ValueError(f"unknown format family {family!r} (known: {', '.join(FAMILIES)})")
        self.family, self.tp, self.dp = family, tp, dp

    # ---- prefixes
    def prefix(self, when: datetime, dp_rank: int | None = None, tp_rank: int | None = None) -> str:
        """`[date time RANKS] `; dp_rank/tp_rank None = a main-process line (no rank tag)."""
        stamp = when.strftime("%H:%M:%S" if self.family == "0.3" else "%Y-%m-%d %H:%M:%S")
        tags = ""
        if tp_rank is not None:
            if self.dp > 1:
                tags += f" DP{dp_rank or 0}"
            if self.tp > 1 or self.family == "0.3" or self.dp > 1:
                tags += f" TP{tp_rank}"
        return f"[{stamp}{tags}] "

    def ranks(self):
        """(dp_rank, tp_rank) of every scheduler process."""
        return [(d, t) for d in range(self.dp) for t in range(self.tp)]

    # ---- periodic lines
    def decode(self, when, *, running, num_tokens, token_usage, gen_throughput, queue, cuda_graph=True,
               dp_rank=0, tp_rank=0) -> str:
        graph = "" if self.family == "0.3" else f"cuda graph: {bool(cuda_graph)}, "
        body = (f"#running-req: {running}, #token: {num_tokens}, token usage: {token_usage:.2f}, {graph}"
                f"gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queue}")
        if self.family in ("0.3", "0.4.7"):
            head, tail = "Decode batch. ", ""
        elif self.family == "0.5.8":
            head, tail = "Decode batch, ", ", "
        else:
            head, tail = "Decode batch, ", ""
        return self.prefix(when, dp_rank, tp_rank) + head + body + tail

    def prefill(self, when, *, new_seq, new_token, cached_token, token_usage, running, queue,
                input_throughput=0.0, dp_rank=0, tp_rank=0) -> str:
        p = self.prefix(when, dp_rank, tp_rank)
        base = f"#new-seq: {new_seq}, #new-token: {new_token}, #cached-token: {cached_token}, "
        if self.family == "0.3":
            rate = 100.0 * cached_token / max(1, new_token + cached_token)
            return p + f"Prefill batch. {base}cache hit rate: {rate:.2f}%, #running-req: {running}, #queue-req: {queue}"
        tail = f"token usage: {token_usage:.2f}, #running-req: {running}, #queue-req: {queue}"
        if self.family == "0.4.7":
            return p + f"Prefill batch. {base}{tail}"
        if self.family == "0.5.8":
            return p + f"Prefill batch, {base}{tail}, "
        return p + (f"Prefill batch, {base}{tail}, #pending-token: 0, cuda graph: False, "
                    f"input throughput (token/s): {input_throughput:.2f}")

    def retraction(self, when, *, retracted, ratio_before, ratio_after, tokens_gained=None,
                   dp_rank=0, tp_rank=0) -> str:
        p = self.prefix(when, dp_rank, tp_rank)
        ratio = f"#new_token_ratio: {ratio_before:.4f} -> {ratio_after:.4f}"
        if self.family == "0.3":
            return p + f"Decode out of memory happened. #retracted_reqs: {retracted}, {ratio}"
        if self.family == "0.4.7":
            return p + f"KV cache pool is full. Retract requests. #retracted_reqs: {retracted}, {ratio}"
        gained = tokens_gained if tokens_gained is not None else 2048 * retracted
        return p + (f"KV cache pool is full. Retract requests. #retracted_reqs: {retracted}, "
                    f"#new_tokens_gained: {gained}, {ratio}")

    def access(self, when, *, port, method="POST", path="/generate", status=200) -> str:
        reason = {200: "OK", 400: "Bad Request", 500: "Internal Server Error", 503: "Service Unavailable"}
        return self.prefix(when) + (f'INFO:     127.0.0.1:{port} - "{method} {path} HTTP/1.1" {status} '
                                    f"{reason.get(status, '')}").rstrip()

    # ---- start-up block
    def server_args(self, when, args: dict) -> str:
        if self.family == "0.5.23":
            text = repr(dict(args))
        else:
            text = "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"
        return self.prefix(when) + "server_args=" + text

    def startup(self, when, args: dict, available_gpu_mem_gb: float, max_total_num_tokens: int | None = None
                ) -> tuple[list[str], int]:
        """The start-up block and the max_total_num_tokens it announces."""
        tp = self.tp
        graphs = not args.get("disable_cuda_graph", False) and self.family != "0.3"
        weights = WEIGHTS_GIB / tp
        after_weights = GPU_AVAIL_AT_BOOT - weights
        pool_end = available_gpu_mem_gb + (GRAPH_GIB if graphs else 0.0)
        kv_gib = max(0.5, after_weights - pool_end)
        tokens = max_total_num_tokens or int(kv_gib * GIB / (KV_BYTES_PER_TOKEN / tp))
        lines = [self.server_args(when, args)]
        for d, t in self.ranks():
            p = self.prefix(when, d, t)
            lines.append(p + f"Load weight begin. avail mem={_fmt_gb(GPU_AVAIL_AT_BOOT)}")
        for d, t in self.ranks():
            p = self.prefix(when, d, t)
            mem = f"avail mem={_fmt_gb(after_weights)}, mem usage={_fmt_gb(weights)}."
            if self.family == "0.5.23":
                lines.append(p + f"Load weight end. elapsed=35.21 s, type=LlamaForCausalLM, {mem}")
            elif self.family == "0.3":
                lines.append(p + f"Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
                                 f"avail mem={_fmt_gb(after_weights)}")
            else:
                lines.append(p + f"Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, {mem}")
        for d, t in self.ranks():
            p = self.prefix(when, d, t)
            half = _fmt_gb(kv_gib / 2)
            if self.family == "0.5.23":
                lines.append(p + f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {tokens}, "
                                 f"K size: {half}, V size: {half}")
            elif self.family != "0.3":
                lines.append(p + f"KV Cache is allocated. #tokens: {tokens}, K size: {half}, V size: {half}")
            lines.append(p + f"Memory pool end. avail mem={_fmt_gb(pool_end)}")
        for d, t in self.ranks():
            p = self.prefix(when, d, t)
            if self.family == "0.3":
                lines.append(p + f"max_total_num_tokens={tokens}, max_prefill_tokens=16384, "
                                 f"max_running_requests={args['max_running_requests']}, context_len=131072")
            else:
                lines.append(p + f"max_total_num_tokens={tokens}, "
                                 f"chunked_prefill_size={args['chunked_prefill_size']}, max_prefill_tokens=16384, "
                                 f"max_running_requests={args['max_running_requests']}, context_len=131072, "
                                 f"available_gpu_mem={available_gpu_mem_gb:.2f} GB")
        lines.append(self.prefix(when) + "The server is fired up and ready to roll!")
        return lines, tokens

    # ---- errors
    def kv_oom(self, when, *, phase="prefill", requested=8192, available=1024, dp_rank=0, tp_rank=0) -> list[str]:
        head = "Prefill" if phase == "prefill" else "Decode"
        return [self.prefix(when, dp_rank, tp_rank) + f"{head} out of memory. Try to lower your batch size.",
                f"Try to allocate {requested} tokens.",
                f"Available tokens: {available} (available_size={available} + evictable_size=0)"]

    def cuda_oom(self, when, *, phase="decode", dp_rank=0, tp_rank=0) -> list[str]:
        func = "forward_extend" if phase == "prefill" else "forward_decode"
        pkg = "/usr/local/lib/python3.10/dist-packages/sglang/srt"
        p = self.prefix(when, dp_rank, tp_rank)
        if self.family == "0.3":
            head = [p + "Exception in ModelTpServer:", "Traceback (most recent call last):",
                    f'  File "{pkg}/managers/tp_worker.py", line 230, in exposed_step',
                    f'  File "{pkg}/managers/tp_worker.py", line 460, in forward_step']
        else:
            head = [p + "Scheduler hit an exception: Traceback (most recent call last):",
                    f'  File "{pkg}/managers/scheduler.py", line 1000, in run_batch']
        return head + [
            f'  File "{pkg}/model_executor/model_runner.py", line 500, in {func}',
            "    return self.model.forward(",
            (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU {tp_rank} has a total "
             f"capacity of {GPU_TOTAL_GIB:.2f} GiB of which 1.01 GiB is free.")]

    def crash(self, when, *, dp_rank=0, tp_rank=0) -> list[str]:
        """A scheduler dies of an exception mid-serving; the launcher reports its child's death."""
        pkg = "/usr/local/lib/python3.10/dist-packages/sglang/srt"
        p = self.prefix(when, dp_rank, tp_rank)
        head = [p + "Exception in ModelTpServer:", "Traceback (most recent call last):"] if self.family == "0.3" \
            else [p + "Scheduler hit an exception: Traceback (most recent call last):"]
        lines = head + [f'  File "{pkg}/managers/scheduler.py", line 1000, in run_batch',
                        f'  File "{pkg}/distributed/parallel_state.py", line 400, in all_reduce',
                        "    torch.distributed.all_reduce(input_, group=self.device_group)", CRASH_CAUSE]
        if self.family != "0.3":
            lines.append(self.prefix(when) + "Received sigquit from a child process. It usually means the child "
                                             "failed.")
        return lines

    def watchdog(self, when, *, timeout=300, dp_rank=0, tp_rank=0) -> str:
        p = self.prefix(when, dp_rank, tp_rank)
        if self.family in ("0.5.8", "0.5.23"):
            return p + f"Scheduler watchdog timeout (self.watchdog_timeout={timeout}, self.soft=False)"
        return p + f"Watchdog timeout (self.watchdog_timeout={timeout})"


# ====================================================================== simulated state + metrics
def _lognorm_cdf(x: float, median: float, sigma: float = LATENCY_SIGMA) -> float:
    if x <= 0:
        return 0.0
    return 0.5 * (1.0 + math.erf((math.log(x) - math.log(median)) / (sigma * math.sqrt(2.0))))


class _Histogram:
    def __init__(self, buckets):
        self.buckets = buckets
        self.cum = [0.0] * len(buckets)
        self.count = 0.0
        self.sum = 0.0

    def observe_many(self, n: float, median: float):
        """Add n observations of a log-normal latency with this median (fractions allowed)."""
        if n <= 0:
            return
        for i, le in enumerate(self.buckets):
            self.cum[i] += n * _lognorm_cdf(le, median)
        self.count += n
        self.sum += n * median * math.exp(LATENCY_SIGMA ** 2 / 2)   # log-normal mean

    def family(self, name, doc, labels: dict):
        from prometheus_client.core import HistogramMetricFamily
        fam = HistogramMetricFamily(name, doc, labels=list(labels))
        count = round(self.count)
        buckets = [(repr(float(le)), float(min(round(c), count))) for le, c in zip(self.buckets, self.cum)]
        buckets.append(("+Inf", float(count)))
        fam.add_metric(list(labels.values()), buckets, float(self.sum))
        return fam


class _RankState:
    """Scheduler gauges of one DP rank (as of its last stats log)."""

    def __init__(self):
        self.running = 0
        self.queue = 0
        self.usage = 0.0
        self.tokens = 0
        self.throughput = 0.0
        self.hit_rate = 0.0


class _Metrics:
    def __init__(self, dp: int):
        self.ranks = [_RankState() for _ in range(dp)]
        self.retracted = 0
        self.retracted_last = 0
        self.prompt_tokens = 0.0
        self.generation_tokens = 0.0
        self.requests = 0.0
        self.ttft = _Histogram(TTFT_BUCKETS)
        self.itl = _Histogram(ITL_BUCKETS)
        self.e2e = _Histogram(E2E_BUCKETS)


# ====================================================================== the simulator
class Simulator:
    """Advances a scenario second by second; see the module docstring for the timing model."""

    def __init__(self, scenario: Scenario, start: datetime | None = None, seed: int = 0, fmt: str | None = None):
        self.scenario = scenario
        self.start = start or datetime(2025, 8, 11, 17, 0, 0)
        self.rng = random.Random(seed)
        self.writer = LineWriter(fmt or scenario.format, scenario.tp, scenario.dp)
        self.family = self.writer.family
        self.args = scenario.server_args
        self.model = self.args.get("served_model_name") or self.args["model_path"]
        self.max_total_num_tokens = 0
        self.metrics = _Metrics(scenario.dp)
        self.now = -1            # last simulated second processed
        self._lock = threading.Lock()
        self._retract_acc = 0.0
        self._complete_acc = 0.0
        self._last_tick = 0
        self._ends = []
        t = 0.0
        for p in scenario.phases:
            t += p.duration
            self._ends.append(t)
        self._events: dict[int, list[Event]] = {}
        offset = 0.0
        for p in scenario.phases:
            for ev in p.events:
                self._events.setdefault(int(offset + ev.at), []).append(ev)
            offset += p.duration

    @property
    def duration(self) -> float:
        return self.scenario.duration

    def phase_at(self, second: float) -> Phase:
        for end, p in zip(self._ends, self.scenario.phases):
            if second < end:
                return p
        return self.scenario.phases[-1]

    # ---- public API
    def lines_until(self, t_seconds: float) -> list[str]:
        """Advance simulated time to t_seconds (from the start) and return the new log lines."""
        out: list[str] = []
        with self._lock:
            while self.now + 1 <= t_seconds:
                self.now += 1
                out.extend(self._step(self.now))
        return out

    def metrics_text(self) -> str:
        from prometheus_client import CollectorRegistry, generate_latest
        with self._lock:
            fams = self._families()

        class _C:
            def collect(self_inner):
                return iter(fams)

        reg = CollectorRegistry(auto_describe=False)
        reg.register(_C())
        return generate_latest(reg).decode("utf-8")

    def write_log(self, path, duration: float | None = None) -> int:
        """Write the whole scenario (or `duration` simulated seconds) at once; returns the line count."""
        lines = self.lines_until(self.duration if duration is None else duration)
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in lines)
        return len(lines)

    # ---- internals
    def _when(self, second: int) -> datetime:
        return self.start + timedelta(seconds=second)

    def _pick(self, v, integer=False):
        if isinstance(v, tuple):
            lo, hi = v
            if integer:
                return self.rng.randint(int(lo), int(hi))
            return self.rng.uniform(lo, hi)
        return round(v) if integer else float(v)

    def _startup(self, second: int) -> list[str]:
        lines, self.max_total_num_tokens = self.writer.startup(
            self._when(second), self.args, self.scenario.available_gpu_mem_gb, self.scenario.max_total_num_tokens)
        self.metrics = _Metrics(self.scenario.dp)   # a new process: counters restart from zero
        self._last_tick = second
        return lines

    def _step(self, s: int) -> list[str]:
        when = self._when(s)
        phase = self.phase_at(s)
        out: list[str] = []
        restarted = s == 0
        if s == 0:
            out.extend(self._startup(s))
        for ev in self._events.get(s, ()):
            if ev.kind == "restart":
                out.extend(self._startup(s))
                restarted = True
            else:
                out.extend(self._event_lines(ev, when))
        if restarted:
            return out
        if phase.silent:
            if s - self._last_tick >= 30 and self.family == "0.5.23":
                for r in self.metrics.ranks:
                    r.throughput = 0.0
            return out
        self._last_tick = s
        out.extend(self._tick(s, when, phase))
        return out

    def _event_lines(self, ev: Event, when: datetime) -> list[str]:
        w, out = self.writer, []
        if ev.kind == "watchdog":
            for d in range(w.dp):
                out.append(w.watchdog(when, dp_rank=d, tp_rank=0))
            return out
        if ev.kind == "crash":
            return w.crash(when)
        phase = "prefill" if ev.kind == "oom_prefill" else "decode"
        for d, t in w.ranks():
            if ev.source == "kv_pool":
                out.extend(w.kv_oom(when, phase=phase, requested=self.args["chunked_prefill_size"],
                                    available=self.rng.randint(64, 2048), dp_rank=d, tp_rank=t))
            else:
                out.extend(w.cuda_oom(when, phase=phase, dp_rank=d, tp_rank=t))
        return out

    def _tick(self, s: int, when: datetime, phase: Phase) -> list[str]:
        w, rng, m, out = self.writer, self.rng, self.metrics, []
        mrr = self.args["max_running_requests"]
        graph_max = self.args["cuda_graph_max_bs"]
        lat = phase.latency
        total_running, total_tput = 0, 0.0
        for d in range(w.dp):
            running = min(mrr, self._pick(phase.running, integer=True))
            queue = self._pick(phase.queue, integer=True)
            usage = round(min(1.0, self._pick(phase.token_usage)), 2)
            tokens = round(usage * self.max_total_num_tokens)
            if phase.gen_throughput is None:
                tput = round(running / lat["itl"] * rng.uniform(0.97, 1.03), 2) if running else 0.0
            else:
                tput = round(self._pick(phase.gen_throughput), 2)
            if phase.cuda_graph is None:
                graph = not self.args["disable_cuda_graph"] and running <= graph_max
            else:
                graph = phase.cuda_graph
            if s % PREFILL_EVERY == 0:
                new_seq = rng.randint(1, 8)
                new_token = new_seq * phase.prompt_tokens
                cached = int(new_token * phase.cache_hit_rate)
                out.append(w.prefill(when, new_seq=new_seq, new_token=new_token - cached, cached_token=cached,
                                     token_usage=usage, running=running, queue=queue,
                                     input_throughput=new_token / max(lat["ttft"], 0.05), dp_rank=d, tp_rank=0))
            out.append(w.decode(when, running=running, num_tokens=tokens, token_usage=usage,
                                gen_throughput=tput, queue=queue, cuda_graph=graph, dp_rank=d, tp_rank=0))
            r = m.ranks[d]
            r.running, r.queue, r.usage, r.tokens, r.throughput = running, queue, usage, tokens, tput
            r.hit_rate = phase.cache_hit_rate if self.family == "0.5.23" else 0.0
            total_running += running
            total_tput += tput
        # retractions: a deterministic rate with random sizes; every TP rank of the DP rank prints them
        self._retract_acc += phase.retractions_per_minute / 60.0
        retracted_now = 0
        while self._retract_acc >= 1.0 - 1e-9:
            self._retract_acc -= 1.0
            n = rng.randint(1, 3)
            before = rng.uniform(0.30, 0.95)
            after = min(1.0, before + 0.3)
            d = rng.randrange(w.dp)
            for t in range(w.tp):
                out.append(w.retraction(when, retracted=n, ratio_before=before, ratio_after=after,
                                        tokens_gained=n * rng.choice((1024, 2048, 4096)), dp_rank=d, tp_rank=t))
            m.retracted += n
            retracted_now += n
        m.retracted_last = retracted_now      # num_retracted_reqs: retracted since the last report
        # completions -> request metrics and a sample of uvicorn access lines
        done = total_running / lat["e2e"]
        self._complete_acc += done
        whole = int(self._complete_acc)
        self._complete_acc -= whole
        for _ in range(min(whole, MAX_ACCESS_PER_SECOND)):
            out.append(w.access(when, port=rng.randint(32768, 60999)))
        m.requests += done
        m.prompt_tokens += done * phase.prompt_tokens
        m.generation_tokens += total_tput
        m.ttft.observe_many(done, lat["ttft"])
        m.e2e.observe_many(done, lat["e2e"])
        m.itl.observe_many(total_tput, lat["itl"])
        return out

    def _labels(self, dp_rank: int | None) -> dict:
        """Label set: scheduler metrics (dp_rank given) or tokenizer metrics (None), per format family."""
        labels = {}
        if dp_rank is not None and self.family in ("0.5.8", "0.5.23") and self.scenario.dp > 1:
            labels["dp_rank"] = str(dp_rank)
        if self.family != "0.3" and (dp_rank is not None or self.family == "0.5.23"):
            labels["engine_type"] = "unified"
        labels["model_name"] = self.model
        if dp_rank is not None and self.family in ("0.5.8", "0.5.23"):
            labels["moe_ep_rank"] = "0"
            labels["pp_rank"] = "0"
            labels["tp_rank"] = "0"
        return labels

    def _families(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        m, fams = self.metrics, []
        per_rank = [(self._labels(d), r) for d, r in enumerate(m.ranks)]
        if self.family not in ("0.5.8", "0.5.23"):
            per_rank = per_rank[:1]   # before 0.4.10 the scheduler label set had no rank: TP0 of DP0 only
        gauges = (("sglang:num_running_reqs", "The number of running requests.", "running"),
                  ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", "queue"),
                  ("sglang:token_usage", "The token usage.", "usage"),
                  ("sglang:gen_throughput", "The generation throughput (token/s).", "throughput"),
                  ("sglang:num_used_tokens", "The number of used tokens.", "tokens"),
                  ("sglang:cache_hit_rate", "The prefix cache hit rate.", "hit_rate"))
        for name, doc, attr in gauges:
            fam: GaugeMetricFamily | CounterMetricFamily = GaugeMetricFamily(name, doc, labels=list(per_rank[0][0]))
            for labels, r in per_rank:
                fam.add_metric(list(labels.values()), float(getattr(r, attr)))
            fams.append(fam)
        if self.family in ("0.5.8", "0.5.23"):
            labels = per_rank[0][0]
            fam = CounterMetricFamily("sglang:num_retracted_requests", "Total number of retracted requests.",
                                      labels=list(labels))
            fam.add_metric(list(labels.values()), float(m.retracted))
            fams.append(fam)
        if self.family == "0.5.23":     # the newer families a metrics-only sidecar reads (catalog_native)
            labels = per_rank[0][0]
            pid = {**labels, "pid": "4242"}    # gauges without a multiprocess mode carry the process id
            capacity = self.scenario.max_total_num_tokens or 1_000_000
            for name, doc, lab, value in (
                    ("sglang:startup_available_gpu_memory_gb", "Available GPU memory after start-up (GB).", labels,
                     self.scenario.available_gpu_mem_gb),
                    ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV pool.", labels,
                     capacity),
                    ("sglang:num_retracted_reqs", "The number of retracted requests.", pid, m.retracted_last),
                    ("sglang:num_paused_reqs", "The number of paused requests.", pid, 0)):
                fam = GaugeMetricFamily(name, doc, labels=list(lab))
                fam.add_metric(list(lab.values()), float(value))
                fams.append(fam)
        tok = self._labels(None)
        for name, doc, value in (
                ("sglang:prompt_tokens", "Number of prefill tokens processed.", m.prompt_tokens),
                ("sglang:generation_tokens", "Number of generation tokens processed.", m.generation_tokens),
                ("sglang:num_requests", "The number of processed requests.", m.requests)):
            fam = CounterMetricFamily(name, doc, labels=list(tok))
            fam.add_metric(list(tok.values()), float(round(value)))
            fams.append(fam)
        fams.append(m.ttft.family("sglang:time_to_first_token_seconds",
                                  "Histogram of time to first token in seconds.", tok))
        fams.append(m.itl.family("sglang:inter_token_latency_seconds",
                                 "Histogram of inter-token latency in seconds.", tok))
        fams.append(m.e2e.family("sglang:e2e_request_latency_seconds",
                                 "Histogram of End-to-end request latency in seconds", tok))
        return fams


# ====================================================================== /metrics server
def serve_metrics(sim: Simulator, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """Serve sim.metrics_text() at /metrics in a daemon thread; call .shutdown() and .server_close()."""
    # imported here: the command line imports this module for its arguments, and http.server is a third of
    # every command's start-up
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            body = sim.metrics_text().encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="simulate-metrics", daemon=True).start()
    return server


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--metrics-listen: expected HOST:PORT, got {text!r}")
    return (host.strip("[]") or "0.0.0.0"), int(port)


# ====================================================================== live mode
def run_simulator(scenario, log_path, metrics_listen=None, speed: float = 1.0, duration: float | None = None,
                  stop_event: threading.Event | None = None, instant: bool = False, seed: int = 0,
                  fmt: str | None = None, start: datetime | None = None) -> int:
    """Write the scenario's log to log_path ("-" = stdout) as simulated time passes at `speed`x real time.

    instant=True writes everything at once (timestamps still in simulated time) and, when metrics_listen is
    set, keeps serving the final state until stop_event is set. Returns 0.
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    if speed <= 0:
        raise ValueError("speed must be > 0")
    stop_event = stop_event or threading.Event()
    sim = Simulator(scenario, start=start or datetime.now().replace(microsecond=0), seed=seed, fmt=fmt)
    end = scenario.duration if duration is None else duration
    server = None
    if metrics_listen:
        host, port = parse_listen(metrics_listen) if isinstance(metrics_listen, str) else metrics_listen
        server = serve_metrics(sim, host, port)
    out = sys.stdout if str(log_path) == "-" else open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - closed in finally
    try:
        if instant:
            lines = sim.lines_until(end)
            out.writelines(line + "\n" for line in lines)
            out.flush()
            if server is not None:
                stop_event.wait()
            return 0
        t0 = time.monotonic()
        while not stop_event.is_set():
            elapsed = min(end, (time.monotonic() - t0) * speed)
            lines = sim.lines_until(elapsed)
            if lines:
                out.write("".join(line + "\n" for line in lines))
                out.flush()
            if elapsed >= end:
                break
            next_second = math.floor(elapsed) + 1
            stop_event.wait(max(0.0, (min(next_second, end) - elapsed) / speed))
        return 0
    finally:
        if out is not sys.stdout:
            out.close()
        if server is not None:
            server.shutdown()
            server.server_close()


# ====================================================================== CLI glue
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", metavar="NAME", help="bundled scenario name or path to a YAML file")
    parser.add_argument("--list", action="store_true", help="list the bundled scenarios and exit")
    parser.add_argument("--log-file", metavar="PATH", default="-", help="log file to append to (default stdout)")
    parser.add_argument("--metrics-listen", metavar="HOST:PORT", help="serve the simulated /metrics here")
    parser.add_argument("--speed", type=float, default=1.0, metavar="X",
                        help="simulated seconds per real second (default 1)")
    parser.add_argument("--duration", type=float, metavar="S",
                        help="simulated seconds to run (default: the scenario's length)")
    parser.add_argument("--instant", action="store_true",
                        help="write the whole log at once (then keep serving /metrics if --metrics-listen)")
    parser.add_argument("--format", metavar="VERSION", choices=FAMILIES,
                        help=f"log format family, overrides the scenario's ({', '.join(FAMILIES)})")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")


def main(args=None) -> int:
    if args is None or isinstance(args, list):
        parser = argparse.ArgumentParser(prog="sglang-exporter simulate", description=__doc__.split("\n")[0])
        add_arguments(parser)
        try:
            args = parser.parse_args(args)
        except SystemExit as exc:
            return int(exc.code or 0)
    if getattr(args, "list", False):
        for name in list_scenarios():
            try:
                desc = load_scenario(name).description.split("\n")[0]
            except ScenarioError as exc:
                desc = f"(invalid: {exc})"
            print(f"{name:22s} {desc}")
        return 0
    if not args.scenario:
        print("simulate: error: --scenario NAME is required (see --list)", file=sys.stderr)
        return 2
    if args.speed is not None and args.speed <= 0:
        print("simulate: error: --speed must be > 0", file=sys.stderr)
        return 2
    if args.duration is not None and args.duration <= 0:
        print("simulate: error: --duration must be > 0", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"ScenarioError: {exc}", file=sys.stderr)
        return 2
    listen = None
    if args.metrics_listen:
        try:
            listen = parse_listen(args.metrics_listen)
        except ValueError as exc:
            print(f"simulate: error: {exc}", file=sys.stderr)
            return 2
    if args.log_file != "-":
        parent = Path(args.log_file).resolve().parent
        if not parent.is_dir():
            print(f"simulate: error: --log-file: directory {parent} does not exist", file=sys.stderr)
            return 2
    try:
        return run_simulator(scenario, args.log_file, metrics_listen=listen, speed=args.speed,
                             duration=args.duration, instant=args.instant, seed=args.seed, fmt=args.format)
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"simulate: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
