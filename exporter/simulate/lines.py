"""SGLang-shaped log lines of one format family for one tp x dp layout: batch lines, retractions, the start-up
block, OOM records, crashes and watchdog timeouts."""
from __future__ import annotations

from datetime import datetime

from exporter.simulate.scenario import DEFAULT_FORMAT, FAMILIES

GPU_TOTAL_GIB = 79.19
GPU_AVAIL_AT_BOOT = 79.10
WEIGHTS_GIB = 14.99         # Llama-3.1-8B bf16, split over TP ranks
GRAPH_GIB = 0.55            # CUDA graph buffers
KV_BYTES_PER_TOKEN = 131072  # Llama-3.1-8B: 32 layers x 8 kv heads x 128 dims x (K,V) x bf16
GIB = 1024 ** 3
# the last line of the traceback a `crash` event prints (an NCCL error in the scheduler, then sigquit)
CRASH_CAUSE = ("RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, unhandled "
               "system error (run with NCCL_DEBUG=INFO for details)")
# what a failing request logs (OpenAI-compatible endpoints' handler, 0.4.9+, then answered 500)
REQUEST_ERROR_CAUSE = "No user query found in messages."
FAILING_PATH = "/v1/chat/completions"


def _fmt_gb(x: float) -> str:
    return f"{x:.2f} GB"


