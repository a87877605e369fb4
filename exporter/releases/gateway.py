"""The SGLang gateway's metric families per release, read by scripts/gateway-releases into gateway.json.

Two lines: `gateway` (SGLang Model Gateway, `smg_*`, its own release tags v1.0.1+, read from its source) and
`router` (the PyPI `sglang-router` wheels: `sgl_router_*` up to 0.2.x, `smg_*` from 0.3.0, names read from the
compiled extension). Each family: type, label names, help, first and last release (`last` None while the
newest release still defines it). `renames`: an old `sgl_router_` family and the `smg_` one that took its place.

    family("smg_worker_health").labels -> ("worker",)
    spellings("smg_worker_cb_state")   -> ("smg_worker_cb_state", "sgl_router_cb_state")
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA = Path(__file__).resolve().parent / "gateway.json"
LINES = ("gateway", "router")


@dataclass(frozen=True)
class GatewayFamily:
    name: str
    line: str             # "gateway" | "router": the release line that defines it (gateway first)
    type: str             # counter | gauge | histogram
    labels: tuple
    help: str
    first: str
    last: str | None      # None: the newest release of its line still defines it


@cache
def _data() -> dict:
    try:
        return json.loads(DATA.read_text())
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"{DATA}: unreadable gateway release data ({exc}); run scripts/gateway-releases") from exc


def releases(line: str) -> list[str]:
    return list(_data()[line]["releases"])


@cache
def families() -> dict[str, GatewayFamily]:
    """Every family of both lines; a name both define is described by the gateway line."""
    out: dict[str, GatewayFamily] = {}
    for line in reversed(LINES):
        for name, f in _data()[line]["families"].items():
            out[name] = GatewayFamily(name, line, f["type"], tuple(f["labels"]), f["help"], f["first"], f["last"])
    return out


def family(name: str) -> GatewayFamily:
    try:
        return families()[name]
    except KeyError:
        raise KeyError(f"{name}: no gateway or router release defines it (exporter/releases/gateway.json)") from None


def span(name: str, line: str) -> tuple[str, str | None] | None:
    """(first, last or None) release of `line` defining the family, or None when none of that line does."""
    got = _data()[line]["families"].get(name)
    return None if got is None else (got["first"], got["last"])


def renames() -> dict[str, str]:
    """old sgl_router_ name -> the smg_ name that replaced it."""
    return {old: new for old, new in _data()["renames"]}


def spellings(name: str) -> tuple[str, ...]:
    """The `smg_` name first, then the older router names of the same meaning."""
    return (name, *(old for old, new in renames().items() if new == name))


def check() -> list[str]:
    """Problems in the data: a rename naming a family no release defines."""
    fams = families()
    return [f"rename {old} -> {new}: {n} is defined by no release" for old, new in _data()["renames"]
            for n in (old, new) if n not in fams]
