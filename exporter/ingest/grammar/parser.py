"""The parser of one source: SGLang's own prefix, multi-line records, time and rank, and the learning of
batch-line shapes; records behind other prefixes and the block path are its helpers'
(anchored.py, block.py, which see a Parser as scanning.py describes it)."""
from __future__ import annotations

import calendar
import re
from collections import Counter
from datetime import datetime, timezone
from itertools import chain

from exporter.ingest.events import EMPTY_RANK, Event, as_event
from exporter.ingest.grammar import anchored, block
from exporter.ingest.grammar.layouts import _Tally
from exporter.ingest.grammar.messages import (
    _MALFORMED,
    _foreign,
    _oom_fields,
    _Pending,
    _phase_from_frames,
    continue_record,
    message,
)
from exporter.ingest.grammar.patterns import (
    _BATCH_HEAD,
    _CUDA_OOM,
    _MAX_RECORD_LINES,
    _MULTILINE,
    _PREFIX,
    _RANK_TAG,
    _unquoted,
    _wrapping,
    request_marked,
)
from exporter.ingest.grammar.prefixes import _PrefixLayout
from exporter.ingest.grammar.shapes import MAX_FRUITLESS_LEARNING, MAX_SHAPES, _compile_shape, _Shape, learn_shape
from exporter.ingest.grammar.values import _container_ts, fields_in_range, parse_batch_body


