"""Request logs carry user text: a prompt quoting any SGLang message we read moves no counter and no signal
(docs/log-events.md, "Request logs are not trusted"). And the other direction: the same messages as real
records, behind the foreign prefixes we read (Ray, docker compose, syslog, Slurm, kubectl --prefix), are
still read. Everything goes through a real file, the real follower and the Sidecar."""
from __future__ import annotations

import json

import pytest

from exporter.config import Config
from exporter.sidecar.run import Sidecar

T = 1_754_932_623.0
D = "[2025-08-11 17:17:09 TP0] "
D2 = "[2025-08-11 17:17:09] "

# Every SGLang message the signals read, as a prompt would quote it: bare, and as a whole record with its prefix.
MESSAGES = [
    "KV cache pool is full. Retract requests. #retracted_reqs: 50, #new_token_ratio: 0.9998 -> 1.0000",
    "Decode out of memory happened. #retracted_reqs: 7, #new_token_ratio: 0.9998 -> 1.0000",
    "Decode out of memory. Try to lower your batch size.",
    "Prefill out of memory. Try to lower your batch size.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "RuntimeError: CUDA error: out of memory",
    "alloc_req_slots runs out of memory. Please set a smaller number for `--max-running-requests`.",
    "Not enough memory. Please try to increase --mem-fraction-static.",
    "max_total_num_tokens=1000, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=1, "
    "context_len=131072, available_gpu_mem=0.50 GB",
    "server_args=ServerArgs(model_path='evil', served_model_name='evil', cuda_graph_max_bs=1, "
    "max_running_requests=1, mem_fraction_static=0.99)",
    "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
    "Watchdog timeout (self.watchdog_timeout=300)",
    "Scheduler hit an exception: Traceback (most recent call last):",
    "Decode batch, #running-req: 999, #token: 1, token usage: 0.01, cuda graph: False, "
    "gen throughput (token/s): 1.00, #queue-req: 99999",
    "Prefill batch, #new-seq: 1, #new-token: 1, #cached-token: 0, token usage: 0.99, #running-req: 999, "
    "#queue-req: 99999",
    "The server is fired up and ready to roll!",
    "Load weight begin. avail mem=1.00 GB",
    "Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.",
    "Received sigquit from a child process. It usually means the child failed.",
    "Subprocess scheduler_0 (pid=1) crashed with exit code -9.",
    "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600081 "
    "milliseconds before timing out.",
]
QUOTED = [q for msg in MESSAGES for q in (msg, D + msg, D2 + msg, "(SchedulerActor pid=1) " + D + msg)]


def _py(text: str) -> str:
    return repr(text)


def request_logs(q: str) -> list[str]:
    """`q` inside every request-log form SGLang prints (and a custom log format, and a raw early-0.4.x one)."""
    j = json.dumps
    return [
        f"{D2}Receive: obj=GenerateReqInput(text={_py(q)}, sampling_params={{'max_new_tokens': 8}}, rid='r1')",
        f"{D2}Receive: obj=GenerateReqInput(text={_py(q + ' it' + chr(39) + 's')}, rid='r2')",
        f"[2025-08-11 17:17:09 DP0 TP0] Finish: obj=GenerateReqInput(rid='r1'), out={{'text': {_py(q)}, "
        f"'meta_info': {{'id': 'r1', 'prompt_tokens': 5}}}}",
        f"{D2}Receive OpenAI: obj=ChatCompletionRequest(messages=[{{'role': 'user', 'content': {_py(q)}}}])",
        f"[17:17:09] in=GenerateReqInput(text={_py(q)}, rid='r3'), out={{'text': {_py(q)}}}",
        f"[2025-08-11 17:17:09,123] {{\"timestamp\": \"2025-08-11T17:17:09\", \"event\": \"request.received\", "
        f"\"rid\": \"r4\", \"obj\": {{\"text\": {j(q)}}}}}",
        f"{{\"timestamp\": \"2025-08-11T17:17:09\", \"event\": \"request.finished\", \"obj\": {{\"text\": {j(q)}}}}}",
        f"{{\"timestamp\": \"2025-08-11T17:17:09\", \"obj\": {{\"text\": {j(q)}}}, \"event\": \"request.received\"}}",
        f"(TokenizerManager pid=7, ip=10.0.0.1) {D2}Receive: obj=GenerateReqInput(text={_py(q)}, rid='r5')",
        f"2025-08-11 17:17:09 INFO tokenizer_manager.py:812: Receive: obj=GenerateReqInput(text={_py(q)})",
        # uvicorn's access line prints the (decoded) path; bare and behind SGLang's prefix
        f'INFO:     10.0.0.9:4242 - "GET /{q} HTTP/1.1" 404 Not Found',
        f'{D2}INFO:     10.0.0.9:4242 - "GET /{q} HTTP/1.1" 404 Not Found',
    ]


def raw_request_log(msg: str) -> str:
    """Early 0.4.x printed request text raw between double quotes: a prompt's own lines follow without a
    prefix. (A prompt line that starts with a whole SGLang prefix cannot be told from a record: the limit
    docs/log-events.md states.)"""
    return f'{D2}Receive: obj=GenerateReqInput(text="line one\n{msg}\nline three", rid="r6")'


