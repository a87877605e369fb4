"""A request that failed while the server kept serving is a request error, never a crash; a crash ends when its
evidence ends; client disconnects drain the queue a stall needs; the error-rate signals. Real SGLang lines
(sglang 0.4.6.post5, 0.5.2 and 0.5.23 sources) through the same engine `analyze` uses."""
from __future__ import annotations

import re

import pytest

from exporter.config import Config
from exporter.engine import Engine
from exporter.ingest.grammar import Parser
from exporter.ingest.scrape import parse_exposition
from exporter.report.analyze import analyze

DAY = "2026-03-01"
GC = "LONG GARBAGE COLLECTION DETECTED | Generation 2 | Duration: 0.1200s | # Objects: gen0=1, gen1=2, gen2=3"


def at(sec: int) -> str:
    return f"{DAY} {sec // 3600:02d}:{sec // 60 % 60:02d}:{sec % 60:02d}"


def decode(sec: int, queue: int = 0, running: int = 8) -> str:
    return (f"[{at(sec)} TP0] Decode batch, #running-req: {running}, #token: 4000, token usage: 0.20, "
            f"cuda graph: True, gen throughput (token/s): 500.00, #queue-req: {queue}")


def request_error(sec: int, text: str = "No user query found in messages.") -> list[str]:
    """OpenAIServingBase.handle_request's `logger.exception(f"Error in request: {e}")`, its 500 access line."""
    return [f"[{at(sec)}] Error in request: {text}",
            "Traceback (most recent call last):",
            '  File "/sgl/python/sglang/srt/entrypoints/openai/serving_base.py", line 110, in handle_request',
            "    adapted_request, processed_request = self._convert_to_internal_request(",
            f"ValueError: {text}",
            'INFO:     10.0.0.7:40112 - "POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error']


def report(tmp_path, lines: list[str], **cfg) -> dict:
    p = tmp_path / "sglang.log"
    p.write_text("\n".join(lines) + "\n")
    rep = analyze([str(p)], Config(**cfg), progress=False)
    return {s["id"]: s for s in rep["signals"]} | {"_report": rep}


@pytest.mark.parametrize("line,disconnected", [
    ("Error in request: No user query found in messages.", False),
    ("[http_server] Error: Request is disconnected from the client side (type 3). Abort request obj.rid='a1'", True),
    ("[http_server] Client disconnected: Request is disconnected from the client side (type 1). Abort request "
     "obj.rid='a1'", True),
    ("Error: Request is disconnected from the client side (type 1). Abort request obj.rid='a1'", True),   # 0.4.x
    ("Error in request: Request is disconnected from the client side (type 3). Abort request obj.rid='b'", True),
    ("Error in preprocessing prompt inputs", False),
    ("Exception: Connection closed", False),                                                     # 0.4.x adapter
    ("Error in request: Scheduler hit an exception: Traceback", False),   # quoted text decides nothing
    ("Error in pythonic tool call parsing.", False),       # logger.exception: a traceback follows
    ("Error in detect_and_parse: Expecting value: line 1 column 2 (char 1)", False),
])
def test_handled_request_errors_are_request_error_events(line, disconnected):
    p = Parser()
    evs = p.feed(f"[{at(0)}] {line}", 1) + p.feed("Traceback (most recent call last):", 2) + \
        p.feed("ValueError: boom", 3) + p.flush()
    assert [e.kind for e in evs] == ["request_error"]
    assert evs[0].fields == {"message": line, "disconnected": disconnected}


def test_a_request_error_while_serving_never_pages_a_crash(tmp_path):
    lines = [decode(s) for s in range(0, 60, 5)] + request_error(61) + [decode(s) for s in range(65, 7200, 30)]
    sig = report(tmp_path, lines)
    assert not sig["server_crashed"]["fired"]
    rep = sig["_report"]
    assert rep["records"].get("request_error") == 1 and "traceback" not in rep["records"]
    assert rep["records"].get("http_access") == 1


def test_the_same_traceback_without_its_request_line_is_a_crash_once_batches_stop(tmp_path):
    """A bare traceback (the launcher's) with no batch line after it: a death, after resume_seconds."""
    lines = [decode(s) for s in range(0, 60, 5)] + request_error(61)[1:5] + [f"[{at(200)}] {GC}"]
    sig = report(tmp_path, lines)
    assert sig["server_crashed"]["fired"]
    # the traceback has no time of its own (the last line's, 55 s): confirmed resume_seconds later
    assert sig["server_crashed"]["intervals"][0]["start"] == at(85).replace(" ", "T")


