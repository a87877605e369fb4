"""Scenario files (exporter/scenarios/*.yaml) as data: the phases, events and start-up a simulation plays, validated
with errors that name the file and the key."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from exporter.catalog.model import PROFILES

SCENARIO_DIR = Path(__file__).resolve().parents[1] / "scenarios"
FAMILIES = ("0.3", "0.4.7", "0.5.8", "0.5.23")
DEFAULT_FORMAT = "0.5.23"
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
DISAGGREGATION_MODES = ("null", "prefill", "decode")    # SGLang's --disaggregation-mode
EVENT_KINDS = ("oom_prefill", "oom_decode", "watchdog", "restart", "crash")


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
    token_usage: object = (0.90, 0.945)   # under kv_pressure's 0.95: a default phase is a healthy one
    gen_throughput: object = None        # None: running / itl
    cuda_graph: bool | None = None       # None: True when running <= cuda_graph_max_bs and graphs enabled
    retractions_per_minute: float = 0.0
    latency: dict = field(default_factory=lambda: {"ttft": 0.3, "itl": 0.03, "e2e": 12.0})
    prompt_tokens: int = 1024
    cache_hit_rate: float = 0.25
    spec_accept_length: float | None = None   # speculative decoding: tokens accepted per verify step (None: off)
    pd_queue: object = 0                      # PD disaggregation: requests in this server's transfer queues
    events: list = field(default_factory=list)
    silent: bool = False
    scheduler_idle: bool = False              # silent: the scheduler idles (counts idle time) instead of hanging
    error_ratio: float = 0.0                  # share of inference requests answered with a 500 (a request error)


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
    profile: str | None = None        # the workload profile it plays (the demo judges it by that profile)

    @property
    def duration(self) -> float:
        return sum(p.duration for p in self.phases)


_PHASE_KEYS = {"duration", "queue", "running", "token_usage", "gen_throughput", "cuda_graph",
               "retractions_per_minute", "latency", "prompt_tokens", "cache_hit_rate", "spec_accept_length",
               "pd_queue", "events", "silent", "scheduler_idle", "error_ratio"}
_TOP_KEYS = {"description", "profile", "format", "layout", "server_args", "startup", "phases"}


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
    if raw.get("spec_accept_length") is not None:
        p.spec_accept_length = float(_check_value(fname, f"{where}.spec_accept_length", raw["spec_accept_length"],
                                                  lo=1, hi=16, allow_range=False))
    if "error_ratio" in raw:
        p.error_ratio = float(_check_value(fname, f"{where}.error_ratio", raw["error_ratio"], lo=0, hi=1,
                                           allow_range=False))
    if "pd_queue" in raw:
        p.pd_queue = _check_value(fname, f"{where}.pd_queue", raw["pd_queue"], lo=0)
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
    if "scheduler_idle" in raw:
        if not isinstance(raw["scheduler_idle"], bool):
            raise ScenarioError(f"{fname}: {where}.scheduler_idle: expected true or false")
        p.scheduler_idle = raw["scheduler_idle"]
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
    profile = data.get("profile")
    if profile is not None and profile not in PROFILES:
        raise ScenarioError(f"{fname}: profile: expected one of {', '.join(PROFILES)}, got {profile!r}")
    sc.profile = profile
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
    if merged.get("disaggregation_mode", "null") not in DISAGGREGATION_MODES:
        raise ScenarioError(f"{fname}: server_args.disaggregation_mode: expected one of "
                            f"{', '.join(DISAGGREGATION_MODES)}")
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

