"""The parser's block path: consecutive lines of a plain-text source, the lines of learned layouts read as
rows (events.py) by their skeleton, the others through the generic path (functions of a
Parser, as scanning.py describes it)."""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from exporter.ingest.events import Event
from exporter.ingest.grammar.layouts import (
    _SKELETON,
    HEAD_CHARS,
    MAX_SKELETON_CHARS,
    MAX_SKELETONS,
    CustomEventLayout,
    CustomLayout,
    _EventLayout,
    _head_key,
    _Layout,
    _Tally,
    custom_spans,
    layout_of_match,
)
from exporter.ingest.grammar.patterns import _ACCESS, REQUEST_WORDS, request_decided
from exporter.ingest.grammar.values import _container_ts

# behind a custom prefix a text request log is found by its message anchor (patterns._ANCHOR), which wants
# "obj=" after the first words: its head holds that too
_ANCHORED_REQUEST_WORDS = tuple(word + "obj=" for word in REQUEST_WORDS)
MAX_CUSTOM_COUNTERS = 256   # row counters of custom layouts per source (when full they are folded in)

if TYPE_CHECKING:      # (the parser calls these with itself: they see it as scanning.py describes it)
    from exporter.ingest.grammar.scanning import Scanning



def feed_items(p: Scanning, texts: list[str], first: int, times: list | None = None) -> list:
    """`feed_lines`, except that a line of a learned layout stays a Row (events.py): the block path
    of `analyze`, `parse` and `serve`, where most lines are batch lines and Event objects would cost more
    than reading them. `times`: container records' own times, one per text, for what the generic path reads
    with them (a line without a date of its own; a learned layout's line, whose own date it reads, needs none
    unless the date is not one)."""
    out: list = []
    if not p._shapes:
        for lineno, text in enumerate(texts, first):
            p._feed_safely(text, lineno, out, None, times[lineno - first] if times is not None else None)
        return out
    layouts, heads, rank_cache, head_lens = p._layouts, p._heads, p._rank_cache, p._head_lens
    sh: Any
    skeleton: bytes | None
    entry: Any
    custom = bool(p._customs)    # layouts behind custom prefixes: lines not starting with "[" have them
    # Without them every layout and head was learned from a line that starts with "[" (the line regex's
    # alternatives all do), so its skeleton does too: a line that does not misses both tables, as it should,
    # without a look at its first character (a slice per line, 5 % of the block path's cost).
    last_dt, last_ts, last_iso = p._row_time
    last_frac: str | None = None         # the same with the fraction of a second
    frac_ts: Any = None
    frac_iso: Any = None
    last_shape: Any = None
    run_start = first
    # The tables hold entries (see _entry), and consecutive lines often share a skeleton (the TP ranks' copies
    # of a batch line, "TP1" being "TP0"'s): the last one looked up is kept, which saves hashing the skeleton.
    # Kept only while the tables stay as they are: the generic path and learning may change them.
    last_skeleton: bytes = b""      # (b"": an empty line's, which has no entry)
    last_entry: tuple | None = None
    # Lines of one skeleton have one length (they differ only in ASCII digits), so a line longer than every
    # line a layout was learned from has none: request logs (400-900 characters) skip the skeleton, which
    # would cost more than the rest of their reading, and go straight to their heads.
    longest = min(p._layout_len, MAX_SKELETON_CHARS)
    pending = p._pending is not None    # (only the generic path sets it)
    fold = p.fold_request_logs
    folded = 0
    append = out.append
    lineno = first - 1
    for text in texts:
        lineno += 1
        if len(text) <= longest:
            try:
                skeleton = text.encode().translate(_SKELETON)
            except UnicodeEncodeError:      # a lone surrogate (not from a splitter): no skeleton
                skeleton = entry = None
            else:
                if skeleton != last_skeleton:
                    last_skeleton, last_entry = skeleton, layouts.get(skeleton)
                entry = last_entry
                if entry is not None:
                    at, top, more, layout, sh, batch, dts, fs, rs = entry
                    if text[at] > top or more is not None and not more(text):
                        entry = None        # a number out of its range: the generic path counts the line
        else:
            skeleton = entry = None         # (the skeleton skipped: made below if the line is learned)
        if entry is None:
            if heads and "\x00" not in text:
                for chars in head_lens:     # HEAD_CHARS for SGLang's own prefix, others for custom ones
                    try:                    # (_head_key inline: most request logs come this way)
                        entry = heads.get(text[:chars].encode().translate(_SKELETON))
                    except UnicodeEncodeError:  # a lone surrogate: no key of this length
                        pass
                    if entry is not None:
                        break
            if entry is None:
                last_skeleton, last_entry = b"", None
                if not custom and text[:1] != "[":
                    skeleton = None         # (as the generic path reads it, it learns no layout of it)
                elif longest < len(text) <= MAX_SKELETON_CHARS:
                    skeleton = _skeleton(text)
                m = p._line_re.match(text)
                sh = p._by_marker.get(m.lastindex) if m is not None else None
                if sh is None:                  # not a learned shape's line: the generic path
                    if last_shape is not None:  # (which may read the counts)
                        last_shape.count += lineno - run_start
                    n = len(out)
                    p._feed_safely(text, lineno, out, m, times[lineno - first] if times is not None else None)
                    last_shape = None           # it may have set the format family, or learned a shape
                    if len(out) > n:
                        found = p._found
                        if found is not None and found[0] == lineno:
                            _learn_custom_layout(p, text, found, out[-1])
                            custom = True
                        elif m is not None and out[-1].kind in p._tallies:
                            _learn_event_layout(p, text, lineno, skeleton, m, out[-1])
                    layouts = p._layouts
                    longest = min(p._layout_len, MAX_SKELETON_CHARS)
                    pending = p._pending is not None
                    continue
                entry = _entry(layout_of_match(sh, m), text)
                if skeleton is not None:
                    _store(p, skeleton, entry, text)
                    longest = min(p._layout_len, MAX_SKELETON_CHARS)
            _, _, _, layout, sh, batch, dts, fs, rs = entry
        if pending:
            out += p.flush()
            pending = False
        if sh is not last_shape:        # (the rows of a run of one shape are counted at its end)
            if last_shape is not None:
                last_shape.count += lineno - run_start
            last_shape, run_start = sh, lineno
            p._in_request = batch is None
            if batch:
                p.format_family = sh.family or p._family(sh.sep, sh.has_iter, sh.trailing,
                                                               sh.has_graph, False, False)
        dt = text[dts]
        if dt != last_dt:
            last_dt, last_frac = dt, None
            last_ts, last_iso = p._date_time(dt[:10], dt[11:])
        elif batch is None and fold and fs is None and last_ts is not None:
            folded += 1     # a request log at the time of the Row before it: counted, no Row (Parser.fold_request_logs)
            continue
        try:
            rank = rank_cache[text[rs]]
        except KeyError:
            rank = p._rank(text[rs])
        if fs is None or last_ts is None:
            if last_ts is None and times is not None and times[lineno - first] is not None:
                # a date the calendar lacks: the container's time, as the generic path takes it
                append((layout, text, _container_ts(times[lineno - first]), times[lineno - first], rank, lineno))
            else:
                append((layout, text, last_ts, last_iso, rank, lineno))
        else:
            frac = text[fs]
            if frac != last_frac:
                last_frac = frac
                frac_ts, frac_iso = last_ts + int(frac) / 10 ** len(frac), f"{last_iso}.{frac}"
            append((layout, text, frac_ts, frac_iso, rank, lineno))
    if last_shape is not None:
        last_shape.count += lineno + 1 - run_start
    p._row_time = last_dt, last_ts, last_iso
    p.folded_request_logs += folded
    return out

