"""Signals about SGLang's gateway (SGLang Model Gateway `smg_*`, and the older router `sgl_router_*`), judged in
PromQL from the gateway's own Prometheus port: no sidecar runs beside a gateway.

One entry per signal: what it means, its thresholds, its alert, its runbook's checks and the gateway families
it reads (the `smg_` name; the older `sgl_router_` spelling of the same meaning comes from
`exporter.releases.gateway.spellings`, read from the releases). The PromQL is in exporter/generate/gateway.py;
every family and label it names is checked against the release data by tests/test_gateway.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from exporter.releases import gateway as gateway_releases


@dataclass(frozen=True)
class GatewaySignal:
    id: str
    title: str
    severity: str            # critical pages; warning opens a ticket
    alert: str               # SGLangGateway + CamelCase
    for_: str
    summary: str
    description: str         # a Prometheus template over $labels and $value
    meaning: str
    impact: str
    checks: tuple            # the runbook's first steps, most telling first
    families: tuple          # the gateway families it reads (smg_ names)
    defaults: dict = field(default_factory=dict)
    engine_values: tuple = ()   # SGLang engine values it compares with (exporter.catalog.native names)
    engine_signals: tuple = ()  # the engine verdicts (sidecar signal ids) a joined signal reads, most telling first

    @property
    def page(self) -> bool:
        return self.severity == "critical"


GATEWAY_SIGNALS: tuple[GatewaySignal, ...] = (
    GatewaySignal(
        "gateway_no_healthy_worker", "No healthy worker behind the gateway", "critical",
        "SGLangGatewayNoHealthyWorker", "1m",
        "The SGLang gateway has no healthy worker.",
        "{{ $labels.pod }} ({{ $labels.namespace }}): no worker behind the gateway passes its health check "
        "(best worker health {{ $value }}; 1 healthy, 0 unhealthy, -1 removed). Every request fails.",
        "Every worker the gateway knows is marked unhealthy (or removed): the gateway has nowhere to send a "
        "request.",
        "All traffic through this gateway fails with 5xx or no-worker errors until a worker recovers.",
        ("Open the engine dashboards of the workers (links on the Gateway board): a crash, an OOM or a stall "
         "there is the cause; the sidecar's failure signals name it.",
         "Check the gateway's own view: `smg_worker_health` per `worker`, and its log lines about health checks.",
         "If the engines are up, check the network path from the gateway to their ports (health check URL, "
         "NetworkPolicy, TLS)."),
        ("smg_worker_health",)),
    GatewaySignal(
        "gateway_pool_shrunk", "Worker pool below its recent size", "warning",
        "SGLangGatewayWorkerPoolShrunk", "10m",
        "The SGLang gateway's worker pool shrank.",
        "{{ $labels.pod }} ({{ $labels.namespace }}): the worker pool is at {{ $value | humanizePercentage }} "
        "of its largest size over the last hour.",
        "The gateway counts fewer workers than it had within the last hour: workers were removed (discovery, "
        "scale-down, crash) and not replaced.",
        "Capacity behind the gateway is lower: queues and latency grow on the remaining workers.",
        ("Compare with the intended replica count of the engine Deployment/LeaderWorkerSet.",
         "Look for engine pods restarting or pending (OOM, GPU scheduling) on their dashboards.",
         "With Kubernetes discovery, check `smg_discovery_registrations_total{result=\"failed\"}`."),
        ("smg_worker_pool_size",), {"min_fraction": 0.75, "window": "1h"}),
    GatewaySignal(
        "gateway_circuit_open", "Circuit breaker open", "warning",
        "SGLangGatewayCircuitOpen", "5m",
        "A worker's circuit breaker in the SGLang gateway stays open.",
        "{{ $labels.pod }} ({{ $labels.namespace }}): the circuit breaker of worker {{ $labels.worker }} is "
        "open: the gateway sends it no traffic.",
        "The gateway saw enough consecutive failures from this worker to stop routing to it.",
        "The pool runs one worker short; if the engine is healthy, its capacity is wasted.",
        ("Open that worker's engine dashboard: if it reports a crash or a stall, fix the engine; the breaker "
         "closes by itself after its timeout.",
         "If the engine is healthy, the failures are between gateway and engine (timeouts, connection "
         "resets): check `smg_worker_errors_total` by `error_type`.",),
        ("smg_worker_cb_state",)),
    GatewaySignal(
        "gateway_circuit_flapping", "Circuit breaker flapping", "warning",
        "SGLangGatewayCircuitFlapping", "0s",
        "A worker's circuit breaker in the SGLang gateway keeps opening.",
        "{{ $labels.pod }} ({{ $labels.namespace }}): the circuit breaker of worker {{ $labels.worker }} "
        "opened {{ $value | printf \"%.0f\" }} times in 15 minutes.",
        "The breaker opens, half-opens and opens again: the worker fails intermittently.",
        "Requests that reach it in the half-open probes fail; latency and errors are spiky.",
        ("Look for intermittent failures on that engine: retractions, long prefills timing out the "
         "gateway's request timeout, or health checks slower than their timeout.",
         "Compare the gateway's request timeout with the engine's p99 end-to-end latency."),
        ("smg_worker_cb_transitions_total",), {"opens": 3, "window": "15m"}),
    GatewaySignal(
        "gateway_retries_exhausted", "Retries exhausted", "warning",
        "SGLangGatewayRetriesExhausted", "5m",
        "Requests through the SGLang gateway fail after all retries.",
        "{{ $labels.pod }} ({{ $labels.namespace }}): {{ $value | printf \"%.1f\" }} requests per minute "
        "failed after exhausting their retries.",
        "The gateway retried these requests on other workers and every attempt failed.",
        "Clients receive errors; the retries add load to workers that are already failing.",
        ("Check which workers fail: `smg_worker_errors_total` by `error_type` and the breakers' state.",
         "An overloaded fleet (every worker queueing) fails retries too: check the engines' queues."),
        ("smg_worker_retries_exhausted_total",), {"per_minute": 1.0}),
    GatewaySignal(
        "gateway_error_ratio", "Gateway error ratio high", "critical",
        "SGLangGatewayErrorRatioHigh", "5m",
        "The SGLang gateway answers many requests with server errors.",
        "{{ $labels.pod }} ({{ $labels.namespace }}): {{ $value | humanizePercentage }} of responses over 5 "
        "minutes were 5xx.",
        "The share of 5xx responses at the gateway's HTTP edge is above the objective.",
        "Users see failures; the error budget burns.",
        ("Split by `path` and `error_code` of `smg_http_responses_total` to see which route fails and why.",
         "No healthy worker, open breakers or exhausted retries explain most 5xx: check those alerts first."),
        ("smg_http_responses_total",), {"max_ratio": 0.05}),
    GatewaySignal(
        "gateway_rate_limited", "Gateway rejecting requests", "warning",
        "SGLangGatewayRateLimiting", "10m",
        "The SGLang gateway rejects requests by its rate limit.",
        "{{ $labels.pod }} ({{ $labels.namespace }}): {{ $value | humanizePercentage }} of admission decisions "
        "over 5 minutes were rejections.",
        "The gateway's concurrency/rate limiter turns requests away (HTTP 429).",
        "Clients are throttled; the fleet behind may have room, or may be saturated.",
        ("If the engines' queues are short, the limit is lower than the fleet can take: raise it.",
         "If the engines are saturated, the limit protects them: add workers."),
        ("smg_http_rate_limit_total",), {"max_ratio": 0.05}),
    GatewaySignal(
        "gateway_latency_above_engines", "Gateway adds latency beyond the engines'", "warning",
        "SGLangGatewayLatencyAboveEngines", "10m",
        "Requests spend far longer in the SGLang gateway than in the engines.",
        "{{ $labels.namespace }}: the gateway's mean request duration exceeds the engines' mean end-to-end "
        "latency by {{ $value | printf \"%.2f\" }}s over 5 minutes.",
        "The gateway's request duration is much longer than what the engines behind it report: requests wait "
        "in the gateway (admission queue, retries, backoff) or on the way to the engines.",
        "Users see latency the engine dashboards do not show.",
        ("Check retries (`smg_worker_retries_total`) and their backoff (`smg_worker_retry_backoff_seconds`).",
         "Check the gateway's queue and rate limiter, and its CPU.",
         "Check the network between gateway and engines (cross-zone, TLS)."),
        ("smg_router_request_duration_seconds",), {"max_extra_seconds": 1.0}, ("e2e",)),
    GatewaySignal(
        "gateway_load_imbalance", "Load imbalanced across workers", "warning",
        "SGLangGatewayLoadImbalance", "15m",
        "The SGLang gateway loads one worker while others idle.",
        "{{ $labels.pod }} ({{ $labels.namespace }}): the least loaded healthy worker carries "
        "{{ $value | humanizePercentage }} of the busiest one's active requests.",
        "Among healthy workers, one carries many requests while another carries almost none.",
        "The busy worker queues and slows down while capacity sits idle; cache-aware routing holding prefixes "
        "on one worker is the usual cause.",
        ("Check the routing policy (`smg_worker_selection_total` by `policy`): cache-aware routing with a low "
         "balance threshold pins shared prefixes to one worker.",
         "Compare the workers' engine dashboards: queue and KV usage on the busy one."),
        ("smg_worker_requests_active", "smg_worker_health"), {"max_min_share": 0.2, "min_busy": 8}),
    GatewaySignal(
        "gateway_pd_failures", "PD bootstrap or KV transfer failing", "warning",
        "SGLangGatewayPDTransferFailures", "5m",
        "The SGLang gateway sees PD bootstrap or KV-transfer failures.",
        "{{ $labels.pod }} ({{ $labels.namespace }}): {{ $value | printf \"%.1f\" }} PD bootstrap or KV "
        "transfer failures per minute.",
        "In prefill-decode disaggregation, the gateway sees requests whose bootstrap between a prefill and a "
        "decode worker, or whose KV cache transfer, failed.",
        "Those requests fail or are retried; decode workers wait for KV that never arrives.",
        ("Open the prefill and decode engines' dashboards: their `num_bootstrap_failed_reqs_total` and "
         "`num_transfer_failed_reqs_total`, and the PD queues.",
         "Check the transfer backend (mooncake, nixl: `smg_pd_kv_connector_mode_total`) and the RDMA/network "
         "path between prefill and decode pods."),
        ("smg_pd_bootstrap_failures_total", "smg_pd_kv_transfer_failures_total"), {"per_minute": 1.0}),
    GatewaySignal(
        "gateway_discovery_failing", "Worker discovery failing", "warning",
        "SGLangGatewayDiscoveryFailing", "5m",
        "The SGLang gateway fails to register discovered workers.",
        "{{ $labels.pod }} ({{ $labels.namespace }}): {{ $value | printf \"%.0f\" }} worker registrations "
        "from {{ $labels.source }} discovery failed in 15 minutes.",
        "Service discovery found workers the gateway could not register.",
        "Workers that are up receive no traffic; the pool stays smaller than the fleet.",
        ("Read the gateway's log for the failed registration (the worker URL and the error).",
         "Check that the workers answer the gateway's health check and model info requests."),
        ("smg_discovery_registrations_total",), {"failures": 1, "window": "15m"}),
    GatewaySignal(
        "gateway_locality_lost", "Prefix-hash routing giving up locality", "warning",
        "SGLangGatewayPrefixLocalityLost", "15m",
        "The SGLang gateway's prefix-hash routing rarely sends requests to their prefix's worker.",
        "{{ $labels.pod }} ({{ $labels.namespace }}): only {{ $value | humanizePercentage }} of prefix-hash "
        "routing decisions over 15 minutes went to the prefix's own worker.",
        "With the prefix_hash policy, most requests leave the worker their prefix hashes to (the ring's "
        "worker is overloaded or unhealthy, so the policy walks on or falls back to the least loaded one).",
        "Prefix-cache reuse on the engines drops: more prefill work, higher time to first token.",
        ("Compare the engines' prefix cache hit rate (engine boards) with the share here.",
         "A walk means the ring's worker is above the load bound: add workers or raise the bound; a fallback "
         "means the ring lookup failed or workers are unhealthy."),
        ("smg_prefix_hash_policy_branch_total",), {"min_share": 0.5, "window": "15m"}),
    GatewaySignal(
        "gateway_cache_aware_fallback", "Cache-aware routing mostly in its load-balancing fallback", "warning",
        "SGLangGatewayCacheAwareFallback", "15m",
        "The sglang-router's cache-aware policy mostly gives up prefix locality to balance load.",
        "{{ $labels.pod }} ({{ $labels.namespace }}): {{ $value | humanizePercentage }} of cache-aware routing "
        "decisions over 15 minutes went to the shortest queue, not to a prefix's worker.",
        "The cache-aware policy routes by prefix only while the workers' loads are balanced; when the busiest "
        "worker's load exceeds both balance thresholds (absolute and relative) it sends the request to the least "
        "loaded worker instead. Here most decisions took that fallback. Only sglang-router before 0.3.0 counts "
        "these decisions: the SGLang Model Gateway's cache_aware policy exports no decision counter (docs/gateway.md).",
        "Prefix-cache reuse on the engines drops (more prefill, higher time to first token), and the imbalance "
        "behind it means one worker queues.",
        ("Compare the workers' loads (`sgl_router_running_requests` by `worker`): one worker far busier than the "
         "rest keeps the policy in its fallback; find why (a hot prefix, a slow engine).",
         "Raise `--balance-abs-threshold` / `--balance-rel-threshold` if short bursts trip it, or add workers.",
         "Compare with the engines' prefix cache hit rate on their boards."),
        ("sgl_router_load_balancing_events_total", "sgl_router_cache_hits_total", "sgl_router_cache_misses_total"),
        {"max_fallback_share": 0.5, "window": "15m"}),
    # ---- joined with the engines: the worker's gateway-side state beside its engine's own verdict (the sidecar's
    # signals). The gateway state and the cause are in the description, never labels (a label that changes within
    # one incident ends the alert and starts another: a second page). How the worker joins its engine: docs/gateway.md.
    GatewaySignal(
        "gateway_worker_engine_crashed", "Gateway cut off a worker whose engine crashed", "critical",
        "SGLangGatewayWorkerEngineCrashed", "0s",
        "The SGLang gateway stopped routing to a worker, and that worker's engine reports a crash.",
        "Worker {{ $labels.worker }}: @STATE@ in the gateway; its engine {{ $labels.pod }} ({{ $labels.namespace }}) "
        "reports a crash. Cause: @CAUSE@",
        "The gateway stopped routing to a worker (its circuit breaker open, or its health check failing), and the "
        "sidecar beside that worker's engine judged it crashed: one incident seen from both sides.",
        "The pool runs one worker short until the engine restarts; this page replaces the engine's crash page "
        "and the gateway's breaker ticket (inhibited).",
        ("Follow the engine's crash runbook (SGLangServerCrashed): the cause line is in this alert.",
         "Once the engine is back, the breaker closes by itself after its timeout."),
        ("smg_worker_cb_state", "smg_worker_health"), engine_signals=("server_crashed",)),
    GatewaySignal(
        "gateway_worker_engine_failing", "Gateway cut off a worker whose engine failed", "critical",
        "SGLangGatewayWorkerEngineFailing", "0s",
        "The SGLang gateway stopped routing to a worker, and that worker's engine reports a stall, an OOM or a "
        "failed start-up.",
        "Worker {{ $labels.worker }}: @STATE@ in the gateway; its engine {{ $labels.pod }} ({{ $labels.namespace }}) "
        "reports {{ $labels.engine_signal }}. Cause: @CAUSE@",
        "The gateway stopped routing to a worker, and the sidecar beside that worker's engine reports why: the "
        "engine stalled, ran out of memory, or never finished starting (`engine_signal` names the engine's verdict, "
        "the most telling one when several fire: startup_oom, oom_prefill, oom_decode, startup_stalled, stalled).",
        "The pool runs one worker short until the engine recovers; this page replaces the engine's own page for "
        "that verdict and the gateway's breaker ticket (inhibited).",
        ("Follow the engine's runbook for `engine_signal` (SGLangStalled, SGLangPrefillOOM, SGLangDecodeOOM, "
         "SGLangStartupOOM, SGLangStartupStalled): the engine is the one at fault.",
         "When the engine recovers, the gateway's health check and breaker let it back in by themselves."),
        ("smg_worker_cb_state", "smg_worker_health"),
        engine_signals=("startup_oom", "oom_prefill", "oom_decode", "startup_stalled", "stalled")),
    GatewaySignal(
        "gateway_cuts_off_healthy_engine", "Gateway cut off a worker whose engine is healthy", "warning",
        "SGLangGatewayCutsOffHealthyEngine", "5m",
        "The SGLang gateway stopped routing to a worker whose engine reports no failure.",
        "Worker {{ $labels.worker }}: @STATE@ in the gateway, but its engine {{ $labels.pod }} "
        "({{ $labels.namespace }}) answers its sidecar and reports no crash, stall or OOM: the fault is between "
        "gateway and engine.",
        "The gateway's breaker is open (or its health check fails) for a worker whose engine answers the sidecar "
        "beside it (the sidecar's scrape of its /metrics works) and is judged sound: the requests fail on the way "
        "(timeouts, connection resets, TLS, a NetworkPolicy), or the gateway's timeouts are shorter than the "
        "engine's latency. Sidecars that only read the log are not joined here: they cannot tell an engine still "
        "starting from one serving.",
        "A healthy engine's capacity is wasted; the remaining workers take its load.",
        ("Check `smg_worker_errors_total` by `error_type` (timeouts, connection errors) and the gateway's log for "
         "the worker's URL.",
         "Compare the gateway's request and health-check timeouts with the engine's p99 end-to-end latency (its "
         "dashboard).",
         "From the gateway's pod, reach the worker URL's /health (DNS, NetworkPolicy, TLS, proxy)."),
        ("smg_worker_cb_state", "smg_worker_health"),
        engine_signals=("server_crashed", "startup_oom", "oom_prefill", "oom_decode", "startup_stalled",
                        "stalled")),
    GatewaySignal(
        "gateway_ttft_above_engines", "Gateway time to first token far above the engines'", "warning",
        "SGLangGatewayTTFTAboveEngines", "10m",
        "The SGLang gateway's time to first token is far above the engines' own.",
        "{{ $labels.model }} ({{ $labels.namespace }}): the gateway's p99 time to first token is "
        "{{ $value | printf \"%.1f\" }}x the engines' own p99 over 5 minutes.",
        "For one model, the p99 time to first token the gateway measures is several times the p99 the engines "
        "record (`sglang:time_to_first_token_seconds`, the native rules' per-model record): requests wait in the "
        "gateway (queue, rate limiter, retries and their backoff) before an engine starts them.",
        "Users wait for the first token longer than any engine dashboard shows.",
        ("Check retries (`smg_worker_retries_total`) and their backoff (`smg_worker_retry_backoff_seconds`): "
         "every retry adds a full attempt before the first token.",
         "Check the gateway's admission queue and rate limiter (`smg_http_rate_limit_total`) and its CPU.",
         "Check the network between gateway and engines (cross-zone, TLS)."),
        ("smg_router_ttft_seconds",), {"min_ratio": 2.0, "min_extra_seconds": 1.0}, ("ttft",)),
)
GATEWAY_SIGNALS_BY_ID = {s.id: s for s in GATEWAY_SIGNALS}


def spellings(family: str) -> tuple[str, ...]:
    """The `smg_` name and its older `sgl_router_` spellings of the same meaning."""
    return gateway_releases.spellings(family)
