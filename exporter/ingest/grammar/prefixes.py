"""Prefix layouts: a custom prefix's skeleton taken apart once into the offsets of its time, rank tags,
level and pid."""
from __future__ import annotations

import re
from typing import Any

from exporter.ingest.events import EMPTY_RANK
from exporter.ingest.grammar.patterns import _PREFIX_PART, _PREFIX_RANKS, _PY_FILE


class _PrefixLayout:
    """One prefix skeleton's parts (_PREFIX_PART), at fixed offsets in every prefix with that skeleton: the
    rightmost time (SGLang's own wins over an outer collector's), the rank tags, the level and the pid;
    `template` names the layout for people ("[<time>][<file>:<n>][<level>]: ")."""
    __slots__ = ("time", "date", "frac", "ranks", "level", "pid", "template", "_rank", "tags", "known")

    def __init__(self, prefix: str):
        self.time: Any = None       # (start, end) of each part in the prefix, once found
        self.date: Any = None
        self.frac: Any = None
        self.level: Any = None
        self.pid: Any = None
        self.ranks: list = []
        self._rank: dict | None = None
        self.known = False
        # the rank tags as SGLang's own prefix prints them (" DP0 TP1"), when they come after the time and
        # SGLang prints each of them: a batch line of the layout is then read by a learned shape
        self.tags: list | None = []
        parts, last = [], 0
        for m in _PREFIX_PART.finditer(prefix):
            parts.append(_PY_FILE.sub("<file>", prefix[last:m.start()]))
            last = m.end()
            if m.group(2) is not None:
                self.time = m.span(2)
                self.date = m.span(1) if m.group(1) is not None else None
                self.frac = m.span(3) if m.group(3) is not None else None
                parts.append("<time>")
            elif m.group(5) is not None:
                self.ranks.append((_PREFIX_RANKS[m.group(4)], m.span(5)))
                if self.tags is not None:
                    self.tags = self.tags + [(m.group(4), m.span(5))] if m.group(4) in _SGLANG_TAGS and \
                        self.time is not None else None
                parts.append("<rank>")
            elif m.group(6) is not None:
                self.level = m.span(6)
                parts.append("<level>")
            elif m.group(7) is not None:
                self.pid = m.span(7)
                parts.append(prefix[m.start():m.start(7)] + "<pid>")
            else:
                parts.append("<n>")
        parts.append(_PY_FILE.sub("<file>", prefix[last:]))
        self.template: str = re.sub(r"<rank>( <rank>)+", "<rank>", "".join(parts))[:120]
        if not self.ranks:
            self._rank = EMPTY_RANK
        if self.time is None or self.date is None:
            self.tags = None

    def ranks_text(self, text: str) -> str:
        return "".join(f" {tag}{text[a:b]}" for tag, (a, b) in self.tags or ())

    def clock(self, text: str):
        d, f = self.date, self.frac
        return (text[d[0]:d[1]] if d else None, text[self.time[0]:self.time[1]], text[f[0]:f[1]] if f else None)

    def rank_of(self, text: str) -> dict:
        if self._rank is not None:
            return self._rank
        rank = dict(EMPTY_RANK)
        for key, (a, b) in self.ranks:
            rank[key] = int(text[a:b])
        return rank

    def level_pid(self, text: str):
        lv, pid = self.level, self.pid
        return (text[lv[0]:lv[1]] if lv else None, int(text[pid[0]:pid[1]]) if pid else None)


_SGLANG_TAGS = frozenset(("DP", "PP", "TP", "EP", "ATTN_CP", "MOE_DP"))
_NO_PREFIX = _PrefixLayout("")
_NO_PREFIX.template = "(none)"
