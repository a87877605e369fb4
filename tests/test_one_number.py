"""One number per meaning (issue 30, item 7): the retraction rate is one definition shown by the gauge, the
signals, the API and the chart; a report states the SGLang release once; the default profile does not call an
idle online server a problem; a missing log is said at start and in /readyz."""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from exporter.config import Config
from exporter.releases import flags
from exporter.report.analyze import analyze
from exporter.report.text import render_text
from exporter.sidecar.run import Sidecar
from exporter.simulate import Simulator, load_scenario
from exporter.web.expose import SidecarCollector
from exporter.web.server import signals_document

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_754_932_620.0          # 2025-08-11 17:17:00 UTC
WHEN = datetime(2025, 8, 11, 17, 0, 0)


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def decode(t: float, rank: str = "TP0") -> str:
    return (f"[{stamp(t)} {rank}] Decode batch, #running-req: 200, #token: 90000, token usage: 0.97, cuda graph: "
            "True, gen throughput (token/s): 1500.00, #queue-req: 40")


def retract(t: float, rank: str = "TP0") -> str:
    return (f"[{stamp(t)} {rank}] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
            "#new_tokens_gained: 2048, #new_token_ratio: 0.9998 -> 1.0000")


class Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


def exposition(sc: Sidecar) -> dict[str, float]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SidecarCollector(sc))
    out = {}
    for line in generate_latest(reg).decode().splitlines():
        if line.startswith("sglang_exporter_retractions_per_minute ") or \
                line.startswith("sglang_exporter_signal_value_per_second{signal=\"retraction"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_gauge_signal_and_api_show_one_rate_at_every_instant(tmp_path):
    """A storm of 24 retractions a minute, followed live from the sidecar's start: the gauge, each signal's
    value (exposition and API) agree at every instant, before and after a full window was observed (the
    gauge divided by its full 10 min window before: 12.3 beside the storm's 24.6)."""
    log = tmp_path / "sglang.log"
    log.write_text("")
    clock = Clock(T0)
    sc = Sidecar(Config(log_files=(str(log),)), clock=clock)
    try:
        sc.poll_logs_once()
        seen = []
        for step in range(1, 13 * 60 // 5 + 1):            # 13 minutes in 5 s steps, 2 retractions each
            t = T0 + 5 * step
            with open(log, "a", encoding="utf-8") as fh:
                fh.write(decode(t) + "\n" + retract(t) + "\n" + retract(t + 1) + "\n")
            clock.t = t
            sc.poll_logs_once()
            if step % 12:
                continue
            clock.t = t + 2.5       # off the 5 s grid: no retraction sits on a window's edge
            view = sc.view()
            frequent = view.snapshot.judgements["retractions_frequent"].value
            storm = view.snapshot.judgements["retraction_storm"].value
            assert view.retractions_per_minute == frequent            # the gauge is the signal's value
            doc = {s["id"]: s["value"] for s in signals_document(view)["signals"]}
            assert doc["retractions_frequent"] == frequent and doc["retraction_storm"] == storm
            shown = exposition(sc)
            assert shown["sglang_exporter_retractions_per_minute"] == frequent
            assert abs(shown['sglang_exporter_signal_value_per_second{signal="retractions_frequent"}'] * 60
                       - frequent) < 1e-9
            seen.append((round(frequent, 6), round(storm, 6)))
        # a steady storm reads about the same over either window, from the first minute on (before: the
        # gauge read half the storm's value 5 min in); the small gap is the partial first step
        for frequent, storm in seen:
            assert 22.5 <= frequent <= 24.0 and 22.5 <= storm <= 24.0 and abs(frequent - storm) < 1.0, seen
    finally:
        sc.shutdown()


def test_the_chart_draws_each_signal_value_where_its_shading_starts(tmp_path):
    """The HTML report's retraction chart: where the storm's shading starts, its line is at the threshold or
    above (it read ~1.5/min there when the chart divided by the full window)."""
    log = tmp_path / "storm.log"
    Simulator(load_scenario("retraction_storm"), start=WHEN).write_log(log)
    rep = analyze([str(log)], Config(), progress=False, series=True)
    series = rep["series"]
    storm = next(s for s in rep["signals"] if s["id"] == "retraction_storm")
    start = storm["intervals"][0]["start_ts"]
    at = series["t"].index(start)
    assert series["retraction_storm_per_minute"][at] >= 10.0
    assert series["retraction_storm_per_minute"][-1] == storm["worst"] or storm["final_state"] != "firing"
    frequent = next(s for s in rep["signals"] if s["id"] == "retractions_frequent")
    assert max(series["retractions_per_minute"]) == frequent["worst"]


def test_the_release_is_the_server_args_range_within_the_format_family():
    args = {"model_path": "m", "tp_size": 1, "mem_fraction_static": 0.88, "chunked_prefill_size": 8192,
            "schedule_conservativeness": 1.0, "cuda_graph_max_bs": 160, "disable_cuda_graph": False}
    wide = flags.infer_release(args)
    assert wide is not None and wide[0] < "0.5"
    narrowed = flags.infer_release(args, family="0.5.9-0.5.23")
    assert narrowed is not None and narrowed[0] == "0.5.9"
    assert flags.releases.version_key(narrowed[1]) <= flags.releases.version_key(wide[1])
    # no server_args: the format family alone; no family: server_args alone
    assert flags.infer_release({}, family="0.5.9-0.5.23") == ("0.5.9", "0.5.23")
    assert flags.infer_release(args, family=None) == wide


def test_a_report_states_the_release_once_and_never_calls_it_unknown_after(tmp_path):
    log = tmp_path / "graph.log"
    Simulator(load_scenario("cuda_graph_off"), start=WHEN).write_log(log)
    rep = analyze([str(log)], Config(), progress=False)
    text = render_text(rep)
    rel = rep["server"]["release"]
    assert text.count("SGLang release") == 1 and f"SGLang release {rel['first']} .. {rel['last']}" in text
    assert rep["format_family"] == "0.5.9-0.5.23" and rel["first"] == "0.5.9"
    assert "format 0.5.9-0.5.23" not in text and "release is not known" not in text
    assert "--sglang-url" not in text              # analyze has no such flag
    assert "remove --disable-cuda-graph (now set)" in text and "(now True) to False" not in text


def test_the_default_profile_calls_an_idle_online_server_healthy_and_says_it_is_the_default(tmp_path):
    log = tmp_path / "online.log"
    Simulator(load_scenario("healthy_online"), start=WHEN).write_log(log)
    proc = subprocess.run([sys.executable, "-m", "exporter", "analyze", "-q", str(log)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Verdict: HEALTHY: nothing fired"
    assert f"{log}: profile online (the default; --profile offline for a batch job), " in lines[1]
    chosen = subprocess.run([sys.executable, "-m", "exporter", "analyze", "-q", "--format", "json", "--profile",
                             "offline", str(log)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    rep = json.loads(chosen.stdout)
    assert rep["profile"] == "offline" and rep["profile_default"] is False and rep["verdict"] == "problems"


def test_a_crash_log_under_the_default_profile_advises_no_request_rate(tmp_path):
    log = tmp_path / "crash.log"
    Simulator(load_scenario("server_crash"), start=WHEN).write_log(log)
    rep = analyze([str(log)], Config(), progress=False)
    assert rep["verdict"] == "failed"
    assert {s["id"] for s in rep["signals"] if s["fired"]} == {"server_crashed"}
    assert not [a for a in rep["advice"] if a["flag"] == "request-rate"]