class Parser:
    """Parses one source's records. Not thread-safe; one instance per followed file."""

    def __init__(self, source: str = ""):
        self.source = source
        self.unparsed: Counter = Counter()
        self._recognised = 0          # records recognised, and per kind, except those counted per learned shape
        self._kinds: Counter = Counter()
        self.format_family: str | None = None
        self._pending: _Pending | None = None
        self._date_key, self._date_ts, self._date_iso = "", 0.0, ""   # last "date time" seen (one per second)
        self._row_time = ("", 0.0, "")   # the same, for feed_items' learned lines ("date time" with its space)
        self._day = ""                          # _date_time's last date and its midnight (None: not a date)
        self._midnight: int | None = None
        self._rank_cache: dict[str, dict] = {"": EMPTY_RANK}
        self._day_offset = 0.0       # time-only prefixes (SGLang 0.3.0-0.3.3): add a day when the clock wraps
        self._last_tod = -1.0
        self._last_kv_oom_line = -10**9
        self.learning = True          # learn batch-line shapes (tests turn it off to compare both paths)
        self._shapes: list[_Shape] = []
        self._by_marker: dict[int | None, _Shape] = {}   # (get(None): no group)
        self._line_re = _PREFIX
        self._prefix_at = 1          # group number of the generic prefix's first group in _line_re
        self._layouts: dict[bytes | None, tuple] = {}   # skeleton -> its layout's entry (block.py): "Skeletons"
        self._heads: dict[bytes | None, tuple] = {}   # head skeleton -> a request-log layout's entry
        self._layout_len = 0         # no line longer than this has a skeleton in _layouts (see block.py)
        self._tallies = {kind: _Tally(kind) for kind in ("http_access", "request_log")}
        # A request log's Row is only counted by the state, and its time only moves the clock. On the block path,
        # one at the same time as the Row before it (most of them: a busy server logs several a second) changes
        # nothing but the count: with this on, such lines are added to `folded_request_logs` instead of becoming
        # Rows, for a reader that takes the count from there (`analyze`: the Rows' work in the state saved, 2.5-3.5 %
        # of its instructions; bench/README.md, "Issue 35, eighth look"). Off for readers that want every record.
        self.fold_request_logs = False
        self.folded_request_logs = 0
        self._fruitless = 0
        self._in_request = False     # the last record was a request log: bare lines after it are its text
        self._prefixes: dict[bytes, _PrefixLayout] = {}   # prefix skeleton -> its layout (message-anchored)
        self._layout_counts: Counter = Counter()   # records read behind each prefix layout found by message
        self._customs: dict[tuple, _Shape | _Tally] = {}  # counters of the rows of custom layouts (block.py)
        self._head_lens: list[int] = []  # head lengths of request-log layouts behind custom prefixes
        self._found: tuple | None = None   # the last record found behind a custom prefix (anchored.py, block.py)
        self.skipped: Counter = Counter()   # the lines counted as no_sglang_prefix, by what they look like
        self._prefixed = False       # a record behind a prefix seen: a message at a line's start is not a record
                                     # while a request's text runs on (see _anchored)
        self._carried: float | None = None   # midnight of the last dated line: the day of a time-only one
        self.untimed = 0             # records found by message without any time in their line
        self._known: list = []       # the prefix regexes of the layouts records were found behind, latest first

    # ------------------------------------------------------------------ public API
    @property
    def recognised(self) -> int:
        """Records turned into Events so far."""
        return self._recognised + sum(s.count for s in self._shapes) + sum(
            t.count for t in chain(self._tallies.values(), self._customs.values()))

    @property
    def kinds(self) -> Counter:
        """Events so far, by kind."""
        out = Counter(self._kinds)
        for s in self._shapes:
            out[s.kind] += s.count
        for t in chain(self._tallies.values(), self._customs.values()):
            if t.count:
                out[t.kind] += t.count
        return out

    @property
    def layouts(self) -> Counter:
        """Records read behind each prefix layout found by message, by its template (prefixes.py)."""
        out = Counter(self._layout_counts)
        for c in self._customs.values():
            if c.count:
                out[c.template] += c.count
        return out

    def feed(self, text: str, lineno: int = 0, container_time: str | None = None) -> list[Event]:
        """One physical line (or container record) -> the Events it completes (usually 0 or 1)."""
        out: list[Event] = []
        try:
            self._feed(text, lineno, container_time, out)
        except Exception:  # noqa: BLE001 - a source never crashes the process; the line counts as malformed
            self._pending = None
            self.unparsed["malformed"] += 1
        return out

    def feed_items(self, texts: list[str], first: int, times: list | None = None) -> list:
        """`feed_lines`, except that a line of a learned layout stays a Row (events.py): see block.py. `times`:
        the container records' own times, one per text (what `feed` takes as `container_time`)."""
        return block.feed_items(self, texts, first, times)

    def feed_lines(self, texts: list[str], first: int) -> list[Event]:
        """Consecutive lines of a plain-text source (line `first` first) -> the Events they complete."""
        return list(map(as_event, self.feed_items(texts, first)))

    def _feed_safely(self, text: str, lineno: int, out: list, m, container_time: str | None = None) -> None:
        try:
            self._feed(text, lineno, container_time, out, m)
        except Exception:  # noqa: BLE001 - as in feed()
            self._pending = None
            self.unparsed["malformed"] += 1

    def _feed(self, text: str, lineno: int, container_time: str | None, out: list, m=None) -> None:
        """One line; `m`: the line regex's match at its start, when the caller has it already."""
        if m is None:
            if not text or text.isspace():
                p = self._pending
                if p is not None:           # part of a multi-line record (the KV-pool OOM message ends with "\n")
                    p.lines += 1
                else:
                    self.unparsed["empty"] += 1
                return
            if "\x00" in text:
                self.unparsed["binary"] += 1
                return
            m = self._line_re.match(text) if text[0] == "[" else None
            if m is None and anchored.inside_record(self, text):
                self._bare(text, lineno, container_time, out)
                return
            if m is None and self._known and anchored.find_record(self, text, lineno, container_time, out, True):
                return                      # behind a prefix layout of this file's (no search of the line)
            if m is None and "[" in text:
                m = self._line_re.search(text)
                if m is not None and not _wrapping(text, m):
                    m = None
            if m is None:
                if not anchored.find_record(self, text, lineno, container_time, out):
                    self._bare(text, lineno, container_time, out)
                return
        elif "\x00" in text:
            self.unparsed["binary"] += 1
            return
        if self._pending:
            out += self.flush()
        shape = self._by_marker.get(m.lastindex)
        if shape is not None:      # a learned shape, found by search (a foreign prefix) or in a container record
            self._in_request = False
            self._learned_event(shape, m, lineno, container_time, out)
            return
        ts: float | None
        a = self._prefix_at
        date, tod, frac, ranks = m.group(a, a + 1, a + 2, a + 3)
        if date is not None:
            key = date + tod
            if key == self._date_key:
                ts, iso = self._date_ts, self._date_iso
            else:
                ts, iso = self._date_time(date, tod)
            if frac and ts is not None:
                ts += int(frac) / 10 ** len(frac)
                iso = f"{iso}.{frac}"
            if ts is None and container_time:
                ts, iso = _container_ts(container_time), container_time
        elif container_time:
            # time-only prefix (0.3.0-0.3.3): the container's full timestamp says which day it is
            self._time_only(tod, frac)
            ts, iso = _container_ts(container_time), container_time
        else:
            ts, iso = self._time_only(tod, frac)
        rank = self._rank_cache.get(ranks) if ranks else EMPTY_RANK
        if rank is None:
            rank = self._rank(ranks)
        msg = text[m.end():]
        ev = self._message(msg, date is None)
        self._in_request = ev is not None and ev.kind == "request_log"
        self._prefixed = True
        if ev is None:
            if not anchored.find_record(self, text, lineno, container_time, out):     # more prefix before the message?
                self.unparsed["unknown_message"] += 1
            return
        if ev is _MALFORMED:
            self.unparsed["malformed"] += 1
            return
        kind = ev.kind
        if kind not in _MULTILINE and not fields_in_range(ev.fields):     # (multi-line ones: at flush)
            self.unparsed["value_out_of_range"] += 1
            return
        ev.time, ev.ts, ev.rank, ev.source, ev.line = iso, ts, rank, self.source, lineno
        if kind in _MULTILINE:
            self._pending = _Pending(ev, text[:m.end()])
            if kind == "oom":
                self._last_kv_oom_line = lineno
            return
        self._recognised += 1
        self._kinds[kind] += 1
        out.append(ev)
        if (kind == "decode_batch" or kind == "prefill_batch") and self.learning and date is not None:
            self._learn(msg, frac, ranks, text[m.end() - 1] == " ")

    def _learned_event(self, shape: _Shape, m, lineno: int, container_time: str | None, out: list) -> None:
        """The Event of a learned-shape line outside the block path: what the block path's row would become."""
        g = m.group(*range(shape.first, shape.first + shape.ngroups))
        dt = g[0]
        date, tod = dt[:10], dt[11:]
        ts, iso = (self._date_ts, self._date_iso) if date + tod == self._date_key else self._date_time(date, tod)
        if shape.has_frac and ts is not None:
            frac = g[1]
            ts += int(frac) / 10 ** len(frac)
            iso = f"{iso}.{frac}"
        if ts is None and container_time:
            ts, iso = _container_ts(container_time), container_time
        ranks = g[shape.rk]
        rank = self._rank_cache.get(ranks) or self._rank(ranks)
        self.format_family = shape.family or self._family(shape.sep, shape.has_iter, shape.trailing,
                                                          shape.has_graph, False, False)
        shape.count += 1
        out.append(shape.event(g, ts, iso, rank, lineno))

    def _learn(self, msg: str, frac: str | None, ranks: str, space: bool) -> None:
        if self._fruitless >= MAX_FRUITLESS_LEARNING:
            return
        shape = learn_shape(msg, frac, ranks, space)
        if shape is None or any(s.key == shape.key for s in self._shapes):
            self._fruitless += 1
            return
        _compile_shape(shape, self.source)
        self._shapes.append(shape)
        for old in self._shapes[:-MAX_SHAPES]:
            self._kinds[old.kind] += old.count
            self._recognised += old.count
        del self._shapes[:-MAX_SHAPES]
        self._compile_shapes()

    def _compile_shapes(self) -> None:
        """One regex for the whole line: one of the learned shapes to the end of the line, or else SGLang's
        generic prefix (its groups from group `_prefix_at`; m.end() is where the message starts). m.lastindex,
        the last group that matched, is a shape's last group when a shape matched (`_by_marker`)."""
        alts, by_marker = [], {}
        first = 1
        for sh in self._shapes:
            sh.first = first
            first += sh.ngroups
            by_marker[first - 1] = sh
            sh.family = None if sh.sep == "." and sh.kind == "prefill_batch" else \
                self._family(sh.sep, sh.has_iter, sh.trailing, sh.has_graph, False, sh.kind == "decode_batch")
            alts.append(sh.regex)
        self._prefix_at = first
        self._line_re = re.compile("(?:" + "".join(a + r"\Z|" for a in alts) + _PREFIX.pattern + ")")
        self._by_marker = by_marker
        self._layouts = {}     # the layouts point at these shapes: a dropped shape must not count on

    def flush(self) -> list[Event]:
        """Emit a pending multi-line record (call at end of input or when a source goes idle)."""
        p, self._pending = self._pending, None
        if p is None:
            return []
        ev = p.event
        out = [ev]
        if ev.kind == "scheduler_exception" or ev.kind == "traceback":
            # an exception's message may run on over lines ("Try to allocate ..."): its first line is the cause
            ev.fields["message"] = (p.exc or p.last)[:500]
            if p.oom_line:
                # SGLang logs its KV-pool OOM, then raises it: the traceback repeats the same OOM.
                repeat = "out of memory. Try to lower" in p.oom_text and \
                    0 <= p.oom_line - self._last_kv_oom_line <= _MAX_RECORD_LINES
                if not repeat:
                    out.append(Event("oom", _oom_fields(p.oom_text, _phase_from_frames(p.funcs)), ev.time, ev.ts,
                                     ev.rank, self.source, p.oom_line))
        if not all(fields_in_range(e.fields) for e in out):      # continuation lines filled numbers in
            self.unparsed["value_out_of_range"] += 1
            return []
        self._recognised += len(out)
        for e in out:
            self._kinds[e.kind] += 1
        return out

    # ------------------------------------------------------------------ internals
    def _bare(self, text: str, lineno: int, container_time: str | None, out: list) -> None:
        """A line without SGLang's prefix: a continuation of a pending record, or a bare message."""
        p = self._pending
        if p is not None:
            p.lines += 1
            if p.lines <= _MAX_RECORD_LINES:
                continue_record(p, text, lineno)
            return
        if self._in_request or request_marked(text):
            # a line of request text (a prompt printed with its newlines by early 0.4.x), or a request log
            # without SGLang's prefix (0.5.7's JSON, another log format): never an event, nor are the bare
            # lines after it until the next SGLang record
            self._in_request = True
            self.unparsed["no_sglang_prefix"] += 1
            self.skipped["request_text"] += 1
            return
        if text.startswith("Traceback (most recent call last):"):
            # a process's traceback without SGLang's prefix (the launcher's, a child's): a record like the
            # scheduler's exception, its last line the cause
            ts = _container_ts(container_time) if container_time else None
            self._pending = _Pending(Event("traceback", {"component": ""}, container_time, ts, EMPTY_RANK,
                                           self.source, lineno))
            return
        m = _CUDA_OOM.search(text)
        if m and _unquoted(text, m.start()):
            ts = _container_ts(container_time) if container_time else None
            ev = Event("oom", _oom_fields(text, "unknown"), container_time, ts, EMPTY_RANK, self.source, lineno)
            if not fields_in_range(ev.fields):
                self.unparsed["value_out_of_range"] += 1
                return
            self._recognised += 1
            self._kinds["oom"] += 1
            out.append(ev)
            return
        i = text.find("Watchdog caught collective operation timeout")
        if i >= 0 and _unquoted(text, i):
            ts = _container_ts(container_time) if container_time else None
            ev = Event("nccl_timeout", {"message": text.strip()[:500]}, container_time, ts, EMPTY_RANK,
                       self.source, lineno)
            self._recognised += 1
            self._kinds["nccl_timeout"] += 1
            out.append(ev)
            return
        self.unparsed["no_sglang_prefix"] += 1
        self.skipped[_foreign(text)] += 1

    def _time_only(self, tod: str, frac):
        """`HH:MM:SS` without a date (0.3.0-0.3.3, custom formats): on the day of the last dated line when there
        was one, else seconds since the first day of the log; day by day (a clock going back by over 12 h)."""
        h, m, s = int(tod[:2]), int(tod[3:5]), int(tod[6:8])
        sod = h * 3600 + m * 60 + s + (int(frac) / 10 ** len(frac) if frac else 0.0)
        if sod + 43200 < self._last_tod:
            self._day_offset += 86400.0
        self._last_tod = sod
        shown = tod + (f".{frac}" if frac else "")
        if self._carried is not None:
            ts = self._carried + self._day_offset + sod
            return ts, datetime.fromtimestamp(ts - sod + 1, tz=timezone.utc).strftime("%Y-%m-%dT") + shown
        return self._day_offset + sod, shown

    def _date_time(self, date: str, tod: str):
        if date != self._day:      # timegm is linear in the time of day: the date's midnight, once per day
            try:
                midnight = calendar.timegm((int(date[:4]), int(date[5:7]), int(date[8:10]), 0, 0, 0, 0, 0, 0))
            except (ValueError, OverflowError):
                midnight = None
            self._day, self._midnight = date, midnight
            if midnight is not None:
                self._carried, self._day_offset = float(midnight), 0.0
        if self._midnight is None:
            return None, None
        ts = float(self._midnight + int(tod[:2]) * 3600 + int(tod[3:5]) * 60 + int(tod[6:8]))
        iso = f"{date}T{tod}"
        self._date_key, self._date_ts, self._date_iso = date + tod, ts, iso
        return ts, iso

    def _rank(self, ranks: str) -> dict:
        rank = dict(EMPTY_RANK)
        for tag, num, encoder_dp in _RANK_TAG.findall(ranks):
            if tag:
                rank[tag.lower()] = int(num)
            else:
                rank["dp"] = int(encoder_dp)
        if len(self._rank_cache) < 4096:
            self._rank_cache[ranks] = rank
        return rank

    def _family(self, sep: str, has_iter: bool, trailing: bool, has_graph: bool, time_only: bool,
                decode: bool) -> str:
        """The SGLang version family a batch line's shape points to (docs/log-events.md, "Format family")."""
        if time_only:
            return "0.3.0-0.3.3"
        if sep == ".":
            if has_graph:
                return "0.4.7-0.5.3"
            if decode:
                return "0.3.4-0.4.6"
            # a prefill line looks the same in 0.3.4-0.5.3: keep what a decode line said
            current = self.format_family
            return current if current in ("0.3.4-0.4.6", "0.4.7-0.5.3") else "0.3.4-0.5.3"
        if trailing:
            return "0.5.4-0.5.8" if has_iter else "0.5.5-0.5.8"
        return "0.5.9-0.5.23"

    def _message(self, msg: str, time_only: bool):
        return message(msg, time_only, self._batch)

    def _batch(self, msg: str, time_only: bool):
        m = _BATCH_HEAD.match(msg)
        if m is None:
            return _MALFORMED
        decode = m.group(1) == "Decode"
        fields: dict = {}
        if m.group(2) is not None:
            fields["mixed_running_req"] = int(m.group(2))
        if m.group(3) is not None:
            fields["forward_iter"] = int(m.group(3))
        body = msg[m.end():]
        parse_batch_body(body, fields)
        if "running_req" not in fields and "new_seq" not in fields:
            return _MALFORMED
        self.format_family = self._family(m.group(4), m.group(3) is not None, body.endswith(", "),
                                          "cuda_graph" in fields, time_only, decode)
        return Event("decode_batch" if decode else "prefill_batch", fields, None, None, EMPTY_RANK)