def _entry(layout: Any, text: str) -> tuple:
    """What the block path reads the lines of `layout` (learned from `text`) by, in one tuple (one lookup, no
    attribute reads per line): where to look for a number out of range (see _Layout), the layout, its shape,
    what its rows are (True: batch lines, None: request logs, False: access lines; read when the shape changes,
    as often as every other line) and the slices of the time, the fraction of a second and the rank tags."""
    at, top = layout.check_at, layout.check_max
    if at < 0:      # nothing to look at: look at the first character, which no line of the skeleton has above
        at, top = 0, "9" if "0" <= text[0] <= "9" else text[0]  # that (a digit or this one): no test per line
    batch = True if layout.batch else None if layout.kind == "request_log" else False
    return at, top, layout.check_more, layout, layout.shape, batch, layout.dt, layout.frac, layout.rank

def _skeleton(text: str) -> bytes | None:
    try:
        return text.encode().translate(_SKELETON)
    except UnicodeEncodeError:      # a lone surrogate (not from a splitter): no skeleton
        return None

def _store(p: Scanning, skeleton: bytes, entry: tuple, text: str) -> None:
    """Read the next lines of `text`'s skeleton by `entry` (see _entry)."""
    if len(p._layouts) >= MAX_SKELETONS:
        p._layouts.clear()
    p._layouts[skeleton] = entry
    if len(text) > p._layout_len:
        p._layout_len = len(text)

