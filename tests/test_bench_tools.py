"""Smoke tests for the benchmark tools (never timed): the log generator and the mtail program."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from helpers import free_port, require_tool

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import genlog


def _gen(tmp_path: Path, name: str, n: int, seed: int) -> bytes:
    out = tmp_path / name
    subprocess.run([sys.executable, str(BENCH / "genlog.py"), str(n), str(out), "--seed", str(seed)],
                   check=True, capture_output=True, timeout=120)
    return out.read_bytes()


def test_genlog_writes_exactly_n_lines_deterministically(tmp_path):
    a = _gen(tmp_path, "a.log", 5000, 7)
    b = _gen(tmp_path, "b.log", 5000, 7)
    c = _gen(tmp_path, "c.log", 5000, 8)
    assert a.count(b"\n") == 5000 and a.endswith(b"\n")
    assert hashlib.sha256(a).digest() == hashlib.sha256(b).digest()
    assert a != c
    assert b"\r" not in a


def test_genlog_content_mix(tmp_path):
    text = _gen(tmp_path, "mix.log", 20000, 1).decode()
    lines = text.splitlines()
    decode = sum("] Decode batch, #running-req: " in ln for ln in lines)
    assert decode > len(lines) * 0.4, "decode batch lines should be the bulk of the file"
    for needle in ("] Prefill batch, #new-seq: ", "KV cache pool is full. Retract requests. #retracted_reqs: ",
                   '] INFO:     127.0.0.1:', ' "POST /generate HTTP/1.1" 200 OK', "] Receive: obj=GenerateReqInput(",
                   "] Finish: obj=GenerateReqInput(", "server_args=ServerArgs(", "max_total_num_tokens=",
                   "The server is fired up and ready to roll!", "Scheduler hit an exception: Traceback",
                   "CUDA out of memory", " TP0] ", " TP3] "):
        assert needle in text, needle
    stamps = [ln[1:20] for ln in lines if ln.startswith("[20")]
    assert stamps == sorted(stamps), "timestamps must not go backwards"


def test_genlog_prefix_of_a_longer_run_is_stable():
    short = [ln for chunk in genlog.generate(300, seed=3) for ln in chunk]
    long = [ln for chunk in genlog.generate(600, seed=3) for ln in chunk]
    assert len(short) == 300 and len(long) == 600
    assert long[:100] == short[:100]  # before the first scheduled crash (at 35 %) the streams agree


def test_mtail_program_compiles():
    mtail = require_tool("mtail")
    p = subprocess.run([mtail, "--compile_only", "--progs", str(BENCH / "sglang.mtail"), "--logtostderr",
                        "--address", "127.0.0.1", "--port", str(free_port())],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def test_mtail_program_extracts_the_decode_gauges(tmp_path):
    mtail = require_tool("mtail")
    log = tmp_path / "one.log"
    log.write_text(genlog.decode_line("2025-08-11 17:17:03", " TP1", 5, 26740, 0.21, 1834.27, 7) + "\n"
                   + "[2025-08-11 17:17:04 TP1] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
                     "#new_tokens_gained: 2048, #new_token_ratio: 0.9998 -> 1.0000\n")
    p = subprocess.run([mtail, "--one_shot", "--one_shot_format", "prometheus", "--progs",
                        str(BENCH / "sglang.mtail"), "--logs", str(log), "--logtostderr",
                        "--address", "127.0.0.1", "--port", str(free_port())],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert 'sglang_queue_requests{prog="sglang.mtail",rank="TP1"} 7' in out
    assert 'sglang_running_requests{prog="sglang.mtail",rank="TP1"} 5' in out
    assert 'sglang_retracted_requests{prog="sglang.mtail",rank="TP1"} 2' in out


def test_genlog_realistic_profile_adds_what_servers_write_beside_batch_lines():
    lines = [ln for chunk in genlog.generate(20000, seed=1, profile="realistic") for ln in chunk]
    text = "\n".join(lines)
    assert len(lines) == 20000
    for needle in (" DP0 TP0] Decode batch, ", " DP1 TP3] Decode batch, ", "] Error in request: ",
                   "Traceback (most recent call last):", '"POST /v1/chat/completions HTTP/1.1" 400 Bad Request',
                   "LONG GARBAGE COLLECTION DETECTED", "UserWarning", "] Receive: obj=", "] Finish: obj="):
        assert needle in text, needle
    requests = sum("] Receive: obj=" in ln for ln in lines)
    bench = sum("] Receive: obj=" in ln for chunk in genlog.generate(20000, seed=1) for ln in chunk)
    assert requests > bench * 1.2, "more request logs than the bench profile"


def test_genlog_leaders_only_prints_batch_lines_from_each_dp_groups_first_tp_rank():
    """SGLang's default: batch lines from attn_tp_rank 0 only; start-up and retraction lines from every rank."""
    def ranks(lines, what):
        return {ln[1:].split("] ", 1)[0].split(" ", 2)[2] for ln in lines if f"] {what}" in ln}
    every = [ln for chunk in genlog.generate(20000, seed=1, profile="realistic") for ln in chunk]
    leaders = [ln for chunk in genlog.generate(20000, seed=1, profile="realistic", leaders_only=True)
               for ln in chunk]
    assert ranks(every, "Decode batch") == ranks(every, "Prefill batch") == {"DP0 TP0", "DP0 TP1", "DP1 TP2",
                                                                             "DP1 TP3"}
    assert ranks(leaders, "Decode batch") == ranks(leaders, "Prefill batch") == {"DP0 TP0", "DP1 TP2"}
    for what in ("KV cache pool is full", "Load weight end", "Capture cuda graph end"):
        assert ranks(leaders, what) == {"DP0 TP0", "DP0 TP1", "DP1 TP2", "DP1 TP3"}, what
    bench = [ln for chunk in genlog.generate(5000, seed=1, tp=2, leaders_only=True) for ln in chunk]
    assert ranks(bench, "Decode batch") == {"TP0"} and len(bench) == 5000


