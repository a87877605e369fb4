"""The failure signals of the catalog: the server crashed, ran out of memory while starting, or never became
ready. They are catalog entries like any other (catalog.SIGNALS holds them); they live here to keep each module
short. A failure signal makes the verdict `failed`.

Each carries a cause line (the last exception line of the traceback, classified by `exporter.state.failures`):
exported as `sglang_exporter_failure_cause_info`, shown by the API and the report, and joined into the
alert's description.
"""
from __future__ import annotations

from exporter.catalog.model import Advice, AlertSpec, Signal

_CAUSE = "Cause ({{ $labels.cause_class }}): {{ $labels.cause }}."

# Start-up OOM advice, by the start-up stage the log shows (`when`): the guide's memory section.
_STARTUP_OOM_ADVICE = (
    Advice("--tp-size", "increase", None,
           "The weights alone do not fit in one GPU's memory: shard them over more GPUs.",
           relieves_pressure=True, when=("weights",)),
    Advice("--quantization", "check", "fp8",
           "FP8 weights take half the memory of BF16 ones (on GPUs that support FP8).",
           relieves_pressure=True, when=("weights", "kv_pool_too_small")),
    Advice("--mem-fraction-static", "decrease", None,
           "The static pool (weights + KV cache) left too little room for what start-up allocates after it: "
           "CUDA graph buffers and the activations of warm-up.",
           relieves_pressure=True, when=("kv_pool", "cuda_graph", "warmup", "unknown")),
    Advice("--kv-cache-dtype", "check", "fp8_e4m3",
           "An FP8 KV cache holds twice the tokens in the same memory, so a smaller pool serves as many.",
           relieves_pressure=True, when=("kv_pool", "kv_pool_too_small")),
    Advice("--cuda-graph-max-bs", "decrease", None,
           "Capturing CUDA graphs for fewer batch sizes needs fewer graph buffers.",
           relieves_pressure=True, when=("cuda_graph",)),
    Advice("--chunked-prefill-size", "decrease", 4096,
           "Warm-up prefills one chunk; a smaller chunk needs less activation memory.",
           relieves_pressure=True, when=("warmup",)),
    Advice("--mem-fraction-static", "increase", None,
           "After the weights no memory was left for a KV cache ('Not enough memory'): give the static "
           "pool a larger share, or make the weights smaller.", when=("kv_pool_too_small",)),
)

FAILURE_SIGNALS: tuple[Signal, ...] = (
    Signal(
        id="server_crashed",
        title="Server crashed",
        meaning="An SGLang process or scheduler loop died: a scheduler or other process hit an exception, a "
                "child process was killed (`Received sigquit`, `Subprocess ... crashed`), initialisation failed "
                "or NCCL timed out. A bare traceback or a failed health check counts only once a death is "
                "confirmed: no batch line for `resume_seconds` after it, a line above, or a new start-up. A "
                "request that failed while the server kept serving (`Error in request: ...`, answered 500) is "
                "not a crash: it counts in `error_rate`. It ends at the next ready line, or when batch lines go "
                "on `resume_seconds` after the last failure line; a failure of a later start-up is a new crash "
                "with its own cause (a new notification).",
        impact="The server does not serve: every request fails until it is restarted. Pages.",
        severity="critical",
        inputs=("scheduler_exception", "traceback", "sigquit", "subprocess_crash", "init_failed",
                "health_check_failed", "nccl_timeout", "server_ready"),
        formula="a failure event since the last server_ready line (events since `min_events`), not followed "
                "by batch lines `resume_seconds` after the last one; a bare traceback or failed health check "
                "only when no batch line came in the `resume_seconds` after it (or a death line or a start-up "
                "followed); the cause is the last exception line of the traceback",
        value_unit="count",
        window_seconds=0,
        defaults={"min_events": 1, "resume_seconds": 30},
        profiles={},
        advice=(),
        alert=AlertSpec("SGLangServerCrashed", "0m", "An SGLang server process crashed.",
                        "{{ $labels.instance }}: SGLang failed and has not served since. " + _CAUSE,
                        page=True),
        guide="(Not in the guide) a crashed scheduler takes the whole server down.",
        failure=True,
    ),
    Signal(
        id="startup_oom",
        title="Out of memory at start-up",
        meaning="SGLang ran out of GPU memory while starting: loading the weights, allocating the KV cache "
                "pool, capturing CUDA graphs or warming up. The stage the log shows picks the advice.",
        impact="The server never becomes ready; in Kubernetes it crash-loops. Pages.",
        severity="critical",
        inputs=("oom", "load_weight", "kv_cache_allocated", "memory_pool", "graph_capture", "server_ready"),
        formula="an OOM event before the ready line of its start-up (phase startup, or a traceback OOM of "
                "unknown phase while the start-up has not printed its ready line) since the last server_ready "
                "line (events >= `min_events`)",
        value_unit="count",
        window_seconds=0,
        defaults={"min_events": 1},
        profiles={},
        advice=_STARTUP_OOM_ADVICE,
        alert=AlertSpec("SGLangStartupOOM", "0m", "SGLang ran out of GPU memory while starting.",
                        "{{ $labels.instance }}: out of memory during start-up. " + _CAUSE
                        + " Advice by stage: see the runbook.", page=True),
        guide="OOM: lower `--mem-fraction-static`, `--cuda-graph-max-bs`, `--chunked-prefill-size`; an FP8 KV "
              "cache, FP8 weights or more tensor parallelism make the model fit.",
        failure=True,
    ),
    Signal(
        id="startup_stalled",
        title="Start-up stalled",
        meaning="SGLang printed its server arguments but no ready line within the allowed time: start-up "
                "hung (NCCL initialisation, a download, a compile) or died without a traceback.",
        impact="The server never becomes ready. Pages.",
        severity="critical",
        inputs=("server_args", "server_ready"),
        formula="seconds since the server_args line of the current start-up, with no server_ready since, "
                "> `startup_seconds`",
        value_unit="seconds",
        window_seconds=0,
        defaults={"startup_seconds": 1200},
        profiles={},
        advice=(),
        alert=AlertSpec("SGLangStartupStalled", "0m", "SGLang did not become ready after starting.",
                        "{{ $labels.instance }}: no ready line {{ $value | humanizeDuration }} after the "
                        "server arguments. " + _CAUSE, page=True),
        guide="(Not in the guide) start-up ends with 'The server is fired up and ready to roll!'.",
        failure=True,
    ),
)