def _learn_event_layout(p: Scanning, text: str, lineno: int, skeleton: bytes | None, m, ev: Event) -> None:
    """After the generic path read line `lineno` (m: the line regex's match) and emitted `ev`, an access or
    request-log Event: the layout that reads the next lines of its key as rows (see _EventLayout)."""
    a = p._prefix_at
    if ev.line != lineno or m.group(a) is None:
        return
    tally = p._tallies[ev.kind]
    where = (text, slice(m.start(a), m.end(a + 1)), slice(*m.span(a + 2)) if m.group(a + 2) is not None else None,
             slice(*m.span(a + 3)), m.end())
    if ev.kind == "http_access":
        access = _ACCESS.match(text, m.end())
        if skeleton is not None and access is not None:
            _store(p, skeleton, _entry(_EventLayout(tally, p.source, *where, access), text), text)
    else:
        decided = request_decided(text, m.end())
        if decided is not None:
            _learn_head(p, text, max(HEAD_CHARS, decided), _EventLayout(tally, p.source, *where))

def _learn_head(p: Scanning, text: str, chars: int, layout: _EventLayout) -> None:
    """Read the next request logs whose first `chars` characters have the skeleton of `text`'s by `layout`."""
    key = _head_key(text, chars)
    if key is not None:
        if len(p._heads) >= MAX_SKELETONS:
            p._heads.clear()
        p._heads[key] = _entry(layout, text)
        if chars not in p._head_lens:
            p._head_lens.append(chars)

def _learn_custom_layout(p: Scanning, text: str, found: tuple, ev: Event) -> None:
    """After the generic path read a record behind a custom prefix (anchored.py's `_found`: the line, its
    prefix layout, where the message starts and, for a batch line, the learned shape and its match on the line
    as SGLang's own prefix would print it), the layout that reads the next lines of its key as rows (see
    layouts.py, "Custom prefixes"): batch and access lines by their skeleton, request logs by their head."""
    p._found = None
    _, prefix, start, shape, m = found
    where = custom_spans(prefix)
    if where is None or ev.line != found[0]:
        return
    dt, frac, rank = where
    kind = shape.kind if shape is not None else ev.kind
    counter: Any = p._customs.get((kind, shape.key if shape is not None else None, prefix.template))
    if counter is None:
        if len(p._customs) >= MAX_CUSTOM_COUNTERS:
            _fold_customs(p)
        if shape is not None:
            counter = copy.copy(shape)
            counter.count, counter.template = 0, prefix.template
        else:
            counter = _Tally(kind, prefix.template)
        p._customs[(kind, shape.key if shape is not None else None, prefix.template)] = counter
    level, pid = prefix.level, prefix.pid
    if level is not None:
        level = slice(*level)
    if pid is not None:
        pid = slice(*pid)
    if shape is not None or kind == "http_access":
        skeleton = _skeleton(text) if len(text) <= MAX_SKELETON_CHARS else None
        if skeleton is None:
            return
        if shape is not None:
            shift = start - (len(m.string) - (len(text) - start))   # message offsets: the line's minus the rebuilt
            rebuilt = [slice(*m.span(k)) for k in range(shape.first, shape.first + shape.ngroups)]
            spans: list[slice] = [dt] + ([frac] if shape.has_frac and frac is not None else []) + [rank] + [
                slice(s.start + shift, s.stop + shift) for s in rebuilt[shape.rk + 1:]]
            layout: Any = CustomLayout(counter, spans, text, level, pid) if level or pid else \
                _Layout(counter, spans, text)
        else:
            access = _ACCESS.match(text, start)
            if access is None:
                return
            layout = CustomEventLayout(counter, p.source, text, dt, frac, rank, start, access, level, pid) \
                if level or pid else _EventLayout(counter, p.source, text, dt, frac, rank, start, access)
        _store(p, skeleton, _entry(layout, text), text)
    elif text[:1] != "[" and (decided := request_decided(text, start, _ANCHORED_REQUEST_WORDS)) is not None:
        # (a prefix that starts with "[" is first read as SGLang's own by the generic path: not by its head)
        _learn_head(p, text, decided,
                         CustomEventLayout(counter, p.source, text, dt, frac, rank, start, None, level, pid)
                         if level or pid else _EventLayout(counter, p.source, text, dt, frac, rank, start))

def _fold_customs(p: Scanning) -> None:
    """Fold the custom layouts' row counts into the parser's counts and start afresh (a bound on them)."""
    for counter in p._customs.values():
        p._recognised += counter.count
        p._kinds[counter.kind] += counter.count
        p._layout_counts[counter.template] += counter.count
    p._customs.clear()
    p._layouts.clear()
    p._heads.clear()
