#!/usr/bin/env python3
"""Regenerates the conformance fixtures: log files and /metrics expositions produced by SGLang releases' own code.

    .venv/bin/python tests/conformance/run.py [--cache DIR] [--release V ...] [--layout NAME ...]

Needs the wheels (scripts/sglang-releases download); the tests that read the fixtures do not. For every release
and parallel layout it runs, in a fresh subprocess per scheduler rank, without importing SGLang:

* the release's `configure_logger` (its format, date format and `force=True` basicConfig), compiled from the
  wheel's source and called with the rank prefix the release's own scheduler-process code builds (the
  statements that compute `prefix` in the function that calls configure_logger, run with that rank's numbers);
* the release's batch-line functions (`log_prefill_stats`/`log_decode_stats`, later `report_*_stats`, or the
  f-strings of the 0.3.x inline code) executed on stand-in objects: attributes, helpers and parameters come
  from chosen values by name, anything else is a neutral stand-in. The retraction, capacity and ready lines
  are the release's own f-strings evaluated with the same values;
* the release's metrics collector module, executed with SGLang imports stubbed, its scheduler collector built
  with that rank's labels and fed through its own `log_stats` with a stats object of chosen values, in
  prometheus_client's multiprocess mode as SGLang runs it; the exposition is what the release's registry
  serves (rendered by the prometheus_client installed here, not the release's pinned one).

Time is a fixed fake clock (UTC), so regenerating gives the same files.

    .venv/bin/python tests/conformance/run.py --expositions [--release V ...]

writes only the /metrics exposition of a two-GPU TP server for every release (default: all of
exporter.releases) to tests/conformance/expositions/<release>.prom: what a metrics-only sidecar of each release
reads (tests/test_native_metrics.py).
"""
from __future__ import annotations

import argparse
import ast
import builtins
import collections
import importlib.machinery
import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
FIXTURES = HERE / "fixtures"
EXPOSITIONS = HERE / "expositions"
RELEASES = ["0.3.0", "0.3.6.post3", "0.4.1.post7", "0.4.5.post3", "0.4.7.post1", "0.4.10.post2", "0.5.2",
            "0.5.5.post3", "0.5.9", "0.5.14", "0.5.23"]
# name -> scheduler ranks (dp, tp, pp) that run, server size, extra mode
LAYOUTS = {
    "single": dict(tp=1, dp=1, pp=1),
    "tp": dict(tp=2, dp=1, pp=1),
    "dp": dict(tp=1, dp=2, pp=1),
    "dp_attention": dict(tp=2, dp=2, pp=1, dp_attention=True),
    "pp": dict(tp=1, dp=1, pp=2),
    "pd_prefill": dict(tp=1, dp=1, pp=1, disagg="prefill"),
    "pd_decode": dict(tp=1, dp=1, pp=1, disagg="decode"),
}
START = 1764062223.0            # 2025-11-25 09:17:03 UTC
MODEL = "conformance/model"


def _script():
    loader = importlib.machinery.SourceFileLoader("sglang_releases", str(ROOT / "scripts" / "sglang-releases"))
    spec = importlib.util.spec_from_loader("sglang_releases", loader)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sglang_releases"] = mod
    loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------------------------------------------
# stand-ins

class Stand:
    """A neutral stand-in: any attribute or call gives a value from VALUES by name, else another Stand.
    Falsy, zero in arithmetic, empty in len/iteration, "0" when printed."""

    def __init__(self, name="value"):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lookup(name)

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value)

    def __setitem__(self, key, value):
        pass

    def __call__(self, *a, **k):
        v = CALLS.get(self._name)
        return v() if callable(v) else (v if v is not None else Stand(self._name + "()"))

    def __bool__(self):
        return False

    def __len__(self):
        return 0

    def __iter__(self):
        return iter(())

    def __getitem__(self, key):
        return Stand()

    def __format__(self, spec):
        return format(0, spec) if spec else "0"

    def __str__(self):
        return "0"

    def __int__(self):
        return 0

    def __float__(self):
        return 0.0

    def __index__(self):
        return 0

    def __eq__(self, other):
        return other is self

    def __hash__(self):
        return id(self)

    def _num(self, *a):
        return 0

    def __add__(self, other):       # a neutral 0: x + stand == x
        return other

    def __sub__(self, other):
        return -other

    __radd__ = __rsub__ = __add__
    __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _num
    __floordiv__ = __rfloordiv__ = __mod__ = __neg__ = __pos__ = __abs__ = __round__ = _num

    def __lt__(self, other):
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