def test_a_crash_ends_when_batch_lines_resume_and_the_next_one_is_a_new_incident(tmp_path):
    crash = [f"[{at(100)} TP0] Scheduler hit an exception: Traceback (most recent call last):",
             '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2512, in run_scheduler_process',
             "AssertionError: first"]
    again = [f"[{at(900)} TP0] Scheduler hit an exception: Traceback (most recent call last):",
             "RuntimeError: second"]
    lines = [decode(s) for s in range(0, 100, 5)] + crash + [decode(s) for s in range(130, 900, 5)] + again + \
        [decode(s) for s in range(930, 1500, 5)]
    sig = report(tmp_path, lines)
    intervals = sig["server_crashed"]["intervals"]
    assert len(intervals) == 2, intervals                      # two incidents, no ready line in between
    assert intervals[0]["end"] <= at(140).replace(" ", "T")   # ended by the batch lines after it
    causes = [f["cause"] for f in sig["_report"]["failures"] if f["signal"] == "server_crashed"]
    assert causes == ["AssertionError: first", "RuntimeError: second"]


def test_a_failed_start_up_after_a_crash_is_its_own_crash(tmp_path):
    """A crash, a restart, then a start-up NCCL watchdog kill: the second has its own cause (labels), so
    Alertmanager gets a new alert, not the first one still firing."""
    lines = [decode(s) for s in range(0, 100, 5)] + [
        f"[{at(100)} TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "AssertionError: first",
        f"[{at(160)}] server_args=ServerArgs(model_path='m', tp_size=2)",
        "[rank1]:[E301 00:13:00.1 ProcessGroupNCCL.cpp:607] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600081 milliseconds before "
        "timing out.",
        f"[{at(780)}] {GC}"]
    engine = Engine(Config(), log_fed=True)
    engine.set_sources(log_up=True)
    p = Parser()
    causes = []
    for n, text in enumerate(lines, 1):
        for ev in p.feed(text, n) + (p.flush() if n == len(lines) else []):
            t = ev.ts if ev.ts is not None else 770.0 + 1_772_323_200
            engine.ingest(ev, t)
            j = engine.evaluate(t).judgements["server_crashed"]
            if j.firing:
                causes.append(j.cause)
    assert causes[0] == ("assertion", "AssertionError: first")
    assert causes[-1][0] == "nccl" and "Watchdog caught collective operation timeout" in causes[-1][1]


def test_disconnects_after_the_last_batch_line_drain_its_queue(tmp_path):
    """An offline client killed mid-job: queue 1890, its connections abort, then only health checks."""
    lines = [decode(s, queue=1890, running=256) for s in range(0, 600, 2)]
    lines += [f"[{at(601)}] [http_server] Error: Request is disconnected from the client side (type 1). Abort "
              f"request obj.rid='r{i}'" for i in range(64)]
    lines += ['INFO:     10.0.0.1:1 - "GET /health HTTP/1.1" 200 OK' for _ in range(3)]
    lines += [f"[{at(s)}] {GC}" for s in range(700, 8 * 3600, 600)]
    sig = report(tmp_path, lines)
    assert not sig["stalled"]["fired"], sig["stalled"]
    # the same log without the disconnects is a stall: the drained queue is what keeps it quiet
    hung = [x for x in lines if "disconnected" not in x]
    assert report(tmp_path, hung)["stalled"]["fired"]


def test_a_scraped_queue_wins_over_the_last_batch_line():
    eng = Engine(Config(), log_fed=True)
    eng.set_sources(log_up=True, metrics_up=True)
    p = Parser()
    t0 = 1_772_323_200.0
    for ev in p.feed(decode(0, queue=50), 1):
        eng.ingest(ev, t0)
    expo = ('# TYPE sglang:num_queue_reqs gauge\n'
            'sglang:num_queue_reqs{model_name="m",tp_rank="0",pp_rank="0"} 0\n'
            '# TYPE sglang:num_running_reqs gauge\n'
            'sglang:num_running_reqs{model_name="m",tp_rank="0",pp_rank="0"} 0\n')
    eng.ingest_scrape(parse_exposition(expo), t0 + 100)
    j = eng.evaluate(t0 + 200).judgements["stalled"]
    assert j.firing is False and "0 requests pending" in j.detail


# ---------------------------------------------------------------------------------------------- error rate
def _access(sec_status):
    return [f'INFO:     10.0.0.7:1 - "POST /v1/chat/completions HTTP/1.1" {st} OK' for st in sec_status]


