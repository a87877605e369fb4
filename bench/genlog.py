#!/usr/bin/env python3
"""Generate a realistic SGLang 0.5.x server log for benchmarks.

    python bench/genlog.py N OUT [--seed S] [--tp 4] [--start "2025-08-11 17:10:00"] [--profile realistic]
                                 [--leaders-only]

Writes exactly N lines to OUT ("-" for stdout). Deterministic for a given seed and arguments.

What the log looks like (SGLang 0.5.9 formats, tp=4 with --enable-metrics-for-all-schedulers so every TP rank
prints its batch lines, --log-requests on, see /work/shared/reference/sglang-formats.md §1-§3, §7, §8):

* a start-up block: server_args=ServerArgs(...), per-rank model-runner lines, tqdm shard progress (raw lines),
  the capacity line (TP0), uvicorn start lines, warm-up request, "The server is fired up and ready to roll!";
* steady state, timestamps advancing ~0.6 s per decode-log interval: one "Decode batch, ..." line per rank
  (the bulk of the file), "Prefill batch, ..." lines when requests arrive, "KV cache pool is full. Retract
  requests. ..." warnings (every rank) when the KV pool runs full, uvicorn access lines (POST /generate,
  GET /metrics every 15 s, GET /health every 10 s), request log lines "Receive: obj=GenerateReqInput(...)" and
  "Finish: obj=..., out={...}" (a few hundred characters each);
* two crashes (around 35 % and 70 % of the file): a "Scheduler hit an exception: Traceback ..." with a CUDA OOM,
  and a KV-pool "Decode out of memory. Try to lower your batch size." error followed by a traceback; each is
  followed by the parent's SIGQUIT line, a restart gap and a new start-up block.

`--profile realistic` (with --leaders-only, the kind of log the held-out measurement reads, see
bench/README.md): ranks tagged
"DP0 TP0" .. "DP1 TP3" (DP attention), about 40 % more requests (so more request-log and access lines, half of
them to /v1/chat/completions), 1 % of requests failing with "Error in request: ..." and its traceback (raw
lines) and a 400 access line, and now and then a "LONG GARBAGE COLLECTION DETECTED" warning or a library's
UserWarning (two raw lines). The default profile ("bench") writes the same bytes as before it existed.

`--leaders-only`: batch lines from each DP group's first TP rank only, as SGLang prints them without
--enable-metrics-for-all-schedulers (its default: the scheduler logs them where `attn_tp_rank == 0`); the
other ranks still print their start-up and retraction lines. Without it every TP rank prints them (4 copies of
each batch line at tp=4), which a default server's log does not hold.

Fast: about 1M lines in a few seconds (lines are built with f-strings, timestamps are cached per second).
The helpers `decode_line`, `stamp` are reused by sidecar_bench.py.
"""
from __future__ import annotations

import argparse
import math
import random
import re
import sys
import time
from datetime import datetime, timezone

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
MAX_TOTAL_TOKENS = 1_048_576
MAX_RUNNING = 256
SITE = "/usr/local/lib/python3.12/dist-packages"

PROMPTS = (
    "Summarize the following support ticket in two sentences: the customer reports that the export job",
    "You are a helpful assistant. Translate the text below into French, keeping the formatting intact:",
    "Write a Python function that parses an ISO-8601 duration string and returns the number of seconds",
    "Given the conversation so far, answer the user's last question about their invoice and refund",
    "Extract all company names, dates and amounts from this contract clause and return them as JSON:",
    "Explain the difference between a mutex and a semaphore to a junior engineer, with an example",
)
OUTPUTS = (
    " The customer cannot export reports since the last update; the job fails with a timeout after",
    " Voici le texte traduit en français, avec la mise en forme d'origine conservée : Bonjour à tous",
    "\\n\\ndef parse_duration(text: str) -> float:\\n    import re\\n    m = re.fullmatch(r'P(?:(\\\\d+)D)?",
    " Your refund of $42.17 was issued on March 3 and should appear on your statement within 5-7 days",
    ' {"companies": ["Acme Corp", "Globex Ltd"], "dates": ["2024-01-15"], "amounts": ["$1,200,000"]}',
    " A mutex is a lock with an owner: only the thread that locked it may unlock it. A semaphore is a",
)


