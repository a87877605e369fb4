"""The core health signals (queue, KV cache, retractions, memory, CUDA graph, OOM, stalls, latency) as catalog
entries."""
from __future__ import annotations

from exporter.catalog.model import GIB, Advice, AlertSpec, Signal

_RATE_DOWN = Advice("request-rate", "decrease", None,
                    "A very long queue adds scheduling overhead and queueing delay without adding throughput.")
_RATE_UP = Advice("request-rate", "increase", None,
                  "The client submits too slowly to keep the batch full; send more requests concurrently.")
_CONS_UP = Advice("--schedule-conservativeness", "increase", 1.3,
                  "Admitting fewer new requests per step leaves KV-cache room, so running requests are not "
                  "evicted and recomputed.", relieves_pressure=True)
_CONS_DOWN = Advice("--schedule-conservativeness", "decrease", 0.3,
                    "The scheduler reserves room for max_new_tokens that requests rarely use (early EOS or "
                    "stop strings); admitting more fills the KV cache.")
_MEM_DOWN = Advice("--mem-fraction-static", "decrease", None,
                   "A smaller static pool leaves more GPU memory for activations and CUDA graph buffers.",
                   relieves_pressure=True)
_MEM_UP = Advice("--mem-fraction-static", "increase", None,
                 "Spare GPU memory could hold more KV cache and so more concurrent requests; raise in steps "
                 "of 0.01 while watching for OOM.")
_MRR_DOWN = Advice("--max-running-requests", "decrease", None,
                   "Fewer concurrent requests need less memory per decode step and shorten each step.",
                   relieves_pressure=True)
_MRR_UP = Advice("--max-running-requests", "increase", None,
                 "The running batch is pinned at its cap while requests wait and the KV cache has room.")


