"""Golden tests per SGLang version family: lines built from the exact f-strings of
/work/shared/reference/sglang-formats.md (§1.2 prefill, §1.3 decode, §1.5 prefixes, §2 retraction, §3 startup,
§4 errors), with varied values, checked for kind, rank, time, ts and EVERY field value.

The expected events are computed here from the same parameters that built the lines (never from the parser).
The lines are also committed as tests/fixtures/versions/<family>.log (one file per family) and parsed through
the real pipeline (exporter.ingest.pipeline.iter_file_events); `scripts/refresh-parser-fixtures` rewrites
the fixtures after a change here (from fixture_files()), and a test fails when they are stale.
"""
from __future__ import annotations

import calendar
import json
import random
from pathlib import Path

import pytest

from exporter.ingest.events import EMPTY_RANK
from exporter.ingest.grammar import Parser
from exporter.ingest.pipeline import SourceParser, iter_file_events

FIXTURES = Path(__file__).parent / "fixtures" / "versions"
GIB = 1 << 30

# The contract's names for SGLang's printed batch keys (docs/log-events.md), written out independently of
# grammar._BATCH_KEYS on purpose.
NAME = {
    "#running-req": "running_req", "#queue-req": "queue_req", "#token": "num_tokens", "token usage": "token_usage",
    "gen throughput (token/s)": "gen_throughput", "input throughput (token/s)": "input_throughput",
    "#new-seq": "new_seq", "#new-token": "new_token", "#cached-token": "cached_token",
    "cache hit rate": "cache_hit_rate", "accept len": "spec_accept_length", "accept rate": "spec_accept_rate",
    "cap len": "spec_cap_length", "block accept len": "spec_block_accept_length",
    "#full token": "full_num_tokens", "full token usage": "full_token_usage", "#swa token": "swa_num_tokens",
    "swa token usage": "swa_token_usage", "mamba num": "mamba_num", "mamba usage": "mamba_usage",
    "#gpu token": "gpu_num_tokens", "gpu token usage": "gpu_token_usage", "#cpu token": "cpu_num_tokens",
    "cpu token usage": "cpu_token_usage", "pre-allocated usage": "pre_allocated_usage",
    "#prealloc-req": "prealloc_req", "#transfer-req": "transfer_req", "#retracted-req": "retracted_req",
    "#host-receive-req": "host_receive_req", "#unbootstrapped-req": "unbootstrapped_req",
    "#transferring-req": "transferring_req", "#bootstrap-req": "bootstrap_req", "#inflight-req": "inflight_req",
    "#optimistic-req": "optimistic_req", "#pending-token": "pending_token", "#replay-token": "replay_token",
    "waiting-image-req": "waiting_image_req", "largest-len": "largest_len", "time": "gap_latency",
    "est. prefill TFLOPS/s (per GPU)": "est_tflops_per_gpu", "est. decode TFLOPS/s (per GPU)": "est_tflops_per_gpu",
    "est. read BW (GB/s per GPU)": "est_read_bw_gb_per_s", "est. write BW (GB/s per GPU)": "est_write_bw_gb_per_s",
    "fwd occupancy": "fwd_occupancy", "fwd+idle occupancy": "fwd_idle_occupancy",
}
# how SGLang formats each key's value: i = int count, f = :.2f, p = :.2f% (a ratio 0-1 in our fields)
USAGE_KEYS = {"token usage", "full token usage", "swa token usage", "mamba usage", "gpu token usage",
              "cpu token usage", "pre-allocated usage"}
PERCENT_KEYS = {"cache hit rate", "fwd occupancy", "fwd+idle occupancy"}
FLOAT_KEYS = {"gen throughput (token/s)", "input throughput (token/s)", "accept len", "accept rate", "cap len",
              "block accept len", "time", "est. prefill TFLOPS/s (per GPU)", "est. decode TFLOPS/s (per GPU)",
              "est. read BW (GB/s per GPU)", "est. write BW (GB/s per GPU)"}
GRAPH_LABELS = {"cuda graph": "cuda", "cpu graph": "cpu", "npu graph": "npu", "musa graph": "musa"}


def rank(**kw) -> dict:
    r = dict(EMPTY_RANK)
    r.update(kw)
    return r


class Prefix:
    """SGLang's `[date time(.ms) RANKS] ` prefix and what the parser must report for it."""

    def __init__(self, epoch: int, tags: str = "", ms: int | None = None, date: bool = True, **ranks):
        tm = __import__("time").gmtime(epoch)
        d, t = f"{tm.tm_year:04d}-{tm.tm_mon:02d}-{tm.tm_mday:02d}", f"{tm.tm_hour:02d}:{tm.tm_min:02d}:{tm.tm_sec:02d}"
        frac = f".{ms:03d}" if ms is not None else ""
        self.text = f"[{d + ' ' if date else ''}{t}{frac}{tags}] "
        if date:
            self.time = f"{d}T{t}{frac}"
            self.ts = calendar.timegm(tm) + (ms / 1000 if ms is not None else 0.0)
        else:                                   # time-only (0.3.0-0.3.3): seconds of the log's first day
            self.time = f"{t}{frac}"
            self.ts = tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec + (ms / 1000 if ms is not None else 0.0)
        self.rank = rank(**ranks)


class Family:
    """The records of one version family: lines, and the events they must give (with 0-based line offsets)."""

    def __init__(self, name: str, seed: int):
        self.name = name
        self.rng = random.Random(seed)
        self.lines: list[str] = []
        self.events: list[dict] = []
        self.t = 1754932623 + seed * 86400      # 2025-08-11 17:17:03 UTC + seed days
        self.ms: int | None = None
        self.date = True

    def prefix(self, tags: str = "", **ranks) -> Prefix:
        self.t += self.rng.randrange(1, 40)
        ms = self.rng.randrange(1000) if self.ms is not None else None
        return Prefix(self.t, tags, ms, self.date, **ranks)

    def add(self, lines: str | list[str], *events: tuple, at: Prefix | None = None) -> None:
        """events: (kind, fields[, line offset within `lines`[, prefix]])."""
        lines = [lines] if isinstance(lines, str) else lines
        base = len(self.lines)
        self.lines += lines
        for ev in events:
            kind, fields = ev[0], ev[1]
            off = ev[2] if len(ev) > 2 else 0
            pre = ev[3] if len(ev) > 3 else at
            self.events.append({"line": base + off + 1, "kind": kind, "time": pre.time if pre else None,
                                "ts": pre.ts if pre else None, "rank": pre.rank if pre else dict(EMPTY_RANK),
                                "fields": fields})

    def one(self, pre: Prefix, msg: str, kind: str, fields: dict) -> None:
        self.add(pre.text + msg, (kind, fields), at=pre)

    # -- value generators, formatted as SGLang does ------------------------------------------------------
    def value(self, key: str):
        rng = self.rng
        if key in GRAPH_LABELS:
            b = rng.random() < 0.7
            return str(b), {"cuda_graph": b, "graph_backend": GRAPH_LABELS[key]}
        name = NAME[key]
        if key in USAGE_KEYS:
            text = f"{rng.random():.2f}"
            return text, {name: float(text)}
        if key in PERCENT_KEYS:
            text = f"{rng.random() * 100:.2f}"
            return text + "%", {name: float(text) / 100.0}
        if key in FLOAT_KEYS:
            text = f"{rng.uniform(0, 30000) if 'throughput' in key or 'BW' in key else rng.uniform(1, 8):.2f}"
            return text, {name: float(text)}
        n = rng.choice((0, 1, rng.randrange(2, 64), rng.randrange(64, 10 ** 6)))
        return str(n), {name: n}

    def batch(self, head: str, keys: list[str], trailing: str = "", tail: list[str] = ()) -> tuple[str, dict]:
        """`head` + 'k: v, k: v' from `keys` (+ trailing text) + ', k: v' tail items; returns (msg, fields)."""
        parts, fields = [], {}
        for key in list(keys) + list(tail):
            text, f = self.value(key)
            parts.append(f"{key}: {text}")
            fields.update(f)
        return head + ", ".join(parts) + trailing, fields

    def batch_line(self, pre: Prefix, head: str, keys: list[str], trailing: str = "", tail=(), extra=None):
        msg, fields = self.batch(head, keys, trailing, tail)
        if extra:
            fields = {**extra, **fields}
        kind = "decode_batch" if head.startswith("Decode") else "prefill_batch"
        self.one(pre, msg, kind, fields)
        return fields

    def mem(self):
        text = f"{self.rng.uniform(0.5, 79):.2f}"
        return text, int(float(text) * GIB)


