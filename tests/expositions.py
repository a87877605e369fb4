"""Per-release /metrics expositions, rendered the way SGLang's collector renders them: prometheus_client metric
objects with each family's name, type and label names exactly as that release defines them
(exporter/releases/metrics.json, read from its wheel), fed with values the test chooses.

What SGLang's multiprocess collector adds is reproduced: gauges without a multiprocess mode (num_retracted_reqs,
num_paused_reqs) carry a `pid` label, scheduler metrics carry tp_rank/pp_rank from 0.4.10, and a family appears
only once it has a sample (a counter before its first increment is absent).

    python -m tests.expositions    # rewrite tests/fixtures/expositions/<release>.prom (steady, healthy values)
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary, generate_latest

from exporter import releases

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "expositions"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
PID_GAUGES = ("num_retracted_reqs", "num_paused_reqs")     # multiprocess_mode "all": one series per process

# steady, healthy values (offline profile): every signal that can be judged says ok
HEALTHY = {
    "num_queue_reqs": 150, "num_running_reqs": 40, "token_usage": 0.95, "gen_throughput": 2400.0,
    "is_cuda_graph": 1, "cache_hit_rate": 0.1, "num_used_tokens": 90000, "startup_available_gpu_memory_gb": 6.5,
    "max_total_num_tokens": 100000, "new_token_ratio": 0.4, "num_retracted_reqs": 0, "num_paused_reqs": 0,
    "kv_used_tokens": 90000, "kv_available_tokens": 10000, "kv_evictable_tokens": 5000, "utilization": 0.9,
    "full_token_usage": 0.95, "swa_token_usage": 0.5, "mamba_usage": 0.3, "total_retracted_reqs": 0,
}
# counters that count from the first request (present from the first scrape with traffic)
STEADY_COUNTERS = ("prompt_tokens", "generation_tokens", "num_requests")   # cached_tokens: 10% of prompts
LATENCY = {"time_to_first_token_seconds": 0.2, "inter_token_latency_seconds": 0.02,
           "time_per_output_token_seconds": 0.02, "e2e_request_latency_seconds": 5.0, "queue_time_seconds": 0.1,
           "queue_time_s": 0.1}


def _labels(release: str, fam: releases.MetricFamily) -> dict:
    """Label values for a family: the collector's base labels (model_name; tp_rank and pp_rank for scheduler
    gauges from 0.4.10) plus the family's own extra label names, each given a plain value."""
    spec = fam.labels
    if spec and not spec[0].startswith("<"):
        return {name: "0" if name.endswith("rank") else "x" for name in spec}
    out = {"model_name": MODEL}
    if fam.type == "gauge" and releases.version_key(release) >= (0, 4, 10, 0):
        out.update(tp_rank="0", pp_rank="0")
    if spec:
        for extra in re.findall(r"'(\w+)'", spec[0]):
            out[extra] = {"mode": "cuda_graph", "is_streaming": "false", "cache_source": "device"}.get(extra, "x")
    return out


def render(release: str, gauges: dict | None = None, counters: dict | None = None,
           observations: dict | None = None) -> str:
    """The /metrics text of `release` with these values: gauges {short name: value}, counters {short name
    without _total: total}, observations {histogram short name: [seconds, ...]}. A family not given a value is
    absent, as in SGLang's multiprocess exposition before its first sample."""
    reg = CollectorRegistry()
    gauges, counters, observations = gauges or {}, counters or {}, observations or {}
    for name, fam in sorted(releases.metric_families(release).items()):
        short = fam.short[:-len("_total")] if fam.short.endswith("_total") else fam.short
        labels = _labels(release, fam)
        if fam.type == "gauge" and short in gauges:
            if short in PID_GAUGES:
                labels["pid"] = "4242"
            g = Gauge(name, fam.help, list(labels), registry=reg)
            g.labels(**labels).set(gauges[short])
        elif fam.type == "counter" and short in counters:
            c = Counter(name[:-len("_total")] if name.endswith("_total") else name, fam.help, list(labels),
                        registry=reg)
            c.labels(**labels).inc(counters[short])
        elif fam.type in ("histogram", "summary") and short in observations:
            cls = Histogram if fam.type == "histogram" else Summary
            h = cls(name, fam.help, list(labels), registry=reg)
            for x in observations[short]:
                h.labels(**labels).observe(x)
    return generate_latest(reg).decode()


def healthy(release: str, step: int = 1) -> str:
    """A healthy server's exposition at scrape `step` (counters grow with it)."""
    return render(release, HEALTHY, {**{c: 1000 * step for c in STEADY_COUNTERS}, "cached_tokens": 100 * step},
                  {h: [v] * (10 * step) for h, v in LATENCY.items()})


def main() -> int:
    from prometheus_client import disable_created_metrics
    disable_created_metrics()      # SGLang's multiprocess exposition has no _created series
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for release in releases.releases():
        (FIXTURES / f"{release}.prom").write_text(healthy(release))
    print(f"wrote {len(releases.releases())} expositions to {FIXTURES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