def test_full_mtail_program_reads_every_batch_field_rank_retractions_and_ooms(tmp_path):
    mtail = require_tool("mtail")
    log = tmp_path / "full.log"
    log.write_text(
        genlog.decode_line("2025-08-11 17:17:03", " DP1 TP3", 5, 26740, 0.21, 1834.27, 7) + "\n"
        "[2025-08-11 17:17:03 DP1 TP3] Prefill batch, #new-seq: 3, #new-token: 4012, #cached-token: 1280, "
        "token usage: 0.22, #running-req: 6, #queue-req: 8, input throughput (token/s): 15342.77, cuda graph: False\n"
        "[2025-08-11 17:17:04 DP1 TP3] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
        "#new_tokens_gained: 2048, #new_token_ratio: 0.9998 -> 1.0000\n"
        "[2025-08-11 17:17:05 TP0] Decode out of memory. Try to lower your batch size.\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB.\n")
    p = subprocess.run([mtail, "--one_shot", "--one_shot_format", "prometheus", "--progs",
                        str(BENCH / "sglang_full.mtail"), "--logs", str(log), "--logtostderr",
                        "--address", "127.0.0.1", "--port", str(free_port())],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    got = {ln.rsplit(" ", 1)[0]: ln.rsplit(" ", 1)[1] for ln in p.stdout.splitlines() if not ln.startswith("#")}
    rank = '{prog="sglang_full.mtail",rank="DP1 TP3"}'
    expected = {"sglang_tokens": "26740", "sglang_gen_throughput": "1834.27", "sglang_decode_cuda_graph": "1",
                "sglang_prefill_new_seqs": "3", "sglang_prefill_new_tokens": "4012",
                "sglang_prefill_cached_tokens": "1280", "sglang_input_throughput": "15342.77",
                "sglang_prefill_cuda_graph": "0", "sglang_token_usage": "0.22", "sglang_running_requests": "6",
                "sglang_queue_requests": "8", "sglang_retracted_requests": "2",
                "sglang_retraction_tokens_gained": "2048", "sglang_new_token_ratio": "1",
                "sglang_decode_batch_lines": "1", "sglang_prefill_batch_lines": "1"}
    for name, value in expected.items():
        assert got.get(name + rank) == value, (name, got.get(name + rank))
    assert got.get('sglang_kv_pool_ooms{phase="Decode",prog="sglang_full.mtail"}') == "1"
    assert got.get('sglang_cuda_ooms{prog="sglang_full.mtail"}') == "1"


# ------------------------------------------------------------------------------ go_profile (Prometheus' pprof)

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes | int) -> bytes:
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _profile(stacks: list[tuple[list[str], int]]) -> bytes:
    """A pprof profile (profile.proto) of `stacks` (function names innermost first, CPU ns), gzipped as Go
    writes it: one function and one location per name, samples with packed location ids."""
    import gzip
    names = sorted({n for names, _ in stacks for n in names})
    ids = {n: i + 1 for i, n in enumerate(names)}
    body = _field(6, b"")                                    # string 0 is always ""
    for n in names:
        body += _field(6, n.encode())
    for i in ids.values():
        body += _field(5, _field(1, i) + _field(2, i))       # function: id, name (string index)
        body += _field(4, _field(1, i) + _field(4, _field(1, i)))   # location: id, line { function id }
    for names_, ns in stacks:
        packed = b"".join(_varint(ids[n]) for n in names_)
        body += _field(2, _field(1, packed) + _field(2, _varint(1) + _varint(ns)))  # values: count, ns
    return gzip.compress(body)


