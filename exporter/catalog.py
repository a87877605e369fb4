"""The signal catalog: every health signal, its thresholds per workload profile, its advice, the metrics
we export, the alert and the runbook anchor, as data.

This is the one source of truth. The exporter evaluates it; `exporter.generate` turns it into alert rules,
dashboards and runbooks; tests read it to know what must exist. Change a threshold here and everything
downstream follows (after `sglang-exporter generate`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

GIB = 1024 ** 3

PROFILES = {
    "offline": "Offline batch inference: throughput first. A queue of 100-2000 keeps the batch full.",
    "online": "Online serving: latency first. An empty queue is healthy; latency objectives apply.",
    "long-context": "Long prompts: prefill dominates; queue depth and latency objectives are relaxed.",
    "multi-turn": "Chat sessions sharing prefixes: latency objectives apply; queue depth is not judged.",
}
DEFAULT_PROFILE = "offline"

SEVERITIES = ("critical", "warning", "info")

# Prefix of every metric the exporter itself exports. SGLang's own metrics use `sglang:`; ours never carry
# a colon (colons are reserved for recording rules).
NS = "sglang_exporter"

RUNBOOK_BASE = "https://github.com/sglang-exporter/sglang-exporter/blob/main/docs/runbooks"


@dataclass(frozen=True)
class Advice:
    """One tuning recommendation a signal makes when it fires."""
    flag: str            # an SGLang flag ("--schedule-conservativeness") or a client knob ("request-rate")
    action: str          # "increase" | "decrease" | "check"
    suggested: object    # a value, or None when it depends on the current value (computed in advice.py)
    reason: str
    # Following it lowers memory pressure (OOM / retraction risk). Wins a tie between opposite directions.
    relieves_pressure: bool = False
    # The start-up stages (exporter.failures.STAGES) it applies to; empty: always.
    when: tuple = ()


@dataclass(frozen=True)
class AlertSpec:
    name: str            # CamelCase, starts with SGLang
    for_: str            # Prometheus duration
    summary: str         # static sentence ending in a period
    description: str     # Go template; may use $labels and $value
    page: bool           # True: pages a human (critical route); False: a ticket


@dataclass(frozen=True)
class Signal:
    id: str
    title: str
    meaning: str              # what it means when it fires (runbook "Meaning")
    impact: str               # what users feel (runbook "Impact")
    severity: str
    inputs: tuple             # event kinds (log) and SGLang metric names (scrape) it reads
    formula: str              # the rule, in words, with the parameter names used below
    value_unit: str           # unit of sglang_exporter_signal_value for this signal
    window_seconds: float
    defaults: dict            # threshold parameters
    profiles: dict            # profile -> None (inactive) or overrides of `defaults`; absent = defaults
    advice: tuple = ()
    alert: AlertSpec | None = None
    guide: str = ""           # the tuning-guide sentence it encodes, paraphrased
    family: str = ""          # signals of one family: the family's critical alert silences its warnings
    failure: bool = False     # the server failed (crashed, could not start): the verdict is `failed`

    def params(self, profile: str) -> dict | None:
        """Thresholds in force for `profile`, or None when the signal is inactive there."""
        if profile in self.profiles and self.profiles[profile] is None:
            return None
        return {**self.defaults, **(self.profiles.get(profile) or {})}

    @property
    def runbook_anchor(self) -> str:
        return self.alert.name.lower() if self.alert else self.id

    @property
    def runbook_url(self) -> str:
        return f"{RUNBOOK_BASE}/{self.alert.name}.md" if self.alert else ""


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


SIGNALS: tuple[Signal, ...] = (
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
                "watchdog fired.",
        impact="Requests hang; /health may still answer. Pages.",
        severity="critical",
        inputs=("decode_batch", "prefill_batch", "watchdog_timeout", "sglang:num_running_reqs",
                "sglang:num_queue_reqs", "sglang:gen_throughput"),
        formula="seconds since the last progress > `stall_seconds` while requests wait (logs: the waiting "
                "queue of the last batch line > 0, since a decode line prints only every 40 steps and its "
                "running count may already have finished; /metrics: queue + running > 0 with no token "
                "counter advancing), or a watchdog timeout in the window",
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


from exporter.catalog_failures import FAILURE_SIGNALS  # noqa: E402 (it builds on the classes above)
from exporter.catalog_tuning import TUNING_SIGNALS  # noqa: E402 (it builds on the classes above)

SIGNALS = SIGNALS + TUNING_SIGNALS + FAILURE_SIGNALS
SIGNALS_BY_ID = {s.id: s for s in SIGNALS}
FAILURE_IDS = tuple(s.id for s in SIGNALS if s.failure)


# Alerts that watch the monitoring itself rather than SGLang's health.
@dataclass(frozen=True)
class MetaAlert:
    alert: AlertSpec
    severity: str
    meaning: str
    impact: str
    params: dict = field(default_factory=dict)


META_ALERTS: tuple[MetaAlert, ...] = (
    MetaAlert(AlertSpec("SGLangExporterDown", "5m", "The sglang-exporter sidecar is not being scraped.",
                        "{{ $labels.job }}/{{ $labels.instance }}: Prometheus cannot scrape sglang-exporter.",
                        page=True),
              "critical", "Prometheus has no fresh samples from the sidecar.",
              "Every SGLang health signal and alert of this server is blind."),
    MetaAlert(AlertSpec("SGLangTargetDown", "5m", "The sglang-exporter sidecar cannot scrape SGLang's /metrics.",
                        "{{ $labels.instance }}: scraping SGLang's /metrics fails ({{ $labels.source }}).",
                        page=True),
              "critical", "The sidecar's last scrapes of SGLang's /metrics failed (the sidecar logs why: "
                          "refused, timeout, http 500, protocol, too large, not an exposition), or none finished "
                          "for 2 x (scrape_interval + scrape_timeout): its scraper is stuck.",
              "SGLang is down, unreachable or replying garbage; metric-fed signals report unknown, and after "
              "scrape_stale_after the values only /metrics gave are no longer exported."),
    MetaAlert(AlertSpec("SGLangLogParserDrift", "30m",
                        "The sglang-exporter sidecar no longer recognises SGLang's log lines.",
                        "{{ $labels.instance }}: {{ $value | humanizePercentage }} of SGLang log records were "
                        "not recognised in the last 30 minutes.", page=False),
              "warning", "Many SGLang-prefixed log lines match no known format: SGLang's log format probably "
                         "changed under us.",
              "Log-fed signals may go silent; the exporter may miss retractions and OOMs.",
              params={"max_unknown_ratio": 0.2}),
    MetaAlert(AlertSpec("SGLangLogStale", "15m", "The sglang-exporter sidecar reads no SGLang log lines.",
                        "{{ $labels.instance }}: no log line was read from {{ $labels.source }} for 15 "
                        "minutes.", page=False),
              "warning", "The followed log file has produced no lines: the hand-off from SGLang's stderr to "
                         "the sidecar may be broken.",
              "Log-fed signals (retractions, OOM, stall, headroom) are blind."),
    MetaAlert(AlertSpec("SGLangLogSourceStale", "5m",
                        "SGLang keeps writing to a log file that was rotated away.",
                        "{{ $labels.instance }}: the file rotated away from {{ $labels.source }} is still being "
                        "written to: the writer never reopens its log.", page=False),
              "warning", "After a rotation, SGLang's output still goes to the old, renamed file (it was started "
                         "as `... > sglang.log` and never reopens): the file at the followed path stays empty.",
              "Nothing is lost while the sidecar runs (it reads the renamed file on), but rotation no longer "
                         "frees disk space, and lines written while the sidecar is down may be lost once "
                         "the renamed file is compressed or deleted."),
    MetaAlert(AlertSpec("SGLangAlertingWatchdog", "0m", "The SGLang alerting pipeline is alive.",
                        "This alert always fires; its absence at the receiver means alerting is broken.",
                        page=False),
              "info", "Always firing, on purpose (a dead man's switch).",
              "If it stops arriving, no other alert can arrive either."),
)


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: str           # gauge | counter | info
    help: str
    labels: tuple = ()


_RANK = ("dp", "tp", "pp")

# Everything the exporter exposes on its /metrics (without the `_total` suffix handling: counters are
# named here as exposed, including `_total`).
METRICS: tuple[MetricSpec, ...] = (
    # health judgements
    MetricSpec(f"{NS}_signal_firing", "gauge", "1 when the health signal fires, 0 when it does not; absent "
               "while it cannot be judged.", ("signal", "severity")),
    MetricSpec(f"{NS}_signal_known", "gauge", "1 when the signal has the data it needs to be judged.",
               ("signal",)),
    MetricSpec(f"{NS}_signal_unsupported", "gauge", "1 while the signal is unknown because its only live "
               "source cannot feed it: the scraped SGLang release does not export its inputs on /metrics, or it "
               "is read from logs only (the API and the report say which); 0 otherwise.", ("signal",)),
    MetricSpec(f"{NS}_signal_value", "gauge", "The value the signal judges, in the unit its catalog entry "
               "names (ratio, per_minute, bytes, count, seconds).", ("signal",)),
    MetricSpec(f"{NS}_signal_state_duration_seconds", "gauge", "Seconds the signal has been in its current "
               "state.", ("signal",)),
    MetricSpec(f"{NS}_failure_cause_info", "gauge", "The cause of a firing failure signal: the last exception "
               "line of the traceback (at most 200 characters) and its class (cuda_oom, nccl, timeout, assertion, "
               "import_config, killed, health_check, startup_hung, other); always 1.",
               ("signal", "cause_class", "cause")),
    MetricSpec(f"{NS}_advice_info", "gauge", "A reconciled tuning recommendation (always 1).",
               ("flag", "action", "current", "suggested", "signals")),
    # raw values the dashboards plot (latest sample per rank)
    MetricSpec(f"{NS}_queue_requests", "gauge", "Requests in the waiting queue (#queue-req).", _RANK),
    MetricSpec(f"{NS}_running_requests", "gauge", "Requests in the running batch (#running-req).", _RANK),
    MetricSpec(f"{NS}_max_running_requests", "gauge", "The server's max_running_requests.", ()),
    MetricSpec(f"{NS}_token_usage_ratio", "gauge", "KV cache pool usage, 0-1 (token usage; the fullest pool "
               "for hybrid models).", _RANK),
    MetricSpec(f"{NS}_gen_throughput_tokens_per_second", "gauge", "Decode throughput of the last decode "
               "line (gen throughput).", _RANK),
    MetricSpec(f"{NS}_cuda_graph_enabled", "gauge", "1 when the last decode batch ran with CUDA graph.",
               _RANK),
    MetricSpec(f"{NS}_gpu_headroom_bytes", "gauge", "GPU memory left after start-up on the GPU with the "
               "least left (the headroom signals judge this one).", ()),
    MetricSpec(f"{NS}_rank_gpu_headroom_bytes", "gauge", "GPU memory left after start-up per rank (`rank` as "
               "SGLang's log prefix spells it, e.g. 'DP1 TP4'; '' for an unprefixed log): the capacity line's "
               "available_gpu_mem, else the rank's last model-runner reading (CUDA graph capture or memory pool "
               "end).", ("rank",)),
    MetricSpec(f"{NS}_retractions_per_minute", "gauge", "Retraction events per minute over the "
               "retractions_frequent window.", ()),
    MetricSpec(f"{NS}_retractions_total", "counter", "Retraction events (one per 'Retract requests' record "
               "of TP rank 0).", ()),
    MetricSpec(f"{NS}_retracted_requests_total", "counter", "Requests retracted (sum of #retracted_reqs).",
               ()),
    MetricSpec(f"{NS}_oom_events_total", "counter", "Out-of-memory events by phase.", ("phase",)),
    MetricSpec(f"{NS}_watchdog_timeouts_total", "counter", "SGLang watchdog timeouts.", ()),
    MetricSpec(f"{NS}_server_restarts_total", "counter", "SGLang (re)starts seen (new epoch).", ()),
    MetricSpec(f"{NS}_last_batch_age_seconds", "gauge", "Seconds since the last prefill or decode batch "
               "line.", ()),
    MetricSpec(f"{NS}_sglang_info", "gauge", "Detected SGLang log format family and model (always 1).",
               ("format", "model")),
    MetricSpec(f"{NS}_build_info", "gauge", "sglang-exporter build (always 1).", ("version", "python")),
    # self-metrics
    MetricSpec(f"{NS}_log_lines_read_total", "counter", "Log lines read.", ("source",)),
    MetricSpec(f"{NS}_log_lines_unparsed_total", "counter", "Log lines not recognised, by reason.",
               ("reason",)),
    MetricSpec(f"{NS}_log_events_total", "counter", "Events recognised, by kind.", ("kind",)),
    MetricSpec(f"{NS}_log_rotations_total", "counter", "Log rotations followed.", ("source",)),
    MetricSpec(f"{NS}_log_truncations_total", "counter", "Log truncations detected.", ("source",)),
    MetricSpec(f"{NS}_log_lines_cut_total", "counter", "Lines longer than the cap, cut.", ("source",)),
    MetricSpec(f"{NS}_log_source_stale", "gauge", "1 while a file rotated away from the followed path is "
               "still written to after the grace period (the writer does not reopen its log).", ("source",)),
    MetricSpec(f"{NS}_source_up", "gauge", "1 when the source is being read: a log file read successfully "
               "last time; SGLang's /metrics when its last scrape succeeded, less than scrape_stale_after ago.",
               ("source",)),
    MetricSpec(f"{NS}_scrape_success", "gauge", "1 when the last scrape of SGLang's /metrics succeeded; 0 "
               "too when none finished for 2 x (scrape_interval + scrape_timeout) (a stuck scraper).",
               ("source",)),
    MetricSpec(f"{NS}_scrape_duration_seconds", "gauge", "Duration of the last scrape of SGLang's /metrics.",
               ("source",)),
    MetricSpec(f"{NS}_worker_errors_total", "counter", "Unexpected errors caught in a worker (follow, scrape, "
               "evaluate, positions); the worker goes on.", ("worker",)),
    MetricSpec(f"{NS}_scrape_samples_rejected_total", "counter", "Samples of SGLang's /metrics dropped as "
               "malformed, by reason (non_finite, out_of_range, bad_le).", ("reason",)),
    MetricSpec(f"{NS}_exposition_errors_total", "counter", "Metric families left out of this /metrics "
               "because building them failed (the rest are served), by family.", ("family",)),
)

METRICS_BY_NAME = {m.name: m for m in METRICS}

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
    **dict.fromkeys(("paused", "kv_used_tokens", "kv_available_tokens", "kv_evictable_tokens",
                     "max_total_num_tokens", "retracted_gauge", "prefill_bootstrap_queue", "prefill_prealloc_queue",
                     "prefill_inflight_queue", "decode_prealloc_queue", "decode_transfer_queue"), (0.0, COUNT_MAX)),
    **dict.fromkeys(("cached_tokens", "transfer_failed", "decode_graph_passes", "decode_eager_passes"),
                    (0.0, COUNTER_MAX)),
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


def active_signals(profile: str) -> list[Signal]:
    return [s for s in SIGNALS if s.params(profile) is not None]
