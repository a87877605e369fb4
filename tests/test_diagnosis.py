"""Logs that end in a failure (tests/fixtures/failures, shapes from public SGLang issues): the verdict, the
signal, the cause line and the advice of each; the four verdicts; short logs rated over what they hold; and
`serve` agreeing with `analyze` on the same lines."""
from __future__ import annotations

import calendar
import re
import time
from pathlib import Path

import pytest

from exporter.config import Config
from exporter.engine import verdict
from exporter.report.analyze import analyze
from exporter.report.text import render_text
from exporter.sidecar.run import Sidecar
from exporter.state.failures import classify_cause

FIXTURES = Path(__file__).parent / "fixtures" / "failures"
ALL = sorted(p.name for p in FIXTURES.glob("*.log"))


def report(name: str, **cfg) -> dict:
    return analyze([str(FIXTURES / name)], Config(**cfg), progress=False)


def advice(rep: dict) -> set:
    return {(a["flag"], a["action"]) for a in rep["advice"]}


# name -> (fired failure signals, cause class, a piece of the cause line, startup stage, advice wanted)
EXPECTED = {
    "startup_oom_weights.log": ({"server_crashed", "startup_oom"}, "cuda_oom",
                                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 270.00 MiB",
                                "weights", {("--tp-size", "increase"), ("--quantization", "check")}),
    "startup_oom_kv_pool.log": ({"server_crashed", "startup_oom"}, "cuda_oom", "Tried to allocate 1.94 GiB",
                                "kv_pool", {("--mem-fraction-static", "decrease"), ("--kv-cache-dtype", "check")}),
    "startup_oom_cuda_graph.log": ({"server_crashed", "startup_oom"}, "cuda_oom",
                                   "Exception: Capture cuda graph failed: CUDA out of memory", "cuda_graph",
                                   {("--cuda-graph-max-bs", "decrease"), ("--mem-fraction-static", "decrease")}),
    "scheduler_exception_serving.log": ({"server_crashed"}, "assertion", "AssertionError", None, set()),
    "sigquit.log": ({"server_crashed"}, "killed", "Received sigquit", None, set()),
    "nccl_timeout.log": ({"server_crashed"}, "nccl", "[Rank 5] Watchdog caught collective operation timeout",
                         None, set()),
    "startup_hung.log": ({"startup_stalled"}, "startup_hung", "no ready line within 1200 s of the server arguments",
                         None, set()),
    "oom_untimed.log": ({"server_crashed", "startup_oom"}, "cuda_oom", "torch.OutOfMemoryError: CUDA out of memory",
                        "unknown",
                        {("--mem-fraction-static", "decrease")}),
}


def test_every_fixture_is_stated():
    assert set(EXPECTED) == set(ALL)
    readme = (FIXTURES / "README.md").read_text()
    for name in ALL:
        assert f"`{name}`" in readme, f"{name}: say where its shape comes from"


@pytest.mark.parametrize("name", ALL)
def test_a_failing_log_is_never_called_healthy(name):
    fired, cls, cause, stage, wanted = EXPECTED[name]
    rep = report(name)
    assert rep["verdict"] == "failed"
    got = {s["id"] for s in rep["signals"] if s["fired"]}
    assert fired <= got and not ({"server_crashed", "startup_oom", "startup_stalled"} - fired) & got
    failures = {f["signal"]: f for f in rep["failures"]}
    assert set(failures) == fired
    main = failures.get("startup_oom") or next(iter(failures.values()))
    assert main["cause_class"] == cls and cause in main["cause"], main
    if stage is not None:
        assert main["stage"] == stage
    assert wanted <= advice(rep), rep["advice"]
    assert not {a for a in advice(rep) if a == ("request-rate", "increase")}
    text = render_text(rep)
    first = text.splitlines()[0]
    assert first.startswith("Verdict: FAILED") and cause in first
    assert "None" not in text


def test_counts_with_first_and_last_are_always_listed():
    rep = report("startup_oom_cuda_graph.log")
    assert rep["counts"]["ooms"] == {"count": 1, "first": "2025-04-08T11:07:58", "last": "2025-04-08T11:07:58"}
    assert rep["counts"]["exceptions"]["count"] == 1
    line = next(ln for ln in render_text(rep).splitlines() if ln.strip().startswith("events:"))
    assert line.strip() == ("events: retractions 0; OOMs 1 (2025-04-08T11:07:58); exceptions 1 "
                            "(2025-04-08T11:07:58); watchdog timeouts 0; restarts 0")


