"""Scrapes SGLang's /metrics and folds its many spellings into the few values the signals need.

Tolerates `sglang:` and `sglang_` prefixes, per-pid series and every rename of SGLang 0.3.5-0.5.23: which family
feeds which value is the catalog's table (exporter/catalog/native.py). A result says which values it fed
(`present`) and which SGLang families it carried (`seen`), so a signal whose inputs the release does not
export is unknown, never judged on nothing.

Never raises, whatever the peer does: a failed scrape is a result with success=False and a reason that starts
with its category ("refused", "unreachable", "timeout", "http 500", "protocol", "too large", "not an
exposition", "internal"). The whole scrape (connect, headers, body) is bounded by its timeout, even against a
peer that sends a byte at a time (the GET: http_get.py). Every number kept is finite and within its range in
catalog.VALUE_RANGES; the others are dropped and counted in `rejected` by reason.
"""
from __future__ import annotations

import http.client
import io
import math
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from prometheus_client.parser import text_fd_to_metric_families

from exporter.catalog import VALUE_RANGES
from exporter.catalog.native import NATIVE_VALUES, SERIES_FILTERS
from exporter.ingest import http_get

# SGLang's families -> our values: one table, in the catalog (exporter/catalog/native.py)
_BY_FAMILY: dict[str, list] = {}
for _v in NATIVE_VALUES:
    for _f in _v.families:
        _BY_FAMILY.setdefault(_f, []).append((_v.name, _v.kind, _v.families.index(_f)))
_COUNTERS = tuple(v.name for v in NATIVE_VALUES if v.kind == "counter")
_SUMMED_GAUGES = frozenset(v.name for v in NATIVE_VALUES if v.per_process)   # one series per pid: they add up
_SERIES_GAUGES = frozenset(v.name for v in NATIVE_VALUES if v.per_series)    # a label splits them: keep each
MAX_GAUGE_SERIES = 64  # series kept per split gauge (phases, sources)
MAX_SEEN = 512         # SGLang family names kept per scrape (to tell the release's families; bounded)
HISTOGRAMS = tuple(f for v in NATIVE_VALUES if v.kind == "histogram" for f in v.families)
REJECT_REASONS = ("non_finite", "out_of_range", "bad_le", "too_many_series")
# what one scrape keeps is bounded whatever the page (a page is parsed as it arrives, so its size alone costs
# no memory): rank label sets, series per counter, bucket bounds per histogram. SGLang's own page has a few of
# each; past a bound the samples are rejected as too_many_series (a counter or histogram past it is dropped
# whole: a sum or a distribution missing a part would be wrong)
MAX_SCRAPE_RANKS = 256
MAX_COUNTER_SERIES = 4096
MAX_BUCKETS = 256


@dataclass
class ScrapeResult:
    success: bool
    duration: float = 0.0
    error: str = ""
    ranks: dict = field(default_factory=dict)        # (dp, tp, pp) -> {gauge value name: value}
    counters: dict = field(default_factory=dict)     # our name -> summed value
    counter_series: dict = field(default_factory=dict)   # our name -> {series labels: value}, for resets
    gauge_series: dict = field(default_factory=dict)     # our name -> {series labels: value}, split gauges
    histograms: dict = field(default_factory=dict)   # SGLang name w/o prefix -> {le: cumulative count}
    model: str = ""
    max_running_requests: int | None = None
    families: int = 0
    rejected: dict = field(default_factory=dict)     # reason (REJECT_REASONS) -> samples dropped
    present: set = field(default_factory=set)        # the values (catalog_native) this scrape fed
    seen: set = field(default_factory=set)           # SGLang families it carried (short, counters w/o _total)