class Present(Stand):
    """A stand-in that exists (truthy): the running batch is there."""

    def __bool__(self):
        return True


class StubMeta(type):
    def __getattr__(cls, name):            # enum-like members: DisaggregationMode.NULL
        if name.startswith("__"):
            raise AttributeError(name)
        member = Mode(name)
        setattr(cls, name, member)
        return member


class StubType(metaclass=StubMeta):
    """A stand-in for a class SGLang names (isinstance targets, bases such as msgspec.Struct)."""

    def __init_subclass__(cls, **kwargs):
        pass

    def __init__(self, *a, **k):
        pass

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lookup(name)


def stub(name):
    return type(name, (StubType,), {}) if name[:1].isupper() and not name.isupper() else Stand(name)


class Count(int):
    """A count that is also a per-kind breakdown (`num_running_reqs.total`, 0.5.13+)."""

    @property
    def total(self):
        return int(self)


class Mode:
    """DisaggregationMode / ForwardMode stand-in: members compare equal to themselves only."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        member = Mode(name)
        object.__setattr__(self, name, member)
        return member


DISAGG = Mode("DisaggregationMode")
VALUES: dict = {}
CALLS: dict = {}


def lookup(name):
    if name in VALUES:
        return VALUES[name]
    if name.endswith("_tic"):          # the previous log's time: 10 s ago
        return Clock.now - 10
    if name in CALLS:
        return Stand(name)
    return Stand(name)


def set_values(layout: dict, rank: dict, step: int) -> None:
    """The chosen numbers for one scheduler rank at one step."""
    queue = 120 + 10 * step + 7 * rank["dp"]
    running = 32 + step
    used = 90000 + 1000 * step
    total = 200000
    disagg = {"prefill": DISAGG.PREFILL, "decode": DISAGG.DECODE}.get(layout.get("disagg"), DISAGG.NULL)
    VALUES.clear()
    VALUES.update({
        "waiting_queue": [Stand()] * queue, "reqs": [Stand()] * running, "can_run_list": [Stand()] * 4,
        "running_bs": running, "num_running_reqs": Count(running), "num_new_seq": 4, "num_new_seqs": 4,
        "log_input_tokens": 2048, "log_hit_tokens": 512, "log_replay_tokens": 0, "num_pending_tokens": 0,
        "max_total_num_tokens": total, "size": total, "num_generated_tokens": 1200, "num_generated_tokens_": 0,
        "last_gen_throughput": 1234.5, "last_input_throughput": 4096.0, "tree_cache_hit_rate": 0.25,
        "decode_forward_ct": 40, "forward_ct_decode": 40, "forward_ct": 40 + step, "decode_log_interval": 40,
        "tp_rank": rank["tp"], "attn_tp_rank": 0, "pp_rank": rank["pp"], "dp_rank": rank["dp"],
        "disaggregation_mode": disagg, "device": "cuda", "is_hybrid": False, "is_hybrid_gdn": False,
        "is_hybrid_swa": False, "enable_metrics": False, "is_stats_logging_rank": True,
        "current_scheduler_metrics_enabled": False, "enable_mfu_metrics": False,
        "num_tokens_pre_allocated": 4096, "retracted_queue": [Stand()], "queue": [Stand()] * 2,
        "disagg_prefill_inflight_queue": [Stand()] * 3, "disagg_decode_transfer_queue": Stand(),
        "language_only": False, "spec_algorithm": Stand("spec_algorithm"), "_graph_backend_label": "cuda graph",
        "last_decode_stats_tic": START, "last_prefill_stats_tic": START, "model_config": Stand(),
        "context_len": 32768, "max_prefill_tokens": 16384, "max_running_requests": 512,
        "chunked_prefill_size": 8192, "total_retracted_reqs": 2 + step, "startup_available_gpu_memory_gb": 6.25, "num_retracted_reqs": 3,
        "new_token_ratio": 0.9, "temp_prefill_info": None,    # 0.5.8 asserts no prefill is pending
    })
    CALLS.clear()
    CALLS.update({
        "is_none": True, "available_size": total - used - 5000, "evictable_size": 5000,
        "_get_token_info": (used, used / total, 0, 0), "get_num_used": used,
        "get_prefill_usage_msg_parts": [f"token usage: {used / total:.2f}"],
        "get_decode_usage_msg_parts": [f"#token: {used}", f"token usage: {used / total:.2f}"],
        "log_usage": (used, used / total, f"#token: {used}, token usage: {used / total:.2f}, "),
        "get_pool_stats": Stand("pool_stats"), "perf_counter": None, "get_disagg": Stand("disagg"),
    })
    VALUES["pool_stats_observer"] = Stand("pool_stats_observer")
    VALUES["running_batch"] = Present("running_batch")
    VALUES["scheduler"] = Stand("scheduler")


class Clock:
    """time / time.perf_counter stand-in: a fake clock that moves only when told."""

    now = START

    def time(self):
        return Clock.now

    def perf_counter(self):
        return Clock.now

    def monotonic(self):
        return Clock.now

    def time_ns(self):
        return int(Clock.now * 1e9)

    def __getattr__(self, name):
        import time as real
        return getattr(real, name)


def _globals_for(tree: ast.AST, extra: dict) -> dict:
    """A namespace binding every global name the code reads: real builtins and modules we name, stand-ins
    for the rest."""
    ns = {"__builtins__": builtins, "logging": logging, "os": os, "json": json, "time": Clock(),
          "DisaggregationMode": DISAGG, "ForwardMode": Mode("ForwardMode"), "LOG_FORWARD_ITERS": False,
          "RECORD_STEP_TIME": False, "defaultdict": collections.defaultdict, "ENABLE_METRICS_DEVICE_TIMER": False, "GB": 1 << 30}
    ns.update(extra)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in ns and not hasattr(builtins, node.id):
            ns[node.id] = stub(node.id)
    return ns


# ------------------------------------------------------------------------------------------------------------
# one scheduler rank

def _function(files: dict, name: str, paths: tuple) -> tuple[ast.FunctionDef, str] | None:
    for path in paths:
        if path in files:
            for node in ast.walk(ast.parse(files[path])):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                    return node, path
    return None


def _compile_function(node: ast.FunctionDef, path: str, ns: dict):
    node = ast.fix_missing_locations(node)
    node.decorator_list = []
    mod = ast.Module(body=[node], type_ignores=[])
    exec(compile(mod, f"<{path}>", "exec"), ns)   # noqa: S102 - the release's own function, from its wheel
    return ns[node.name]


def configure_logging(files: dict, prefix: str) -> None:
    found = _function(files, "configure_logger", ("sglang/srt/utils.py", "sglang/srt/utils/common.py"))
    server_args = types.SimpleNamespace(log_level="info")
    envs = Stand("envs")
    ns = _globals_for(found[0], {"envs": envs, "get_bool_env_var": lambda *a, **k: False})
    fn = _compile_function(found[0], found[1], ns)
    fn(server_args, prefix=prefix)


def rank_prefix(files: dict, layout: dict, rank: dict) -> str:
    """Run the release's prefix-building statements (in the function that calls configure_logger with a
    prefix) with this rank's numbers."""
    tp, dp, pp = layout["tp"], layout["dp"], layout["pp"]
    server_args = types.SimpleNamespace(tp_size=tp, dp_size=dp, pp_size=pp, ep_size=1, moe_dp_size=1,
                                        attn_cp_size=1, enable_dp_attention=layout.get("dp_attention", False))
    parallel = types.SimpleNamespace(dp_rank=rank["dp"] if dp > 1 else None, tp_rank=rank["tp"], pp_rank=rank["pp"],
                                     moe_ep_rank=0, attn_cp_rank=0, moe_dp_rank=0, tp_size=tp, pp_size=pp,
                                     ep_size=1, attn_cp_size=1, moe_dp_size=1)
    local = {"server_args": server_args, "tp_rank": rank["tp"], "pp_rank": rank["pp"], "moe_ep_rank": 0,
             "dp_rank": rank["dp"] if dp > 1 else None, "gpu_id": 0, "display_tp_rank": None,
             "display_dp_rank": None, "display_moe_ep_rank": None, "attn_cp_rank": 0, "moe_dp_rank": 0,
             "get_parallel": lambda: parallel, "dp_worker_id": rank["dp"]}
    for path in ("sglang/srt/managers/scheduler.py", "sglang/srt/managers/tp_worker.py"):
        if path not in files:
            continue
        for func in ast.walk(ast.parse(files[path])):
            if not isinstance(func, ast.FunctionDef):
                continue
            calls = [c for c in ast.walk(func) if isinstance(c, ast.Call) and
                     getattr(c.func, "id", "") == "configure_logger" and
                     any(k.arg == "prefix" for k in c.keywords)]
            if not calls:
                continue
            # run the statements that compute the prefix and the one that calls configure_logger (maybe under
            # an `if dp_rank is None: ... else: ...`), with configure_logger capturing the prefix it is given
            stmts = [s for s in func.body if (s.lineno < calls[0].lineno and _builds_prefix(s))
                     or any(isinstance(n, ast.Call) and getattr(n.func, "id", "") == "configure_logger"
                            for n in ast.walk(s)) and s.lineno <= calls[-1].lineno]
            got = []
            ns = _globals_for(func, dict(local))
            ns.update(local)
            ns["configure_logger"] = lambda server_args, prefix="", got=got: got.append(prefix)
            for st in stmts:
                exec(compile(ast.fix_missing_locations(ast.Module(body=[st], type_ignores=[])),  # noqa: S102
                             path, "exec"), ns)
                if got:
                    return got[0]
    raise RuntimeError("no configure_logger(prefix=...) call found")