def stamp(sec: int) -> str:
    """The SGLang/uvicorn date part for an epoch second: '2025-08-11 17:17:03' (read as UTC)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(sec))


def decode_line(ts: str, rank: str, running: int, tokens: int, usage: float, gen: float, queue: int) -> str:
    """One 0.5.9+ decode batch line (rank like ' TP0' or '')."""
    return (f"[{ts}{rank}] Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
            f"cuda graph: True, gen throughput (token/s): {gen:.2f}, #queue-req: {queue}")


def _server_args(tp: int, port: int, seed: int) -> str:
    return (
        f"server_args=ServerArgs(model_path='{MODEL}', tokenizer_path='{MODEL}', tokenizer_mode='auto', "
        "skip_tokenizer_init=False, load_format='auto', model_loader_extra_config='{}', trust_remote_code=False, "
        "context_length=None, is_embedding=False, enable_multimodal=None, revision=None, model_impl='auto', "
        f"host='0.0.0.0', port={port}, skip_server_warmup=False, warmups=None, nccl_port=None, "
        "dtype='auto', quantization=None, quantization_param_path=None, kv_cache_dtype='auto', "
        "mem_fraction_static=0.871, max_running_requests=None, max_queued_requests=None, "
        "max_total_tokens=None, chunked_prefill_size=8192, max_prefill_tokens=16384, schedule_policy='fcfs', "
        "schedule_conservativeness=1.0, page_size=1, hybrid_kvcache_ratio=None, swa_full_tokens_ratio=0.8, "
        f"disable_hybrid_swa_memory=False, device='cuda', tp_size={tp}, pp_size=1, max_micro_batch_size=None, "
        f"stream_interval=1, stream_output=False, random_seed={seed}, constrained_json_whitespace_pattern=None, "
        "watchdog_timeout=300, dist_timeout=None, download_dir=None, base_gpu_id=0, gpu_id_step=1, "
        "sleep_on_idle=False, log_level='info', log_level_http=None, log_requests=True, log_requests_level=2, "
        "crash_dump_folder=None, show_time_cost=False, enable_metrics=True, "
        "enable_metrics_for_all_schedulers=True, bucket_time_to_first_token=None, "
        "bucket_inter_token_latency=None, bucket_e2e_request_latency=None, collect_tokens_histogram=False, "
        "decode_log_interval=40, enable_request_time_stats_logging=False, kv_events_config=None, "
        "api_key=None, served_model_name='" + MODEL + "', weight_version='default', chat_template=None, "
        "completion_template=None, file_storage_path='sglang_storage', enable_cache_report=False, "
        "reasoning_parser=None, tool_call_parser=None, dp_size=1, load_balance_method='round_robin', "
        "dist_init_addr=None, nnodes=1, node_rank=0, json_model_override_args='{}', preferred_sampling_params=None, "
        "enable_lora=None, max_lora_rank=None, lora_paths=None, attention_backend=None, sampling_backend='flashinfer', "
        "grammar_backend='xgrammar', speculative_algorithm=None, ep_size=1, enable_dp_attention=False, "
        "cuda_graph_max_bs=256, cuda_graph_bs=None, disable_cuda_graph=False, disable_radix_cache=False, "
        "enable_torch_compile=False, torch_compile_max_bs=32, triton_attention_num_kv_splits=8, "
        "disaggregation_mode='null', enable_memory_saver=False, allow_auto_truncate=False)"
    )


class _Gen:
    """The simulation; `lines` is appended to, `t` is simulated epoch seconds."""

    def __init__(self, rng: random.Random, t0: float, tp: int, profile: str = "bench", leaders_only: bool = False):
        self.rng = rng
        self.t = t0
        self.tp = tp
        self.realistic = profile == "realistic"
        if self.realistic:      # DP attention over 2 groups: "DP0 TP0", "DP0 TP1", "DP1 TP2", ...
            self.ranks = [f" DP{r * 2 // tp} TP{r}" for r in range(tp)] if tp > 1 else [""]
        else:
            self.ranks = [f" TP{r}" for r in range(tp)] if tp > 1 else [""]
        # the ranks that print batch lines: each DP group's first ("TP0" when there are no DP tags)
        self.batch_ranks = [r for i, r in enumerate(self.ranks)
                            if not leaders_only or i == 0 or r.split(" TP")[0] != self.ranks[i - 1].split(" TP")[0]]
        self.lines: list[str] = []
        self._sec = -1
        self._ts = ""
        self.port = 30000
        self.next_metrics = t0
        self.next_health = t0
        self.load_phase = rng.random() * 6.28
        self.running = 0
        self.queue = 0
        self.ctx = 1800.0
        self.inflight: list[tuple[float, str, int, int, int]] = []  # (finish_at, rid, prompt_idx, in_tok, out_tok)
        self.client_port = 40000 + rng.randrange(20000)
        self.input_tput = 0.0
        self.fwd_ct = 0

    # -- helpers -------------------------------------------------------------------------------------
    def ts(self) -> str:
        sec = int(self.t)
        if sec != self._sec:
            self._sec = sec
            self._ts = stamp(sec)
        return self._ts

    def cport(self) -> int:
        self.client_port += 1 + self.rng.randrange(7)
        if self.client_port > 65000:
            self.client_port = 33000 + self.rng.randrange(1000)
        return self.client_port

    def access(self, method: str, path: str, status: str = "200 OK") -> None:
        self.lines.append(f'[{self.ts()}] INFO:     127.0.0.1:{self.cport()} - "{method} {path} HTTP/1.1" {status}')

    # -- blocks --------------------------------------------------------------------------------------
    def startup(self, seed: int) -> None:
        rng, L = self.rng, self.lines
        self.port = 30000
        L.append(f"[{self.ts()}] {_server_args(self.tp, self.port, seed)}")
        self.t += 2.5 + rng.random()
        L.append(f"[{self.ts()}] Using default HuggingFace chat template with detected content format: string")
        self.t += 3.0
        for r in self.ranks:
            L.append(f"[{self.ts()}{r}] Init torch distributed begin.")
        self.t += 1.5 + rng.random()
        for r in self.ranks:
            L.append(f"[{self.ts()}{r}] Init torch distributed ends. elapsed={1.2 + rng.random():.2f} s, "
                     f"mem usage={0.4 + rng.random() * 0.3:.2f} GB")
        for r in self.ranks:
            L.append(f"[{self.ts()}{r}] Load weight begin. avail mem={78.0 + rng.random():.2f} GB")
        for i in range(5):
            L.append(f"Loading safetensors checkpoint shards:  {i * 25:3d}% Completed | {i}/4 "
                     f"[00:{i * 3:02d}<00:{(4 - i) * 3:02d},  {0.3 + rng.random() * 0.1:.2f}it/s]")
            self.t += 3.0
        L.append("")
        for r in self.ranks:
            L.append(f"[{self.ts()}{r}] Load weight end. elapsed={12.0 + rng.random() * 2:.2f} s, "
                     f"type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem={74.0 + rng.random():.2f} GB, "
                     f"mem usage={4.0 + rng.random() * 0.2:.2f} GB.")
        self.t += 1.0
        for r in self.ranks:
            L.append(f"[{self.ts()}{r}] KV Cache is allocated. #tokens: {MAX_TOTAL_TOKENS}, K size: 16.00 GB, "
                     "V size: 16.00 GB")
        for r in self.ranks:
            L.append(f"[{self.ts()}{r}] Memory pool end. avail mem={41.0 + rng.random():.2f} GB")
        for r in self.ranks:
            L.append(f"[{self.ts()}{r}] Capture cuda graph begin. This can take up to several minutes. "
                     f"avail mem={40.5 + rng.random():.2f} GB")
        self.t += 10.0 + rng.random() * 5
        for r in self.ranks:
            L.append(f"[{self.ts()}{r}] Capture cuda graph end. Time elapsed: {11.0 + rng.random() * 4:.2f} s. "
                     f"mem usage=0.55 GB. avail mem={39.9 + rng.random():.2f} GB.")
        L.append(f"[{self.ts()}{self.ranks[0]}] max_total_num_tokens={MAX_TOTAL_TOKENS}, chunked_prefill_size=8192, "
                 f"max_prefill_tokens=16384, max_running_requests={MAX_RUNNING}, context_len=131072, "
                 f"available_gpu_mem={39.45 + rng.random() * 0.1:.2f} GB")
        self.t += 1.0
        L.append(f"[{self.ts()}] INFO:     Started server process [{1000 + rng.randrange(60000)}]")
        L.append(f"[{self.ts()}] INFO:     Waiting for application startup.")
        L.append(f"[{self.ts()}] INFO:     Application startup complete.")
        L.append(f"[{self.ts()}] INFO:     Uvicorn running on http://0.0.0.0:{self.port} (Press CTRL+C to quit)")
        self.t += 1.0
        self.access("GET", "/get_model_info")
        for r in self.batch_ranks:
            L.append(f"[{self.ts()}{r}] Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, "
                     "token usage: 0.00, #running-req: 0, #queue-req: 0, input throughput (token/s): 0.00, "
                     "cuda graph: False")
        self.t += 0.5
        self.access("POST", "/generate")
        L.append(f"[{self.ts()}] The server is fired up and ready to roll!")
        self.running = self.queue = 0
        self.inflight.clear()
        self.next_metrics = self.t + 15.0
        self.next_health = self.t + 10.0

    def crash(self, kind: int) -> None:
        rng, L = self.rng, self.lines
        r = self.ranks[rng.randrange(len(self.ranks))]
        gpu = int(r.rsplit("TP", 1)[1]) if r else 0
        if kind == 1:
            L.append(f"[{self.ts()}{r}] Decode out of memory. Try to lower your batch size.")
            L.append("Try to allocate 256 tokens.")
            L.append(f"Available tokens: {rng.randrange(200)} (available_size={rng.randrange(100)} + "
                     "evictable_size=0)")
        L.append(f"[{self.ts()}{r}] Scheduler hit an exception: Traceback (most recent call last):")
        L.append(f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 2874, in run_scheduler_process')
        L.append("    scheduler.event_loop_overlap()")
        L.append(f'  File "{SITE}/torch/utils/_contextlib.py", line 120, in decorate_context')
        L.append("    return func(*args, **kwargs)")
        L.append("           ^^^^^^^^^^^^^^^^^^^^^")
        L.append(f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 1077, in event_loop_overlap')
        L.append("    batch = self.get_next_batch_to_run()")
        if kind == 0:
            L.append(f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 1790, in run_batch')
            L.append("    batch_result = self.model_worker.forward_batch_generation(model_worker_batch)")
            L.append(f'  File "{SITE}/sglang/srt/model_executor/model_runner.py", line 2049, in forward')
            L.append("    output = self._forward_raw(forward_batch, skip_attn_backend_init, pp_proxy_tensors)")
            L.append(f'  File "{SITE}/torch/nn/modules/module.py", line 1773, in _wrapped_call_impl')
            L.append("    return self._call_impl(*args, **kwargs)")
            L.append(f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU {gpu} has a total "
                     "capacity of 79.19 GiB of which 1.01 GiB is free. Process 3212 has 78.17 GiB memory in use. "
                     "Of the allocated memory 74.10 GiB is allocated by PyTorch, and 1.52 GiB is reserved by "
                     "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
                     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
                     "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
        else:
            L.append(f'  File "{SITE}/sglang/srt/managers/scheduler.py", line 1561, in update_running_batch')
            L.append("    batch.prepare_for_decode()")
            L.append(f'  File "{SITE}/sglang/srt/managers/schedule_batch.py", line 1502, in prepare_for_decode')
            L.append("    self.out_cache_loc = alloc_for_decode(self, token_per_req=1)")
            L.append("RuntimeError: Decode out of memory. Try to lower your batch size.")
            L.append("Try to allocate 256 tokens.")
            L.append("Available tokens: 17 (available_size=17 + evictable_size=0)")
        L.append("")
        self.t += 0.2
        L.append(f"[{self.ts()}] Received sigquit from a child process. It usually means the child failed.")
        self.t += 45.0 + rng.random() * 30.0  # restart by the orchestrator

    def request_lines(self, rid: str, pidx: int, max_new: int, finish: tuple | None) -> None:
        temp = (0.0, 0.6, 0.7, 1.0)[pidx % 4]
        head = (f"GenerateReqInput(validation_time={1.1e-05 + pidx * 1e-06:.3e}, received_time={self.t:.6f}, "
                f"rid='{rid}', http_worker_ipc=None, video_data=None, sampling_params={{'max_new_tokens': "
                f"{max_new}, 'temperature': {temp}, 'top_p': 0.95}}, return_logprob=False, logprob_start_len=-1, "
                "top_logprobs_num=0, stream=False, log_metrics=True, return_hidden_states=False, modalities=[], "
                f"lora_path=None, custom_logit_processor=None, text='{PROMPTS[pidx]}...')")
        if finish is None:
            self.lines.append(f"[{self.ts()}] Receive: obj={head}")
        else:
            in_tok, out_tok, cached, lat = finish
            reason = "{'type': 'length', 'length': %d}" % out_tok if out_tok == max_new else \
                "{'type': 'stop', 'matched': 128009}"
            self.lines.append(
                f"[{self.ts()}] Finish: obj={head}, out={{'text': '{OUTPUTS[pidx]}...', 'meta_info': "
                f"{{'id': '{rid}', 'finish_reason': {reason}, 'prompt_tokens': {in_tok}, "
                f"'weight_version': 'default', 'completion_tokens': {out_tok}, 'cached_tokens': {cached}, "
                f"'e2e_latency': {lat:.4f}}}}}")

    def steady_round(self) -> None:
        """One decode-log interval (40 forward passes) on all ranks, plus what happened in between."""
        rng, L, ranks = self.rng, self.lines, self.ranks
        dt = 0.45 + rng.random() * 0.3
        self.t += dt
        self.load_phase += dt * 0.002
        load = 0.65 + 0.45 * math.sin(self.load_phase) + 0.15 * math.sin(self.load_phase * 7.3)
        # arrivals: Receive lines + a prefill batch on every rank
        lam = max(0.05, load) * (0.62 if self.realistic else 0.45)
        n_new = 0
        while rng.random() < lam and n_new < 8:
            n_new += 1
        ts = self.ts()
        if n_new:
            for _ in range(n_new):
                rid = "%032x" % rng.getrandbits(128)
                pidx = rng.randrange(len(PROMPTS))
                max_new = (128, 256, 512, 1024)[rng.randrange(4)]
                out_tok = max_new if rng.random() < 0.4 else 20 + rng.randrange(max_new - 19)
                lat = out_tok / (35.0 + rng.random() * 20)
                self.inflight.append((self.t + lat, rid, pidx, max_new, out_tok))
                self.request_lines(rid, pidx, max_new, None)
            new_tok = n_new * (200 + rng.randrange(1800))
            cached = int(new_tok * rng.random() * 0.6)
            self.input_tput = new_tok / dt
            for r in self.batch_ranks:
                L.append(f"[{ts}{r}] Prefill batch, #new-seq: {n_new}, #new-token: {new_tok}, "
                         f"#cached-token: {cached}, token usage: {self.usage():.2f}, #running-req: {self.running}, "
                         f"#queue-req: {self.queue}, input throughput (token/s): {self.input_tput:.2f}, "
                         f"cuda graph: False")
        # target batch size follows the load, queue builds above the ceiling
        target = load * 190.0 + rng.gauss(0.0, 6.0)
        self.running = max(0, min(MAX_RUNNING, int(self.running + (target - self.running) * 0.2)))
        self.queue = max(0, int((target - MAX_RUNNING * 0.78) * 0.8 + rng.gauss(0.0, 2.0)))
        self.ctx = min(4000.0, max(400.0, self.ctx + (1800.0 - self.ctx) * 0.02 + rng.gauss(0.0, 40.0)))
        usage = self.usage()
        # retraction when the KV pool runs full (every rank logs it)
        if usage > 0.95 and rng.random() < 0.3:
            n = 1 + rng.randrange(3)
            gained = n * (1024 + rng.randrange(3072))
            old = 0.7 + rng.random() * 0.3
            new = min(1.0, old + 0.0002 + rng.random() * 0.05)
            for r in ranks:
                L.append(f"[{ts}{r}] KV cache pool is full. Retract requests. #retracted_reqs: {n}, "
                         f"#new_tokens_gained: {gained}, #new_token_ratio: {old:.4f} -> {new:.4f}")
            self.running = max(0, self.running - n)
            self.queue += n
            usage = self.usage()
        tokens = int(usage * MAX_TOTAL_TOKENS)
        per_req = 62.0 - self.running * 0.1 + rng.random() * 4
        gen = self.running * per_req if self.running else 0.0
        for r in self.batch_ranks:
            L.append(decode_line(ts, r, self.running, tokens, usage, gen * (0.995 + rng.random() * 0.01),
                                 self.queue))
        # finishes: Finish line + access line
        if self.inflight and self.inflight[0][0] <= self.t:
            keep = []
            for item in self.inflight:
                if item[0] <= self.t:
                    fin, rid, pidx, max_new, out_tok = item
                    in_tok = 40 + rng.randrange(1900)
                    if self.realistic and rng.random() < 0.01:
                        self.request_error(rid)
                        continue
                    self.request_lines(rid, pidx, max_new, (in_tok, out_tok, rng.randrange(in_tok),
                                                            fin - self.t + out_tok / 45.0))
                    self.access("POST", "/v1/chat/completions" if self.realistic and pidx % 2 else "/generate")
                else:
                    keep.append(item)
            self.inflight = keep
            self.inflight.sort()
        if self.realistic and rng.random() < 0.002:
            self.warning()
        if self.t >= self.next_metrics:
            self.next_metrics += 15.0
            self.access("GET", "/metrics")
        if self.t >= self.next_health:
            self.next_health += 10.0
            self.access("GET", "/health")

    def request_error(self, rid: str) -> None:
        """A request that failed while the server kept serving: SGLang's "Error in request" with its traceback
        (raw lines), then uvicorn's 500 (realistic profile)."""
        L = self.lines
        L.append(f"[{self.ts()}] Error in request: 'Requested token count exceeds the model's maximum context "
                 f"length of 131072 tokens. You requested a total of 131{self.rng.randrange(100, 999)} tokens'")
        L.append("Traceback (most recent call last):")
        L.append(f'  File "{SITE}/sglang/srt/entrypoints/openai/serving_base.py", line 108, in handle_request')
        L.append("    adapted_request, processed_request = self._convert_to_internal_request(request, raw_request)")
        L.append(f'  File "{SITE}/sglang/srt/managers/tokenizer_manager.py", line 641, in _validate_one_request')
        L.append("    raise ValueError(")
        L.append("ValueError: Requested token count exceeds the model's maximum context length of 131072 tokens.")
        self.access("POST", "/v1/chat/completions", "400 Bad Request")
        self.lines.append(f"[{self.ts()}] Finish: obj=GenerateReqInput(rid='{rid}', ...), out={{'meta_info': "
                          f"{{'id': '{rid}', 'finish_reason': {{'type': 'abort', 'message': 'context length'}}}}}}")

    def warning(self) -> None:
        """Warnings a busy server prints now and then (realistic profile)."""
        r = self.ranks[self.rng.randrange(len(self.ranks))]
        if self.rng.random() < 0.5:
            self.lines.append(
                f"[{self.ts()}{r}] LONG GARBAGE COLLECTION DETECTED | Generation 2 | Duration: "
                f"{0.2 + self.rng.random():.4f}s | # Objects: gen0=312, gen1=45, gen2=1290344 | This may cause "
                "latency jitter. Consider calling the freeze_gc API after sending a few warmup requests.")
        else:
            self.lines.append(f"{SITE}/torch/distributed/distributed_c10d.py:4631: UserWarning: No device id is "
                              "provided via `init_process_group` or `barrier `. Using the current device set by "
                              "the user.")
            self.lines.append("  warnings.warn(  # warn only once")

    def usage(self) -> float:
        return min(0.99, self.running * self.ctx / MAX_TOTAL_TOKENS * 2.2)


