"""Scrapes SGLang's /metrics and folds its many spellings into the few values the signals need.

Tolerates `sglang:` and `sglang_` prefixes, per-pid series, the renames of SGLang 0.3.6-0.5.23 (reference
§5.4) and the old retraction gauge as well as the newer counter. Never raises: a failed scrape is a result
with success=False and the reason.
"""
from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

_GAUGES = {"num_queue_reqs": "queue", "num_running_reqs": "running", "token_usage": "usage",
           "gen_throughput": "throughput", "is_cuda_graph": "cuda_graph"}
# counters summed over series -> our name; the first present of each group wins
_COUNTERS = {"generation_tokens": ("generation_tokens",), "prompt_tokens": ("prompt_tokens",),
             "retracted_requests": ("num_retracted_requests", "total_retracted_reqs")}
HISTOGRAMS = ("time_to_first_token_seconds", "inter_token_latency_seconds", "time_per_output_token_seconds",
              "e2e_request_latency_seconds")


@dataclass
class ScrapeResult:
    success: bool
    duration: float = 0.0
    error: str = ""
    ranks: dict = field(default_factory=dict)        # (dp, tp, pp) -> {queue, running, usage, ...}
    counters: dict = field(default_factory=dict)     # our name -> summed value
    histograms: dict = field(default_factory=dict)   # SGLang name w/o prefix -> {le: cumulative count}
    model: str = ""
    max_running_requests: int | None = None
    families: int = 0


def _short(name: str) -> str | None:
    for prefix in ("sglang:", "sglang_"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return None


def _rank(labels: dict) -> tuple:
    def num(key):
        v = labels.get(key)
        return int(v) if v is not None and v.isdigit() else None
    return (num("dp_rank"), num("tp_rank"), num("pp_rank"))


def parse_exposition(text: str) -> ScrapeResult:
    """Normalise one /metrics text. Raises ValueError on text that is not the Prometheus format."""
    res = ScrapeResult(success=True)
    counters: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        res.families += 1
        short = _short(fam.name)
        if short is None:
            continue
        if short.endswith("_total"):
            short = short[:-len("_total")]
        if short in _GAUGES:
            attr = _GAUGES[short]
            for s in fam.samples:
                if s.labels.get("priority"):     # per-priority series repeat the total (priority="")
                    continue
                vals = res.ranks.setdefault(_rank(s.labels), {})
                vals[attr] = bool(s.value) if attr == "cuda_graph" else s.value
                res.model = res.model or s.labels.get("model_name", "")
        elif short in HISTOGRAMS:
            buckets = res.histograms.setdefault(short, {})
            for s in fam.samples:
                if s.name.endswith("_bucket") and "le" in s.labels:
                    le = float(s.labels["le"])
                    buckets[le] = buckets.get(le, 0.0) + s.value
        else:
            for ours, names in _COUNTERS.items():
                if short in names:
                    total = sum(s.value for s in fam.samples
                                if not s.name.endswith("_created") and not s.labels.get("priority"))
                    counters[f"{ours}:{names.index(short)}"] = total
    for ours in _COUNTERS:
        present = sorted(k for k in counters if k.startswith(ours + ":"))
        if present:
            res.counters[ours] = counters[present[0]]
    return res


def scrape(url: str, timeout: float, max_bytes: int) -> ScrapeResult:
    """GET `url` (SGLang's /metrics) within `timeout` seconds and at most `max_bytes`."""
    start = time.monotonic()
    deadline = start + timeout
    try:
        req = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            length = resp.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > max_bytes:
                raise ValueError(f"response larger than {max_bytes} bytes")
            # read in pieces and check the deadline between them: a target that dribbles bytes slower than
            # the socket timeout would otherwise hold one scrape far past `timeout`
            chunks, size = [], 0
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("timed out")
                _set_timeout(resp, remaining)
                chunk = resp.read1(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
                if size > max_bytes:
                    raise ValueError(f"response larger than {max_bytes} bytes")
            body = b"".join(chunks)
        res = parse_exposition(body.decode("utf-8", errors="replace"))
    except urllib.error.HTTPError as exc:
        res = ScrapeResult(False, error=f"HTTP {exc.code}")
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        res = ScrapeResult(False, error=f"unreachable: {reason}")
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        res = ScrapeResult(False, error=f"not a Prometheus exposition: {exc}"[:300])
    res.duration = time.monotonic() - start
    return res


def _set_timeout(resp, seconds: float) -> None:
    """Shrink the socket timeout of a response to what is left of the scrape's deadline (best effort)."""
    try:
        resp.fp.raw._sock.settimeout(max(seconds, 0.001))
    except (AttributeError, OSError):
        pass


def metrics_url(base: str) -> str:
    base = base.rstrip("/")
    return base if base.endswith("/metrics") else base + "/metrics"