def _builds_prefix(st: ast.stmt) -> bool:
    names = {n.id for n in ast.walk(st) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    if isinstance(st, ast.If):
        names |= {t.id for n in ast.walk(st) if isinstance(n, (ast.Assign, ast.AugAssign))
                  for t in ([n.target] if isinstance(n, ast.AugAssign) else n.targets) if isinstance(t, ast.Name)}
    return bool(names & {"prefix", "parallel", "shown_dp", "shown_tp", "shown_moe_ep", "dp_rank"})


BATCH_FUNCS = {"prefill": ("log_prefill_stats", "report_prefill_stats"),
               "decode": ("log_decode_stats", "report_decode_stats", "print_decode_stats")}
BATCH_FILES = ("sglang/srt/managers/scheduler_components/metrics_reporter.py",
               "sglang/srt/observability/scheduler_metrics_mixin.py",
               "sglang/srt/managers/scheduler_metrics_mixin.py", "sglang/srt/managers/scheduler.py",
               "sglang/srt/managers/tp_worker.py")


def batch_line(files: dict, which: str, logger: logging.Logger) -> str:
    """Run the release's batch-line function on stand-ins; returns how ("function" or "f-string")."""
    for name in BATCH_FUNCS[which]:
        found = _function(files, name, BATCH_FILES)
        if found is None:
            continue
        func, path = found
        ns = _globals_for(func, {"logger": logger})
        fn = _compile_function(func, path, ns)
        args = {}
        for a in func.args.args[1:] + func.args.kwonlyargs:
            args[a.arg] = {"can_run_cuda_graph": True, "running_bs": VALUES["running_bs"],
                           "has_being_chunked": False, "has_inflight": False, "batch": Stand("batch"),
                           "running_batch": None, "adder": Stand("adder"),
                           "can_run_list": VALUES["can_run_list"], "prefill_stats": Stand("prefill_stats"),
                           "decode_stats": Stand("decode_stats"), "dp_cooperation_info": None,
                           }.get(a.arg, Stand(a.arg))
        self = Stand("self")
        fn(self, **args)
        return "function"
    # 0.3.0-0.3.5: the prefill line is built inline in a large method: evaluate its own f-string
    return render_fstring(files, "Prefill batch. " if which == "prefill" else "Decode batch", logger)


def render_fstring(files: dict, marker: str, logger: logging.Logger, level=logging.INFO) -> str:
    """Evaluate the release's message expression containing `marker` with the chosen values and log it."""
    s = SCRIPT
    for path in BATCH_FILES + ("sglang/srt/entrypoints/http_server.py", "sglang/srt/server.py"):
        if path not in files or marker not in files[path]:
            continue
        tree = ast.parse(files[path])
        for func in ast.walk(tree):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            nodes = s._message_nodes(func)
            start = next((i for i, n in enumerate(nodes) if marker in (s.template(n) or "")), None)
            if start is None:
                continue
            ns = _globals_for(func, {})
            ns.update(VALUES)
            ns.update({"self": Stand("self"), "retracted_reqs": [Stand()] * 3, "old_ratio": 0.7,
                       "new_token_ratio": 0.9, "new_token_gained": 512, "reqs_to_abort": [],
                       "avail_mem": 6.25, "kv_full_retract_flag": True, "mamba_num_gained": 0})
            # the message may be assembled over a few statements (msg_prefix = ...; msg_details = ...;
            # logger.warning(msg_prefix + msg_details)): evaluate them in order up to the logger call
            parents = {c: p for p in ast.walk(func) for c in ast.iter_child_nodes(p)}
            msg, last = None, nodes[start].lineno
            for node in nodes[start:]:
                last = node.lineno
                value = eval(compile(ast.Expression(node), path, "eval"), ns)   # noqa: S307
                parent = parents.get(node)
                if isinstance(parent, ast.IfExp):
                    parent = parents.get(parent)
                if isinstance(parent, ast.Call):
                    msg = value
                    break
                targets = parent.targets if isinstance(parent, ast.Assign) else \
                    [parent.target] if isinstance(parent, (ast.AugAssign, ast.AnnAssign)) else []
                for t in targets:
                    if isinstance(t, ast.Name):
                        ns[t.id] = ns.get(t.id, "") + value if isinstance(parent, ast.AugAssign) else value
                msg = value
            else:       # the logger call joins names (`msg_prefix + msg_details`): evaluate it too
                call = min((c for c in ast.walk(func) if isinstance(c, ast.Call) and c.args and c.lineno >= last
                            and getattr(c.func, "attr", "") in s._LOG_CALLS), key=lambda c: c.lineno, default=None)
                if call is not None:
                    msg = eval(compile(ast.Expression(call.args[0]), path, "eval"), ns)   # noqa: S307
            logger.log(level, msg)
            return "f-string"
    return "absent"


def run_rank(version: str, layout_name: str, rank: dict, log_path: Path, mp_dir: Path, steps: int) -> None:
    layout = LAYOUTS[layout_name]
    files = SCRIPT.read_sources(SCRIPT.wheel_path(CACHE, version))
    logging.time = Clock()          # LogRecord.created comes from the fake clock
    os.environ["TZ"] = "UTC"
    import time as _t
    _t.tzset()
    with log_path.open("a") as out:
        real_stderr, sys.stderr = sys.stderr, out      # basicConfig's handler writes to sys.stderr
        try:
            configure_logging(files, "" if rank.get("main") else rank_prefix(files, layout, rank))
        finally:
            sys.stderr = real_stderr
        sched = logging.getLogger("sglang.srt.managers.scheduler")
        if rank.get("main"):        # the HTTP server process: no rank prefix, prints the ready line
            Clock.now = START + 2
            set_values(layout, {"dp": 0, "tp": 0, "pp": 0}, 0)
            render_fstring(files, "The server is fired up", logging.getLogger("sglang.srt.entrypoints.http_server"))
            return
        if rank["prints"] and rank["pp"] == 0:
            set_values(layout, rank, 0)
            render_fstring(files, "max_total_num_tokens=", sched)
        first_stage = rank["pp"] == 0
        last_stage = rank["pp"] == layout["pp"] - 1
        for step in range(steps):
            Clock.now = START + 10 * step + rank["dp"] * 0.25 + rank["pp"] * 0.5
            set_values(layout, rank, step)
            # with plain TP only TP rank 0 prints batch lines; with DP attention each attention group's first
            if rank["prints"]:
                if layout.get("disagg") != "decode" and first_stage:
                    batch_line(files, "prefill", sched)
                if layout.get("disagg") != "prefill" and last_stage:
                    Clock.now += 5
                    batch_line(files, "decode", sched)
            if step == steps - 1 and layout.get("disagg") != "prefill":
                Clock.now += 1
                lvl = logging.WARNING
                render_fstring(files, "KV cache pool is full", sched, lvl) != "absent" or \
                    render_fstring(files, "Decode out of memory happened", sched, lvl)
        out.flush()
    write_metrics(files, layout, rank, mp_dir)


def write_metrics(files: dict, layout: dict, rank: dict, mp_dir: Path) -> None:
    path = next((p for p in ("sglang/srt/observability/metrics_collector.py", "sglang/srt/metrics/collector.py")
                 if p in files), None)
    if path is None:
        return
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(mp_dir)
    import prometheus_client
    histogram_init = prometheus_client.Histogram.__init__

    def init(self, *a, buckets=prometheus_client.Histogram.DEFAULT_BUCKETS, **k):
        # buckets computed by SGLang helpers we stub out fall back to prometheus_client's defaults
        try:
            buckets = [float(b) for b in buckets]
        except (TypeError, ValueError):
            buckets = []
        histogram_init(self, *a, buckets=buckets if len(buckets) >= 2 else
                       prometheus_client.Histogram.DEFAULT_BUCKETS, **k)
    prometheus_client.Histogram.__init__ = init
    real_import = builtins.__import__

    def fake_import(name, globals=None, locals=None, fromlist=(), level=0):
        if name.split(".")[0] in ("sglang", "torch", "numpy", "orjson", "zmq", "msgspec", "pybase64") or level:
            mod = types.ModuleType(name)
            mod.__getattr__ = stub
            return mod
        return real_import(name, globals, locals, fromlist, level)

    module = types.ModuleType("sglang_conformance_collector")   # dataclasses look their module up
    sys.modules[module.__name__] = module
    ns = module.__dict__
    ns["__builtins__"] = dict(vars(builtins), __import__=fake_import)
    exec(compile(files[path], path, "exec"), ns)   # noqa: S102 - the release's collector module, from its wheel
    labels = {"model_name": MODEL, "engine_type": "unified", "tp_rank": str(rank["tp"]), "pp_rank": str(rank["pp"])}
    if layout["dp"] > 1:
        labels["dp_rank"] = str(rank["dp"])
    # labels the release's collector reads back (`labels["moe_ep_rank"] == 0`): its scheduler always passes them
    for key in re.findall(r'labels\["(\w+)"\] ==', files[path]):
        labels.setdefault(key, 0)
    cls = ns.get("SchedulerMetricsCollector")
    if cls is None:
        return
    import inspect
    params = [p for p in inspect.signature(cls.__init__).parameters.values()
              if p.name != "self" and (p.default is p.empty or p.name == "server_args")
              and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    kwargs = {p.name: labels if p.name == "labels" else Stand(p.name) for p in params}
    collector = cls(**kwargs)
    stats_cls = ns.get("SchedulerStats")
    stats = stats_cls() if stats_cls else types.SimpleNamespace()
    chosen = {"num_running_reqs": Count(34), "num_used_tokens": 92000, "token_usage": 0.46, "gen_throughput": 1234.5,
              "num_queue_reqs": 140 + 7 * rank["dp"], "cache_hit_rate": 0.25, "total_retracted_reqs": 4,
              "num_retracted_reqs": 3, "is_cuda_graph": 1.0, "max_running_requests": 512,
              # what the tuning signals read, at healthy values: speculative decoding accepting well, KV room
              # to evict, no request paused, short PD queues, the pool's capacity (0.5.6-0.5.10 report it here)
              "spec_accept_length": 2.5, "spec_accept_rate": 0.6, "kv_used_tokens": 92000,
              "kv_available_tokens": 100000, "kv_evictable_tokens": 8000, "num_paused_reqs": 0,
              "new_token_ratio": 0.4, "max_total_num_tokens": 200000, "num_prefill_bootstrap_queue_reqs": 2,
              "num_prefill_prealloc_queue_reqs": 2, "num_prefill_inflight_queue_reqs": 1,
              "num_prefill_infight_queue_reqs": 1, "num_decode_prealloc_queue_reqs": 1,
              "num_decode_transfer_queue_reqs": 0}
    import dataclasses
    for k, v in chosen.items():
        current = getattr(stats, k, None)
        if dataclasses.is_dataclass(current) and hasattr(current, "total"):   # QueueCount (0.5.13+)
            setattr(stats, k, dataclasses.replace(current, total=int(v)))
        elif hasattr(stats, k) or not stats_cls:
            setattr(stats, k, v)
    if hasattr(collector, "log_stats"):
        collector.log_stats(stats)
    # start-up constants (0.5.11+: emit_constants) and queue waits (0.5.3+: observe_queue_time), through the
    # release's own methods; a parameter not chosen here gets the method's default or a neutral stand-in
    constants = {"max_total_num_tokens": 200000, "startup_available_gpu_memory_gb": 6.25 - 0.5 * rank["tp"],
                 "weight_memory_usage_gb": 15.0, "kv_cache_memory_usage_gb": 50.0, "graph_memory_usage_gb": {},
                 "page_size": 1, "num_pages": 200000, "context_len": 32768, "max_total_num_tokens_swa": None,
                 "max_running_requests_under_SLO": None}
    emit = getattr(collector, "emit_constants", None)
    if emit is not None:
        sig = inspect.signature(emit)
        emit(**{name: constants.get(name, p.default if p.default is not p.empty else Stand(name))
                for name, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)})
    if hasattr(collector, "observe_queue_time"):
        for wait in (0.05, 0.1, 0.2):
            collector.observe_queue_time(wait)
    # 0.5.7+: the retraction counter is bumped where requests are retracted, not in log_stats
    for metric in list(vars(collector).values()):
        if getattr(metric, "_name", "") in ("sglang:num_retracted_requests", "sglang_num_retracted_requests"):
            child = metric.labels(**{k: v for k, v in labels.items() if k in metric._labelnames})
            child.inc(3)


def serve_exposition(mp_dir: Path) -> str:
    """What the release's /metrics serves in multiprocess mode: every rank's files, collected together."""
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(mp_dir))
    return canonical(generate_latest(registry).decode())