def generate(n: int, seed: int = 1, tp: int = 4, start: str = "2025-08-11 17:10:00", profile: str = "bench",
             leaders_only: bool = False):
    """Yield chunks (lists of str without newline) totalling exactly n lines."""
    rng = random.Random(seed)
    t0 = datetime.strptime(start, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    g = _Gen(rng, t0, tp, profile, leaders_only)
    crash_at = [int(n * 0.35), int(n * 0.70)]
    emitted = 0
    g.startup(seed)
    while emitted < n:
        while len(g.lines) < 20000 and emitted + len(g.lines) < n:
            if crash_at and emitted + len(g.lines) >= crash_at[0]:
                crash_at.pop(0)
                g.crash(1 - len(crash_at))
                g.startup(seed)
            g.steady_round()
        chunk = g.lines
        g.lines = []
        if emitted + len(chunk) > n:
            chunk = chunk[: n - emitted]
        emitted += len(chunk)
        yield chunk


# A custom logging config's layout (docs/log-events.md, "Custom log formats"): SGLang's "[date time RANKS] "
# prefix replaced by "date time,mmm LEVEL pid [RANKS file:line] ", as SGLANG_LOGGING_CONFIG_PATH setups print it.
_SGLANG_PREFIX = re.compile(r"^\[([0-9-]{10} [0-9:]{8})((?: [A-Z]+[0-9]+)*)\] ", re.M)


def custom_layout(text: str) -> str:
    """The same lines with a custom logging config's prefix instead of SGLang's own."""
    return _SGLANG_PREFIX.sub(lambda m: f"{m.group(1)},000 INFO 4242 [{m.group(2).strip() or 'main'} "
                                        f"scheduler.py:1234] ", text)


def write(n: int, out: str, seed: int = 1, tp: int = 4, start: str = "2025-08-11 17:10:00",
          layout: str = "sglang", profile: str = "bench", leaders_only: bool = False) -> int:
    """Write the log (`layout` "custom": with custom_layout's prefix; `profile` "realistic": see the module's
    docstring); returns the number of bytes written."""
    size = 0
    fh = sys.stdout if out == "-" else open(out, "w", encoding="utf-8", newline="\n")
    try:
        for chunk in generate(n, seed, tp, start, profile, leaders_only):
            if chunk and layout == "custom":
                chunk = custom_layout("\n".join(chunk)).split("\n")
            if chunk:
                text = "\n".join(chunk) + "\n"
                fh.write(text)
                size += len(text.encode("utf-8")) if not text.isascii() else len(text)
    finally:
        if fh is not sys.stdout:
            fh.close()
    return size


def add_log_arguments(ap: argparse.ArgumentParser, lines: int) -> None:
    """The generated log's options of the benchmarks that make one (instructions.py, evaluations.py)."""
    ap.add_argument("--lines", type=int, default=lines)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tp", type=int, default=4,
                    help="ranks that print batch lines (genlog.py --tp; 1: a single-GPU server, every batch "
                         "line a sample)")
    ap.add_argument("--leaders-only", action="store_true",
                    help="batch lines from each DP group's first TP rank only (genlog.py --leaders-only: "
                         "SGLang's default)")
    ap.add_argument("--layout", choices=("sglang", "custom"), default="sglang",
                    help="custom: the generated log behind a custom logging config's prefix (genlog.py --layout)")
    ap.add_argument("--profile", choices=("bench", "realistic"), default="bench",
                    help="realistic: what a busy server writes beside batch lines (genlog.py --profile; with "
                         "--leaders-only, the held-out measurement's kind of log)")


