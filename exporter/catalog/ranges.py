"""The ranges a number read from SGLang must lie in to be believed: scraped values and log record fields."""
from __future__ import annotations

COUNT_MAX = 10 ** 9             # requests, tokens, sequences, tokens per second: far above any server's

# The values a number scraped from SGLang's /metrics must lie in to be believed: name -> (low, high), both inclusive. A
# value that is not finite (NaN, +Inf, -Inf) or falls outside is malformed: it is dropped and counted by reason
# ("non_finite", "out_of_range"), never stored or exported. The names are those of the values the exporter
# keeps (scrape.py's per-rank gauges and counters; the log side's are FIELD_RANGES below); the bounds are
# sanity, not health: far beyond anything a real server reports, well short of what breaks arithmetic.
COUNTER_MAX = float(2 ** 53)     # cumulative counts: past 2^53 a float no longer counts in ones
VALUE_RANGES: dict[str, tuple[float, float]] = {
    "queue": (0.0, COUNT_MAX),               # requests waiting (sglang:num_queue_reqs, #queue-req)
    "running": (0.0, COUNT_MAX),             # requests running (sglang:num_running_reqs, #running-req)
    "usage": (0.0, 1.5),                     # KV pool usage ratio; SGLang may overshoot 1 briefly
    "throughput": (0.0, COUNT_MAX),          # generated tokens per second
    "cuda_graph": (0.0, 1.0),                # a 0/1 flag
    "retracted_requests": (0.0, COUNTER_MAX),  # counters (cumulative)
    "generation_tokens": (0.0, COUNTER_MAX),
    "prompt_tokens": (0.0, COUNTER_MAX),
    "histogram_bucket": (0.0, COUNTER_MAX),  # a latency histogram's cumulative bucket count
    "bytes": (0.0, float(2 ** 50)),          # GPU memory figures: below 1 PiB
    # the other values of SGLang's /metrics the exporter reads (catalog_native.NATIVE_VALUES)
    **dict.fromkeys(("full_usage", "swa_usage", "mamba_usage", "cache_hit_rate", "utilization", "fwd_occupancy",
                     "spec_accept_rate"), (0.0, 1.5)),
    **dict.fromkeys(("paused", "used_tokens", "kv_used_tokens", "kv_available_tokens", "kv_evictable_tokens",
                     "max_total_num_tokens", "retracted_gauge", "prefill_bootstrap_queue", "prefill_prealloc_queue",
                     "prefill_inflight_queue", "decode_prealloc_queue", "decode_transfer_queue"), (0.0, COUNT_MAX)),
    **dict.fromkeys(("cached_tokens", "requests", "transfer_failed", "decode_graph_passes", "decode_eager_passes",
                     "responses", "responses_5xx", "aborted_requests"),
                    (0.0, COUNTER_MAX)),
    # the serving signals' (catalog_native.SERVING_VALUES)
    **dict.fromkeys(("idle_seconds", "bootstrap_failed", "prefill_retries", "effective_tokens", "hicache_dropped",
                     "hicache_backup", "dp_tokens"), (0.0, COUNTER_MAX)),
    **dict.fromkeys(("startup_seconds", "weight_update_seconds"), (0.0, 1e7)),
    **dict.fromkeys(("headroom_gb", "weight_memory_gb", "kv_cache_memory_gb"), (0.0, float(2 ** 20))),  # GiB
    "new_token_ratio": (0.0, 10.0),
    "spec_accept_length": (0.0, 1e4),
}

# Valid ranges of the numbers SGLang's log records print, per event field (docs/log-events.md): low <= value <
# high. A record with a number outside its field's range (negative, absurdly large, not finite) is not an
# event: the parser counts it as unparsed, reason `value_out_of_range`, and nothing of it is stored. Fields
# not listed take DEFAULT_FIELD_RANGE. The batch-line fields' highs are d * 10**k (k >= 0, d in 1..9): the
# parser's learned line shapes check them with digit classes (grammar.py, "Learned shapes"), so its fast path
# costs nothing more per line.
RATIO_MAX = 2                   # KV-pool usage and other 0-1 ratios (a pool may report a little above 1)
BYTES_MAX = 2 ** 50             # 1 PiB
SECONDS_MAX = 10 ** 7           # about 116 days
_COUNT = (0, COUNT_MAX)
_RATIO = (0, RATIO_MAX)
_BYTES = (0, BYTES_MAX)
_SECONDS = (0, SECONDS_MAX)
FIELD_RANGES: dict[str, tuple[float, float]] = {
    **dict.fromkeys((
        # batch lines
        "running_req", "queue_req", "num_tokens", "new_seq", "new_token", "cached_token", "full_num_tokens",
        "swa_num_tokens", "mamba_num", "gpu_num_tokens", "cpu_num_tokens", "prealloc_req", "transfer_req",
        "retracted_req", "host_receive_req", "unbootstrapped_req", "transferring_req", "bootstrap_req",
        "inflight_req", "optimistic_req", "pending_token", "replay_token", "waiting_image_req", "largest_len",
        "mixed_running_req",
        # retractions, the capacity line, OOM records
        "retracted_reqs", "aborted_retracted_reqs", "new_tokens_gained", "mamba_num_gained",
        "max_total_num_tokens", "max_prefill_tokens", "max_running_requests", "context_len",
        "requested_tokens", "available_tokens"), _COUNT),
    "chunked_prefill_size": (-1, COUNT_MAX),    # -1: chunked prefill off (the capacity line prints it so)
    **dict.fromkeys((
        "token_usage", "full_token_usage", "swa_token_usage", "mamba_usage", "gpu_token_usage", "cpu_token_usage",
        "pre_allocated_usage", "cache_hit_rate", "fwd_occupancy", "fwd_idle_occupancy"),
        _RATIO),
    **dict.fromkeys(("available_gpu_mem_bytes", "available_cpu_mem_bytes", "avail_mem_bytes", "mem_usage_bytes",
                     "k_size_bytes", "v_size_bytes", "kv_size_bytes", "requested_bytes"), _BYTES),
    **dict.fromkeys(("timeout_seconds", "duration_seconds", "elapsed_seconds", "gap_latency"), _SECONDS),
    "forward_iter": (0, 10 ** 15),
    "gen_throughput": (0, 10 ** 9), "input_throughput": (0, 10 ** 9),     # tokens/s
    "spec_accept_rate": (0, 10),        # a ratio, loose: the golden fixtures print invented values above 1
    "spec_accept_length": (0, 10 ** 4), "spec_cap_length": (0, 10 ** 4), "spec_block_accept_length": (0, 10 ** 4),
    "est_tflops_per_gpu": (0, 10 ** 7), "est_read_bw_gb_per_s": (0, 10 ** 7), "est_write_bw_gb_per_s": (0, 10 ** 7),
    "new_token_ratio_before": (0, 10), "new_token_ratio_after": (0, 10),
    "pid": (0, 2 ** 32), "exit_code": (-256, 256), "status": (100, 600),
    # server_args values the signals and advice read
    "mem_fraction_static": (0, RATIO_MAX), "schedule_conservativeness": (0, 100), "cuda_graph_max_bs": _COUNT,
    "tp_size": (0, 10 ** 5), "dp_size": (0, 10 ** 5), "pp_size": (0, 10 ** 5),
}
DEFAULT_FIELD_RANGE = (-10 ** 15, 10 ** 15)   # any other number a record prints (future fields, server_args)
