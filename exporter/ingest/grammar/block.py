"""The parser's block path: consecutive lines of a plain-text source, the lines of learned layouts read as
rows (events.py) by their skeleton, the others through the generic path."""
from __future__ import annotations

from exporter.ingest.events import Event
from exporter.ingest.grammar.layouts import (
    _SKELETON,
    HEAD_CHARS,
    MAX_SKELETON_CHARS,
    MAX_SKELETONS,
    _EventLayout,
    _head_key,
    _Layout,
)
from exporter.ingest.grammar.patterns import _ACCESS


class BlockPath:
    """The parser's bulk reader (a mixin of Parser: it shares the parser's state)."""

    def feed_items(self, texts: list[str], first: int) -> list:
        """`feed_lines`, except that a line of a learned layout stays a Row (events.py): the block path
        of `analyze`, `parse` and `serve`, where most lines are batch lines and Event objects would cost more
        than reading them."""
        out: list = []
        if not self._shapes:
            for lineno, text in enumerate(texts, first):
                self._feed_safely(text, lineno, out, None)
            return out
        layouts, heads, rank_cache = self._layouts, self._heads, self._rank_cache
        last_dt, last_ts, last_iso = self._row_time
        last_shape = None
        lineno = first - 1
        for text in texts:
            lineno += 1
            skeleton = layout = None
            if text[:1] == "[":
                if len(text) <= MAX_SKELETON_CHARS:
                    try:
                        skeleton = text.encode().translate(_SKELETON)
                    except UnicodeEncodeError:      # a lone surrogate (not from a splitter): no skeleton
                        pass
                    else:
                        layout = layouts.get(skeleton)
                        if layout is not None and layout.check_at >= 0 and (
                                text[layout.check_at] > layout.check_max
                                or layout.check_more is not None and not layout.check_more(text)):
                            layout = None       # a number out of its range: the generic path counts the line
                if layout is None and heads and "\x00" not in text:
                    layout = heads.get(_head_key(text))
            if layout is None:
                m = self._line_re.match(text)
                sh = self._by_marker.get(m.lastindex) if m is not None else None
                if sh is None:                  # not a learned shape's line: the generic path
                    n = len(out)
                    self._feed_safely(text, lineno, out, m)
                    last_shape = None           # it may have set the format family, or learned a shape
                    layouts = self._layouts
                    if len(out) > n and m is not None and out[-1].kind in self._tallies:
                        self._learn_event_layout(text, lineno, skeleton, m, out[-1])
                    continue
                layout = _Layout(sh, m)
                if skeleton is not None:
                    if len(layouts) >= MAX_SKELETONS:
                        layouts.clear()
                    layouts[skeleton] = layout
            sh = layout.shape
            if self._pending is not None:
                out += self.flush()
            dt = text[layout.dt]
            if dt != last_dt:
                last_dt = dt
                last_ts, last_iso = self._date_time(dt[:10], dt[11:])
            ts, iso = last_ts, last_iso
            if layout.frac is not None and ts is not None:
                frac = text[layout.frac]
                ts += int(frac) / 10 ** len(frac)
                iso = f"{iso}.{frac}"
            ranks = text[layout.rank]
            rank = rank_cache.get(ranks)
            if rank is None:
                rank = self._rank(ranks)
            if sh is not last_shape:
                last_shape = sh
                self._in_request = sh.kind == "request_log"
                if layout.batch:
                    self.format_family = sh.family or self._family(sh.sep, sh.has_iter, sh.trailing,
                                                                   sh.has_graph, False, False)
            sh.count += 1
            out.append((layout, text, ts, iso, rank, lineno))
        self._row_time = last_dt, last_ts, last_iso
        return out

    def _learn_event_layout(self, text: str, lineno: int, skeleton: bytes | None, m, ev: Event) -> None:
        """After the generic path read line `lineno` (m: the line regex's match) and emitted `ev`, an access or
        request-log Event: the layout that reads the next lines of its key as rows (see _EventLayout)."""
        a = self._prefix_at
        if ev.line != lineno or m.group(a) is None:
            return
        tally = self._tallies[ev.kind]
        if ev.kind == "http_access":
            access = _ACCESS.match(text, m.end())
            if skeleton is not None and access is not None:
                if len(self._layouts) >= MAX_SKELETONS:
                    self._layouts.clear()
                self._layouts[skeleton] = _EventLayout(tally, self.source, m, a, access)
        elif text.startswith(("Receive: ", "Finish: "), m.end()) and m.end() + len("Receive: ") <= HEAD_CHARS:
            key = _head_key(text)
            if key is not None:
                if len(self._heads) >= MAX_SKELETONS:
                    self._heads.clear()
                self._heads[key] = _EventLayout(tally, self.source, m, a)