def canonical(text: str) -> str:
    """The exposition with families and samples in a stable order (the multiprocess collector follows file
    and dict order) and `pid` labels (multiprocess_mode="all", a new pid every run) numbered by the rank
    labels of their process."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("# HELP") or not blocks:
            blocks.append([])
        blocks[-1].append(line)
    rank_of = {}
    for line in text.splitlines():
        m = re.search(r'pid="([0-9]+)"', line)
        if m:
            rank_of.setdefault(m.group(1), re.sub(r'pid="[0-9]+",?', "", line.split("{", 1)[1].split("}")[0]))
    order = {pid: 1000 + i for i, pid in enumerate(sorted(rank_of, key=lambda p: rank_of[p]))}
    out = []
    for block in sorted(blocks, key=lambda b: b[0]):
        head = [ln for ln in block if ln.startswith("#")]
        samples = sorted(re.sub(r'pid="([0-9]+)"', lambda m: f'pid="{order[m.group(1)]}"', ln)
                         for ln in block if not ln.startswith("#"))
        out += head + samples
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------------------------

def ranks(layout: dict) -> list[dict]:
    """Scheduler processes: one per (dp, pp, tp) rank; with DP attention the dp ranks split the tp group,
    and each attention group's first rank (attn_tp_rank 0) prints the batch lines."""
    if layout.get("dp_attention"):
        per = layout["tp"] // layout["dp"]
        return [{"dp": t // per, "tp": t, "pp": 0, "prints": t % per == 0} for t in range(layout["tp"])]
    return [{"dp": d, "tp": t, "pp": p, "prints": t == 0} for d in range(layout["dp"]) for p in range(layout["pp"])
            for t in range(layout["tp"])]


def generate(version: str, layout_name: str, steps: int = 3) -> None:
    out = FIXTURES / version
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / f"{layout_name}.log"
    log_path.write_text("")
    with tempfile.TemporaryDirectory() as mp:
        for r in [{"main": True}] + ranks(LAYOUTS[layout_name]):
            subprocess.run([sys.executable, __file__, "--cache", str(CACHE), "--one", version, layout_name,
                            json.dumps(r), str(log_path), mp, str(steps)], check=True, capture_output=True, text=True)
        exposition = serve_exposition(Path(mp))
    # the ranks run one after another; a server's log interleaves them by time
    lines = log_path.read_text().splitlines(keepends=True)
    log_path.write_text("".join(sorted(lines, key=_line_time)))
    prom = out / f"{layout_name}.prom"
    if exposition.strip():
        prom.write_text(exposition)
    elif prom.exists():
        prom.unlink()
    print(f"{version} {layout_name}: {len(lines)} lines, {len(exposition.splitlines())} exposition lines")


def generate_exposition(version: str, layout_name: str = "tp") -> None:
    """Only the release's /metrics of a `layout_name` server (its log is not kept)."""
    with tempfile.TemporaryDirectory() as mp:
        log = Path(mp) / "discarded.log"
        metrics = Path(mp) / "metrics"
        metrics.mkdir()
        for r in ranks(LAYOUTS[layout_name]):
            subprocess.run([sys.executable, __file__, "--cache", str(CACHE), "--one", version, layout_name,
                            json.dumps(r), str(log), str(metrics), "1"], check=True, capture_output=True, text=True)
        exposition = serve_exposition(metrics)
    EXPOSITIONS.mkdir(exist_ok=True)
    out = EXPOSITIONS / f"{version}.prom"
    if exposition.strip():
        out.write_text(exposition)
    elif out.exists():
        out.unlink()
    print(f"{version}: {len(exposition.splitlines())} exposition lines")


def _line_time(line: str) -> str:
    return line[1:line.index("]")] if line.startswith("[") and "]" in line else ""


CACHE = Path.home() / ".cache" / "sglang-exporter" / "wheels"
SCRIPT = None


def main() -> int:
    global CACHE, SCRIPT
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", type=Path, default=CACHE)
    p.add_argument("--release", action="append")
    p.add_argument("--layout", action="append", choices=list(LAYOUTS))
    p.add_argument("--expositions", action="store_true",
                   help="write only each release's /metrics of a TP server to tests/conformance/expositions/")
    p.add_argument("--one", nargs=6, help=argparse.SUPPRESS)
    a = p.parse_args()
    CACHE = a.cache
    SCRIPT = _script()
    if a.one:
        version, layout, rank, log_path, mp, steps = a.one
        run_rank(version, layout, json.loads(rank), Path(log_path), Path(mp), int(steps))
        return 0
    failed = []
    if a.expositions:
        sys.path.insert(0, str(ROOT))
        from exporter import releases
        for v in a.release or releases.releases():
            try:
                generate_exposition(v)
            except subprocess.CalledProcessError as exc:
                failed.append(f"{v}: {exc.stderr.strip().splitlines()[-1] if exc.stderr else exc}")
        for line in failed:
            print(f"FAILED {line}", file=sys.stderr)
        return 1 if failed else 0
    for v in a.release or RELEASES:
        for layout in a.layout or LAYOUTS:
            try:
                generate(v, layout)
            except subprocess.CalledProcessError as exc:
                failed.append(f"{v} {layout}: {exc.stderr.strip().splitlines()[-1] if exc.stderr else exc}")
    for line in failed:
        print(f"FAILED {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
