"""What the parser's two helpers (anchored.py: records found by message; block.py: the block path) read and call
on the parser of a source: its scanning state, as a Protocol. They import this, not parser.py, and parser.py
imports them: the three modules form no circle. The names keep their leading underscore: they are the parser's
own, shared with its helpers and nothing else."""
from __future__ import annotations

from collections import Counter
from typing import Any, Protocol

from exporter.ingest.events import Event


class Scanning(Protocol):
    """A Parser as its helpers see it (parser.py sets and explains each of these)."""

    source: str
    unparsed: Counter
    format_family: str | None
    learning: bool
    untimed: int
    fold_request_logs: bool
    folded_request_logs: int
    # records and rows counted, and where they were found
    _recognised: int
    _kinds: Counter
    _layout_counts: Counter
    _tallies: dict
    _customs: dict
    # multi-line records and request text
    _pending: Any
    _in_request: bool
    _prefixed: bool
    _last_kv_oom_line: int
    # time and rank
    _date_key: str
    _date_ts: float
    _date_iso: str
    _row_time: tuple
    _rank_cache: dict[str, dict]
    # learned shapes, skeleton layouts and prefix layouts
    _shapes: list
    _by_marker: dict
    _line_re: Any
    _prefix_at: int
    _layouts: dict
    _heads: dict
    _head_lens: list[int]
    _layout_len: int
    _prefixes: dict
    _known: list
    _found: tuple | None

    def flush(self) -> list[Event]: ...

    def _feed_safely(self, text: str, lineno: int, out: list, m: Any, container_time: str | None = None) -> None: ...

    def _message(self, msg: str, time_only: bool) -> Any: ...

    def _learn(self, msg: str, frac: str | None, ranks: str, space: bool) -> None: ...

    def _learned_event(self, shape: Any, m: Any, lineno: int, container_time: str | None, out: list) -> None: ...

    def _date_time(self, date: str, tod: str) -> tuple: ...

    def _time_only(self, tod: str, frac: Any) -> tuple: ...

    def _rank(self, ranks: str) -> dict: ...

    def _family(self, sep: str, has_iter: bool, trailing: bool, has_graph: bool, time_only: bool,
                decode: bool) -> str: ...