def test_an_untimed_log_says_no_timestamps():
    rep = report("oom_untimed.log")
    assert rep["span"] == {"start": None, "end": None, "seconds": None}
    text = render_text(rep)
    assert "no timestamps" in text and "None" not in text
    rates = {s["id"]: s for s in rep["signals"]}
    assert rates["retraction_storm"]["final_state"] == "unknown"
    assert "no timestamps" in rates["retraction_storm"]["detail"]


# ---------------------------------------------------------------------------------------------- verdicts
def _write(tmp_path, name, lines) -> str:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return str(p)


def _decode(t, queue=300, usage=0.95, running=100, graph=True):
    return (f"[2025-08-11 {17 + t // 3600}:{t // 60 % 60:02d}:{t % 60:02d} TP0] Decode batch. #running-req: {running}, #token: 1000, "
            f"token usage: {usage:.2f}, cuda graph: {graph}, gen throughput (token/s): 100.00, #queue-req: {queue}")


def test_four_verdicts(tmp_path):
    healthy = _write(tmp_path, "healthy.log", [_decode(t) for t in range(0, 600, 10)])
    problems = _write(tmp_path, "problems.log", [_decode(t, queue=3000) for t in range(0, 600, 10)])
    startup_only = _write(tmp_path, "startup.log", [
        "[2025-08-11 17:00:00] server_args=ServerArgs(model_path='m', tp_size=1, mem_fraction_static=0.88)",
        "[2025-08-11 17:00:20 TP0] max_total_num_tokens=665690, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=4096, context_len=65536, available_gpu_mem=6.50 GB",
        "[2025-08-11 17:00:30] The server is fired up and ready to roll!"])
    got = {name: analyze([p], Config(), progress=False) for name, p in
           (("healthy", healthy), ("problems", problems), ("startup", startup_only))}
    assert got["healthy"]["verdict"] == "healthy"
    assert got["problems"]["verdict"] == "problems" and "queue_above_range" in got["problems"]["verdict_reason"]
    assert got["startup"]["verdict"] == "insufficient data"
    assert got["startup"]["verdict_reason"] == "no batch lines; start-up facts only"
    first = render_text(got["startup"]).splitlines()[0]
    assert first == "Verdict: INSUFFICIENT DATA: too little to judge health: no batch lines; start-up facts only"
    assert report("sigquit.log")["verdict"] == "failed"


def test_verdict_rules():
    assert verdict(["queue_below_range", "server_crashed"], ["stalled"]) == ("failed", "server_crashed")
    assert verdict(["retraction_storm"], ["retraction_storm"])[0] == "problems"
    assert verdict([], ["queue_above_range", "stalled"])[0] == "healthy"
    # healthy, but a paging signal this view cannot judge (metrics-only, an old release) is named, not hidden
    name, why = verdict([], ["queue_above_range"], unknown=["retraction_storm", "spec_accept_low"])
    assert name == "healthy" and why.endswith("; cannot be judged here: retraction_storm")
    # judged but not a serving signal: a log of start-up lines only is not "healthy"
    assert verdict([], ["gpu_headroom_low", "server_crashed"], "no batch lines") == \
        ("insufficient data", "no batch lines")


def test_a_bare_traceback_is_a_crash(tmp_path):
    """The launcher's own traceback has no SGLang prefix; its last line is still the cause."""
    p = _write(tmp_path, "dead.log", [
        "Traceback (most recent call last):",
        '  File "/sgl/python/sglang/launch_server.py", line 14, in <module>',
        "    launch_server(server_args)",
        "Exception: Rank 0 scheduler is dead. Please check if there are relevant logs."])
    rep = analyze([p], Config(), progress=False)
    assert rep["verdict"] == "failed" and rep["records"] == {"traceback": 1}
    assert rep["failures"][0]["cause"] == "Exception: Rank 0 scheduler is dead. Please check if there are relevant logs."
    assert rep["lines"]["unparsed"] == {}


@pytest.mark.parametrize("line,cls", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.", "cuda_oom"),
    ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:275, unhandled system error", "nccl"),
    ("torch.distributed.DistBackendError: [Rank 0] Watchdog caught collective operation timeout", "nccl"),
    ("TimeoutError: timed out waiting for the tokenizer", "timeout"),
    ("AssertionError", "assertion"),
    ("AssertionError: len(self.out_cache_loc) == bs", "assertion"),
    ("ModuleNotFoundError: No module named 'flashinfer'", "import_config"),
    ("ValueError: Unsupported architecture: FooForCausalLM", "import_config"),
    ("Exception: Rank 0 scheduler is dead. Please check if there are relevant logs.", "other"),
])
def test_cause_classes(line, cls):
    assert classify_cause(line) == cls


