"""Skeleton layouts: a learned shape (or an access / request-log line) at the fixed offsets of one line
skeleton, which the block path reads lines of as rows."""
from __future__ import annotations

import operator
import re
from typing import Any

from exporter.ingest.events import Event, compact_encoder
from exporter.ingest.grammar.patterns import _rid, request_phase
from exporter.ingest.grammar.shapes import _Shape

# Skeletons. A line's skeleton is its bytes with every digit made "0": lines of one learned shape whose numbers
# have the same widths share it (a tp=4 log of 200k lines has about 60 batch-line skeletons), and in a line of
# a known skeleton every group of its shape sits at the same offsets. So the block path reads a batch line by
# one dict lookup of its skeleton and two slices (time, rank tags), and the regex runs once per skeleton.
# Exact: every part of a shape's regex other than [0-9] is literal, so a line whose skeleton is that of a line
# the regex matched is matched by the regex too, with the same group offsets. Only lines no longer than the
# longest line a layout was learned from get a skeleton (see block.py).
_SKELETON = bytes.maketrans(b"123456789", b"000000000")
MAX_SKELETONS = 4096        # per source; when full the table starts afresh
MAX_SKELETON_CHARS = 600    # longer lines (request logs) are never batch lines worth a skeleton
HEAD_CHARS = 64             # a request-log line is known by the skeleton of its head (see _EventLayout)


class _Layout:
    """A learned shape at the offsets of one skeleton (that of the line `text`): the `shape` of the
    rows of its lines (events.py), which keep their text. The parser slices out only the time and rank
    tags; the other groups are sliced out when someone asks for the numbers, the Event or its JSON.

    `values(text)` is the shape's `values` of the line's groups, but a function of the layout's own: the engine
    reads the numbers of every sample (and of each rank's latest unread line), and slicing all the shape's groups
    to convert five of them was most of that cost. Generated on the first call (_first_values) from the shape's
    `value_exprs`, each group read at its constant offsets (see _layout_values): the same expressions, so the
    same values and types, and the parser never pays for it. (Not a __getattr__ filling the unset slot: a class
    with one loses CPython's fast attribute reads, and the parser reads a layout's slots on every line.)"""
    __slots__ = ("shape", "kind", "source", "groups", "dt", "frac", "rank", "spans", "values", "check_at",
                 "check_max", "check_more")
    batch = True                # its rows are batch lines (the engine reads their numbers)
    prefix_json: Any = None     # a custom prefix's level and pid as JSON (CustomLayout), None: none printed

    def __init__(self, shape: _Shape, spans: list, text: str):
        """`spans`: the offsets of the shape's groups in `text`, a line of the skeleton (see layout_of_match)."""
        self.spans = spans
        self.shape, self.kind, self.source = shape, shape.kind, shape.source
        self.groups = operator.itemgetter(*spans)
        self.dt, self.frac, self.rank = spans[0], spans[1] if shape.has_frac else None, spans[shape.rk]
        self.values = self._first_values    # a cycle until the first call replaces it (gc frees unused ones)
        # The skeleton fixes each number's digit count, not its digits: a range that is not 0 <= n < 10**k
        # (a ratio below 2) needs its leading digit looked at when the whole part has the limit's width. A
        # line of this layout is in range when text[check_at] <= check_max (check_at -1: nothing to look at)
        # and check_more(text), when there is more than one such digit (hybrid pools, PD decode lines): the
        # first comparison inline in feed_items, as most lines have one (token usage), a call for the others.
        starts = []
        for k, (width, c) in shape.limits.items():
            whole = text[spans[k]].split(".", 1)[0]
            if len(whole) == width:
                starts.append((spans[k].start, c))
        self.check_at: int = starts[0][0] if starts else -1
        self.check_max: str = starts[0][1] if starts else ""
        self.check_more = _layout_check(tuple(starts[1:])) if len(starts) > 1 else None

    def _first_values(self, text: str) -> tuple:
        """The layout's `values` until its first call: generates the layout's own, which replaces this."""
        self.values = values = _layout_values(self.shape.value_exprs, self.spans)
        return values(text)

    def event(self, text: str, ts, iso, rank, line) -> Event:
        return self.shape.event(self.groups(text), ts, iso, rank, line)

    def fields_json(self, text: str) -> str:
        return self.shape.fields_json(self.groups(text))


def layout_of_match(shape: _Shape, m) -> _Layout:
    """The layout of the line a shape's part of the parser's line regex matched (`m`)."""
    return _Layout(shape, [slice(*m.span(k)) for k in range(shape.first, shape.first + shape.ngroups)], m.string)


