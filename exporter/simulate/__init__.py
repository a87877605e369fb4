"""An SGLang stand-in driven by scenario data files (exporter/scenarios/*.yaml).

It writes SGLang-shaped log lines (four format families, see FAMILIES) and serves a /metrics page of the
simulated state, so the exporter, its alerts and dashboards can be rehearsed without a GPU.

    sim = Simulator(load_scenario("retraction_storm"), start=datetime(2025, 8, 11, 17, 0, 0))
    sim.lines_until(60)        # the first simulated minute of log lines
    sim.metrics_text()         # /metrics text of the state at that moment

Timing model: simulated time advances in whole seconds. Second 0 (and the second of a `restart` event)
prints the start-up block; every other second of a non-silent phase prints one decode line per DP rank
(from its TP0 scheduler), a prefill line every PREFILL_EVERY seconds, the retractions due (every TP rank
prints them), and a few uvicorn access lines (a phase's `error_ratio` of them answered 500, each after its request
error). Everything random comes from one random.Random(seed); the
/metrics-only values (queue time, KV token split, new-token ratio, speculative and PD figures) are derived
from the scenario without random draws, so the log is the same whatever the exposition shows.
See docs/simulate.md for the scenario format.

Parts, one job each: `scenario` (the scenario files), `lines` (the log lines), `engine` (the simulation),
`exposition` (its /metrics, named by the catalog's SGLang table), `run` (HTTP, live mode, command line).
"""
from __future__ import annotations

from exporter.simulate.engine import MAX_ACCESS_PER_SECOND, PREFILL_EVERY, Simulator
from exporter.simulate.exposition import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS
from exporter.simulate.lines import (
    CRASH_CAUSE,
    GIB,
    GPU_AVAIL_AT_BOOT,
    GPU_TOTAL_GIB,
    GRAPH_GIB,
    KV_BYTES_PER_TOKEN,
    REQUEST_ERROR_CAUSE,
    WEIGHTS_GIB,
    LineWriter,
)
from exporter.simulate.run import add_arguments, main, parse_listen, run_simulator, serve_metrics
from exporter.simulate.scenario import (
    DEFAULT_FORMAT,
    DEFAULT_SERVER_ARGS,
    EVENT_KINDS,
    FAMILIES,
    SCENARIO_DIR,
    Event,
    Phase,
    Scenario,
    ScenarioError,
    list_scenarios,
    load_scenario,
    parse_scenario,
)

__all__ = [
    "CRASH_CAUSE", "DEFAULT_FORMAT", "DEFAULT_SERVER_ARGS", "E2E_BUCKETS", "EVENT_KINDS", "FAMILIES", "GIB",
    "GPU_AVAIL_AT_BOOT", "GPU_TOTAL_GIB", "GRAPH_GIB", "ITL_BUCKETS", "KV_BYTES_PER_TOKEN", "MAX_ACCESS_PER_SECOND",
    "PREFILL_EVERY", "REQUEST_ERROR_CAUSE", "SCENARIO_DIR", "TTFT_BUCKETS", "WEIGHTS_GIB", "Event", "LineWriter",
    "Phase", "Scenario", "ScenarioError", "Simulator", "add_arguments", "list_scenarios", "load_scenario", "main",
    "parse_listen", "parse_scenario", "run_simulator", "serve_metrics",
]