class LineWriter:
    """Formats SGLang log lines of one format family for one tp x dp layout."""

    def __init__(self, family: str = DEFAULT_FORMAT, tp: int = 1, dp: int = 1):
        if family not in FAMILIES:
            raise ValueError(f"unknown format family {family!r} (known: {', '.join(FAMILIES)})")
        self.family, self.tp, self.dp = family, tp, dp

    # ---- prefixes
    def prefix(self, when: datetime, dp_rank: int | None = None, tp_rank: int | None = None) -> str:
        """`[date time RANKS] `; dp_rank/tp_rank None = a main-process line (no rank tag)."""
        stamp = when.strftime("%H:%M:%S" if self.family == "0.3" else "%Y-%m-%d %H:%M:%S")
        tags = ""
        if tp_rank is not None:
            if self.dp > 1:
                tags += f" DP{dp_rank or 0}"
            if self.tp > 1 or self.family == "0.3" or self.dp > 1:
                tags += f" TP{tp_rank}"
        return f"[{stamp}{tags}] "

    def ranks(self):
        """(dp_rank, tp_rank) of every scheduler process."""
        return [(d, t) for d in range(self.dp) for t in range(self.tp)]

    # ---- periodic lines
    def decode(self, when, *, running, num_tokens, token_usage, gen_throughput, queue, cuda_graph=True,
               dp_rank=0, tp_rank=0) -> str:
        graph = "" if self.family == "0.3" else f"cuda graph: {bool(cuda_graph)}, "
        body = (f"#running-req: {running}, #token: {num_tokens}, token usage: {token_usage:.2f}, {graph}"
                f"gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queue}")
        if self.family in ("0.3", "0.4.7"):
            head, tail = "Decode batch. ", ""
        elif self.family == "0.5.8":
            head, tail = "Decode batch, ", ", "
        else:
            head, tail = "Decode batch, ", ""
        return self.prefix(when, dp_rank, tp_rank) + head + body + tail

    def prefill(self, when, *, new_seq, new_token, cached_token, token_usage, running, queue,
                input_throughput=0.0, dp_rank=0, tp_rank=0) -> str:
        p = self.prefix(when, dp_rank, tp_rank)
        base = f"#new-seq: {new_seq}, #new-token: {new_token}, #cached-token: {cached_token}, "
        if self.family == "0.3":
            rate = 100.0 * cached_token / max(1, new_token + cached_token)
            return p + f"Prefill batch. {base}cache hit rate: {rate:.2f}%, #running-req: {running}, #queue-req: {queue}"
        tail = f"token usage: {token_usage:.2f}, #running-req: {running}, #queue-req: {queue}"
        if self.family == "0.4.7":
            return p + f"Prefill batch. {base}{tail}"
        if self.family == "0.5.8":
            return p + f"Prefill batch, {base}{tail}, "
        return p + (f"Prefill batch, {base}{tail}, #pending-token: 0, cuda graph: False, "
                    f"input throughput (token/s): {input_throughput:.2f}")

    def retraction(self, when, *, retracted, ratio_before, ratio_after, tokens_gained=None,
                   dp_rank=0, tp_rank=0) -> str:
        p = self.prefix(when, dp_rank, tp_rank)
        ratio = f"#new_token_ratio: {ratio_before:.4f} -> {ratio_after:.4f}"
        if self.family == "0.3":
            return p + f"Decode out of memory happened. #retracted_reqs: {retracted}, {ratio}"
        if self.family == "0.4.7":
            return p + f"KV cache pool is full. Retract requests. #retracted_reqs: {retracted}, {ratio}"
        gained = tokens_gained if tokens_gained is not None else 2048 * retracted
        return p + (f"KV cache pool is full. Retract requests. #retracted_reqs: {retracted}, "
                    f"#new_tokens_gained: {gained}, {ratio}")

    def access(self, when, *, port, method="POST", path="/generate", status=200) -> str:
        reason = {200: "OK", 400: "Bad Request", 500: "Internal Server Error", 503: "Service Unavailable"}
        return self.prefix(when) + (f'INFO:     127.0.0.1:{port} - "{method} {path} HTTP/1.1" {status} '
                                    f"{reason.get(status, '')}").rstrip()

    def request_error(self, when, *, port, cause=REQUEST_ERROR_CAUSE) -> list[str]:
        """A request the server answers with a 500 and goes on serving: the handler's logger.exception (from
        0.4.9; older families print only the access line) and uvicorn's access line."""
        access = self.access(when, port=port, path=FAILING_PATH, status=500)
        if self.family in ("0.3", "0.4.7"):
            return [access]
        pkg = "/usr/local/lib/python3.10/dist-packages/sglang/srt"
        return [self.prefix(when) + f"Error in request: {cause}",
                "Traceback (most recent call last):",
                f'  File "{pkg}/entrypoints/openai/serving_base.py", line 110, in handle_request',
                "    adapted_request, processed_request = self._convert_to_internal_request(",
                f"ValueError: {cause}",
                access]

    # ---- start-up block
    def server_args(self, when, args: dict) -> str:
        if self.family == "0.5.23":
            text = repr(dict(args))
        else:
            text = "ServerArgs(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"
        return self.prefix(when) + "server_args=" + text

    def startup(self, when, args: dict, available_gpu_mem_gb: float, max_total_num_tokens: int | None = None
                ) -> tuple[list[str], int]:
        """The start-up block and the max_total_num_tokens it announces."""
        tp = self.tp
        graphs = not args.get("disable_cuda_graph", False) and self.family != "0.3"
        weights = WEIGHTS_GIB / tp
        after_weights = GPU_AVAIL_AT_BOOT - weights
        pool_end = available_gpu_mem_gb + (GRAPH_GIB if graphs else 0.0)
        kv_gib = max(0.5, after_weights - pool_end)
        tokens = max_total_num_tokens or int(kv_gib * GIB / (KV_BYTES_PER_TOKEN / tp))
        lines = [self.server_args(when, args)]
        for d, t in self.ranks():
            p = self.prefix(when, d, t)
            lines.append(p + f"Load weight begin. avail mem={_fmt_gb(GPU_AVAIL_AT_BOOT)}")
        for d, t in self.ranks():
            p = self.prefix(when, d, t)
            mem = f"avail mem={_fmt_gb(after_weights)}, mem usage={_fmt_gb(weights)}."
            if self.family == "0.5.23":
                lines.append(p + f"Load weight end. elapsed=35.21 s, type=LlamaForCausalLM, {mem}")
            elif self.family == "0.3":
                lines.append(p + f"Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
                                 f"avail mem={_fmt_gb(after_weights)}")
            else:
                lines.append(p + f"Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, {mem}")
        for d, t in self.ranks():
            p = self.prefix(when, d, t)
            half = _fmt_gb(kv_gib / 2)
            if self.family == "0.5.23":
                lines.append(p + f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {tokens}, "
                                 f"K size: {half}, V size: {half}")
            elif self.family != "0.3":
                lines.append(p + f"KV Cache is allocated. #tokens: {tokens}, K size: {half}, V size: {half}")
            lines.append(p + f"Memory pool end. avail mem={_fmt_gb(pool_end)}")
        for d, t in self.ranks():
            p = self.prefix(when, d, t)
            if self.family == "0.3":
                lines.append(p + f"max_total_num_tokens={tokens}, max_prefill_tokens=16384, "
                                 f"max_running_requests={args['max_running_requests']}, context_len=131072")
            else:
                lines.append(p + f"max_total_num_tokens={tokens}, "
                                 f"chunked_prefill_size={args['chunked_prefill_size']}, max_prefill_tokens=16384, "
                                 f"max_running_requests={args['max_running_requests']}, context_len=131072, "
                                 f"available_gpu_mem={available_gpu_mem_gb:.2f} GB")
        lines.append(self.prefix(when) + "The server is fired up and ready to roll!")
        return lines, tokens

    # ---- errors
    def kv_oom(self, when, *, phase="prefill", requested=8192, available=1024, dp_rank=0, tp_rank=0) -> list[str]:
        head = "Prefill" if phase == "prefill" else "Decode"
        return [self.prefix(when, dp_rank, tp_rank) + f"{head} out of memory. Try to lower your batch size.",
                f"Try to allocate {requested} tokens.",
                f"Available tokens: {available} (available_size={available} + evictable_size=0)"]

    def cuda_oom(self, when, *, phase="decode", dp_rank=0, tp_rank=0) -> list[str]:
        func = "forward_extend" if phase == "prefill" else "forward_decode"
        pkg = "/usr/local/lib/python3.10/dist-packages/sglang/srt"
        p = self.prefix(when, dp_rank, tp_rank)
        if self.family == "0.3":
            head = [p + "Exception in ModelTpServer:", "Traceback (most recent call last):",
                    f'  File "{pkg}/managers/tp_worker.py", line 230, in exposed_step',
                    f'  File "{pkg}/managers/tp_worker.py", line 460, in forward_step']
        else:
            head = [p + "Scheduler hit an exception: Traceback (most recent call last):",
                    f'  File "{pkg}/managers/scheduler.py", line 1000, in run_batch']
        return head + [
            f'  File "{pkg}/model_executor/model_runner.py", line 500, in {func}',
            "    return self.model.forward(",
            (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.95 GiB. GPU {tp_rank} has a total "
             f"capacity of {GPU_TOTAL_GIB:.2f} GiB of which 1.01 GiB is free.")]

    def crash(self, when, *, dp_rank=0, tp_rank=0) -> list[str]:
        """A scheduler dies of an exception mid-serving; the launcher reports its child's death."""
        pkg = "/usr/local/lib/python3.10/dist-packages/sglang/srt"
        p = self.prefix(when, dp_rank, tp_rank)
        head = [p + "Exception in ModelTpServer:", "Traceback (most recent call last):"] if self.family == "0.3" \
            else [p + "Scheduler hit an exception: Traceback (most recent call last):"]
        lines = head + [f'  File "{pkg}/managers/scheduler.py", line 1000, in run_batch',
                        f'  File "{pkg}/distributed/parallel_state.py", line 400, in all_reduce',
                        "    torch.distributed.all_reduce(input_, group=self.device_group)", CRASH_CAUSE]
        if self.family != "0.3":
            lines.append(self.prefix(when) + "Received sigquit from a child process. It usually means the child "
                                             "failed.")
        return lines

    def watchdog(self, when, *, timeout=300, dp_rank=0, tp_rank=0) -> str:
        p = self.prefix(when, dp_rank, tp_rank)
        if self.family in ("0.5.8", "0.5.23"):
            return p + f"Scheduler watchdog timeout (self.watchdog_timeout={timeout}, self.soft=False)"
        return p + f"Watchdog timeout (self.watchdog_timeout={timeout})"

