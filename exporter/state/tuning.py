"""What the batch lines of a scheduler's leader say for the tuning signals: prefills cut at the chunk size,
prefix cache hits, speculative accept lengths and PD queue backlogs, in bounded windows."""
from __future__ import annotations

from exporter.catalog import SIGNALS_BY_ID
from exporter.state.windows import HitWindow, TimeWindow

# PD-disaggregation queue counts of batch lines, every release's spelling: prefill servers' bootstrap /
# pre-allocation and in-flight queues, decode servers' pre-allocation and transfer queues (docs/log-events.md)
PD_FIELDS = ("bootstrap_req", "prealloc_req", "unbootstrapped_req", "inflight_req", "transferring_req",
             "transfer_req")
# what the tallies read of each kind of line, in the order of its numbers (the PD queues are summed)
_READS = {"prefill_batch": ("new_token", "cached_token", "queue_req"), "decode_batch": ("spec_accept_length",)}
# those fields as batch lines print them (docs/log-events.md), for line_reader
_PRINTED = {"new_token": "#new-token", "cached_token": "#cached-token", "queue_req": "#queue-req",
            "spec_accept_length": "accept len", "bootstrap_req": "#bootstrap-req", "prealloc_req": "#prealloc-req",
            "unbootstrapped_req": "#unbootstrapped-req", "inflight_req": "#inflight-req",
            "transferring_req": "#transferring-req", "transfer_req": "#transfer-req"}
_NUMBER = frozenset("0123456789.")


def numbers(kind: str, f: dict) -> tuple:
    """The numbers the tallies read of a batch line's Event fields: prefill (new, cached, queue, PD queues),
    decode (accept length, PD queues); None where the line does not print one."""
    pd = [f[k] for k in PD_FIELDS if k in f]
    return (*(f.get(k) for k in _READS[kind]), sum(pd) if pd else None)


def line_reader(kind: str, text: str, fields: dict):
    """`numbers` of every line of a parser's learned layout, read from its text, given one line of it and that
    line's Event fields; None when a number cannot be located. A layout's lines share their skeleton (every
    digit at the same offset), so a number found in one line sits at the same offsets in all; each is checked
    against the Event here, once per layout. Slicing a few numbers costs a line a fraction of its Event."""
    spans = {}
    for name in (*_READS[kind], *PD_FIELDS):
        value = fields.get(name)
        if value is None:
            continue
        key = _PRINTED[name]
        at, lead = -1, ""
        for lead in (", ", ". "):    # not inside another key ("block accept len")
            at = text.find(f"{lead}{key}: ")
            if at >= 0:
                break
        if at < 0:
            return None
        start = end = at + len(lead) + len(key) + 2
        while end < len(text) and text[end] in _NUMBER:
            end += 1
        conv = int if value.__class__ is int else float
        try:
            if conv(text[start:end]) != value:
                return None
        except ValueError:
            return None
        spans[name] = (start, end, conv)
    main = tuple(spans.get(name) for name in _READS[kind])
    return _reader(main, tuple(spans[name][:2] for name in PD_FIELDS if name in spans))


_READERS: dict[tuple, object] = {}     # (main spans, PD spans) -> their reader, shared by layouts alike


def _reader(main: tuple, pd: tuple):
    """`read(text)` of a layout: each number of `main` ((start, end, int or float) or None) and the sum of the
    `pd` numbers ((start, end), integers), sliced at those offsets by a generated expression (a leader's prefill
    line is read at every line; generators per call cost it more than its numbers). The slices are globals of
    the function, as in grammar.layouts: `text[a:b]` would build the slice at every call."""
    read = _READERS.get((main, pd))
    if read is None:
        namespace: dict = {}

        def number(at: tuple, conv) -> str:
            name = f"s{len(namespace)}"
            namespace[name] = slice(at[0], at[1])
            return f"{conv.__name__}(text[{name}])"
        code = [number(at, at[2]) if at else "None" for at in main]
        code.append(" + ".join(number(at, int) for at in pd) if pd else "None")
        exec(f"def read(text):\n    return ({', '.join(code)},)\n", namespace)  # noqa: S102 - built above
        if len(_READERS) >= 4096:
            _READERS.clear()
        read = _READERS[(main, pd)] = namespace["read"]
    return read


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
        # prefix reuse: prefills that computed or reused tokens, hit = queued with a high hit rate
        self.prefix = HitWindow(window["prefix_reuse_missed"]).series(0)
        # long prompts: series 0 = prefills (chunk size known), hit = at the chunk size; series 1 = those at the
        # chunk size, hit = requests queued behind them
        chunked = HitWindow(window["long_prompts_dominate"], series=2)
        self.chunked, self.chunked_queued = chunked.series(0), chunked.series(1)
        self.spec = TimeWindow(window["spec_accept_low"])      # (t, accept length) of speculating decode lines
        self.pd = HitWindow(window["pd_backlog"]).series(0)    # lines printing PD queues, hit = backlog
        self.windows = (self.prefix.window, chunked, self.spec, self.pd.window)    # ServerState.expire drops from them

    def reads(self, kind: str, values: tuple) -> bool:
        """Whether a batch line of this kind with these `numbers` feeds any tally (a learned layout prints the
        same fields in all its lines, so the answer is kept per layout)."""
        if values[-1] is not None and self._max_pd is not None:
            return True
        if kind == "prefill_batch":
            return self.wants_prefill and values[0] is not None
        return values[0] is not None

    def prefill(self, now: float, new, cached, queue, pd, chunk) -> None:
        """A leader's prefill line; `chunk` is the chunked_prefill_size in force (None: not known, <= 0: off)."""
        if new.__class__ is int and queue.__class__ is int:
            if self._min_hit is not None and cached.__class__ is int and new + cached > 0:
                b = self.prefix.window.bucket(now)
                b[0] += 1
                b[1] += queue > 0 and cached >= self._min_hit * (new + cached)
            if self._chunk_fraction is not None and chunk is not None and chunk > 0:
                b = self.chunked.window.bucket(now)
                b[0] += 1
                if new >= self._chunk_fraction * chunk:
                    b[1] += 1
                    b[2] += 1
                    b[3] += queue > 0
        if pd is not None and self._max_pd is not None:
            self.pd.window.push(now, pd > self._max_pd)

    def decode(self, now: float, accept, pd) -> None:
        """A leader's decode line: its accept length (speculative decoding on) and PD queues."""
        if accept.__class__ in (int, float) and accept > 0:
            self.spec.push(now, float(accept))
        if pd is not None and self._max_pd is not None:
            self.pd.window.push(now, pd > self._max_pd)

    def spec_mean(self, since: float) -> tuple[float | None, int]:
        """(mean accept length of the lines since `since`, their number)."""
        n = self.spec.count_since(since)
        return (self.spec.weight_since(since) / n if n else None), n

    def clear(self) -> None:
        """A new start-up: what the last process's lines said no longer counts."""
        for w in self.windows:
            w.clear()