DECODE_PLAIN = ["#running-req", "#token", "token usage", "gen throughput (token/s)", "#queue-req"]
DECODE_GRAPH = ["#running-req", "#token", "token usage", "cuda graph", "gen throughput (token/s)", "#queue-req"]
PREFILL_036 = ["#new-seq", "#new-token", "#cached-token", "cache hit rate", "token usage", "#running-req",
               "#queue-req"]
PREFILL_044 = ["#new-seq", "#new-token", "#cached-token", "token usage", "#running-req", "#queue-req"]


def traceback_lines(funcs: list[str], last: str) -> list[str]:
    out = ["Traceback (most recent call last):"]
    for i, fn in enumerate(funcs):
        out.append(f'  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/mod{i}.py", line {100 + i}, in {fn}')
        out.append(f"    result = self.{fn}(batch)")
        out.append("             ^^^^^^^^^^^^^^^^^^^^")
    out.append(last)
    return out


# ---------------------------------------------------------------------------------------------------- families
def fam_030_033() -> Family:
    f = Family("0.3.0-0.3.3", 1)
    f.date = False
    # 0.3.0-0.3.1 prefill, both variants; 0.3.2+ adds token usage
    p = f.prefix(" TP0", tp=0)
    n = f.rng.randrange(1, 300)
    msg, fields = f.batch(f"Prefill batch(mixed #running-req: {n}). ",
                          ["#new-seq", "#new-token", "#cached-token", "cache hit rate", "#queue-req"])
    f.one(p, msg, "prefill_batch", {"mixed_running_req": n, **fields})
    f.batch_line(f.prefix(" TP0", tp=0), "Prefill batch. ",
                 ["#new-seq", "#new-token", "#cached-token", "cache hit rate", "#running-req", "#queue-req"])
    f.batch_line(f.prefix(" TP0", tp=0), "Prefill batch. ",
                 ["#new-seq", "#new-token", "#cached-token", "cache hit rate", "token usage", "#running-req",
                  "#queue-req"])
    f.batch_line(f.prefix(" TP1", tp=1), "Decode batch. ", DECODE_PLAIN)
    # 0.3.x DP workers: " DP1 TP0"
    f.batch_line(f.prefix(" DP1 TP0", dp=1, tp=0), "Decode batch. ", DECODE_PLAIN)
    p = f.prefix(" TP0", tp=0)
    n, a, b = f.rng.randrange(1, 50), f.rng.uniform(0.1, 1), f.rng.uniform(0.1, 1)
    f.one(p, f"Decode out of memory happened. #retracted_reqs: {n}, #new_token_ratio: {a:.4f} -> {b:.4f}",
          "retraction", {"variant": "decode_oom_legacy", "testing": False, "retracted_reqs": n,
                         "new_token_ratio_before": float(f"{a:.4f}"), "new_token_ratio_after": float(f"{b:.4f}")})
    p = f.prefix(" TP0", tp=0)
    v = [f.rng.randrange(1000, 10 ** 6) for _ in range(4)]
    f.one(p, f"max_total_num_tokens={v[0]}, max_prefill_tokens={v[1]}, max_running_requests={v[2]}, "
             f"context_len={v[3]}", "memory_config",
          {"max_total_num_tokens": v[0], "max_prefill_tokens": v[1], "max_running_requests": v[2],
           "context_len": v[3]})
    t, b = f.mem()
    f.one(f.prefix(" TP0", tp=0), f"Load weight begin. avail mem={t} GB", "load_weight",
          {"avail_mem_bytes": b, "phase": "begin"})
    t, b = f.mem()
    f.one(f.prefix(" TP0", tp=0), f"Load weight end. type=Qwen2ForCausalLM, dtype=torch.float16, avail mem={t} GB",
          "load_weight", {"avail_mem_bytes": b, "phase": "end", "model_type": "Qwen2ForCausalLM",
                          "dtype": "torch.float16"})
    f.one(f.prefix(" TP0", tp=0), "Capture cuda graph begin. This can take up to several minutes.",
          "graph_capture", {"phase": "begin", "target": "cuda graph"})
    # 0.3.0-0.3.4 KV OOM: one line, then exit(1)
    f.one(f.prefix(" TP0", tp=0), "Prefill out of memory. Try to lower your batch size.", "oom",
          {"phase": "prefill", "source": "kv_pool"})
    # 0.3.0-0.3.5 process crash text
    p = f.prefix(" TP0", tp=0)
    f.add([p.text + "Exception in ModelTpServer:"] + traceback_lines(["forward_step", "forward_decode"],
                                                                     "ValueError: boom"),
          ("scheduler_exception", {"component": "ModelTpServer", "message": "ValueError: boom"}), at=p)
    # the clock wraps past midnight: the next day counts on (ts keeps increasing)
    f.t = (f.t // 86400) * 86400 + 86400 - 5
    p = f.prefix(" TP0", tp=0)
    p.ts += 86400
    f.batch_line(p, "Decode batch. ", DECODE_PLAIN)
    return f


def fam_034_046() -> Family:
    f = Family("0.3.4-0.4.6", 2)
    f.batch_line(f.prefix(" TP0", tp=0), "Prefill batch. ", PREFILL_036)           # 0.3.6-0.4.3
    f.batch_line(f.prefix(" DP1 TP3", dp=1, tp=3), "Prefill batch. ", PREFILL_036)
    f.batch_line(f.prefix(" TP0", tp=0), "Decode batch. ", DECODE_PLAIN)
    f.batch_line(f.prefix(" TP0", tp=0), "Decode batch. ",                       # 0.4.2-0.4.3 speculative
                 ["#running-req", "#token", "token usage", "accept len", "gen throughput (token/s)", "#queue-req"])
    f.batch_line(f.prefix(" TP2", tp=2), "Prefill batch. ", PREFILL_044, trailing=", ")   # 0.4.4-0.4.5
    f.batch_line(f.prefix(" TP0", tp=0), "Decode batch. ",                       # 0.4.4 largest-len
                 ["#running-req", "#token", "token usage", "gen throughput (token/s)", "largest-len", "#queue-req"],
                 trailing=", ")
    f.batch_line(f.prefix(" TP0", tp=0), "Decode batch. ", DECODE_PLAIN, trailing=", ")   # 0.4.5
    # 0.4.6 PD prefill (trailing space) and PD decode
    f.batch_line(f.prefix(" TP0", tp=0), "Prefill batch. ",
                 ["#new-seq", "#new-token", "#cached-token", "token usage", "#running-req", "#unbootstrapped-req",
                  "#queue-req", "#transferring-req"], trailing=" ")
    f.batch_line(f.prefix(" DP0 TP0", dp=0, tp=0), "Decode batch. ",
                 ["#running-req", "#token", "token usage", "accept len", "pre-allocated usage",
                  "gen throughput (token/s)", "#queue-req"])
    # capacity 0.4.2-0.4.6 (chunked_prefill_size)
    v = [f.rng.randrange(1000, 10 ** 6) for _ in range(5)]
    f.one(f.prefix(" TP1", tp=1), f"max_total_num_tokens={v[0]}, chunked_prefill_size={v[1]}, "
                                  f"max_prefill_tokens={v[2]}, max_running_requests={v[3]}, context_len={v[4]}",
          "memory_config", {"max_total_num_tokens": v[0], "chunked_prefill_size": v[1], "max_prefill_tokens": v[2],
                            "max_running_requests": v[3], "context_len": v[4]})
    # retraction (legacy text until 0.4.6)
    p = f.prefix(" TP1", tp=1)
    n, a, b = f.rng.randrange(1, 50), f.rng.uniform(0.1, 1), f.rng.uniform(0.1, 1)
    f.one(p, f"Decode out of memory happened. #retracted_reqs: {n}, #new_token_ratio: {a:.4f} -> {b:.4f}",
          "retraction", {"variant": "decode_oom_legacy", "testing": False, "retracted_reqs": n,
                         "new_token_ratio_before": float(f"{a:.4f}"), "new_token_ratio_after": float(f"{b:.4f}")})
    # model runner lines
    t1, b1 = f.mem()
    t2, b2 = f.mem()
    f.one(f.prefix(" TP0", tp=0), f"Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem={t1} GB, "
                                  f"mem usage={t2} GB.", "load_weight",
          {"avail_mem_bytes": b1, "mem_usage_bytes": b2, "phase": "end", "model_type": "LlamaForCausalLM",
           "dtype": "torch.bfloat16"})
    t1, b1 = f.mem()
    f.one(f.prefix(" TP0", tp=0), f"KV Cache is allocated. K size: {t1} GB, V size: {t1} GB.",   # 0.4.2-0.4.3
          "kv_cache_allocated", {"cache": "KV Cache", "k_size_bytes": b1, "v_size_bytes": b1})
    n = f.rng.randrange(10 ** 4, 10 ** 7)
    f.one(f.prefix(" TP0", tp=0), f"KV Cache is allocated. #tokens: {n}, K size: {t1} GB, V size: {t1} GB",
          "kv_cache_allocated", {"cache": "KV Cache", "num_tokens": n, "k_size_bytes": b1, "v_size_bytes": b1})
    t1, b1 = f.mem()
    f.one(f.prefix(" TP0", tp=0), f"Memory pool end. avail mem={t1} GB", "memory_pool", {"avail_mem_bytes": b1})
    f.one(f.prefix(" TP0", tp=0), f"Capture cuda graph begin. This can take up to several minutes. avail mem={t1} GB",
          "graph_capture", {"avail_mem_bytes": b1, "phase": "begin", "target": "cuda graph"})
    e = f"{f.rng.uniform(1, 90):.2f}"
    t2, b2 = f.mem()
    f.one(f.prefix(" TP0", tp=0), f"Capture cuda graph end. Time elapsed: {e} s", "graph_capture",   # 0.4.0-0.4.3
          {"phase": "end", "target": "cuda graph", "elapsed_seconds": float(e)})
    f.one(f.prefix(" TP0", tp=0), f"Capture cuda graph end. Time elapsed: {e} s. avail mem={t1} GB. "
                                  f"mem usage={t2} GB.", "graph_capture",                            # 0.4.4-0.4.6
          {"avail_mem_bytes": b1, "mem_usage_bytes": b2, "phase": "end", "target": "cuda graph",
           "elapsed_seconds": float(e)})
    # KV-pool OOM, 0.3.5-0.4.6 ("Avaliable" typo), multi-line; then 0.4.4-0.4.6 extend variant's extra lines
    p = f.prefix(" TP0", tp=0)
    req, av = f.rng.randrange(1, 5000), f.rng.randrange(0, 5000)
    f.add([p.text + "Decode out of memory. Try to lower your batch size.", f"Try to allocate {req} tokens.",
           f"Avaliable tokens: {av}", ""],
          ("oom", {"phase": "decode", "source": "kv_pool", "requested_tokens": req, "available_tokens": av}), at=p)
    p = f.prefix(" TP0", tp=0)
    req, av = f.rng.randrange(1, 5000), f.rng.randrange(0, 5000)
    f.add([p.text + "Prefill out of memory. Try to lower your batch size.", f"Try to allocate {req} tokens.",
           f"Avaliable tokens: {av}", f"self.token_to_kv_pool_allocator.available_size()={av}",
           "self.tree_cache.evictable_size()=0", ""],
          ("oom", {"phase": "prefill", "source": "kv_pool", "requested_tokens": req, "available_tokens": av}), at=p)
    # ... and its RuntimeError in the scheduler's traceback: one oom only (the logged one), plus the exception
    p = f.prefix(" TP0", tp=0)
    f.add([p.text + "Scheduler hit an exception: Traceback (most recent call last):"]
          + traceback_lines(["event_loop_normal", "get_next_batch_to_run", "prepare_for_extend"],
                            "RuntimeError: Prefill out of memory. Try to lower your batch size.")
          + [f"Try to allocate {req} tokens.", f"Avaliable tokens: {av}"],
          # the cause is the exception line, not the lines its message runs on over
          ("scheduler_exception", {"component": "Scheduler",
                                   "message": "RuntimeError: Prefill out of memory. Try to lower your batch size."}),
          at=p)
    # 0.3.5-0.5.6 watchdog, 0.4.2 sigquit typo, 0.4.4+ sigquit
    sec = f.rng.choice((300, 600, 45))
    f.one(f.prefix(" TP0", tp=0), f"Watchdog timeout (self.watchdog_timeout={sec})", "watchdog_timeout",
          {"component": "Scheduler", "soft": False, "timeout_seconds": sec})
    f.one(f.prefix(), "Received sigquit from a child proces. It usually means the child failed.", "sigquit", {})
    f.one(f.prefix(), "Received sigquit from a child process. It usually means the child failed.", "sigquit", {})
    f.one(f.prefix(), "The server is fired up and ready to roll!", "server_ready", {})
    return f


def fam_047_053() -> Family:
    f = Family("0.4.7-0.5.3", 3)
    # tp=1: no rank tag at all (0.4.7+)
    f.batch_line(f.prefix(), "Prefill batch. ", PREFILL_044)
    f.batch_line(f.prefix(), "Decode batch. ", DECODE_GRAPH)
    # 0.4.7 PD prefill: time, trailing space; 0.4.8 PD prefill: input throughput
    f.batch_line(f.prefix(" TP0", tp=0), "Prefill batch. ",
                 ["#new-seq", "#new-token", "#cached-token", "token usage", "#running-req", "#unbootstrapped-req",
                  "#queue-req", "#transferring-req", "time"], trailing=" ")
    f.batch_line(f.prefix(" TP0", tp=0), "Prefill batch. ",
                 ["#new-seq", "#new-token", "#cached-token", "token usage", "#unbootstrapped-req", "#queue-req",
                  "#transferring-req", "input throughput (token/s)"], trailing=" ")
    # 0.4.8 PD decode, #retracted-req
    f.batch_line(f.prefix(" TP1", tp=1), "Decode batch. ",
                 ["#running-req", "#token", "token usage", "pre-allocated usage", "#retracted-req", "cuda graph",
                  "gen throughput (token/s)", "#queue-req"])
    # 0.4.9: allocator usage msg in both lines (plain and SWA)
    f.batch_line(f.prefix(" TP0", tp=0), "Prefill batch. ",
                 ["#new-seq", "#new-token", "#cached-token", "#token", "token usage", "#running-req", "#queue-req"])
    p = f.prefix(" TP0", tp=0)
    r, fu, sw, q = f.rng.randrange(1, 300), f.rng.randrange(10 ** 6), f.rng.randrange(10 ** 5), f.rng.randrange(99)
    uf, us, gt = f"{f.rng.random():.2f}", f"{f.rng.random():.2f}", f"{f.rng.uniform(0, 9000):.2f}"
    f.one(p, f"Decode batch. #running-req: {r}, #token: full={fu}, swa={sw}, token usage: full={uf}, swa={us}, "
             f"cuda graph: False, gen throughput (token/s): {gt}, #queue-req: {q}", "decode_batch",
          {"running_req": r, "full_num_tokens": fu, "swa_num_tokens": sw, "full_token_usage": float(uf),
           "swa_token_usage": float(us), "cuda_graph": False, "graph_backend": "cuda", "gen_throughput": float(gt),
           "queue_req": q})
    # 0.4.10-0.5.2, TP=4, trailing ", "; hybrid SWA decode; EP tags in DP TP EP PP order (0.4.10-0.5.5)
    f.batch_line(f.prefix(" TP3", tp=3), "Prefill batch. ", PREFILL_044, trailing=", ")
    f.batch_line(f.prefix(" TP3", tp=3), "Decode batch. ", DECODE_GRAPH, trailing=", ")
    f.batch_line(f.prefix(" TP0", tp=0), "Prefill batch. ",
                 ["#new-seq", "#new-token", "#cached-token", "full token usage", "swa token usage", "#running-req",
                  "#queue-req"], trailing=", ")
    f.batch_line(f.prefix(" DP1 TP2 EP2 PP1", dp=1, tp=2, ep=2, pp=1), "Decode batch. ",
                 ["#running-req", "#full token", "full token usage", "#swa token", "swa token usage", "cuda graph",
                  "gen throughput (token/s)", "#queue-req"], trailing=", ")
    # 0.4.10-0.5.2 PD prefill (input throughput, trailing ", ")
    f.batch_line(f.prefix(" TP0", tp=0), "Prefill batch. ",
                 ["#new-seq", "#new-token", "#cached-token", "token usage", "#unbootstrapped-req", "#queue-req",
                  "#transferring-req", "input throughput (token/s)"], trailing=", ")
    # 0.5.2 cpu graph label
    f.batch_line(f.prefix(), "Decode batch. ",
                 ["#running-req", "#token", "token usage", "cpu graph", "gen throughput (token/s)", "#queue-req"],
                 trailing=", ")
    # 0.5.3 PD with DP attention (`DP1 TP0`)
    f.batch_line(f.prefix(" DP1 TP0", dp=1, tp=0), "Prefill batch. ",
                 PREFILL_044 + ["#prealloc-req", "#inflight-req"], trailing=", ")
    f.batch_line(f.prefix(" DP1 TP0", dp=1, tp=0), "Decode batch. ",
                 ["#running-req", "#token", "token usage", "pre-allocated usage", "#prealloc-req", "#transfer-req",
                  "#retracted-req", "cuda graph", "gen throughput (token/s)", "#queue-req"], trailing=", ")
    # retractions: 0.4.7-0.5.2, 0.5.3-0.5.4 (aborted)
    for aborted in (False, True):
        p = f.prefix(" TP1", tp=1)
        n, ab, a, b = f.rng.randrange(1, 50), f.rng.randrange(0, 5), f.rng.uniform(0.1, 1), f.rng.uniform(0.1, 1)
        fields = {"variant": "kv_cache_full", "testing": False, "retracted_reqs": n}
        mid = ""
        if aborted:
            mid = f"#aborted_retracted_reqs: {ab}, "
            fields["aborted_retracted_reqs"] = ab
        fields.update(new_token_ratio_before=float(f"{a:.4f}"), new_token_ratio_after=float(f"{b:.4f}"))
        f.one(p, f"KV cache pool is full. Retract requests. #retracted_reqs: {n}, {mid}"
                 f"#new_token_ratio: {a:.4f} -> {b:.4f}", "retraction", fields)
    # capacity 0.4.7-0.5.1 (gpu) and 0.5.2+ on CPU
    for key in ("available_gpu_mem", "available_cpu_mem"):
        v = [f.rng.randrange(1000, 10 ** 6) for _ in range(5)]
        t, b = f.mem()
        f.one(f.prefix(), f"max_total_num_tokens={v[0]}, chunked_prefill_size={v[1]}, max_prefill_tokens={v[2]}, "
                          f"max_running_requests={v[3]}, context_len={v[4]}, {key}={t} GB", "memory_config",
              {"max_total_num_tokens": v[0], "chunked_prefill_size": v[1], "max_prefill_tokens": v[2],
               "max_running_requests": v[3], "context_len": v[4], f"{key}_bytes": b})
    # capture end 0.4.7-0.5.1
    e = f"{f.rng.uniform(1, 90):.2f}"
    t1, b1 = f.mem()
    t2, b2 = f.mem()
    f.one(f.prefix(" TP1", tp=1), f"Capture cuda graph end. Time elapsed: {e} s. mem usage={t2} GB. avail mem={t1} GB.",
          "graph_capture", {"avail_mem_bytes": b1, "mem_usage_bytes": b2, "phase": "end", "target": "cuda graph",
                            "elapsed_seconds": float(e)})
    # KV OOM 0.4.7-0.4.9 (typo fixed) and 0.4.10+ (available_size=... + evictable_size=...)
    p = f.prefix()
    req, av = f.rng.randrange(1, 5000), f.rng.randrange(0, 5000)
    f.add([p.text + "Decode out of memory. Try to lower your batch size.", f"Try to allocate {req} tokens.",
           f"Available tokens: {av}", ""],
          ("oom", {"phase": "decode", "source": "kv_pool", "requested_tokens": req, "available_tokens": av}), at=p)
    p = f.prefix(" TP2", tp=2)
    req, av = f.rng.randrange(1, 5000), f.rng.randrange(0, 5000)
    f.add([p.text + "Prefill out of memory. Try to lower your batch size.", f"Try to allocate {req} tokens.",
           f"Available tokens: {av} (available_size={av - 1} + evictable_size=1)", ""],
          ("oom", {"phase": "prefill", "source": "kv_pool", "requested_tokens": req, "available_tokens": av}), at=p)
    # hybrid SWA variant of the tail
    p = f.prefix(" TP0", tp=0)
    req, av = f.rng.randrange(1, 5000), f.rng.randrange(0, 5000)
    f.add([p.text + "Decode out of memory. Try to lower your batch size.", f"Try to allocate {req} tokens.",
           f"Available full tokens: {av}", "Available swa tokens: 7", "Full LRU list evictable size: 0",
           "SWA LRU list evictable size: 0", ""],
          ("oom", {"phase": "decode", "source": "kv_pool", "requested_tokens": req, "available_tokens": av}), at=p)
    # alloc_req_slots (RuntimeError -> inside the scheduler's traceback) and startup "Not enough memory"
    p = f.prefix(" TP0", tp=0)
    last = (f"RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for "
            f"`--max-running-requests`. self.req_to_token_pool.available_size()=0, num_reqs={req}, ")
    f.add([p.text + "Scheduler hit an exception: Traceback (most recent call last):"]
          + traceback_lines(["event_loop_overlap", "prepare_for_extend", "alloc_req_slots"], last),
          ("scheduler_exception", {"component": "Scheduler", "message": last.strip()}),
          ("oom", {"phase": "decode", "source": "req_pool"}, 11), at=p)
    p = f.prefix(" TP0", tp=0)
    last = ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: self.server_args.mem_fraction_static=0.88")
    f.add([p.text + "Scheduler hit an exception: Traceback (most recent call last):"]
          + traceback_lines(["run_scheduler_process", "__init__", "init_memory_pool"], last),
          ("scheduler_exception", {"component": "Scheduler", "message": last}),
          ("oom", {"phase": "startup", "source": "startup"}, 11), at=p)
    # server_args dataclass repr (<= 0.5.18): nested lists, dict strings, enum-like reprs, quotes with commas
    p = f.prefix()
    port = f.rng.randrange(20000, 40000)
    f.one(p, "server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', tokenizer_mode='auto', "
             "load_format=<LoadFormat.AUTO: 'auto'>, model_loader_extra_config='{}', "
             "json_model_override_args='{\"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0}}', "
             f"host='0.0.0.0', port={port}, mem_fraction_static=0.871, max_running_requests=None, "
             "chunked_prefill_size=8192, schedule_conservativeness=1.3, tp_size=4, cuda_graph_max_bs=160, "
             "cuda_graph_bs=[1, 2, 4, 8, 16], disable_cuda_graph=False, chat_template='a, b (c)', "
             "lora_paths={'a': 'x, y'}, served_model_name=\"it's, quoted\", enable_dp_attention=True)",
          "server_args",
          {"model_path": "meta-llama/Llama-3.1-8B-Instruct", "tokenizer_mode": "auto",
           "load_format": "<LoadFormat.AUTO: 'auto'>", "model_loader_extra_config": "{}",
           "json_model_override_args": '{"rope_scaling": {"type": "yarn", "factor": 4.0}}', "host": "0.0.0.0",
           "port": port, "mem_fraction_static": 0.871, "max_running_requests": None, "chunked_prefill_size": 8192,
           "schedule_conservativeness": 1.3, "tp_size": 4, "cuda_graph_max_bs": 160,
           "cuda_graph_bs": [1, 2, 4, 8, 16], "disable_cuda_graph": False, "chat_template": "a, b (c)",
           "lora_paths": {"a": "x, y"}, "served_model_name": "it's, quoted", "enable_dp_attention": True})
    f.one(f.prefix(), "The server is fired up and ready to roll!", "server_ready", {})
    return f


def fam_054() -> Family:
    f = Family("0.5.4", 4)
    it = f.rng.randrange(1, 10 ** 6)
    f.batch_line(f.prefix(" TP0", tp=0), f"Prefill batch [{it}], ", PREFILL_044, trailing=", ",
                 extra={"forward_iter": it})
    it += 17
    f.batch_line(f.prefix(" TP0", tp=0), f"Decode batch [{it}], ", DECODE_GRAPH, trailing=", ",
                 extra={"forward_iter": it})
    it += 40
    f.batch_line(f.prefix(" TP1", tp=1), f"Decode batch [{it}], ",                  # mamba + spec (accept rate)
                 ["#running-req", "#full token", "full token usage", "mamba num", "mamba usage", "accept len",
                  "accept rate", "cuda graph", "gen throughput (token/s)", "#queue-req"], trailing=", ",
                 extra={"forward_iter": it})
    f.batch_line(f.prefix(" TP0", tp=0), f"Prefill batch [{it + 1}], ",              # mamba prefill + PD
                 ["#new-seq", "#new-token", "#cached-token", "full token usage", "mamba usage", "#running-req",
                  "#queue-req", "#prealloc-req", "#inflight-req", "input throughput (token/s)"], trailing=", ",
                 extra={"forward_iter": it + 1})
    p = f.prefix(" TP0", tp=0)
    n, ab, a, b = f.rng.randrange(1, 50), f.rng.randrange(1, 5), f.rng.uniform(0.1, 1), f.rng.uniform(0.1, 1)
    f.one(p, f"KV cache pool is full. Retract requests. #retracted_reqs: {n}, #aborted_retracted_reqs: {ab}, "
             f"#new_token_ratio: {a:.4f} -> {b:.4f}", "retraction",
          {"variant": "kv_cache_full", "testing": False, "retracted_reqs": n, "aborted_retracted_reqs": ab,
           "new_token_ratio_before": float(f"{a:.4f}"), "new_token_ratio_after": float(f"{b:.4f}")})
    return f


def fam_055_058() -> Family:
    f = Family("0.5.5-0.5.8", 5)
    f.batch_line(f.prefix(" TP0", tp=0), "Prefill batch, ", PREFILL_044, trailing=", ")
    f.batch_line(f.prefix(" TP0", tp=0), "Decode batch, ",
                 ["#running-req", "#token", "token usage", "accept len", "accept rate", "cuda graph",
                  "gen throughput (token/s)", "#queue-req"], trailing=", ")
    # 0.5.6+ SGLANG_LOG_MS=1 and SGLANG_LOG_FORWARD_ITERS=1; DP PP TP EP order (0.5.6-0.5.8)
    f.ms = 0
    it = f.rng.randrange(1, 10 ** 6)
    f.batch_line(f.prefix(" DP3 PP1 TP2 EP2", dp=3, pp=1, tp=2, ep=2), f"Decode batch [{it}], ", DECODE_GRAPH,
                 trailing=", ", extra={"forward_iter": it})
    f.batch_line(f.prefix(" TP0", tp=0), "Decode batch, ",
                 ["#running-req", "#full token", "full token usage", "mamba num", "mamba usage", "cuda graph",
                  "gen throughput (token/s)", "#queue-req"], trailing=", ")
    # PD prefill 0.5.5-0.5.8 (input throughput after #inflight-req)
    f.batch_line(f.prefix(" DP0 TP0", dp=0, tp=0), "Prefill batch, ",
                 PREFILL_044 + ["#prealloc-req", "#inflight-req", "input throughput (token/s)"], trailing=", ")
    f.ms = None
    # retraction 0.5.5-0.5.6 (no aborted field), 0.5.7+ WARNING with #new_tokens_gained; "Testing retraction."
    p = f.prefix(" TP0", tp=0)
    n, a, b = f.rng.randrange(1, 50), f.rng.uniform(0.1, 1), f.rng.uniform(0.1, 1)
    f.one(p, f"KV cache pool is full. Retract requests. #retracted_reqs: {n}, #new_token_ratio: {a:.4f} -> {b:.4f}",
          "retraction", {"variant": "kv_cache_full", "testing": False, "retracted_reqs": n,
                         "new_token_ratio_before": float(f"{a:.4f}"), "new_token_ratio_after": float(f"{b:.4f}")})
    p = f.prefix(" TP1", tp=1)
    n, g = f.rng.randrange(1, 50), f.rng.randrange(1, 10 ** 5)
    f.one(p, f"KV cache pool is full. Retract requests. #retracted_reqs: {n}, #new_tokens_gained: {g}, "
             f"#new_token_ratio: {a:.4f} -> {b:.4f}", "retraction",
          {"variant": "kv_cache_full", "testing": False, "retracted_reqs": n, "new_tokens_gained": g,
           "new_token_ratio_before": float(f"{a:.4f}"), "new_token_ratio_after": float(f"{b:.4f}")})
    p = f.prefix(" TP0", tp=0)
    f.one(p, f"Testing retraction. #retracted_reqs: {n}, #new_tokens_gained: {g}", "retraction",
          {"variant": "kv_cache_full", "testing": True, "retracted_reqs": n, "new_tokens_gained": g})
    # 0.5.7+ watchdog (hard and soft)
    for soft in (False, True):
        sec = f.rng.choice((300, 120, 900))
        f.one(f.prefix(" TP0", tp=0), f"Scheduler watchdog timeout (self.watchdog_timeout={sec}, self.soft={soft})",
              "watchdog_timeout", {"component": "Scheduler", "soft": soft, "timeout_seconds": sec})
    f.one(f.prefix(), "DetokenizerManager watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
          "watchdog_timeout", {"component": "DetokenizerManager", "soft": False, "timeout_seconds": 300})
    return f


def fam_059_0523() -> Family:
    f = Family("0.5.9-0.5.23", 6)
    # 0.5.9 prefill order (input throughput, then graph), 0.5.10 order, 0.5.11+ #pending-token
    f.batch_line(f.prefix(" TP0", tp=0), "Prefill batch, ", PREFILL_044 + ["input throughput (token/s)", "cuda graph"])
    f.batch_line(f.prefix(" TP0", tp=0), "Prefill batch, ", PREFILL_044 + ["cuda graph", "input throughput (token/s)"])
    f.batch_line(f.prefix(" TP0", tp=0), "Prefill batch, ",
                 PREFILL_044 + ["#pending-token", "cuda graph", "input throughput (token/s)"])
    f.batch_line(f.prefix(), "Decode batch, ", DECODE_GRAPH)
    f.batch_line(f.prefix(" TP1", tp=1), "Decode batch, ", DECODE_GRAPH)
    # DP attention, TP=2/4, newer rank tags ATTN_CP / MOE_DP, in 0.5.9+ order DP PP ATTN_CP MOE_DP TP EP
    f.batch_line(f.prefix(" DP1 TP0", dp=1, tp=0), "Decode batch, ", DECODE_GRAPH)
    f.batch_line(f.prefix(" DP2 PP1 ATTN_CP1 MOE_DP3 TP3 EP3", dp=2, pp=1, attn_cp=1, moe_dp=3, tp=3, ep=3),
                 "Decode batch, ", DECODE_GRAPH)
    # speculative 0.5.16+ (cap len, block accept len)
    f.batch_line(f.prefix(" TP0", tp=0), "Decode batch, ",
                 ["#running-req", "#token", "token usage", "accept len", "accept rate", "cap len", "block accept len",
                  "cuda graph", "gen throughput (token/s)", "#queue-req"])
    # hybrid: SWA, mamba, HiSparse (0.5.11+)
    f.batch_line(f.prefix(" TP0", tp=0), "Decode batch, ",
                 ["#running-req", "#full token", "full token usage", "#swa token", "swa token usage", "npu graph",
                  "gen throughput (token/s)", "#queue-req"])
    f.batch_line(f.prefix(" TP0", tp=0), "Decode batch, ",
                 ["#running-req", "#gpu token", "gpu token usage", "#cpu token", "cpu token usage", "musa graph",
                  "gen throughput (token/s)", "#queue-req"])
    f.batch_line(f.prefix(" TP0", tp=0), "Prefill batch, ",
                 ["#new-seq", "#new-token", "#cached-token", "full token usage", "mamba usage", "#running-req",
                  "#queue-req", "#pending-token", "cuda graph", "input throughput (token/s)"])
    # PD: prefill 0.5.16+ (#bootstrap-req, #optimistic-req, #replay-token), decode 0.5.21+ (#host-receive-req)
    f.batch_line(f.prefix(" DP0 TP0", dp=0, tp=0), "Prefill batch, ",
                 PREFILL_044 + ["#pending-token", "#replay-token", "#bootstrap-req", "#inflight-req",
                                "#optimistic-req", "waiting-image-req", "cuda graph", "input throughput (token/s)"])
    f.batch_line(f.prefix(" DP1 TP0", dp=1, tp=0), "Decode batch, ",
                 ["#running-req", "#token", "token usage", "pre-allocated usage", "#prealloc-req", "#transfer-req",
                  "#host-receive-req", "#retracted-req", "waiting-image-req", "cuda graph",
                  "gen throughput (token/s)", "#queue-req"])
    # MFU and occupancy tails
    f.batch_line(f.prefix(" TP0", tp=0), "Decode batch, ", DECODE_GRAPH,
                 tail=["est. decode TFLOPS/s (per GPU)", "est. read BW (GB/s per GPU)", "est. write BW (GB/s per GPU)"])
    f.batch_line(f.prefix(" TP0", tp=0), "Prefill batch, ",
                 PREFILL_044 + ["#pending-token", "cuda graph", "input throughput (token/s)"],
                 tail=["est. prefill TFLOPS/s (per GPU)", "fwd occupancy", "fwd+idle occupancy"])
    f.batch_line(f.prefix(" TP0", tp=0), "Decode batch, ", DECODE_GRAPH, tail=["fwd occupancy"])
    # retraction 0.5.11+ hybrid SSM
    p = f.prefix(" TP0", tp=0)
    n, g, mg, a, b = (f.rng.randrange(1, 50), f.rng.randrange(1, 10 ** 5), f.rng.randrange(1, 9),
                      f.rng.uniform(0.1, 1), f.rng.uniform(0.1, 1))
    f.one(p, f"KV cache pool is full. Retract requests. #retracted_reqs: {n}, #new_tokens_gained: {g}, "
             f"#mamba_num_gained: {mg}, #new_token_ratio: {a:.4f} -> {b:.4f}", "retraction",
          {"variant": "kv_cache_full", "testing": False, "retracted_reqs": n, "new_tokens_gained": g,
           "mamba_num_gained": mg, "new_token_ratio_before": float(f"{a:.4f}"),
           "new_token_ratio_after": float(f"{b:.4f}")})
    # startup lines
    v = [f.rng.randrange(1000, 10 ** 6) for _ in range(5)]
    t, b = f.mem()
    f.one(f.prefix(" TP0", tp=0), f"max_total_num_tokens={v[0]}, chunked_prefill_size={v[1]}, "
                                  f"max_prefill_tokens={v[2]}, max_running_requests={v[3]}, context_len={v[4]}, "
                                  f"available_gpu_mem={t} GB", "memory_config",
          {"max_total_num_tokens": v[0], "chunked_prefill_size": v[1], "max_prefill_tokens": v[2],
           "max_running_requests": v[3], "context_len": v[4], "available_gpu_mem_bytes": b})
    e = f"{f.rng.uniform(1, 90):.2f}"
    t1, b1 = f.mem()
    t2, b2 = f.mem()
    f.one(f.prefix(" TP0", tp=0), f"Load weight end. elapsed={e} s, type=LlamaForCausalLM, dtype=torch.bfloat16, "
                                  f"avail mem={t1} GB, mem usage={t2} GB.", "load_weight",          # 0.5.9
          {"avail_mem_bytes": b1, "mem_usage_bytes": b2, "phase": "end", "model_type": "LlamaForCausalLM",
           "dtype": "torch.bfloat16", "elapsed_seconds": float(e)})
    f.one(f.prefix(" TP1", tp=1), f"Load weight end. elapsed={e} s, type=DeepseekV3ForCausalLM, quant=fp8, fmt=e4m3, "
                                  f"avail mem={t1} GB, mem usage={t2} GB.", "load_weight",          # 0.5.10+
          {"avail_mem_bytes": b1, "mem_usage_bytes": b2, "phase": "end", "model_type": "DeepseekV3ForCausalLM",
           "quantization": "fp8", "elapsed_seconds": float(e)})
    f.one(f.prefix(" TP0", tp=0), f"Load weight end. Committed real weights after CUDA graph capture in {e} s "
                                  "(capture overlap window 1.00 s, startup overlap total 2.00 s)", "load_weight",
          {"phase": "end", "elapsed_seconds": float(e)})                                           # 0.5.18+
    n = f.rng.randrange(10 ** 4, 10 ** 7)
    f.one(f.prefix(" TP0", tp=0), f"KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: {n}, K size: {t1} GB, "
                                  f"V size: {t1} GB", "kv_cache_allocated",                         # 0.5.13+
          {"cache": "KV Cache", "num_tokens": n, "k_size_bytes": b1, "v_size_bytes": b1, "dtype": "torch.float8_e4m3fn"})
    f.one(f.prefix(" TP0", tp=0), f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {n}, KV size: {t2} GB",
          "kv_cache_allocated", {"cache": "KV Cache", "num_tokens": n, "kv_size_bytes": b2, "dtype": "torch.bfloat16"})
    f.one(f.prefix(" TP0", tp=0), f"draft KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: {n}, "
                                  f"KV size: {t2} GB", "kv_cache_allocated",                        # 0.5.17+
          {"cache": "draft KV Cache", "num_tokens": n, "kv_size_bytes": b2, "dtype": "torch.bfloat16"})
    f.one(f.prefix(" TP0", tp=0), f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
                                  f"avail mem={t1} GB", "graph_capture",                            # 0.5.22+
          {"avail_mem_bytes": b1, "phase": "begin", "target": "target decode CUDA graph"})
    f.one(f.prefix(" TP0", tp=0), f"Capture target decode CUDA graph end. bs=[1, 2, 4, 8], elapsed={e} s, "
                                  f"mem usage={t2} GB, avail mem={t1} GB.", "graph_capture",
          {"avail_mem_bytes": b1, "mem_usage_bytes": b2, "phase": "end", "target": "target decode CUDA graph",
           "elapsed_seconds": float(e)})
    f.one(f.prefix(" TP0", tp=0), f"Capture piecewise CUDA graph end. Time elapsed: {e} s. mem usage={t2} GB. "
                                  f"avail mem={t1} GB.", "graph_capture",
          {"avail_mem_bytes": b1, "mem_usage_bytes": b2, "phase": "end", "target": "piecewise CUDA graph",
           "elapsed_seconds": float(e)})
    # server_args dict form (0.5.19+)
    port = f.rng.randrange(20000, 40000)
    f.one(f.prefix(), "server_args={'model_path': 'Qwen/Qwen3-8B', 'tp_size': 2, 'port': " + str(port) + ", "
                      "'mem_fraction_static': 0.9, 'cuda_graph_bs': [1, 2, 4], 'chat_template': 'x, y', "
                      "'json_model_override_args': '{\"a\": 1}', 'max_running_requests': None, "
                      "'disable_cuda_graph': False}", "server_args",
          {"model_path": "Qwen/Qwen3-8B", "tp_size": 2, "port": port, "mem_fraction_static": 0.9,
           "cuda_graph_bs": [1, 2, 4], "chat_template": "x, y", "json_model_override_args": '{"a": 1}',
           "max_running_requests": None, "disable_cuda_graph": False})
    f.one(f.prefix(), "The server is fired up and ready to roll!", "server_ready", {})
    port = f.rng.randrange(1024, 65535)
    f.one(f.prefix(), f'INFO:     127.0.0.1:{port} - "GET /metrics HTTP/1.1" 200 OK', "http_access",
          {"client": f"127.0.0.1:{port}", "method": "GET", "path": "/metrics", "status": 200})
    # errors: CUDA OOM tracebacks with the phase from the frames (prefill / decode / startup), old torch text
    for funcs, phase in ((["event_loop_overlap", "run_batch", "forward_batch_generation", "forward_extend"], "prefill"),
                         (["event_loop_normal", "run_batch", "forward_decode"], "decode"),
                         (["__init__", "init_device_graphs", "capture"], "startup")):
        p = f.prefix(" TP1", tp=1)
        amount = f"{f.rng.uniform(1, 900):.2f}"
        unit = f.rng.choice(("MiB", "GiB"))
        last = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {amount} {unit}. GPU 1 has a total "
                "capacity of 79.19 GiB of which 1.01 GiB is free. Including non-PyTorch memory, this process has "
                "78.17 GiB memory in use.")
        lines = [p.text + "Scheduler hit an exception: Traceback (most recent call last):"] \
            + traceback_lines(funcs, last)
        f.add(lines, ("scheduler_exception", {"component": "Scheduler", "message": last}),
              ("oom", {"phase": phase, "source": "cuda",
                       "requested_bytes": int(float(amount) * (GIB if unit == "GiB" else 1 << 20))}, len(lines) - 1),
              at=p)
    p = f.prefix(" TP0", tp=0)
    last = "RuntimeError: CUDA error: out of memory"
    lines = [p.text + "Scheduler hit an exception: Traceback (most recent call last):"] \
        + traceback_lines(["forward_decode"], last)
    f.add(lines, ("scheduler_exception", {"component": "Scheduler", "message": last}),
          ("oom", {"phase": "decode", "source": "cuda"}, len(lines) - 1), at=p)
    p = f.prefix(" TP0", tp=0)
    last = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total "
            "capacity; 6.10 GiB already allocated)")
    lines = [p.text + "TpModelWorkerClient hit an exception: Traceback (most recent call last):"] \
        + traceback_lines(["forward_thread_func_", "forward_batch_generation"], last)
    f.add(lines, ("scheduler_exception", {"component": "TpModelWorkerClient", "message": last}),
          ("oom", {"phase": "unknown", "source": "cuda", "requested_bytes": 36 << 20}, len(lines) - 1), at=p)
    # 0.5.23 KV OOM (decode), then its RuntimeError in the traceback (one oom, not two)
    p = f.prefix(" TP0", tp=0)
    req, av = f.rng.randrange(1, 5000), f.rng.randrange(0, 5000)
    f.add([p.text + "Decode out of memory. Try to lower your batch size.", f"Try to allocate {req} tokens.",
           f"Available tokens: {av} (available_size={av} + evictable_size=0)", ""],
          ("oom", {"phase": "decode", "source": "kv_pool", "requested_tokens": req, "available_tokens": av}), at=p)
    p = f.prefix(" TP0", tp=0)
    tail = f"Available tokens: {av} (available_size={av} + evictable_size=0)"
    f.add([p.text + "Scheduler hit an exception: Traceback (most recent call last):"]
          + traceback_lines(["event_loop_overlap", "update_running_batch", "alloc_for_decode"],
                            "RuntimeError: Decode out of memory. Try to lower your batch size.")
          + [f"Try to allocate {req} tokens.", tail, ""],
          ("scheduler_exception", {"component": "Scheduler",
                                   "message": "RuntimeError: Decode out of memory. Try to lower your batch size."}),
          at=p)
    for comp in ("DetokenizerManager", "DataParallelController", "TokenizerManager"):
        p = f.prefix()
        f.add([p.text + f"{comp} hit an exception: Traceback (most recent call last):"]
              + traceback_lines(["event_loop"], "KeyError: 'x'"),
              ("scheduler_exception", {"component": comp, "message": "KeyError: 'x'"}), at=p)
    f.one(f.prefix(), "SIGQUIT received. signum=3, frame=<frame at 0x7f, file 'a.py', line 1, code main>. "
                      "It usually means one child failed.", "sigquit", {})
    name, pid, code = f.rng.choice(("scheduler_0", "detokenizer")), f.rng.randrange(100, 99999), f.rng.choice((-9, 1))
    f.one(f.prefix(), f"Subprocess {name} (pid={pid}) crashed with exit code {code}. Triggering SIGQUIT for cleanup...",
          "subprocess_crash", {"name": name, "pid": pid, "exit_code": code})
    msg = ("Health check failed. Server couldn't get a response from detokenizer for last 20 seconds. "
           "tic start time: 17:16:43. last_heartbeat time: 17:10:02")
    f.one(f.prefix(), msg, "health_check_failed", {"message": msg})
    msg = "Encoder health check timed out after 20s"
    f.one(f.prefix(" encode_server"), msg, "health_check_failed", {"message": msg})
    msg = "Initialization failed. warmup error: Traceback (most recent call last):"
    f.one(f.prefix(), msg, "init_failed", {"message": msg})
    d = f"{f.rng.uniform(0.1, 9):.4f}"
    f.one(f.prefix(" TP0", tp=0), f"LONG GARBAGE COLLECTION DETECTED | Generation 2 | Duration: {d}s | # Objects: "
                                  "gen0=1, gen1=2, gen2=3 | This may cause latency jitter.", "gc_warning",
          {"duration_seconds": float(d)})
    p = f.prefix()
    f.one(p, "Receive: obj=GenerateReqInput(rid='0123abcd', text='hi, there')", "request_log",
          {"phase": "receive", "rid": "0123abcd"})
    f.one(f.prefix(" encode_dp_worker[3]", dp=3), "Decode batch, " + "#running-req: 1, #token: 2, token usage: 0.00, "
          "cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0", "decode_batch",
          {"running_req": 1, "num_tokens": 2, "token_usage": 0.0, "cuda_graph": True, "graph_backend": "cuda",
           "gen_throughput": 1.0, "queue_req": 0})
    # NCCL watchdog (PyTorch, glog prefix; no SGLang time)
    nccl = ("[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=600000) "
            "ran for 600081 milliseconds before timing out.")
    f.add(nccl, ("nccl_timeout", {"message": nccl}))
    return f