CORE_SIGNALS: tuple[Signal, ...] = (
    Signal(
        id="queue_below_range",
        title="Queue below range",
        meaning="The waiting queue is mostly shorter than the healthy range: the client is not submitting "
                "requests fast enough to keep the running batch full.",
        impact="Offline throughput is lower than the hardware allows; GPUs idle between requests.",
        severity="info",
        inputs=("decode_batch.queue_req", "sglang:num_queue_reqs"),
        formula="share of queue samples in the window below `min_queue` >= `fraction` (at least "
                "`min_samples` samples)",
        value_unit="ratio",
        window_seconds=300,
        defaults={"min_queue": 100, "fraction": 0.5, "min_samples": 3},
        profiles={"online": None, "long-context": None, "multi-turn": None},
        advice=(_RATE_UP,),
        alert=AlertSpec("SGLangQueueBelowRange", "10m", "SGLang's request queue is below its healthy range.",
                        "{{ $labels.instance }}: {{ $value | humanizePercentage }} of queue samples are "
                        "below the healthy range. Advice: submit requests faster.", page=False),
        guide="Frequent `#queue-req: 0` means the client submits too slowly; 100-2000 is healthy.",
    ),
    Signal(
        id="queue_above_range",
        title="Queue above range",
        meaning="The waiting queue is mostly longer than the healthy range: more work arrives than the "
                "server drains.",
        impact="Queueing delay grows and the scheduler spends more time per step on the queue.",
        severity="warning",
        inputs=("decode_batch.queue_req", "sglang:num_queue_reqs"),
        formula="share of queue samples in the window above `max_queue` >= `fraction` (at least "
                "`min_samples` samples)",
        value_unit="ratio",
        window_seconds=300,
        defaults={"max_queue": 2000, "fraction": 0.5, "min_samples": 3},
        profiles={},
        advice=(_RATE_DOWN,),
        alert=AlertSpec("SGLangQueueAboveRange", "10m", "SGLang's request queue is above its healthy range.",
                        "{{ $labels.instance }}: {{ $value | humanizePercentage }} of queue samples are "
                        "above the healthy range. Advice: lower the request rate.", page=False),
        guide="Avoid a very large `#queue-req`; it increases scheduling overhead.",
    ),
    Signal(
        id="kv_cache_underused",
        title="KV cache under-used",
        meaning="Requests wait in the queue while the KV cache has free room: the scheduler is too "
                "conservative about admitting them.",
        impact="Throughput is lost; requests queue for no memory reason.",
        severity="warning",
        inputs=("decode_batch.token_usage", "decode_batch.queue_req", "sglang:token_usage",
                "sglang:num_queue_reqs"),
        formula="share of samples with token usage < `min_usage` while queue > 0 >= `fraction` (at least "
                "`min_samples` samples)",
        value_unit="ratio",
        window_seconds=300,
        defaults={"min_usage": 0.9, "fraction": 0.5, "min_samples": 3},
        profiles={},
        advice=(_CONS_DOWN,),
        alert=AlertSpec("SGLangKVCacheUnderused", "15m",
                        "SGLang keeps requests queued while its KV cache has room.",
                        "{{ $labels.instance }}: {{ $value | humanizePercentage }} of samples show token "
                        "usage below target with a non-empty queue. Advice: decrease "
                        "--schedule-conservativeness (e.g. 0.3).", page=False),
        guide="`token usage < 0.9` with `#queue-req > 0` means the server is too conservative.",
    ),
    Signal(
        id="retractions_frequent",
        title="Retractions frequent",
        meaning="The KV cache pool fills up often enough that running requests are retracted (evicted and "
                "re-queued) more than about once a minute.",
        impact="Retracted requests are recomputed: wasted GPU time and longer latency for them.",
        severity="warning",
        inputs=("retraction", "sglang:num_retracted_requests_total", "sglang:total_retracted_reqs"),
        formula="retraction events per minute over the window > `per_minute` (observed less than a window: "
                "over the span observed, at least `min_span_seconds`)",
        value_unit="per_minute",
        window_seconds=600,
        defaults={"per_minute": 1.0, "min_span_seconds": 60},
        profiles={},
        advice=(_CONS_UP,),
        alert=AlertSpec("SGLangRetractionsFrequent", "10m",
                        "SGLang retracts requests more often than once a minute.",
                        "{{ $labels.instance }}: {{ $value | printf \"%.1f\" }} retractions per minute. "
                        "Advice: increase --schedule-conservativeness (e.g. 1.3).", page=False),
        guide="Occasional `KV cache pool is full. Retract requests.` is fine; frequent ones mean raise "
              "`--schedule-conservativeness`.",
        family="retractions",
    ),
    Signal(
        id="retraction_storm",
        title="Retraction storm",
        meaning="Retractions are sustained far above the acceptable rate: the server keeps evicting and "
                "recomputing requests.",
        impact="Throughput collapses as the GPU recomputes evicted work; latency for affected requests "
               "spikes. Pages.",
        severity="critical",
        inputs=("retraction", "sglang:num_retracted_requests_total", "sglang:total_retracted_reqs"),
        formula="retraction events per minute over the window >= `per_minute` (observed less than a window: "
                "over the span observed, at least `min_span_seconds`)",
        value_unit="per_minute",
        window_seconds=300,
        defaults={"per_minute": 10.0, "min_span_seconds": 30},
        profiles={},
        advice=(_CONS_UP, _MRR_DOWN,
                Advice("--mem-fraction-static", "check", None,
                       "Check the KV pool is as large as the GPU allows before trading concurrency away.")),
        alert=AlertSpec("SGLangRetractionStorm", "2m", "SGLang is in a retraction storm.",
                        "{{ $labels.instance }}: {{ $value | printf \"%.1f\" }} retractions per minute. "
                        "Advice: increase --schedule-conservativeness, lower --max-running-requests, check "
                        "--mem-fraction-static.", page=True),
        guide="Frequent retractions: increase `--schedule-conservativeness`.",
        family="retractions",
    ),
    Signal(
        id="gpu_headroom_low",
        title="GPU memory headroom low",
        meaning="After start-up less GPU memory is left for activations and CUDA graph buffers than the "
                "5-8 GiB rule of thumb.",
        impact="Risk of CUDA out-of-memory errors under load.",
        severity="warning",
        inputs=("memory_config.available_gpu_mem_bytes",),
        formula="least free GPU memory after start-up over the ranks in the current epoch < `min_bytes`",
        value_unit="bytes",
        window_seconds=0,
        defaults={"min_bytes": 5 * GIB},
        profiles={},
        advice=(_MEM_DOWN,),
        alert=AlertSpec("SGLangGPUHeadroomLow", "0m", "SGLang started with too little free GPU memory.",
                        "{{ $labels.instance }}: {{ $value | humanize1024 }}B of GPU memory left after "
                        "start-up. Advice: decrease --mem-fraction-static.", page=False),
        guide="available_gpu_mem should be 5-8 GB; too low risks OOM: decrease `--mem-fraction-static`.",
    ),
    Signal(
        id="gpu_headroom_high",
        title="GPU memory headroom high",
        meaning="After start-up more GPU memory is left unused than the 5-8 GiB rule of thumb: the KV "
                "cache could be larger.",
        impact="Lower peak concurrency than the GPU allows.",
        severity="info",
        inputs=("memory_config.available_gpu_mem_bytes",),
        formula="least free GPU memory after start-up over the ranks in the current epoch > `max_bytes`",
        value_unit="bytes",
        window_seconds=0,
        defaults={"max_bytes": 8 * GIB},
        profiles={},
        advice=(_MEM_UP,),
        alert=AlertSpec("SGLangGPUHeadroomHigh", "0m", "SGLang leaves GPU memory unused for KV cache.",
                        "{{ $labels.instance }}: {{ $value | humanize1024 }}B of GPU memory left after "
                        "start-up. Advice: increase --mem-fraction-static.", page=False),
        guide="available_gpu_mem of 10-20 GB is too high: increase `--mem-fraction-static`.",
    ),
    Signal(
        id="cuda_graph_off_small_batch",
        title="CUDA graph off for small batches",
        meaning="Decode batches small enough for CUDA graph ran without it.",
        impact="Small-batch decode is slower than it could be (kernel launch overhead).",
        severity="warning",
        inputs=("decode_batch.cuda_graph", "decode_batch.running_req", "server_args.cuda_graph_max_bs",
                "sglang:is_cuda_graph"),
        formula="number of decode samples in the window with cuda graph False and running_req <= "
                "cuda_graph_max_bs (from server_args, else `default_max_bs`) >= `min_samples`",
        value_unit="count",
        window_seconds=300,
        defaults={"default_max_bs": 160, "min_samples": 1},
        profiles={},
        advice=(Advice("--cuda-graph-max-bs", "increase", None,
                       "Batches above the captured sizes fall back to eager mode; capture larger sizes (this "
                       "costs some GPU memory)."),
                Advice("--disable-cuda-graph", "check", False,
                       "Make sure CUDA graph is not disabled; if it is on and still not used, try another "
                       "attention backend.")),
        alert=AlertSpec("SGLangCUDAGraphOffSmallBatch", "10m",
                        "SGLang runs small decode batches without CUDA graph.",
                        "{{ $labels.instance }}: {{ $value }} small decode batches ran without CUDA graph in "
                        "the window. Advice: raise --cuda-graph-max-bs.", page=False),
        guide="CUDA graph is on only for small batches (< 160 or 256); raise `--cuda-graph-max-bs`.",
    ),
    Signal(
        id="oom_prefill",
        title="Out of memory in prefill",
        meaning="The server ran out of GPU or KV-pool memory while prefilling prompts.",
        impact="Requests fail or the server crashes and restarts. Pages.",
        severity="critical",
        inputs=("oom",),
        formula="OOM events with phase prefill in the window >= `min_events`",
        value_unit="count",
        window_seconds=900,
        defaults={"min_events": 1},
        profiles={},
        advice=(Advice("--chunked-prefill-size", "decrease", 4096,
                       "Smaller prefill chunks need less activation memory (long prompts prefill slower).",
                       relieves_pressure=True), _MEM_DOWN),
        alert=AlertSpec("SGLangPrefillOOM", "0m", "SGLang ran out of memory during prefill.",
                        "{{ $labels.instance }}: {{ $value }} out-of-memory errors in prefill. Advice: "
                        "decrease --chunked-prefill-size (4096 or 2048), then --mem-fraction-static.",
                        page=True),
        guide="OOM in prefill: reduce `--chunked-prefill-size` to 4096 or 2048.",
    ),
    Signal(
        id="oom_decode",
        title="Out of memory in decode",
        meaning="The server ran out of GPU or KV-pool memory while decoding.",
        impact="Requests fail or the server crashes and restarts. Pages.",
        severity="critical",
        inputs=("oom",),
        formula="OOM events with phase decode (or unknown phase) in the window >= `min_events`",
        value_unit="count",
        window_seconds=900,
        defaults={"min_events": 1},
        profiles={},
        advice=(_MRR_DOWN, _MEM_DOWN),
        alert=AlertSpec("SGLangDecodeOOM", "0m", "SGLang ran out of memory during decode.",
                        "{{ $labels.instance }}: {{ $value }} out-of-memory errors in decode. Advice: "
                        "lower --max-running-requests, then --mem-fraction-static.", page=True),
        guide="OOM in decode: lower `--max-running-requests`; both: lower `--mem-fraction-static`.",
    ),
    Signal(
        id="concurrency_capped",
        title="Concurrency capped",
        meaning="The running batch sits at --max-running-requests while requests queue and the KV cache "
                "has room: the cap, not memory, limits throughput.",
        impact="Throughput is lower than the KV cache allows.",
        severity="warning",
        inputs=("decode_batch.running_req", "decode_batch.queue_req", "decode_batch.token_usage",
                "memory_config.max_running_requests"),
        formula="share of samples with running_req >= `running_fraction` x max_running_requests, queue > 0 "
                "and token usage < `max_usage` >= `fraction` (at least `min_samples` samples)",
        value_unit="ratio",
        window_seconds=300,
        defaults={"running_fraction": 0.95, "max_usage": 0.9, "fraction": 0.5, "min_samples": 3},
        profiles={},
        advice=(_MRR_UP,),
        alert=AlertSpec("SGLangConcurrencyCapped", "15m",
                        "SGLang's running batch is held at --max-running-requests.",
                        "{{ $labels.instance }}: {{ $value | humanizePercentage }} of samples at the running "
                        "cap with a queue and spare KV cache. Advice: raise --max-running-requests.",
                        page=False),
        guide="Running at the cap with a queue and free KV cache: raise `--max-running-requests`.",
    ),
    Signal(
        id="stalled",
        title="Stalled",
        meaning="Requests are pending but the server has printed no batch progress for too long, or its "
                "watchdog fired. Pending means still there: clients that disconnect after the last batch line "
                "(`Request is disconnected from the client side ... Abort request`, `[http_server] Client "
                "disconnected`) take their queued requests with them, so the queue that line showed no longer "
                "counts (an offline job whose client was killed leaves an idle server, not a stalled one); with "
                "/metrics scraped, SGLang's own queue gauge counts instead of the last batch line's.",
        impact="Requests hang; /health may still answer. Pages. How fast: with requests waiting at the last "
               "batch line, `stall_seconds` (60 s) plus the alert's `for:` (1 min) plus a scrape and an "
               "evaluation: about 2 min. When the last batch line said `#queue-req: 0`, nothing the log or "
               "/metrics shows says work is pending, even while the access log shows new requests (uvicorn logs "
               "a streaming request when its headers go out, before any token; a hung scheduler updates no "
               "gauge): the page waits for SGLang's own watchdog (`--watchdog-timeout`, 300 s by default). Its "
               "timeout line fires this signal (paging after `for:`, about 6 min) and SGLang then kills itself "
               "(`SIGQUIT received`), which pages `SGLangServerCrashed` (`for: 0m`) first: about 5.1 min after "
               "the hang (300 s plus the evaluation and scrape intervals). A lower `--watchdog-timeout` pages "
               "sooner.",
        severity="critical",
        inputs=("decode_batch", "prefill_batch", "watchdog_timeout", "request_error", "sglang:num_running_reqs",
                "sglang:num_queue_reqs", "sglang:gen_throughput"),
        formula="seconds since the last progress > `stall_seconds` while requests wait (logs: the waiting "
                "queue of the last batch line > 0, since a decode line prints only every 40 steps and its "
                "running count may already have finished, unless a client disconnect came after that line, "
                "and SGLang's scraped queue gauge instead when /metrics is scraped too; /metrics alone: queue "
                "+ running > 0 with no token counter advancing), or a watchdog timeout in the window",
        value_unit="seconds",
        window_seconds=300,
        defaults={"stall_seconds": 60},
        profiles={},
        advice=(),
        alert=AlertSpec("SGLangStalled", "1m", "SGLang has pending requests but makes no progress.",
                        "{{ $labels.instance }}: no batch progress for {{ $value | humanizeDuration }} with "
                        "requests pending.", page=True),
        guide="(Not in the guide) a hung scheduler prints no batch lines while work is pending.",
    ),
    Signal(
        id="latency_high",
        title="Latency high",
        meaning="The 99th percentile of time-to-first-token, inter-token latency or end-to-end latency "
                "is above its objective.",
        impact="Users wait longer than the service objective.",
        severity="warning",
        inputs=("sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds",
                "sglang:time_per_output_token_seconds", "sglang:e2e_request_latency_seconds"),
        formula="worst of p99/objective over TTFT (`ttft_p99_seconds`), inter-token (`itl_p99_seconds`) "
                "and e2e (`e2e_p99_seconds`) over the window > 1",
        value_unit="ratio",
        window_seconds=300,
        defaults={"ttft_p99_seconds": 2.0, "itl_p99_seconds": 0.2, "e2e_p99_seconds": 60.0},
        profiles={"offline": None, "long-context": {"ttft_p99_seconds": 10.0, "e2e_p99_seconds": 300.0}},
        advice=(_MRR_DOWN, _RATE_DOWN,
                Advice("--chunked-prefill-size", "increase", None,
                       "Larger prefill chunks finish long prompts in fewer steps (more memory per step).")),
        alert=AlertSpec("SGLangLatencyHigh", "10m", "SGLang's p99 latency is above its objective.",
                        "{{ $labels.instance }}: p99 latency is {{ $value | printf \"%.2f\" }}x its "
                        "objective. Advice: lower --max-running-requests or the request rate.", page=False),
        guide="(Online) long queues, large batches and long prompts raise latency.",
    ),
)