def test_go_profile_splits_cpu_by_the_paths_on_each_stack():
    import go_profile
    profile = _profile([
        (["tsdb.(*headIndexReader).SortedPostings", "storage.(*querierAdapter).Select",
          "rules.(*Group).Eval"], 3_000_000_000),
        (["promql.(*evaluator).eval", "rules.(*Group).Eval"], 1_000_000_000),
        (["runtime.scanobject", "runtime.gcBgMarkWorker"], 2_000_000_000),
        (["scrape.(*scrapeLoop).run"], 5_000_000_000),
        # Prometheus 3 selects from the block querier, with no adapter on the stack
        (["tsdb.PostingsForMatchers", "tsdb.(*blockQuerier).Select", "rules.(*Group).Eval"], 500_000_000),
    ])
    got = go_profile.split(profile)
    assert got["seconds"] == 11.5
    paths = got["paths"]
    assert paths["rule evaluation"] == 4.5
    assert paths["  selecting series (postings, sort)"] == 3.5
    assert paths["  sorting postings by labels"] == 3.0
    assert paths["garbage collection (background)"] == 2.0
    assert paths["scraping"] == 5.0
    assert paths["garbage collection (assists)"] == 0.0
    assert go_profile.heaviest(profile, 2) == [("scrape.(*scrapeLoop).run", 5.0), ("rules.(*Group).Eval", 4.5)]


def test_go_profile_reads_what_a_real_prometheus_writes(tmp_path):
    """The decoder against Prometheus' own pprof output (its heap profile: always has samples, no wait)."""
    import urllib.request

    import go_profile
    from helpers import stop_process, wait_until
    binary = require_tool("prometheus")
    port = free_port()
    (tmp_path / "prometheus.yml").write_text("global: {scrape_interval: 1m}\n")
    proc = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def heap() -> bytes | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/debug/pprof/heap", timeout=5) as r:
                    return r.read()
            except OSError:
                return None
        profile = wait_until(heap, timeout=60, interval=0.1, what="Prometheus' /debug/pprof/heap")
    finally:
        stop_process(proc)
    stacks = go_profile.stacks(profile)
    assert stacks and all(names for names, _ in stacks)
    assert any(name.startswith("github.com/prometheus/prometheus/") for names, _ in stacks for name in names)