def fam_wrapped() -> Family:
    """Foreign prefixes added by Ray, docker compose, syslog/journald and Slurm: time and rank still SGLang's."""
    f = Family("wrapped", 7)
    for wrap in ("(SchedulerActor pid=123, ip=10.0.0.1) ", "sglang-1  | ",
                 "Aug 11 17:17:03 gpu-node-7 python[12345]: ", "0: ", "12: "):
        p = f.prefix(" DP1 TP3", dp=1, tp=3)
        msg, fields = f.batch("Decode batch, ", DECODE_GRAPH)
        f.add(wrap + p.text + msg, ("decode_batch", fields), at=p)
        p = f.prefix()
        f.add(wrap + p.text + "The server is fired up and ready to roll!", ("server_ready", {}), at=p)
    return f


FAMILIES = {f.name: f for f in (fam_030_033(), fam_034_046(), fam_047_053(), fam_054(), fam_055_058(),
                                fam_059_0523(), fam_wrapped())}
EXPECTED_FAMILY = {"0.3.0-0.3.3": "0.3.0-0.3.3", "0.3.4-0.4.6": "0.3.4-0.4.6", "0.4.7-0.5.3": "0.4.7-0.5.3",
                   "0.5.4": "0.5.4-0.5.8", "0.5.5-0.5.8": "0.5.5-0.5.8", "0.5.9-0.5.23": "0.5.9-0.5.23",
                   "wrapped": "0.5.9-0.5.23"}


