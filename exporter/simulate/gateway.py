"""A stand-in for SGLang's gateway: the /metrics page of an SGLang Model Gateway (`smg_*`) or of the older
sglang-router (`sgl_router_*`) in front of a few workers, in the family names and label names the chosen release
defines (exporter/releases/gateway.json), so the gateway's rules and board can be rehearsed without a fleet.

    sim = GatewaySimulator("1.9.0", workers=3)      # a gateway release; "0.2.4": sglang-router's old names
    sim.advance(60)                                  # a minute of traffic, spread over the healthy workers
    sim.set_healthy(0, False); sim.open_breaker(1)   # incidents
    sim.metrics_text()

Traffic is deterministic (no random draws): every simulated second each healthy worker with a closed breaker
takes `rps_per_worker` requests; a request for which no worker is left is answered 503 (`no_workers`) and its
retries counted exhausted.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from exporter.releases import gateway as releases

OLD_NAMES_UNTIL = (0, 3, 0)      # sglang-router before 0.3.0 spells its families sgl_router_*
CB_CODE = {"closed": 0, "open": 1, "half_open": 2}


def uses_old_names(release: str) -> bool:
    """Whether a release (gateway tag or sglang-router version) exports the sgl_router_ spelling."""
    parts = tuple(int(x) for x in release.split(".")[:3])
    return release in releases.releases("router") and parts < OLD_NAMES_UNTIL


@dataclass
class _Worker:
    url: str
    healthy: bool = True
    breaker: str = "closed"
    active: int = 0
    opens: int = 0


class GatewaySimulator:
    def __init__(self, release: str = "1.9.0", workers: int = 3, rps_per_worker: int = 4,
                 active_per_worker: int = 6, model: str = "m", urls: tuple[str, ...] = ()):
        line = "router" if release in releases.releases("router") else "gateway"
        if release not in releases.releases(line):
            raise ValueError(f"{release}: not a gateway release of exporter/releases/gateway.json "
                             f"(gateway: {releases.releases('gateway')}, router: {releases.releases('router')})")
        self.release, self.old = release, uses_old_names(release)
        # `urls`: the first workers' URLs (a real engine's address, for a joined rehearsal), the rest made up
        self.workers = [_Worker(urls[i] if i < len(urls) else f"http://10.0.1.{i + 1}:30000") for i in range(workers)]
        self.rps, self.active_per_worker, self.model = rps_per_worker, active_per_worker, model
        self.requests = self.ok = self.failed = self.exhausted = 0
        self.duration_sum = 0.0
        self.lock = threading.Lock()

    # ---- incidents
    def set_healthy(self, index: int, healthy: bool) -> None:
        with self.lock:
            self.workers[index].healthy = healthy

    def open_breaker(self, index: int) -> None:
        with self.lock:
            w = self.workers[index]
            if w.breaker != "open":
                w.breaker, w.opens = "open", w.opens + 1

    def close_breaker(self, index: int) -> None:
        with self.lock:
            self.workers[index].breaker = "closed"

    # ---- time
    def advance(self, seconds: int) -> None:
        with self.lock:
            serving = [w for w in self.workers if w.healthy and w.breaker == "closed"]
            for w in self.workers:
                w.active = self.active_per_worker if w in serving else 0
            offered = self.rps * len(self.workers) * seconds
            served = self.rps * len(serving) * seconds
            self.requests += offered
            self.ok += served
            self.failed += offered - served
            self.exhausted += offered - served
            self.duration_sum += served * 1.5

    # ---- exposition
    def metrics_text(self) -> str:
        with self.lock:
            return self._old_text() if self.old else self._smg_text()

    def _family(self, out: list, name: str, kind: str, samples: list[tuple[dict, float]]) -> None:
        fam = releases.family(name)
        for labels, _ in samples:       # never a label the release's code does not emit
            extra = set(labels) - set(fam.labels) - {"le"}
            assert not extra, f"{name}: the simulator would invent labels {sorted(extra)}"
        out.append(f"# HELP {name} {fam.help}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
            out.append(f"{name}{{{inner}}} {value:g}" if inner else f"{name} {value:g}")

    def _smg_text(self) -> str:
        out: list[str] = []
        ws = self.workers
        self._family(out, "smg_worker_health", "gauge", [({"worker": w.url}, 1 if w.healthy else 0) for w in ws])
        self._family(out, "smg_worker_cb_state", "gauge", [({"worker": w.url}, CB_CODE[w.breaker]) for w in ws])
        self._family(out, "smg_worker_cb_transitions_total", "counter",
                     [({"worker": w.url, "from": "closed", "to": "open"}, w.opens) for w in ws])
        self._family(out, "smg_worker_requests_active", "gauge", [({"worker": w.url}, w.active) for w in ws])
        self._family(out, "smg_worker_pool_size", "gauge",
                     [({"connection_mode": "http", "model": self.model, "worker_type": "regular"}, len(ws))])
        self._family(out, "smg_worker_retries_exhausted_total", "counter",
                     [({"endpoint": "chat", "worker_type": "regular"}, self.exhausted)])
        path = "/v1/chat/completions"
        self._family(out, "smg_http_responses_total", "counter",
                     [({"path": path, "status_code": "200", "error_code": ""}, self.ok),
                      ({"path": path, "status_code": "503", "error_code": "no_workers"}, self.failed)])
        route = {"router_type": "http", "backend_type": "regular", "connection_mode": "http", "model": self.model,
                 "endpoint": "chat"}
        duration = releases.family("smg_router_request_duration_seconds")
        out.append(f"# HELP {duration.name} {duration.help}")
        out.append("# TYPE smg_router_request_duration_seconds histogram")
        out.append(_histogram_line("smg_router_request_duration_seconds", route, self.ok, self.duration_sum))
        return "\n".join(out) + "\n"

    def _old_text(self) -> str:
        out: list[str] = []
        ws = self.workers
        self._family(out, "sgl_router_worker_health", "gauge",
                     [({"worker": w.url}, 1 if w.healthy else 0) for w in ws])
        self._family(out, "sgl_router_cb_state", "gauge", [({"worker": w.url}, CB_CODE[w.breaker]) for w in ws])
        self._family(out, "sgl_router_running_requests", "gauge", [({"worker": w.url}, w.active) for w in ws])
        self._family(out, "sgl_router_active_workers", "gauge", [({}, len(ws))])
        self._family(out, "sgl_router_requests_total", "counter", [({"route": "/generate"}, self.requests)])
        self._family(out, "sgl_router_request_errors_total", "counter",
                     [({"route": "/generate", "error_type": "no_workers"}, self.failed)])
        self._family(out, "sgl_router_retries_exhausted_total", "counter", [({"route": "/generate"}, self.exhausted)])
        return "\n".join(out) + "\n"


def _histogram_line(name: str, labels: dict, count: float, total: float) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return (f'{name}_bucket{{{inner},le="+Inf"}} {count:g}\n{name}_sum{{{inner}}} {total:g}\n'
            f"{name}_count{{{inner}}} {count:g}")
