"""Records found by their message behind any prefix (docs/log-events.md, "Custom log formats"): the
parser's part that learns a file's prefix layouts and keeps request-log text out (functions of a
Parser, as scanning.py describes it)."""
from __future__ import annotations

import re
from itertools import chain
from typing import TYPE_CHECKING

from exporter.ingest.grammar.layouts import _SKELETON
from exporter.ingest.grammar.messages import _MALFORMED, _Pending
from exporter.ingest.grammar.patterns import (
    _ACCESS,
    _ANCHOR,
    _MULTILINE,
    CLOCK,
    MAX_KNOWN_PREFIXES,
    MAX_PREFIX_LAYOUTS,
    _closed_quotes,
    request_marked,
)
from exporter.ingest.grammar.prefixes import _NO_PREFIX, _PrefixLayout
from exporter.ingest.grammar.values import _container_ts, fields_in_range

if TYPE_CHECKING:      # (the parser calls these with itself: they see it as scanning.py describes it)
    from exporter.ingest.grammar.scanning import Scanning



# a prefix's time (prefixes._PrefixLayout.time: patterns._PREFIX_PART's clock); a line without one holds none
_CLOCK = re.compile(CLOCK)


def inside_record(p: Scanning, text: str) -> bool:
    """Whether `text`, a line without SGLang's prefix at its start, can only go on the pending record or the
    request's text: find_record would find no record in it, as inside one only a prefix with a time starts
    another (or uvicorn's access line, undated, at the line's start) once the file has prefixes. Most lines
    of a traceback have neither, and searching them for a message cost more than the rest of their reading
    (bench/README.md, "Issue 35, sixth look")."""
    return (p._pending is not None or p._in_request) and p._prefixed and not (
        ":" in text and (_CLOCK.search(text) is not None or _ACCESS.match(text) is not None))


def find_record(p: Scanning, text: str, lineno: int, container_time: str | None, out: list,
              known_only: bool = False) -> bool:
    """A record found by its message anywhere in the line (_ANCHOR), whatever prefix stands before it; False
    when the line holds none. User text never passes: a message inside an open quote, or in a line that is a
    request log (its head, the leftmost anchor, makes it one) is not a record. Lines that go on a pending
    multi-line record or a request's text (see _bare) start a record only behind a prefix with a time, or,
    in a file whose records have no prefix at all, with the message at the line's start. `known_only`: look
    only where a prefix layout of this file's ends (False when none fits)."""
    if "\x00" in text:
        return False
    marked = None
    anchors = None
    for rx in p._known:          # the file's layouts: the message where their prefix ends, no search
        m = rx.match(text)
        if m is not None:
            a = _ANCHOR.match(text, m.end())
            if a is not None:
                anchors = chain((a,), _ANCHOR.finditer(text, a.end()))
                break
    if anchors is None and known_only:
        return False
    for a in anchors or _ANCHOR.finditer(text):
        start = a.start()
        if start == 0 and a.group().endswith("memory"):
            return False                # a bare CUDA OOM: _bare's one-line record, as always
        if not _closed_quotes(text, start):
            return False                # the rest of the line is inside quoted text
        msg = text[start:]
        head = msg[:1]
        if not (head == "R" or head == "F" or head == "i" or head == "{" or head == "I"):
            if marked is None:
                marked = request_marked(text)
            if marked:
                return False            # a request log's text quoting a message
        layout = _prefix_layout(p, text, start) if start else _NO_PREFIX
        if layout is None:
            continue
        # inside a traceback or a request's raw text only a dated prefix starts a record (a bare message
        # does too in a file without prefixes, as a request's text cannot be told from it there)
        if (p._pending is not None or p._in_request) and layout.time is None and not (
                start == 0 and not p._prefixed) and not (start == 0 and p._pending is not None
                                                         and _ACCESS.match(text)):
            # (uvicorn's access line, undated, ends a traceback: a handled request error's 500 follows it)
            return False
        if layout.tags is not None and (head == "D" or head == "P") and _batch_by_shape(p,
                text, msg, layout, lineno, container_time, out):
            return True
        ev = p._message(msg, False)
        if ev is None:
            continue
        if p._pending is not None:
            out += p.flush()
        p._in_request = ev.kind == "request_log"
        if ev is _MALFORMED:
            p.unparsed["malformed"] += 1
            return True
        kind = ev.kind
        if kind not in _MULTILINE and not fields_in_range(ev.fields):
            p.unparsed["value_out_of_range"] += 1
            return True
        ts = iso = None
        if layout.time is not None:
            date, tod, frac = layout.clock(text)
            if date is not None:
                ts, iso = (p._date_ts, p._date_iso) if date + tod == p._date_key else \
                    p._date_time(date, tod)
                if frac and ts is not None:
                    frac = frac[:6]
                    ts += int(frac) / 10 ** len(frac)
                    iso = f"{iso}.{frac}"
            elif container_time is None:
                ts, iso = p._time_only(tod, frac[:6] if frac else frac)
        if ts is None and container_time:
            ts, iso = _container_ts(container_time), container_time
        if ts is None:
            p.untimed += 1
        if start:
            p._prefixed = True
            _know(p, layout, text, start)
        ev.time, ev.ts, ev.rank, ev.source, ev.line = iso, ts, layout.rank_of(text), p.source, lineno
        level, pid = layout.level_pid(text)
        if level is not None or pid is not None:
            ev.prefix = {"level": level, "pid": pid}
        p._layout_counts[layout.template] += 1
        if start and (kind == "http_access" or kind == "request_log"):
            p._found = (lineno, layout, start, None, None)
        if kind in _MULTILINE:
            p._pending = _Pending(ev, text[:start])
            if kind == "oom":
                p._last_kv_oom_line = lineno
            return True
        p._recognised += 1
        p._kinds[kind] += 1
        out.append(ev)
        if (kind == "decode_batch" or kind == "prefill_batch") and layout.tags is not None and p.learning:
            date, _, frac = layout.clock(text)
            if date is not None:
                p._learn(msg, frac[:6] if frac else None, layout.ranks_text(text), True)
        return True
    return False