def test_error_rate_from_the_access_log_with_the_cause_line(tmp_path):
    lines = []
    for s in range(0, 1200, 10):
        lines.append(decode(s))
        lines += _access([200, 200, 200])
        if s % 30 == 0:
            lines += request_error(s + 1)          # one in ten fails with a 500
        lines += ['INFO:     10.0.0.1:1 - "GET /health HTTP/1.1" 200 OK'] * 5     # not counted
    sig = report(tmp_path, lines, profile="online")
    assert sig["error_rate"]["fired"] and not sig["errors_nearly_all"]["fired"]
    assert 0.08 < sig["error_rate"]["worst"] < 0.15       # one in ten, over a sliding window
    assert "No user query found in messages." in sig["error_rate"]["detail"]
    assert not sig["server_crashed"]["fired"]


def test_healthy_responses_stay_quiet(tmp_path):
    lines = []
    for s in range(0, 1200, 10):
        lines.append(decode(s))
        lines += _access([200] * 10)
    lines += request_error(600)          # one in 1200: under the 5 % objective
    sig = report(tmp_path, lines, profile="online")
    assert sig["error_rate"]["final_state"] == "ok" and not sig["error_rate"]["fired"]
    assert not sig["errors_nearly_all"]["fired"]


def test_nearly_all_failing_pages(tmp_path):
    lines = []
    for s in range(0, 900, 10):
        lines.append(decode(s))
        lines += _access([500] * 5)
    sig = report(tmp_path, lines, profile="online")
    assert sig["errors_nearly_all"]["fired"] and sig["error_rate"]["fired"]


def test_without_response_counts_the_error_rate_is_unknown_with_the_releases(tmp_path):
    lines = [decode(s) for s in range(0, 600, 10)] + request_error(300)[:5]
    sig = report(tmp_path, lines)
    assert sig["error_rate"]["final_state"] == "unknown"
    assert "0.4.7" in sig["error_rate"]["detail"] and "0.5.23" in sig["error_rate"]["detail"]


def test_error_rate_from_sglang_0_5_23_http_responses():
    """The 5xx share of http_responses_total's POST series; the GET health checks do not dilute it."""
    eng = Engine(Config(), log_fed=False)
    eng.set_sources(metrics_up=True)
    t0 = 1_772_323_200.0

    def expo(ok, bad, health):
        labels = 'endpoint="/v1/chat/completions",method="POST"'
        return ("# TYPE sglang:http_responses_total counter\n"
                f'sglang:http_responses_total{{{labels},status_code="200"}} {ok}\n'
                f'sglang:http_responses_total{{{labels},status_code="500"}} {bad}\n'
                f'sglang:http_responses_total{{endpoint="/health",method="GET",status_code="200"}} {health}\n')
    for i in range(12):
        eng.ingest_scrape(parse_exposition(expo(100 * i, 20 * i, 1000 * i)), t0 + 30 * i)
    j = eng.evaluate(t0 + 330).judgements["error_rate"]
    assert j.firing is True and j.value == pytest.approx(20 / 120)
    quiet = Engine(Config(), log_fed=False)
    quiet.set_sources(metrics_up=True)
    for i in range(12):
        quiet.ingest_scrape(parse_exposition(expo(100 * i, 0, 1000 * i)), t0 + 30 * i)
    assert quiet.evaluate(t0 + 330).judgements["error_rate"].firing is False


def test_access_lines_read_as_rows_feed_the_error_rate(tmp_path):
    """Dated access lines become Rows of a learned layout on analyze's block path (counted, not Events): a
    POST's status must still count, a GET (health check) must not."""
    lines = []
    for s in range(0, 1200, 2):
        lines.append(decode(s))
        status = 500 if s % 10 == 0 else 200
        lines.append(f'[{at(s)}] INFO:     127.0.0.1:4000{s % 10} - "POST /generate HTTP/1.1" {status} OK')
        lines.append(f'[{at(s)}] INFO:     127.0.0.1:4000{s % 10} - "GET /health HTTP/1.1" 500 OK')
    sig = report(tmp_path, lines, profile="online")
    assert sig["error_rate"]["fired"]
    failed, answered = map(int, re.match(r"(\d+) of (\d+) requests failed \(5xx responses of the access log\)",
                                         sig["error_rate"]["detail"]).groups())
    assert answered in (300, 301) and failed / answered == pytest.approx(0.2, abs=0.01)    # one POST in five
