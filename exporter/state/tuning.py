"""What the batch lines of a scheduler's leader say for the tuning signals: prefills cut at the chunk size,
prefix cache hits, speculative accept lengths and PD queue backlogs, in bounded windows."""
from __future__ import annotations

from exporter.catalog import SIGNALS_BY_ID
from exporter.state.windows import HitWindow, TimeWindow

# PD-disaggregation queue counts of batch lines, every release's spelling: prefill servers' bootstrap /
# pre-allocation and in-flight queues, decode servers' pre-allocation and transfer queues (docs/log-events.md)
PD_FIELDS = ("bootstrap_req", "prealloc_req", "unbootstrapped_req", "inflight_req", "transferring_req",
             "transfer_req")
_PREFILL_FIELDS = frozenset(("new_token", *PD_FIELDS))
_DECODE_FIELDS = frozenset(("spec_accept_length", *PD_FIELDS))


class LogTuning:
    """Per-sample tallies of the tuning signals that batch lines can feed; thresholds are read once, as
    ServerState.classify reads its own, so a line costs a few comparisons."""

    def __init__(self, params: dict):
        def param(sid, key):
            return params[sid][key] if params.get(sid) else None
        window = {sid: SIGNALS_BY_ID[sid].window_seconds for sid in
                  ("prefix_reuse_missed", "long_prompts_dominate", "spec_accept_low", "pd_backlog")}
        self._min_hit = param("prefix_reuse_missed", "min_hit_rate")
        self._chunk_fraction = param("long_prompts_dominate", "chunk_fraction")
        self._max_pd = param("pd_backlog", "max_queue")
        self.wants_prefill = self._min_hit is not None or self._chunk_fraction is not None
        # prefix reuse: series 0 = prefills that computed or reused tokens, hit = queued with a high hit rate
        self.prefix = HitWindow(window["prefix_reuse_missed"]).series(0)
        # long prompts: series 0 = prefills (chunk size known), hit = at the chunk size; series 1 = those at the
        # chunk size, hit = requests queued behind them
        chunked = HitWindow(window["long_prompts_dominate"], series=2)
        self.chunked, self.chunked_queued = chunked.series(0), chunked.series(1)
        self.spec = TimeWindow(window["spec_accept_low"])      # (t, accept length) of speculating decode lines
        self.pd = HitWindow(window["pd_backlog"]).series(0)    # lines printing PD queues, hit = backlog
        self._windows = (self.prefix.window, chunked, self.spec, self.pd.window)

    def reads(self, kind: str, fields) -> bool:
        """Whether batch lines of this kind with these fields feed any tally (a learned layout's fields are
        the same for all its lines, so the answer is kept per layout)."""
        if kind == "prefill_batch":
            return self.wants_prefill and "new_token" in fields or any(k in fields for k in PD_FIELDS)
        return not _DECODE_FIELDS.isdisjoint(fields)

    def prefill(self, now: float, f: dict, chunk) -> None:
        """A leader's prefill line; `chunk` is the chunked_prefill_size in force (None: not known, <= 0: off)."""
        new, queue = f.get("new_token"), f.get("queue_req")
        if new.__class__ is int and queue.__class__ is int:
            if self._min_hit is not None:
                cached = f.get("cached_token")
                if cached.__class__ is int and new + cached > 0:
                    w = self.prefix.window
                    b = w.bucket(now)
                    b[0] += 1
                    b[1] += queue > 0 and cached >= self._min_hit * (new + cached)
            if self._chunk_fraction is not None and chunk is not None and chunk > 0:
                w = self.chunked.window
                b = w.bucket(now)
                b[0] += 1
                if new >= self._chunk_fraction * chunk:
                    b[1] += 1
                    b[2] += 1
                    b[3] += queue > 0
        self._pd(now, f)

    def decode(self, now: float, f: dict) -> None:
        """A leader's decode line: its accept length (speculative decoding on) and PD queues."""
        accept = f.get("spec_accept_length")
        if accept.__class__ in (int, float) and accept > 0:
            self.spec.push(now, float(accept))
        self._pd(now, f)

    def _pd(self, now: float, f: dict) -> None:
        if self._max_pd is None:
            return
        queued = [f[k] for k in PD_FIELDS if k in f]
        if queued:
            self.pd.window.push(now, sum(queued) > self._max_pd)

    def spec_mean(self, since: float) -> tuple[float | None, int]:
        """(mean accept length of the lines since `since`, their number)."""
        n = self.spec.count_since(since)
        return (self.spec.weight_since(since) / n if n else None), n

    def expire(self, now: float) -> None:
        for w in self._windows:
            w.expire(now)

    def clear(self) -> None:
        """A new start-up: what the last process's lines said no longer counts."""
        for w in self._windows:
            if isinstance(w, TimeWindow):
                w.items.clear()
            else:
                w.clear()