def write_log(a: argparse.Namespace, out: str) -> int:
    """`write` of the log add_log_arguments' options describe."""
    return write(a.lines, out, a.seed, a.tp, layout=a.layout, profile=a.profile, leaders_only=a.leaders_only)


def log_description(a: argparse.Namespace) -> str:
    return (f"genlog.py {a.lines} lines, seed {a.seed}, layout {a.layout}, profile {a.profile}, tp {a.tp}"
            + (", leaders only" if a.leaders_only else ""))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, help="number of lines")
    ap.add_argument("out", help="output file, - for stdout")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tp", type=int, default=4, help="tensor-parallel size (ranks that print batch lines)")
    ap.add_argument("--start", default="2025-08-11 17:10:00", help="first timestamp (UTC)")
    ap.add_argument("--layout", choices=("sglang", "custom"), default="sglang",
                    help="custom: a custom logging config's prefix instead of SGLang's own")
    ap.add_argument("--profile", choices=("bench", "realistic"), default="bench",
                    help="realistic: DP x TP rank tags, more request logs, handled request errors with "
                         "tracebacks, warnings (with --leaders-only, the held-out measurement's kind of log)")
    ap.add_argument("--leaders-only", action="store_true",
                    help="batch lines from each DP group's first TP rank only (SGLang's default; without it every "
                         "TP rank prints them, as with --enable-metrics-for-all-schedulers)")
    a = ap.parse_args(argv)
    t = time.perf_counter()
    size = write(a.n, a.out, a.seed, a.tp, a.start, a.layout, a.profile, a.leaders_only)
    if a.out != "-":
        print(f"wrote {a.n} lines, {size / 1e6:.1f} MB to {a.out} in {time.perf_counter() - t:.2f} s",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