_GROUP_REF = re.compile(r"g\[([0-9]+)\]")
_GRAPH_REF = re.compile(r"g\[([0-9]+)\] == 'True'")
_LAYOUT_VALUES: dict[tuple, object] = {}    # (value exprs, their groups' offsets) -> their function
MAX_LAYOUT_VALUES = 4096


def _layout_values(exprs: tuple, spans: list):
    """`values(text)` of a layout: the shape's value expressions, each group `g[k]` read as the slice `text[gk]`
    of its span (a global of the function: `text[a:b]` would build the slice object on every call). A graph
    flag (`g[k] == 'True'`, its group `(True|False)`) is read by its first character, `text[start] == 'T'`,
    which allocates nothing. Kept by the expressions and the offsets, so layouts that put the five numbers at
    the same offsets (other groups' widths differ) share one function; the table starts afresh when full."""
    used = sorted({int(k) for e in exprs for k in _GROUP_REF.findall(e)})
    key = (exprs, tuple((spans[k].start, spans[k].stop) for k in used))
    values = _LAYOUT_VALUES.get(key)
    if values is None:
        code = ", ".join(_GROUP_REF.sub(r"text[g\1]",
                                        _GRAPH_REF.sub(lambda m: f"text[{spans[int(m.group(1))].start}] == 'T'", e))
                         for e in exprs)
        namespace = {f"g{k}": spans[k] for k in used}
        exec(f"def values(text):\n    return ({code})\n", namespace)  # noqa: S102 - built above
        if len(_LAYOUT_VALUES) >= MAX_LAYOUT_VALUES:
            _LAYOUT_VALUES.clear()
        values = _LAYOUT_VALUES[key] = namespace["values"]
    return values


_LAYOUT_CHECKS: dict[tuple, object] = {}


def _layout_check(starts: tuple):
    """`check(text)` of a layout: the digit at each start offset is <= its limit (one comparison per limited
    number, no slicing); shared by layouts with the same offsets."""
    check = _LAYOUT_CHECKS.get(starts)
    if check is None:
        code = " and ".join(f"text[{i}] <= {c!r}" for i, c in starts)
        namespace: dict = {}
        exec(f"def check(text):\n    return {code}\n", namespace)  # noqa: S102 - built above from ints
        if len(_LAYOUT_CHECKS) >= MAX_LAYOUT_VALUES:
            _LAYOUT_CHECKS.clear()
        check = _LAYOUT_CHECKS[starts] = namespace["check"]
    return check


class _Tally:
    """What a learned shape is to the parser's counts, for the lines of the _EventLayouts of one kind."""
    __slots__ = ("kind", "count", "template")
    batch = False

    def __init__(self, kind: str, template: str | None = None):
        self.kind, self.count, self.template = kind, 0, template


_FIELDS_JSON = compact_encoder()    # JsonLines' own encoding, so a row's JSON is its Event's


class _EventLayout:
    """The layout of a frequent line that is not a batch line, learned from a line the generic path read. Its
    lines become rows too (events.Row, `batch` False: the engine only counts them), so bulk readers skip
    the generic path's regexes and Event; the Event is built when someone asks. Two kinds, each found by a key
    that decides everything the generic path decides about the line (its regexes treat every digit alike, so
    lines of one skeleton take the same branches and have their groups at the same offsets):
    - uvicorn access lines (`INFO:     127.0.0.1:40000 - "GET /metrics HTTP/1.1" 200 OK`): by their skeleton,
      as batch lines are;
    - --log-requests lines (`Receive: obj=...` / `Finish: obj=...`, 400-900 characters, a hex rid that makes
      every skeleton new): by the skeleton of their first HEAD_CHARS characters, which hold the whole prefix and
      the message's first word, and only without a NUL byte (the generic path calls those binary); the rid
      is searched for when the Event is built, as the generic path searches for it. A JSON one
      (`{"timestamp": "...", "event": "request.received", ...}`, --log-requests-format json) by its head up to
      the event (patterns._JSON_REQUEST_HEAD), which is what makes the generic path call it a request log.
    Dated prefixes only (a time-only prefix's day count is the generic path's state), and learned on the block
    path, which starts with a source's first learned batch shape."""
    __slots__ = ("shape", "kind", "source", "dt", "frac", "rank", "msg", "phase", "groups", "post_status")
    batch = False
    check_at = -1               # (as _Layout's: nothing to look at)
    check_max = ""
    check_more = None
    prefix_json: Any = None

    def __init__(self, tally: _Tally, source: str, text: str, dt: slice, frac: slice | None, rank: slice, msg: int,
                 access=None):
        """`dt`, `frac`, `rank`: where "date time", the fraction of a second and the rank tags are in `text`,
        `msg` where its message starts, `access`: the access line's _ACCESS match (None: a request log)."""
        self.shape, self.kind, self.source = tally, tally.kind, source
        self.dt, self.frac, self.rank, self.msg = dt, frac, rank, msg
        self.phase = request_phase(text[msg:]) if access is None else None
        self.groups = None if access is None else operator.itemgetter(*(slice(*access.span(k)) for k in range(1, 5)))
        # An access line's method is letters, the same in every line of its skeleton: the state reads a POST's
        # status (an inference response's) from this slice and only counts the others (None), without `fields`
        self.post_status = slice(*access.span(4)) if access is not None and access.group(2) == "POST" else None

    def fields(self, text: str) -> dict:
        if self.groups is None:
            return {"phase": self.phase, "rid": _rid(text, self.msg)}
        client, method, path, status = self.groups(text)
        return {"client": client, "method": method, "path": path, "status": int(status)}

    def event(self, text: str, ts, iso, rank, line) -> Event:
        return Event(self.kind, self.fields(text), iso, ts, rank, self.source, line)

    def fields_json(self, text: str) -> str:
        return _FIELDS_JSON(self.fields(text))