def _batch_by_shape(p: Scanning, text: str, msg: str, layout, lineno: int, container_time, out: list) -> bool:
    """A batch line behind a custom prefix with a date, read by a learned shape (see "Learned shapes"): the
    line as SGLang's own prefix would print it, so the shapes learned from either layout serve both."""
    date, tod, frac = layout.clock(text)
    if date is None or not p._shapes:
        return False
    m = p._line_re.match(f"[{date} {tod}{'.' + frac[:6] if frac else ''}{layout.ranks_text(text)}] {msg}")
    shape = p._by_marker.get(m.lastindex) if m is not None else None
    if shape is None:
        return False
    if p._pending is not None:
        out += p.flush()
    p._in_request = False
    p._prefixed = True
    _know(p, layout, text, len(text) - len(msg))
    p._learned_event(shape, m, lineno, container_time, out)
    ev = out[-1]
    ev.line = lineno
    level, pid = layout.level_pid(text)
    if level is not None or pid is not None:
        ev.prefix = {"level": level, "pid": pid}
    p._layout_counts[layout.template] += 1
    p._found = (lineno, layout, len(text) - len(msg), shape, m)
    return True

def _know(p: Scanning, layout, text: str, end: int) -> None:
    """Remember a prefix layout a record was found behind: its lines' messages are then looked for where
    the prefix ends (its skeleton as a regex: each digit any digit, the rest as printed)."""
    if layout.known:
        return
    layout.known = True
    rx = re.compile(re.sub(r"[0-9]", "[0-9]", re.escape(text[:end])))
    p._known = [rx] + p._known[:MAX_KNOWN_PREFIXES - 1]

def _prefix_layout(p: Scanning, text: str, end: int):
    """The layout of the prefix text[:end]: learned once per skeleton (digits as 0), so a file's prefix is
    taken apart once, not per line; None when it is not text a prefix can be (a lone surrogate)."""
    try:
        key = text[:end].encode().translate(_SKELETON)
    except UnicodeEncodeError:
        return None
    layout = p._prefixes.get(key)
    if layout is None:
        if len(p._prefixes) >= MAX_PREFIX_LAYOUTS:
            p._prefixes.clear()
        layout = p._prefixes[key] = _PrefixLayout(text[:end])
    return layout