# ---------------------------------------------------------------------------------------------- short logs
def _storm_log(tmp_path, burst_at=10, span=60):
    """Nine retractions in four seconds, `burst_at` seconds into a log of `span` seconds."""
    lines = [_decode(t, queue=50, usage=0.99) for t in range(0, burst_at, 10)]
    for i in range(9):
        t = burst_at + i // 2
        lines.append(f"[2025-08-11 {17 + t // 3600}:{t // 60 % 60:02d}:{t % 60:02d} TP0] KV cache pool is full. "
                     "Retract requests. #retracted_reqs: 1, #new_tokens_gained: 2048, #new_token_ratio: 0.9998 -> 1.0000")
    lines += [_decode(t, queue=50, usage=0.99) for t in range(burst_at + 10, span + 1, 10)]
    return _write(tmp_path, f"burst{burst_at}.log", lines)


def test_a_burst_in_a_short_log_is_a_storm(tmp_path):
    rep = analyze([_storm_log(tmp_path)], Config(), progress=False)
    sig = {s["id"]: s for s in rep["signals"]}
    assert sig["retraction_storm"]["fired"], sig["retraction_storm"]
    assert sig["retraction_storm"]["worst"] == pytest.approx(18.0)     # 9 over the 30 s minimum span
    assert sig["retractions_frequent"]["fired"]
    assert "observed (shorter than the" in sig["retractions_frequent"]["detail"]
    assert rep["counts"]["retractions"] == {"count": 9, "first": "2025-08-11T17:00:10",
                                            "last": "2025-08-11T17:00:14"}


def test_the_same_burst_an_hour_in_is_rated_over_whole_windows(tmp_path):
    rep = analyze([_storm_log(tmp_path, burst_at=3000, span=3600)], Config(), progress=False)
    sig = {s["id"]: s for s in rep["signals"]}
    assert not sig["retraction_storm"]["fired"]                    # 9 in 5 min: 1.8/min
    assert not sig["retractions_frequent"]["fired"]                # 9 in 10 min: 0.9/min
    assert sig["retractions_frequent"]["detail"].endswith("over 10 min")


class Clock:
    def __init__(self, t: float):
        self.t = t

    def __call__(self) -> float:
        return self.t