def test_rounds_compares_two_checkouts_with_mtail_in_each_round(tmp_path):
    require_tool("mtail")
    _gen(tmp_path, "g.log", 300, 3)
    log = tmp_path / "g.log"
    root = str(BENCH.parent)
    out = subprocess.run([sys.executable, str(BENCH / "rounds.py"), "--file", str(log), "--rounds", "2", root, root],
                         capture_output=True, text=True, timeout=300, check=True)
    rows = {line.split("|")[1].strip(): line for line in out.stdout.splitlines() if line.startswith("| ")}
    assert set(rows) >= {"mtail", "before", "after"}
    assert rows["before"].rstrip(" |").endswith("x") and rows["after"].rstrip(" |").endswith("x")
    assert out.stderr.count("round ") == 2


def test_rounds_runs_each_checkouts_own_code_from_the_repository_root(tmp_path):
    """Started from a checkout's root (as bench/README says), each contestant still imports its own tree: a
    checkout whose analyze fails makes the run fail, not pass on the root's exporter/."""
    require_tool("mtail")
    _gen(tmp_path, "g.log", 300, 3)
    root = BENCH.parent
    broken = tmp_path / "broken"
    shutil.copytree(root / "exporter", broken / "exporter", ignore=shutil.ignore_patterns("__pycache__"))
    (broken / "exporter" / "__main__.py").write_text("raise SystemExit(3)\n")
    out = subprocess.run([sys.executable, str(BENCH / "rounds.py"), "--file", str(tmp_path / "g.log"),
                          "--rounds", "1", str(root), str(broken)], capture_output=True, text=True, timeout=300,
                         cwd=root)
    assert out.returncode != 0 and "returned non-zero exit status 3" in out.stderr, out.stderr[-2000:]
    # and a log named relative to where it was started
    good = subprocess.run([sys.executable, str(BENCH / "rounds.py"), "--file", "g.log", "--rounds", "1",
                           str(root), str(root)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert good.returncode == 0, good.stderr[-2000:]


def test_each_variant_of_a_realistic_log_reads_as_the_same_log(tmp_path):
    """bench/variants.py changes one property of a log (request-log format, container wrapping, characters,
    timestamps, how many request errors): the exporter still finds the same batch lines and request logs in each, so a variant's time
    is that property's cost."""
    import variants

    from exporter.ingest.events import as_event
    from exporter.ingest.pipeline import iter_file_items

    src = tmp_path / "real.log"
    genlog.write(6000, str(src), seed=1, profile="realistic")

    def kinds(path):
        out: dict = {}
        for item in iter_file_items(str(path)):
            kind = as_event(item).kind
            out[kind] = out.get(kind, 0) + 1
        return out
    want = kinds(src)
    assert want["request_log"] > 100 and want["decode_batch"] > 1000
    for how in variants.VARIANTS:
        out = tmp_path / f"{how}.log"
        subprocess.run([sys.executable, str(BENCH / "variants.py"), str(src), str(out), "--as", how],
                       check=True, capture_output=True, timeout=120)
        text = out.read_text(encoding="utf-8")
        got = kinds(out)
        for kind in ("decode_batch", "prefill_batch", "request_log", "retraction"):
            assert got.get(kind) == want.get(kind), (how, kind)
        if how == "errors5":    # each handled request error (its line and 6 of traceback) five times
            assert want["request_error"] > 3 and got["request_error"] == 5 * want["request_error"]
            assert text.count("\n") == 6000 + 4 * 7 * want["request_error"]
        else:
            assert text.count("\n") == 6000, how
    assert '"event": "request.received"' in (tmp_path / "json.log").read_text()
    assert "Receive OpenAI: obj=" in (tmp_path / "openai.log").read_text()
    assert "中文" in (tmp_path / "cjk.log").read_text(encoding="utf-8")
