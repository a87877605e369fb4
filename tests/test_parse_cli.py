"""`sglang-exporter parse` end to end (a real subprocess): JSON Lines per DESIGN.md §4, container envelopes,
stdin, --stats, and every bad input's message and exit code (never a traceback)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RANK0 = {"dp": None, "tp": 0, "pp": None, "ep": None, "attn_cp": None, "moe_dp": None}
NO_RANK = {k: None for k in RANK0}

DECODE = ("[2025-08-11 17:17:03 TP0] Decode batch, #running-req: 233, #token: 370959, token usage: 0.82, "
          "cuda graph: True, gen throughput (token/s): 4594.01, #queue-req: 317")
DECODE_FIELDS = {"running_req": 233, "num_tokens": 370959, "token_usage": 0.82, "cuda_graph": True,
                 "graph_backend": "cuda", "gen_throughput": 4594.01, "queue_req": 317}
RETRACT = ("[2025-08-11 17:17:04 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
           "#new_token_ratio: 0.5123 -> 0.7000")
RETRACT_FIELDS = {"variant": "kv_cache_full", "testing": False, "retracted_reqs": 3,
                  "new_token_ratio_before": 0.5123, "new_token_ratio_after": 0.7}
OOM = ["[2025-08-11 17:17:05 DP1 TP0] Decode out of memory. Try to lower your batch size.",
       "Try to allocate 5 tokens.", "Available tokens: 3 (available_size=3 + evictable_size=0)", ""]
OOM_FIELDS = {"phase": "decode", "source": "kv_pool", "requested_tokens": 5, "available_tokens": 3}
READY = "[2025-08-11 17:17:06] The server is fired up and ready to roll!"
LINES = ["some launcher noise", DECODE, RETRACT, *OOM, READY]


def expected(source: str, lines=(2, 3, 4, 8)) -> list[dict]:
    return [
        {"source": source, "line": lines[0], "kind": "decode_batch", "time": "2025-08-11T17:17:03", "rank": RANK0,
         "fields": DECODE_FIELDS},
        {"source": source, "line": lines[1], "kind": "retraction", "time": "2025-08-11T17:17:04", "rank": RANK0,
         "fields": RETRACT_FIELDS},
        {"source": source, "line": lines[2], "kind": "oom", "time": "2025-08-11T17:17:05",
         "rank": {**RANK0, "dp": 1}, "fields": OOM_FIELDS},
        {"source": source, "line": lines[3], "kind": "server_ready", "time": "2025-08-11T17:17:06", "rank": NO_RANK,
         "fields": {}},
    ]


def run(*args, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "exporter", "parse", *args], input=stdin, capture_output=True,
                          env=env, timeout=120)


def jsonl(out: bytes) -> list[dict]:
    text = out.decode()
    assert text == "" or text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def no_traceback(proc) -> None:
    assert b"Traceback" not in proc.stderr, proc.stderr.decode()


def test_plain_file(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\n".join(LINES) + "\n")
    proc = run(str(log))
    assert proc.returncode == 0, proc.stderr
    assert jsonl(proc.stdout) == expected(str(log))
    assert proc.stderr == b""
    # exact JSON shape: the documented keys, in order, one object per line
    assert list(json.loads(proc.stdout.splitlines()[0])) == ["source", "line", "kind", "time", "rank", "fields"]


def test_cri_file_with_partials(tmp_path):
    log = tmp_path / "cri.log"
    stamp = "2025-08-11T17:17:03.123456789Z"
    half = len(DECODE) // 2
    rows = [f"{stamp} stdout F some launcher noise",
            f"{stamp} stderr P {DECODE[:half]}", f"{stamp} stderr F {DECODE[half:]}",
            f"{stamp} stderr F {RETRACT}"] + [f"{stamp} stderr F {line}" for line in OOM] + [f"{stamp} stderr F {READY}"]
    log.write_text("\n".join(rows) + "\n")
    proc = run(str(log))
    assert proc.returncode == 0, proc.stderr
    # a record's line is the first physical line of it: the decode record starts at the P piece (line 2)
    assert jsonl(proc.stdout) == expected(str(log), lines=(2, 4, 5, 9))


def test_docker_json_file(tmp_path):
    log = tmp_path / "docker.log"
    rows = [json.dumps({"log": line + "\n", "stream": "stderr", "time": "2025-08-11T17:17:03.1Z"}) for line in LINES]
    log.write_text("\n".join(rows) + "\n")
    proc = run(str(log))
    assert proc.returncode == 0, proc.stderr
    assert jsonl(proc.stdout) == expected(str(log))


def test_stdin_and_stats():
    proc = run("-", "--stats", stdin=("\n".join(LINES) + "\n").encode())
    assert proc.returncode == 0, proc.stderr
    assert jsonl(proc.stdout) == expected("-")
    stats = json.loads(proc.stderr)
    assert stats["lines"] == len(LINES)
    assert stats["records"] == 4
    assert stats["kinds"] == {"decode_batch": 1, "oom": 1, "retraction": 1, "server_ready": 1}
    assert stats["unparsed"] == {"no_sglang_prefix": 1}
    assert stats["format_family"] == "0.5.9-0.5.23"


def test_time_only_prefix_and_unknown_lines(tmp_path):
    log = tmp_path / "old.log"
    log.write_text("[17:17:03 TP1] Decode batch. #running-req: 5, #token: 26740, token usage: 0.21, "
                   "gen throughput (token/s): 1834.27, #queue-req: 0\n[17:17:04 TP1] something new\n")
    proc = run(str(log), "--stats")
    assert proc.returncode == 0
    (ev,) = jsonl(proc.stdout)
    assert ev["time"] == "17:17:03" and ev["rank"]["tp"] == 1 and ev["fields"]["num_tokens"] == 26740
    assert json.loads(proc.stderr)["unparsed"] == {"unknown_message": 1}


@pytest.mark.parametrize("case", ["missing", "directory", "binary", "unreadable"])
def test_bad_inputs_exit_2_with_message(tmp_path, case):
    path = tmp_path / f"{case}.log"
    if case == "directory":
        path.mkdir()
    elif case == "binary":
        path.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8)
    elif case == "unreadable":
        path.write_text(DECODE + "\n")
        path.chmod(0)
        if os.access(path, os.R_OK):
            pytest.skip("running as root: chmod 000 does not stop reads")
    proc = run(str(path))
    no_traceback(proc)
    assert proc.returncode == 2
    assert proc.stdout == b""
    msg = proc.stderr.decode()
    assert str(path) in msg and msg.startswith("sglang-exporter: error: ")
    assert {"missing": "no such file", "directory": "directory", "binary": "binary",
            "unreadable": "permission denied"}[case] in msg


def test_bad_input_among_good_ones_names_the_bad_one(tmp_path):
    good = tmp_path / "good.log"
    good.write_text(DECODE + "\n")
    proc = run(str(good), str(tmp_path / "nope.log"))
    no_traceback(proc)
    assert proc.returncode == 2 and "nope.log" in proc.stderr.decode() and proc.stdout == b""


def test_text_without_sglang_records_exits_1(tmp_path):
    log = tmp_path / "nginx.log"
    log.write_text('127.0.0.1 - - [11/Aug/2025:17:17:03 +0000] "GET / HTTP/1.1" 200 612\nhello\n')
    proc = run(str(log))
    no_traceback(proc)
    assert proc.returncode == 1 and proc.stdout == b""
    assert str(log) in proc.stderr.decode() and "no SGLang log record" in proc.stderr.decode()


def test_empty_file_is_fine(tmp_path):
    log = tmp_path / "empty.log"
    log.write_text("")
    proc = run(str(log))
    no_traceback(proc)
    assert proc.returncode == 0 and proc.stdout == b""


def test_invalid_utf8_and_junk_lines_never_crash(tmp_path):
    log = tmp_path / "junk.log"
    log.write_bytes(DECODE.encode() + b"\n\xff\xfe[2025-08-11 17:17:03 TP0] Decode batch, \xc3\x28 #running-req: x\n"
                    + b"[" * 5000 + b"\n" + READY.encode() + b"\n")
    proc = run(str(log), "--stats")
    no_traceback(proc)
    assert proc.returncode == 0
    assert [e["kind"] for e in jsonl(proc.stdout)] == ["decode_batch", "server_ready"]


def test_golden_fixtures_through_the_cli():
    """The version fixtures through the real command: every line is JSON, line numbers match the expectations."""
    fixtures = REPO / "tests" / "fixtures" / "versions"
    for log in sorted(fixtures.glob("*.log")):
        proc = run(str(log))
        assert proc.returncode == 0, (log, proc.stderr)
        got = jsonl(proc.stdout)
        want = json.loads(log.with_suffix(".expected.json").read_text())
        assert [(e["line"], e["kind"], e["time"], e["rank"], e["fields"]) for e in got] == \
            [(e["line"], e["kind"], e["time"], e["rank"], e["fields"]) for e in want], log.name