def _ts(line: str) -> float | None:
    m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", line)
    return float(calendar.timegm(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"))) if m else None


def records(lines):
    """Lines grouped as SGLang writes them: a record's continuation lines (a traceback) in the same write."""
    out = []
    for line in lines:
        if out and _ts(line) is None and not line.startswith("[rank"):
            out[-1].append(line)
        else:
            out.append([line])
    return out


def serve_lines(tmp_path, lines):
    """A sidecar started with the server, following the file SGLang writes record by record, each arriving at
    its own log time (an untimed one with the one before it): serve's clock is then the log's."""
    log = tmp_path / "serve.log"
    log.write_text("")
    clock = Clock(next((t for t in map(_ts, lines) if t is not None), 1_700_000_000.0))
    sc = Sidecar(Config(log_files=(str(log),), from_start=True), clock=clock)
    sc.poll_logs_once()
    with open(log, "a") as fh:
        for rec in records(lines):
            t = _ts(rec[0])
            if t is not None:
                clock.t = t
            fh.write("\n".join(rec) + "\n")
            fh.flush()
            sc.poll_logs_once()
            sc.poll_logs_once()          # went quiet: a pending traceback is emitted
            sc.view()                    # evaluates, as a scrape does
    return sc


def test_serve_rates_a_burst_in_its_first_minute(tmp_path):
    lines = Path(_storm_log(tmp_path)).read_text().splitlines()
    sc = serve_lines(tmp_path, lines[:11])          # up to the ninth retraction
    j = sc.view().snapshot.judgements["retraction_storm"]
    assert j.firing is True and "observed" in j.detail
    sc.follower.close()


# ---------------------------------------------------------------------------------------------- serve == analyze
@pytest.mark.parametrize("name", ALL)
def test_serve_and_analyze_agree(tmp_path, name):
    lines = (FIXTURES / name).read_text().splitlines()
    rep = report(name)
    sc = serve_lines(tmp_path, lines)
    eng = sc.engine
    served_fired = {sid for sid, h in eng.history.items() if h.fired}
    assert served_fired == {s["id"] for s in rep["signals"] if s["fired"]}
    assert dict(eng.state.oom_total) == rep["oom_phases"]
    assert eng.state.failures.startup_oom_stage == next(
        (f.get("stage") for f in rep["failures"] if f["signal"] == "startup_oom"), None)
    known = {sid for sid, h in eng.history.items() if h.known}
    assert verdict(served_fired, known)[0] == rep["verdict"]
    causes = {sid: j.cause for sid, j in sc.view().snapshot.judgements.items() if j.firing and j.cause}
    assert causes == {f["signal"]: (f["cause_class"], f["cause"]) for f in rep["failures"]}
    sc.follower.close()


@pytest.mark.parametrize("name", ["startup_oom_cuda_graph.log", "oom_untimed.log"])
def test_html_report_shows_the_failure(name):
    from exporter.report.html import render_html
    rep = analyze([str(FIXTURES / name)], Config(), progress=False, series=True)
    page = render_html(rep)
    assert "Verdict: FAILED" in page and "class='failures'" in page
    assert "CUDA out of memory" in page and "None" not in page
    if name == "oom_untimed.log":
        assert "no timestamps" in page


def test_history_read_from_start_keeps_its_minutes(tmp_path):
    """serve --from-start reads eleven minutes of history at once: the retractions in it are rated over the
    minutes their timestamps span, not over the second they arrived in."""
    lines = []
    for i in range(22):                                      # 2 per minute for 11 minutes
        t = i * 30
        lines.append(f"[2025-08-11 17:{t // 60:02d}:{t % 60:02d} TP0] KV cache pool is full. Retract requests. "
                     "#retracted_reqs: 1, #new_tokens_gained: 2048, #new_token_ratio: 0.9998 -> 1.0000")
    log = tmp_path / "history.log"
    log.write_text("\n".join(lines) + "\n")
    clock = Clock(_ts(lines[-1]) + 5)
    sc = Sidecar(Config(log_files=(str(log),), from_start=True), clock=clock)
    sc.poll_logs_once()
    j = sc.view().snapshot.judgements
    assert j["retractions_frequent"].firing is True
    assert j["retraction_storm"].firing is False, j["retraction_storm"]
    sc.follower.close()


def test_a_hung_start_up_fires_in_serve_with_a_steady_cause(tmp_path):
    """serve's clock moves on with no line written: start-up stalls past startup_seconds, and its cause (a
    label of the alert) does not change while it keeps firing."""
    lines = (FIXTURES / "startup_hung.log").read_text().splitlines()[:2]
    sc = serve_lines(tmp_path, lines)
    clock = sc.clock
    assert sc.view().snapshot.judgements["startup_stalled"].firing is False
    clock.t += 1201
    first = sc.view().snapshot.judgements["startup_stalled"]
    clock.t += 60
    later = sc.view().snapshot.judgements["startup_stalled"]
    assert first.firing and later.firing and later.value == first.value + 60
    assert first.cause == later.cause == ("startup_hung", "no ready line within 1200 s of the server arguments "
                                                          "(last stage: loading the weights)")
    sc.follower.close()


def test_failure_signals_without_inputs_are_unknown_with_a_reason():
    from exporter.engine import Engine
    metrics_only = Engine(Config(), log_fed=False)
    metrics_only.set_sources(metrics_up=True)
    nothing_read = Engine(Config(), log_fed=True)
    nothing_read.set_sources(log_up=True)
    for eng in (metrics_only, nothing_read):
        j = eng.evaluate(1_700_000_000.0).judgements
        for sid in ("server_crashed", "startup_oom", "startup_stalled"):
            assert j[sid].firing is None and j[sid].detail, (sid, j[sid])


def test_a_batch_line_or_two_is_not_enough_to_say_healthy():
    """CUDA graph and stalls are judged from one batch line; the queue and the KV cache need a window of
    samples. Until one of those was judged, nothing fired is 'insufficient data', not 'healthy'."""
    from exporter.engine import verdict
    assert verdict(set(), {"cuda_graph_off_small_batch", "stalled", "oom_decode"})[0] == "insufficient data"
    assert verdict(set(), {"cuda_graph_off_small_batch", "queue_above_range"})[0] == "healthy"
    assert verdict({"stalled"}, {"stalled"})[0] == "problems"
