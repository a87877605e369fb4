"""What the serving signals (catalog_serving) keep: the admission cap and its hit window, one sample per scrape
of the serving counters (idle scheduler time, PD failures, cache tiers, dropped tokens, DP-rank tokens), and
the durations of this server's start-ups and weight updates."""
from __future__ import annotations

import math
from collections import deque

from exporter.ingest.events import Event
from exporter.state.parts import StatePart
from exporter.state.ranks import rank_label
from exporter.state.windows import MAX_WINDOW_SAMPLES, HitWindow

MAX_DURATIONS = 32        # start-ups and weight updates remembered (the newest)
MAX_GROUPS = 64           # label values kept per split counter (tiers, DP ranks, schedulers)
UNBOUNDED = 2 ** 62       # a cap this large is "no cap" (0.4.9-0.5.2 default: sys.maxsize)
TIER_MODES = {"device_hit": "device", "host_hit": "host", "storage_hit": "storage"}


class ServingFeed(StatePart):
    """ServerState's serving part. Its windows are expired by ServerState.expire (admission, serving_samples)."""

    params: dict
    log_fed: bool
    epoch_started: float | None

    def _serving_init(self, params: dict, windows: dict) -> None:
        admission = params.get("admission_blocked") or {}
        self._admission_fill = admission.get("fill")
        self._configured_cap = admission.get("max_queued_requests") or None
        self._queued_cap: float | None = None     # the cap in force, as a queue length (fill x cap)
        self.admission = HitWindow(windows["admission_blocked"])
        self.serving_samples: deque = deque()      # (t, sample) per scrape, see _serving_sample
        self.serving_window = max(windows[s] for s in ("scheduler_idle_waiting", "pd_transfer_failures",
                                                       "hicache_tokens_dropped", "dp_attention_imbalance"))
        self._serving_last: dict[str, dict] = {}   # counter -> {series labels: last value}
        self._serving_last_t: float | None = None
        # durations: kind ("startup", "weight_load", "weight_update") -> deque of (t ended, seconds)
        self.durations: dict[str, deque] = {}
        # kind -> (t ended, seconds, the median of the ones before, how many those are): the latest duration
        # against its history (startup_regression's `history`), worked out when it is added; kinds with two or
        # more durations only
        self.duration_baselines: dict[str, tuple] = {}
        self._duration_history = int((params.get("startup_regression") or {}).get("history", 0))
        self._startup_began: float | None = None
        self._weight_began: dict[str, float] = {}
        self._weight_seconds: float | None = None
        self._last_metric_durations: dict[str, dict] = {}

    # ------------------------------------------------------------------------------------------ admission cap
    def queued_cap(self) -> tuple[float | None, str]:
        """(--max-queued-requests in force or None, where it comes from). None with "unbounded": no cap."""
        if "max_queued_requests" in self.server_args:
            raw = self.server_args["max_queued_requests"]
            if raw is None or (isinstance(raw, (int, float)) and not isinstance(raw, bool) and raw >= UNBOUNDED):
                return None, "unbounded"
            if isinstance(raw, (int, float)) and not isinstance(raw, bool) and raw > 0:
                return float(raw), "server_args"
        if self._configured_cap:
            return float(self._configured_cap), "configuration"
        if self.server_args:     # every field is printed: a release without the flag (before 0.4.9) has no cap
            return None, "unbounded"
        return None, "unknown"

    def _admission_limits(self) -> None:
        """The queue length that counts as "at the cap" (ServerState._limits calls it when server_args change)."""
        cap, _ = self.queued_cap()
        fill = self._admission_fill
        self._queued_cap = None if cap is None or fill is None else fill * cap

    def admission_sample(self, now: float, queue) -> None:
        """One scheduler's batch sample (from classify): at the cap or not."""
        if self._queued_cap is not None and queue is not None:
            self.admission.push(now, queue >= self._queued_cap)

    # -------------------------------------------------------------------------------------------- start-ups
    def serving_event(self, kind: str, ev: Event, now: float) -> None:
        """Start-up lines: server_args opens a start-up, load weight begin/end time each rank's weights, the
        ready line closes it."""
        f = ev.fields
        if kind == "server_args":
            self._startup_began = now
            self._weight_began = {}
            self._weight_seconds = None
        elif kind == "load_weight":
            label = rank_label(ev.rank)
            if f.get("phase") == "begin":
                if len(self._weight_began) < MAX_GROUPS:
                    self._weight_began[label] = now
            else:
                began = self._weight_began.pop(label, None)
                took = f.get("elapsed_seconds")
                if took is None and began is not None:
                    took = now - began
                if took is not None:
                    self._weight_seconds = max(self._weight_seconds or 0.0, float(took))
        elif kind == "server_ready" and self._startup_began is not None:
            self._add_duration("startup", now, now - self._startup_began)
            if self._weight_seconds is not None:
                self._add_duration("weight_load", now, self._weight_seconds)
            self._startup_began = None

    def _add_duration(self, kind: str, now: float, seconds: float) -> None:
        if not math.isfinite(seconds) or seconds < 0:
            return
        items = self.durations.setdefault(kind, deque(maxlen=MAX_DURATIONS))
        items.append((now, seconds))
        if len(items) >= 2 and self._duration_history:      # (0: startup_regression is off, nobody compares)
            before = [s for _, s in list(items)[-1 - self._duration_history:-1]]
            self.duration_baselines[kind] = (now, seconds, _median(before), len(before))

    # ---------------------------------------------------------------------------------------------- scrapes
    def serving_scrape(self, scrape, now: float) -> None:
        """One scrape's serving sample (growth of the serving counters since the previous scrape)."""
        dt = None if self._serving_last_t is None else now - self._serving_last_t
        self._serving_last_t = now
        if not self.log_fed:
            self._metric_durations(scrape, now)
        sample = {
            "dt": dt,
            "idle": self._idle_with_queue(scrape, dt),
            "transfer_failed": self._growth(scrape, "transfer_failed"),
            "bootstrap_failed": self._growth(scrape, "bootstrap_failed"),
            "prefill_retries": self._growth(scrape, "prefill_retries"),
            "tiers": self._growth_by(scrape, "effective_tokens", "mode"),
            "sources": self._growth_by(scrape, "cached_tokens", "cache_source"),
            "dropped": self._growth(scrape, "hicache_dropped"),
            "backup": self._growth(scrape, "hicache_backup"),
            "dp_tokens": self._dp_tokens(scrape),
        }
        if dt is None or dt <= 0:
            return
        self.serving_samples.append((now, sample))
        if len(self.serving_samples) > MAX_WINDOW_SAMPLES:
            self.serving_samples.popleft()

    def _grown(self, scrape, name: str) -> dict | None:
        """{series labels: growth since the last scrape} of SGLang counter `name` (a reset counts all of the new
        value, as Prometheus' increase() does); None when the scrape lacks it or this is its first sight."""
        series = scrape.counter_series.get(name)
        if series is None:
            return None
        last = self._serving_last.get(name)
        kept = dict(list(series.items())[:4 * MAX_GROUPS])
        self._serving_last[name] = kept
        if last is None:
            return None
        return {key: (v - last[key] if v >= last[key] else v) for key, v in kept.items() if key in last}

    def _growth(self, scrape, name: str) -> float | None:
        grown = self._grown(scrape, name)
        return None if grown is None else float(sum(grown.values()))

    def _growth_by(self, scrape, name: str, label: str) -> dict | None:
        grown = self._grown(scrape, name)
        if grown is None:
            return None
        out: dict[str, float] = {}
        for key, v in grown.items():
            value = dict(key).get(label, "")
            if value in out or len(out) < MAX_GROUPS:
                out[value] = out.get(value, 0.0) + v
        return out

    def _idle_with_queue(self, scrape, dt: float | None) -> dict | None:
        """{scheduler rank label: (idle seconds since the last scrape, its queue)}; None without the idle
        counter (or on its first sight)."""
        grown = self._grown(scrape, "idle_seconds")
        if grown is None or not dt or dt <= 0:
            return None
        out: dict[str, tuple] = {}
        for key, idle in grown.items():
            labels = dict(key)
            rank = tuple(int(labels[k]) if str(labels.get(k, "")).isdigit() else None
                         for k in ("dp_rank", "tp_rank", "pp_rank"))
            queue = (scrape.ranks.get(rank) or {}).get("queue")
            if len(out) < MAX_GROUPS:
                out[_rank_text(labels)] = (idle, float(queue or 0))
        return out

    def _dp_tokens(self, scrape) -> dict | None:
        """{dp_rank: scheduled tokens since the last scrape} (dp_attention_tokens_total{kind="scheduled"})."""
        grown = self._grown(scrape, "dp_tokens")
        if grown is None:
            return None
        out: dict[str, float] = {}
        for key, v in grown.items():
            labels = dict(key)
            if labels.get("kind") != "scheduled":
                continue
            rank = str(labels.get("dp_rank", labels.get("tp_rank", "")))
            if rank in out or len(out) < MAX_GROUPS:
                out[rank] = max(out.get(rank, 0.0), v)     # TP ranks of one DP rank repeat its tokens
        return out

    def _metric_durations(self, scrape, now: float) -> None:
        """A start-up or weight update /metrics reports that was not there at the last scrape: its duration."""
        for value, kind in (("startup_seconds", "startup"), ("weight_update_seconds", "weight_update")):
            series = scrape.gauge_series.get(value)
            if not series:
                continue
            last = self._last_metric_durations.get(value)
            self._last_metric_durations[value] = dict(series)
            if series == last:
                continue
            if kind == "startup":
                # the largest phase: the whole start-up where a phase covers it, else its longest part
                self._add_duration(kind, now, max(series.values()))
            else:
                changed = [v for k, v in series.items() if last is None or last.get(k) != v]
                self._add_duration(kind, now, max(changed))

    def forget_serving(self) -> None:
        self.serving_samples.clear()
        self._serving_last_t = None

    def expire_serving(self, now: float) -> None:
        edge = now - self.serving_window
        while self.serving_samples and self.serving_samples[0][0] < edge:
            self.serving_samples.popleft()


def _rank_text(labels: dict) -> str:
    parts = [f"{tag}{labels[key]}" for tag, key in (("DP", "dp_rank"), ("TP", "tp_rank"), ("PP", "pp_rank"))
             if labels.get(key) not in (None, "")]
    return " ".join(parts)


def _median(values: list) -> float:
    """statistics.median of a non-empty list (the mean of the two middle values for an even count), without
    importing statistics, which imports fractions, decimal and random for it at every start-up."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