HEALTHY = [
    "[2025-08-11 17:17:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', tp_size=1, "
    "max_running_requests=None, cuda_graph_max_bs=8, mem_fraction_static=0.88, schedule_conservativeness=1.0)",
    "[2025-08-11 17:17:01 TP0] max_total_num_tokens=130000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=4097, context_len=131072, available_gpu_mem=6.50 GB",
    "[2025-08-11 17:17:02] The server is fired up and ready to roll!",
    *[f"[2025-08-11 17:17:0{3 + i} TP0] Decode batch, #running-req: 5, #token: 26740, token usage: 0.95, "
      f"cuda graph: True, gen throughput (token/s): 1834.27, #queue-req: 150" for i in range(5)],
]


def _observed(sc: Sidecar) -> dict:
    """Every counter and signal a prompt must not move (request-log and access counts, lines read and
    unparsed lines may move)."""
    v = sc.view()
    snap = v.snapshot
    return {
        "retractions": (v.retractions_total, v.retracted_requests_total, v.retractions_per_minute),
        "oom": v.oom_total, "watchdog": v.watchdog_total, "restarts": v.restarts,
        "events": {k: n for k, n in v.events_total.items() if k not in ("request_log", "http_access")},
        "ranks": v.ranks, "max_running": v.max_running_requests, "headroom": v.headroom_bytes, "model": v.model,
        "format": v.format_family, "last_batch_age": v.last_batch_age,
        "signals": {sid: (j.firing, j.value) for sid, j in snap.judgements.items()},
        "advice": [(r.flag, r.action, r.current, r.suggested) for r in snap.advice],
        "server_args": dict(sc.engine.state.server_args), "memory_config": dict(sc.engine.state.memory_config),
    }


@pytest.fixture
def sidecar(tmp_path):
    log = tmp_path / "sglang.log"
    log.write_text("\n".join(HEALTHY) + "\n")
    sc = Sidecar(Config(log_files=(str(log),), from_start=True), clock=lambda: T)
    sc.poll_logs_once()
    sc.poll_logs_once()
    yield sc, log
    sc.shutdown()


def _append(sc: Sidecar, log, lines: list[str]) -> None:
    with open(log, "a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    sc.poll_logs_once()
    sc.poll_logs_once()        # the idle pass flushes a held multi-line record


def test_quoted_messages_in_request_logs_move_nothing(sidecar):
    sc, log = sidecar
    before = _observed(sc)
    lines = [line for q in QUOTED for line in request_logs(q)] + [raw_request_log(msg) for msg in MESSAGES]
    _append(sc, log, lines)
    after = _observed(sc)
    assert after == before
    v = sc.view()
    # 7 request-log forms have SGLang's prefix (one of them behind Ray's) and one a custom logging config's
    # (found by its message), each a request_log event; the prefix-less JSON ones, right after a request log,
    # are taken for its text and counted as lines without a message
    assert v.events_total["request_log"] == 8 * len(QUOTED) + len(MESSAGES)


@pytest.mark.parametrize("msg", MESSAGES[:13])
def test_each_message_quoted_alone_moves_nothing(sidecar, msg):
    """One message at a time (a counter moved by one form cannot hide behind another's)."""
    sc, log = sidecar
    before = _observed(sc)
    _append(sc, log, [line for q in (msg, D + msg) for line in request_logs(q)] + [raw_request_log(msg)])
    assert _observed(sc) == before


def test_request_text_ends_at_the_next_record(sidecar):
    """After a request log, bare lines are its text; the next SGLang record ends it, and what follows is read."""
    sc, log = sidecar
    _append(sc, log, [
        f'{D2}Receive: obj=GenerateReqInput(text="hello\nCUDA out of memory. Tried to allocate 1.00 GiB", rid="a")',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",   # still request text
        D + "KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.9 -> 1.0",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",   # a bare OOM of its own
    ])
    v = sc.view()
    assert (v.retractions_total, v.retracted_requests_total) == (1, 3)
    assert v.oom_total == {"unknown": 1}


WRAPPERS = ["(SchedulerActor pid=123, ip=10.0.0.1) ", "sglang-1  | ", "Aug 11 17:17:09 gpu-node-7 python[12345]: ",
            "0: ", "[pod/sglang-0/sglang] "]


@pytest.mark.parametrize("wrap", WRAPPERS)
def test_records_behind_foreign_prefixes_are_still_read(sidecar, wrap):
    """The other direction: the messages as real records behind a foreign prefix move what they should."""
    sc, log = sidecar
    before = sc.view()
    _append(sc, log, [
        wrap + D + "KV cache pool is full. Retract requests. #retracted_reqs: 4, #new_token_ratio: 0.9 -> 1.0",
        wrap + D + "Decode out of memory. Try to lower your batch size.",
        wrap + D + "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
        wrap + D + "Decode batch, #running-req: 7, #token: 1, token usage: 0.10, cuda graph: True, "
                   "gen throughput (token/s): 5.00, #queue-req: 42",
        wrap + "[2025-08-11 17:17:10 TP0] Receive: obj=GenerateReqInput(text='x', rid='w')",
    ])
    v = sc.view()
    assert v.retractions_total == before.retractions_total + 1
    assert v.retracted_requests_total == before.retracted_requests_total + 4
    assert v.oom_total.get("decode", 0) == before.oom_total.get("decode", 0) + 1
    assert v.watchdog_total == before.watchdog_total + 1
    assert [vals[0] for vals in v.ranks.values()] == [42]
    assert v.events_total["request_log"] == before.events_total.get("request_log", 0) + 1
