"""What ServerState's parts (StartupFacts, ScrapeFeed) share, declared for the type checker: the rank table and
the start-up configuration that more than one part reads or resets. ServerState.__init__ sets every attribute;
the methods are ServerState's, or a part's."""
from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.state.ranks import RankValues


class StatePart:
    """The base of ServerState's parts: annotations only (no value, nothing at run time), so each part's
    methods are checked against the attributes ServerState gives them."""

    server_args: dict
    format_family: str          # the batch lines' format family, set by whoever parses them (analyze, sidecar)
    memory_config: dict
    memory_by_rank: dict[str, dict]
    _ranks: dict[tuple, RankValues]
    _unread: list[RankValues]
    _schedulers: dict | None
    _leader_tp: dict

    if TYPE_CHECKING:
        def _limits(self) -> None: ...

        def _forget_row_slots(self) -> None: ...

        def _memory_reading(self, label: str, kind: str, avail) -> None: ...