def _short(name: str) -> str | None:
    for prefix in ("sglang:", "sglang_"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return None


def _rank(labels: dict) -> tuple:
    def num(key):
        v = labels.get(key)
        # ASCII digits only: str.isdigit() accepts "²", which int() refuses
        return int(v) if v is not None and v.isascii() and v.isdigit() and len(v) <= 6 else None
    return (num("dp_rank"), num("tp_rank"), num("pp_rank"))


def _believable(res: ScrapeResult, kind: str, value) -> bool:
    """True when `value` may be a `kind` (catalog.VALUE_RANGES); otherwise the sample is counted as rejected."""
    try:
        v = float(value)
    except (OverflowError, TypeError, ValueError):    # an integer too large for a float
        v = math.nan
    if not math.isfinite(v):
        reason = "non_finite"
    else:
        low, high = VALUE_RANGES[kind]
        if low <= v <= high:
            return True
        reason = "out_of_range"
    _reject(res, reason)
    return False


def _reject(res: ScrapeResult, reason: str, n: int = 1) -> None:
    res.rejected[reason] = res.rejected.get(reason, 0) + n


def _bucket_bound(res: ScrapeResult, le: str) -> float | None:
    """A bucket's upper bound: a number or +Inf; anything else (NaN, -Inf, text) is a malformed sample."""
    try:
        bound = float(le)
    except ValueError:
        bound = math.nan
    if math.isnan(bound) or bound == -math.inf:
        res.rejected["bad_le"] = res.rejected.get("bad_le", 0) + 1
        return None
    return bound


class NotExposition(ValueError):
    """The page is not in the Prometheus text format; the message is the parser's."""


def parse_exposition(text: str) -> ScrapeResult:
    """Normalise one /metrics text. Raises ValueError (NotExposition) on text that is not the Prometheus format.

    A gauge sample out of range is dropped alone; a bad sample of a counter or histogram drops that counter or
    histogram from this result (a sum or a distribution missing a part would be wrong, not just smaller)."""
    fold = _Fold()
    fold.read(io.StringIO(text))
    return fold.result()


def _parts(lines: Iterable[str]) -> Iterator[str]:
    """`lines` with every family longer than FAMILY_PART samples cut into parts. The parser holds a family's
    samples until the family ends, so one family as large as the page would be held whole (~10 bytes of
    Python objects per byte of text); a cut is a HELP line of an empty family named _CUT, after which the
    family's own HELP and TYPE lines are given again and its samples go on. The folding adds parts up."""
    head_name: str | None = None
    head: list[str] = []
    samples = 0
    for line in lines:
        if line.startswith("#"):
            words = line.split(None, 3)
            if len(words) >= 3 and words[1] in ("HELP", "TYPE"):
                if words[2] != head_name:
                    head_name, head = words[2], []
                head.append(line)
                samples = 0
        elif line.strip():
            if head and samples >= FAMILY_PART:
                yield f"# HELP {_CUT}\n"
                yield from head
                samples = 0
            samples += 1
        yield line


FAMILY_PART = 2000     # samples of one family handed to the parser at once (bounds its memory)
_CUT = "sglang_exporter_cut"


class _Fold:
    """Folds the families of one page, as the parser yields them, into a ScrapeResult."""

    def __init__(self) -> None:
        self.res = ScrapeResult(success=True)
        self.counters: dict[str, dict | None] = {}   # "<our name>:<family rank>" -> series (None: a bad sample)
        self.bad_histograms: set[str] = set()
        self._last = ""

    def read(self, lines: Iterable[str]) -> None:
        """Parse and fold `lines`. Errors of the text become NotExposition; whatever the line source raises
        (a timeout, a reply too large, a connection reset) passes through as it is."""
        families = iter(text_fd_to_metric_families(_parts(lines)))  # type: ignore[arg-type]  # any iterable
        while True:
            try:
                fam = next(families)
            except StopIteration:
                return
            except (http_get.Failed, OSError, http.client.HTTPException):
                raise
            except Exception as exc:  # noqa: BLE001 - the parser's errors are not all ValueError
                raise NotExposition(str(exc)) from None
            self.family(fam)

    def family(self, fam) -> None:
        res = self.res
        if fam.name == _CUT:
            return
        if fam.name != self._last:          # the parts of one cut family are one family
            res.families += 1
            self._last = fam.name
        short = _short(fam.name)
        if short is None:
            return
        if short.endswith("_total"):
            short = short[:-len("_total")]
        if len(res.seen) < MAX_SEEN:
            res.seen.add(short)
        for ours, kind, rank in _BY_FAMILY.get(short, ()):
            _read_family(self, fam, short, ours, kind, rank)

    def result(self) -> ScrapeResult:
        res = self.res
        for short in self.bad_histograms:
            res.histograms.pop(short, None)
        for short in res.histograms:
            res.present.update(ours for ours, _, _ in _BY_FAMILY.get(short, ()))
        counters = {k: v for k, v in self.counters.items() if v is not None}
        for ours in _COUNTERS:
            present = sorted(k for k in counters if k.startswith(ours + ":"))
            if present:
                series = counters[present[0]]
                res.counter_series[ours] = series
                res.counters[ours] = sum(series.values())
                res.present.add(ours)
        return res


def _read_family(fold: _Fold, fam, short: str, ours: str, kind: str, rank: int) -> None:
    """Fold one SGLang family (or one part of it) into value `ours` of the result."""
    res = fold.res
    if kind == "gauge":
        for s in fam.samples:
            if s.labels.get("priority"):     # per-priority series repeat the total (priority="")
                continue
            if not _believable(res, ours, s.value):
                continue
            if ours in _SERIES_GAUGES:
                split = res.gauge_series.setdefault(ours, {})
                if len(split) < MAX_GAUGE_SERIES:
                    split[tuple(sorted(s.labels.items()))] = s.value
            rank_key = _rank(s.labels)
            vals = res.ranks.get(rank_key)
            if vals is None:
                if len(res.ranks) >= MAX_SCRAPE_RANKS:
                    _reject(res, "too_many_series")
                    continue
                vals = res.ranks[rank_key] = {}
            if ours == "cuda_graph":
                vals[ours] = bool(s.value)
            elif ours in _SUMMED_GAUGES:
                vals[ours] = vals.get(ours, 0.0) + s.value
            else:
                vals[ours] = s.value
            res.present.add(ours)
            res.model = res.model or s.labels.get("model_name", "")
    elif kind == "histogram":
        buckets: dict | None = {}
        for s in fam.samples:
            if s.name.endswith("_bucket") and "le" in s.labels:
                le = _bucket_bound(res, s.labels["le"])
                if le is None or not _believable(res, "histogram_bucket", s.value):
                    buckets = None
                elif buckets is not None:
                    buckets[le] = buckets.get(le, 0.0) + s.value
        if buckets is None:
            fold.bad_histograms.add(short)
        elif short not in fold.bad_histograms:
            merged = res.histograms.setdefault(short, {})
            for le, n in buckets.items():
                merged[le] = merged.get(le, 0.0) + n
            if len(merged) > MAX_BUCKETS:
                _reject(res, "too_many_series", len(merged))
                fold.bad_histograms.add(short)
                res.histograms.pop(short)
    else:
        series: dict | None = {}
        wanted = SERIES_FILTERS.get(ours)
        for s in fam.samples:
            if s.name.endswith("_created") or s.labels.get("priority"):
                continue
            if wanted is not None and not wanted(s.labels):
                continue
            if not _believable(res, ours, s.value):
                series = None
            elif series is not None:
                labels = tuple(sorted(s.labels.items()))
                series[labels] = series.get(labels, 0.0) + s.value
        key = f"{ours}:{rank}"
        if series is None:
            fold.counters[key] = None
        elif series or (wanted is None and key not in fold.counters):
            kept = fold.counters.setdefault(key, {})
            if kept is not None:
                for k, v in series.items():
                    kept[k] = kept.get(k, 0.0) + v
                if len(kept) > MAX_COUNTER_SERIES:
                    _reject(res, "too_many_series", len(kept))
                    fold.counters[key] = None


# ------------------------------------------------------------------------------------------------ the scrape
def _reason(exc: BaseException, timeout: float) -> str:
    """A failed scrape's reason: a page that is no exposition, else what the GET met (http_get.reason)."""
    if isinstance(exc, NotExposition):
        return http_get.printable(f"not an exposition: {exc}")[:http_get.MAX_REASON]
    return http_get.reason(exc, timeout)


def scrape(url: str, timeout: float, max_bytes: int) -> ScrapeResult:
    """GET `url` (SGLang's /metrics) within `timeout` seconds and at most `max_bytes`. Never raises."""
    start = time.monotonic()
    fold = _Fold()
    try:
        # the page is parsed and folded as it arrives, never held whole, all of it within the deadline
        http_get.get_lines(url, start + timeout, timeout, max_bytes, fold.read)
        res = fold.result()
    except Exception as exc:  # noqa: BLE001 - whatever the peer does, a scrape ends with a reason
        res = ScrapeResult(False, error=_reason(exc, timeout))
    res.duration = time.monotonic() - start
    return res


def metrics_url(base: str) -> str:
    """SGLang's /metrics under `base` (its server URL, or already its /metrics), the query string kept."""
    u = urlsplit(base)
    path = u.path.rstrip("/")
    return u._replace(path=path if path.endswith("/metrics") else path + "/metrics").geturl()
