"""Turns the advice of firing signals into one recommendation per knob, with the current value and a
suggested one, reconciling signals that pull the same flag in opposite directions.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from exporter.catalog import GIB, SIGNALS_BY_ID, Advice
from exporter.signals import Judgement

_SEVERITY_RANK = {"critical": 3, "warning": 2, "info": 1}
_HEADROOM_TARGET = 6.5 * GIB        # middle of the guide's 5-8 GB rule of thumb
_GRAPH_BS_STEPS = (256, 512, 768, 1024)


@dataclass(frozen=True)
class Recommendation:
    flag: str
    action: str                 # increase | decrease | check
    current: object
    suggested: object
    signals: tuple[str, ...]
    severity: str
    reason: str

    def to_json(self) -> dict:
        return {"flag": self.flag, "action": self.action, "current": self.current,
                "suggested": self.suggested, "signals": list(self.signals), "severity": self.severity,
                "reason": self.reason}


def reconcile(judgements: dict[str, Judgement], server_args: dict, memory_config: dict,
              headroom_bytes: float | None = None, total_gpu_bytes: float | None = None) -> list[Recommendation]:
    by_flag: dict[str, list[tuple[str, Advice]]] = {}
    for sid, j in judgements.items():
        if j.firing:
            for adv in SIGNALS_BY_ID[sid].advice:
                by_flag.setdefault(adv.flag, []).append((sid, adv))
    out = []
    for flag, items in by_flag.items():
        current = _current(flag, server_args, memory_config)
        moves = [(sid, a) for sid, a in items if a.action != "check"]
        if not moves:
            sid, adv = items[0]
            out.append(Recommendation(flag, "check", current, adv.suggested, _ids(items),
                                      _severity(items), adv.reason))
            continue
        winner_sid, winner = max(moves, key=lambda m: (_SEVERITY_RANK[SIGNALS_BY_ID[m[0]].severity],
                                                       m[1].relieves_pressure))
        agree = [(s, a) for s, a in items if a.action in (winner.action, "check")]
        losers = [(s, a) for s, a in moves if a.action != winner.action]
        reason = winner.reason
        if losers:
            reason += (f" ({', '.join(_ids(losers))} asked to {losers[0][1].action} it instead; "
                       f"{winner_sid} wins because "
                       + ("it is more severe" if _SEVERITY_RANK[SIGNALS_BY_ID[winner_sid].severity]
                          > max(_SEVERITY_RANK[SIGNALS_BY_ID[s].severity] for s, _ in losers)
                          else "lowering memory pressure comes first")
                       + "; re-check once it clears.)")
        suggested = _suggest(flag, winner, current, server_args, memory_config, headroom_bytes,
                             total_gpu_bytes, set(_ids(agree)))
        out.append(Recommendation(flag, winner.action, current, suggested, _ids(agree), _severity(agree),
                                  reason))
    out.sort(key=lambda r: (-_SEVERITY_RANK[r.severity], r.flag))
    return out


class Reconciler:
    """reconcile() that remembers its last answer. The engine calls it at every evaluation, and what advice
    depends on changes rarely: the firing signals, the current value of each flag they advise on, the
    headroom and the GPU size. When none of those changed, the last answer (a fresh list) is the answer."""

    def __init__(self):
        self._key: list | None = None
        self._advice: list[Recommendation] = []

    def __call__(self, judgements: dict[str, Judgement], server_args: dict, memory_config: dict,
                 headroom_bytes: float | None = None, total_gpu_bytes: float | None = None) -> list[Recommendation]:
        firing = tuple(sid for sid, j in judgements.items() if j.firing)
        key = [firing, headroom_bytes, total_gpu_bytes]
        for name in _arg_names(firing):         # what _current() reads
            v = server_args.get(name)
            if v is None:
                v = memory_config.get(name)
            key += (v.__class__, v)             # the type too: 1 and 1.0 are equal but print differently
        if key != self._key:
            self._key = key
            self._advice = reconcile(judgements, server_args, memory_config, headroom_bytes, total_gpu_bytes)
        return list(self._advice)


@functools.cache
def _arg_names(firing: tuple[str, ...]) -> tuple[str, ...]:
    """The server arguments behind the flags these signals advise on: all reconcile() reads of server_args
    and memory_config."""
    names = (_arg_name(adv.flag) for sid in firing for adv in SIGNALS_BY_ID[sid].advice)
    return tuple(dict.fromkeys(n for n in names if n is not None))


def _ids(items) -> tuple[str, ...]:
    return tuple(sorted({sid for sid, _ in items}))


def _severity(items) -> str:
    return max((SIGNALS_BY_ID[sid].severity for sid, _ in items), key=_SEVERITY_RANK.__getitem__)


def _current(flag: str, server_args: dict, memory_config: dict):
    key = _arg_name(flag)
    if key is None:
        return None
    value = server_args.get(key)
    if value is None:
        value = memory_config.get(key)
    return value if isinstance(value, (int, float, str, bool)) else None


@functools.cache
def _arg_name(flag: str) -> str | None:
    """--max-running-requests -> max_running_requests (None: not a server flag, e.g. request-rate)."""
    return flag[2:].replace("-", "_") if flag.startswith("--") else None


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _suggest(flag, adv: Advice, current, server_args, memory_config, headroom, total, signals):
    cur = _num(current)
    if flag == "--schedule-conservativeness":
        if cur is None:
            return adv.suggested
        if adv.action == "increase":
            return round(max(adv.suggested, cur + 0.3), 2)
        return round(min(adv.suggested, cur / 2), 2)
    if flag == "--mem-fraction-static" and cur is not None:
        if adv.action == "decrease":
            if "gpu_headroom_low" in signals and headroom is not None and total:
                return _floor2(cur - (_HEADROOM_TARGET - headroom) / total)
            return _floor2(cur - 0.05)
        if adv.action == "increase" and headroom is not None and total:
            return _floor2(cur + (headroom - _HEADROOM_TARGET) / total)
        return round(cur + 0.01, 2) if adv.action == "increase" else None
    if flag == "--max-running-requests" and cur is not None:
        return max(1, int(cur * 0.75)) if adv.action == "decrease" else int(cur * 1.5)
    if flag == "--cuda-graph-max-bs" and adv.action == "increase":
        base = cur if cur is not None else 160
        return next((s for s in _GRAPH_BS_STEPS if s > base), int(base * 2))
    if flag == "--chunked-prefill-size":
        if adv.action == "decrease":
            return 2048 if cur is not None and cur <= 4096 else 4096
        return int(cur * 2) if cur is not None else None
    return adv.suggested


def _floor2(x: float) -> float:
    """Round down to 0.01 and keep within what SGLang can run with."""
    return min(0.95, max(0.05, int(x * 100) / 100))