def fixture_text(fam: Family) -> str:
    return "\n".join(fam.lines) + "\n"


def as_dict(ev) -> dict:
    return {"line": ev.line, "kind": ev.kind, "time": ev.time, "ts": ev.ts, "rank": ev.rank, "fields": ev.fields}


def _check(got: list[dict], want: list[dict]) -> None:
    assert [(e["line"], e["kind"]) for e in got] == [(e["line"], e["kind"]) for e in want]
    for g, w in zip(got, want):
        assert g["fields"] == w["fields"], (w["line"], w["kind"])
        for k, v in g["fields"].items():   # bool vs int vs float must match too (True == 1 in Python)
            assert type(v) is type(w["fields"][k]), (w["line"], k, v)
        assert g["time"] == w["time"] and g["rank"] == w["rank"], w["line"]
        if w["ts"] is None:
            assert g["ts"] is None
        else:
            assert g["ts"] == pytest.approx(w["ts"], abs=1e-6), w["line"]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_lines(name):
    fam = FAMILIES[name]
    p = Parser("x")
    got = []
    for i, line in enumerate(fam.lines, 1):
        got += p.feed(line, i)
    got += p.flush()
    _check([as_dict(e) for e in got], fam.events)
    assert not p.unparsed.get("unknown_message") and not p.unparsed.get("malformed"), p.unparsed
    assert p.recognised == len(fam.events) == sum(p.kinds.values())
    assert p.format_family == EXPECTED_FAMILY[name]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_fixture_file(name):
    """The committed fixture is what this module builds, and the real pipeline parses it the same way."""
    fam = FAMILIES[name]
    path = FIXTURES / f"{name}.log"
    assert path.read_text() == fixture_text(fam), "stale fixture: run scripts/refresh-parser-fixtures"
    want = json.loads((FIXTURES / f"{name}.expected.json").read_text())
    assert want == json.loads(json.dumps(fam.events))
    sp = SourceParser(str(path))
    got = [as_dict(e) for e in iter_file_events(str(path), stats=sp)]
    _check(got, fam.events)
    assert all(e.source == str(path) for e in iter_file_events(str(path)))


def test_every_contract_key_is_exercised():
    """Each printed batch key of the reference appears in some golden line."""
    text = "\n".join(line for fam in FAMILIES.values() for line in fam.lines)
    missing = [k for k in NAME if f"{k}: " not in text]
    assert not missing


def fixture_files() -> dict[Path, str]:
    """The committed fixtures of every family, as this module builds them (scripts/refresh-parser-fixtures)."""
    files = {}
    for name, fam in FAMILIES.items():
        files[FIXTURES / f"{name}.log"] = fixture_text(fam)
        files[FIXTURES / f"{name}.expected.json"] = json.dumps(fam.events, indent=1) + "\n"
    return files


def test_the_refresh_script_finds_every_fixture_fresh():
    """scripts/refresh-parser-fixtures --check, run as a user runs it, covers both fixture sets and says fresh."""
    import subprocess
    import sys
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "scripts" / "refresh-parser-fixtures"), "--check"],
                          capture_output=True, text=True, cwd=root, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = len(list(FIXTURES.glob("*"))) + len(list((FIXTURES.parent / "layouts").glob("*.expected.json")))
    assert proc.stdout.strip() == f"{n} fixtures fresh"