def _head_key(text: str, chars: int = HEAD_CHARS) -> bytes | None:
    try:
        return text[:chars].encode().translate(_SKELETON)
    except UnicodeEncodeError:      # a lone surrogate (not from a splitter): no key
        return None



# Custom prefixes (docs/log-events.md, "Custom log formats"). A record behind a prefix of another logging set-up is
# found by its message (anchored.py): a prefix layout per prefix skeleton, and a batch line read by a learned
# shape as SGLang's own prefix would print it. Once the generic path read such a line, its layout reads the next
# lines of its skeleton as rows, as for SGLang's own prefix: the shape's message groups at their offsets in the
# line, the time and rank tags where the prefix layout found them. Exact for the same reason: every decision the
# generic path makes about the line (prefix parts, anchors, quotes, request-log markers, the shape's regex)
# treats every digit alike, the shape's ranges excepted (check_at). Only prefixes whose date and time stand
# together and whose rank tags are SGLang's, in one run ("DP0 TP1", read as SGLang's own rank tags); the
# level and pid, when printed, go on the Event (`prefix`), as the generic path puts them.


def custom_spans(prefix) -> tuple[slice, slice | None, slice] | None:
    """Where "date time", the fraction (at most 6 digits, as the generic path reads it) and the rank tags are
    in a line of prefix layout `prefix` (prefixes._PrefixLayout), or None when they cannot be read as slices."""
    if prefix.tags is None or prefix.date is None or prefix.time[0] != prefix.date[1] + 1:
        return None
    dt = slice(prefix.date[0], prefix.time[1])
    frac = slice(prefix.frac[0], min(prefix.frac[1], prefix.frac[0] + 6)) if prefix.frac else None
    if not prefix.tags:
        return dt, frac, slice(0, 0)
    first_tag, (start, _) = prefix.tags[0]
    return dt, frac, slice(start - len(first_tag), prefix.tags[-1][1][1])


def _prefix_of(level: slice | None, pid: slice | None, text: str) -> dict:
    return {"level": text[level] if level else None, "pid": int(text[pid]) if pid else None}


class CustomLayout(_Layout):
    """A learned shape's layout behind a custom prefix that prints a level or a pid: its Event carries them."""
    __slots__ = ("level", "pid")

    def __init__(self, shape: _Shape, spans: list, text: str, level: slice | None, pid: slice | None):
        super().__init__(shape, spans, text)
        self.level, self.pid = level, pid

    def event(self, text: str, ts, iso, rank, line) -> Event:
        ev = self.shape.event(self.groups(text), ts, iso, rank, line)
        ev.prefix = _prefix_of(self.level, self.pid, text)
        return ev

    def prefix_json(self, text: str) -> str:
        return _FIELDS_JSON(_prefix_of(self.level, self.pid, text))


class CustomEventLayout(_EventLayout):
    """An access or request-log line's layout behind a custom prefix that prints a level or a pid."""
    __slots__ = ("level", "pid")

    def __init__(self, tally: _Tally, source: str, text: str, dt, frac, rank, msg: int, access,
                 level: slice | None, pid: slice | None):
        super().__init__(tally, source, text, dt, frac, rank, msg, access)
        self.level, self.pid = level, pid

    def event(self, text: str, ts, iso, rank, line) -> Event:
        ev = Event(self.kind, self.fields(text), iso, ts, rank, self.source, line)
        ev.prefix = _prefix_of(self.level, self.pid, text)
        return ev

    def prefix_json(self, text: str) -> str:
        return _FIELDS_JSON(_prefix_of(self.level, self.pid, text))
