"""Turns the advice of firing signals into one recommendation per knob, with the current value and a
suggested one, reconciling signals that pull the same flag in opposite directions.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from exporter.catalog import GIB, SIGNALS_BY_ID, Advice
from exporter.releases import flags
from exporter.signals.judgement import Judgement

_SEVERITY_RANK = {"critical": 3, "warning": 2, "info": 1}
_HEADROOM_TARGET = 6.5 * GIB        # middle of the guide's 5-8 GB rule of thumb
_GRAPH_BS_STEPS = (256, 512, 768, 1024)


@dataclass(frozen=True)
class Recommendation:
    flag: str
    action: str                 # increase | decrease | check | hold (do not raise) | keep (changing it cannot help)
    current: object
    suggested: object
    signals: tuple[str, ...]
    severity: str
    reason: str
    spellings: tuple[str, ...] = ()     # every spelling of the flag some SGLang release accepts

    def to_json(self) -> dict:
        return {"flag": self.flag, "action": self.action, "current": self.current,
                "suggested": self.suggested, "signals": list(self.signals), "severity": self.severity,
                "reason": self.reason, "spellings": list(self.spellings or (self.flag,))}


# Firing, these say memory is short: more requests would only be retracted or run out of memory.
PRESSURE_SIGNALS = ("retractions_frequent", "retraction_storm", "oom_prefill", "oom_decode", "startup_oom",
                    "server_crashed", "gpu_headroom_low")
KV_FULL = 0.9          # the guide's token-usage target: at or above it the KV cache is full


def reconcile(judgements: dict[str, Judgement], server_args: dict, memory_config: dict,
              headroom_bytes: float | None = None, total_gpu_bytes: float | None = None,
              facts: dict | None = None) -> list[Recommendation]:
    """facts (engine.advice_facts): `startup_oom_stage` picks a start-up OOM's advice, `graph_off_peak` is the
    largest decode batch that ran without CUDA graph, `kv_full` whether a KV cache pool is full now,
    `format_family` the batch lines' format (it narrows the release server_args tell)."""
    family = (facts or {}).get("format_family")
    return _reconcile(judgements, server_args, memory_config, headroom_bytes, total_gpu_bytes, facts,
                      flags.infer_release(server_args, family=family))


def _reconcile(judgements: dict[str, Judgement], server_args: dict, memory_config: dict,
               headroom_bytes: float | None, total_gpu_bytes: float | None, facts: dict | None,
               release: tuple[str, str] | None) -> list[Recommendation]:
    """reconcile() for the release its server_args tell (flags.infer_release, which reads only their keys)."""
    facts = facts or {}
    stage = facts.get("startup_oom_stage") or "unknown"
    by_flag: dict[str, list[tuple[str, Advice]]] = {}
    for sid, j in judgements.items():
        if j.firing:
            for adv in SIGNALS_BY_ID[sid].advice:
                if not adv.when or stage in adv.when:
                    by_flag.setdefault(adv.flag, []).append((sid, adv))
    out = []
    held = _hold_rate(by_flag, judgements, facts.get("kv_full", False))
    if held is not None:
        out.append(held)
    graph = _graph_check(by_flag, server_args, facts.get("graph_off_peak"))
    out += graph
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
    out = [_spelled(r, release) for r in out]
    out.sort(key=lambda r: (-_SEVERITY_RANK[r.severity], r.flag))
    return out


def _spelled(rec: Recommendation, release: tuple[str, str] | None) -> Recommendation:
    """The recommendation in the words of the user's release: the flag it accepts (server_args tells the
    release); when the release is not known and releases spell the flag differently, every spelling."""
    flag, spellings = flags.spell(rec.flag, release)
    reason = rec.reason
    if flag != rec.flag:
        reason = reason.replace(rec.flag, flag)
    elif len(spellings) > 1 and (release is None or not flags.accepted(flag, release)):
        others = [f"{s} (SGLang {flags.releases.first_release(s)} on)" for s in spellings if s != flag]
        known = "The SGLang release is not known" if release is None else \
            f"SGLang {release[0]} .. {release[1]} spans a rename"
        reason += f" {known}: it may spell {flag} as {', '.join(others)}."
    return Recommendation(flag, rec.action, rec.current, rec.suggested, rec.signals, rec.severity, reason,
                          spellings)


class Reconciler:
    """reconcile() that remembers its last answer. The engine calls it at every evaluation, and what advice
    depends on changes rarely: the firing signals, the current value of each flag they advise on, the
    headroom and the GPU size. When none of those changed, the last answer (a fresh list) is the answer.
    server_args is taken to be replaced when its keys change (ServerState never adds or removes keys in place;
    its values may change in place): its keys, and the release they tell, are read again only then."""

    def __init__(self):
        self._key: list | None = None
        self._advice: list[Recommendation] = []
        self._args: tuple = ({}, (), None, None)   # the last server_args, its keys, the release they tell and
                                                    # the format family that narrowed it

    def __call__(self, judgements: dict[str, Judgement], server_args: dict, memory_config: dict,
                 headroom_bytes: float | None = None, total_gpu_bytes: float | None = None,
                 facts: dict | None = None, firing: tuple[str, ...] | None = None) -> list[Recommendation]:
        """`firing`: the ids of the firing judgements in their order, when the caller has them (the Evaluator
        keeps them between changes)."""
        if firing is None:
            firing = tuple([sid for sid, j in judgements.items() if j.firing])
        # the keys tell the release; copying a few hundred keys (and inferring the release on every change of
        # advice) cost an evaluation more than its judges
        args, names, release, family = self._args
        wanted = (facts or {}).get("format_family")
        if args is not server_args or len(names) != len(server_args) or family != wanted:
            keys = tuple(server_args)
            if keys != names or family != wanted:
                release = flags.infer_release(server_args, family=wanted)
            names = keys
            self._args = (server_args, names, release, wanted)
        key: list = [firing, headroom_bytes, total_gpu_bytes, facts, names]
        for name in _arg_names(firing):         # what _current() reads
            v = server_args.get(name)
            if v is None:
                v = memory_config.get(name)
            key += (v.__class__, v)             # the type too: 1 and 1.0 are equal but print differently
        if key != self._key:
            self._key = key
            self._advice = _reconcile(judgements, server_args, memory_config, headroom_bytes, total_gpu_bytes,
                                      facts, release)
        return list(self._advice)


@functools.cache
def _arg_names(firing: tuple[str, ...]) -> tuple[str, ...]:
    """The server arguments behind the flags these signals advise on: all reconcile() reads of server_args
    and memory_config."""
    names = (n for sid in firing for adv in SIGNALS_BY_ID[sid].advice
             for n in (flags.chain(_arg_name(adv.flag)) if _arg_name(adv.flag) else ()))
    # _graph_check reads these too
    return tuple(dict.fromkeys(n for n in (*names, "disable_cuda_graph", "attention_backend") if n is not None))


def _hold_rate(by_flag: dict, judgements: dict, full: bool) -> Recommendation | None:
    """A short queue asks for more requests; while memory is short they would only be retracted or run out of
    memory. Then the request rate is held (the pressure signal wins) and by_flag loses the increase."""
    items = by_flag.get("request-rate")
    if not items or not any(a.action == "increase" for _, a in items):
        return None
    winners = [sid for sid in PRESSURE_SIGNALS if judgements.get(sid) and judgements[sid].firing]
    if not winners and not full:
        return None
    by_flag["request-rate"] = [(s, a) for s, a in items if a.action != "increase"]
    if by_flag["request-rate"]:
        return None               # another signal asks to lower the rate: that recommendation stands alone
    del by_flag["request-rate"]
    askers = [s for s, a in items if a.action == "increase"]
    why = (f"{', '.join(winners)} fired" if winners else "") + \
        (("; " if winners else "") + f"the KV cache is full (token usage >= {KV_FULL})" if full else "")
    won = winners[0] if winners else "the full KV cache"
    return Recommendation("request-rate", "hold", None, None, tuple(sorted(set(askers + winners))),
                          _severity([(s, None) for s in askers + winners]),
                          f"Do not send more requests while {why}: they would only wait, be retracted, run out "
                          f"of memory or fail. {', '.join(askers)} asked to increase the request rate; {won} wins "
                          "because memory pressure and failures come first; re-check once it clears.")


def _graph_check(by_flag: dict, server_args: dict, peak) -> list[Recommendation]:
    """Batches no larger than --cuda-graph-max-bs that ran without CUDA graph cannot be helped by raising it:
    CUDA graph is disabled or does not apply (the guide: check it is not disabled, try another attention
    backend). Raising is left only when the limit is not known (no server_args line)."""
    items = by_flag.get("--cuda-graph-max-bs")
    max_bs = _num(flags.value(server_args, "cuda_graph_max_bs"))
    if not items or max_bs is None:
        return []
    raise_ = [(s, a) for s, a in items if a.action == "increase"]
    if not raise_:
        return []
    by_flag["--cuda-graph-max-bs"] = [(s, a) for s, a in items if a.action != "increase"]
    if not by_flag["--cuda-graph-max-bs"]:
        del by_flag["--cuda-graph-max-bs"]
    sids = _ids(raise_)
    seen = f"batches of up to {int(peak)}" if peak else "small batches"
    disabled = server_args.get("disable_cuda_graph")
    out = [Recommendation("--cuda-graph-max-bs", "keep", max_bs if max_bs != int(max_bs) else int(max_bs), None,
                          sids, _severity(raise_),
                          f"{seen.capitalize()} ran without CUDA graph though --cuda-graph-max-bs is "
                          f"{int(max_bs)}: raising it cannot help; CUDA graph is disabled or does not apply to "
                          "them (see --disable-cuda-graph and --attention-backend).")]
    checks = by_flag.pop("--disable-cuda-graph", [])
    out.append(Recommendation("--disable-cuda-graph", "check", disabled if isinstance(disabled, bool) else None,
                              False, _ids(checks) or sids, _severity(checks or raise_),
                              ("CUDA graph is disabled on the command line: remove --disable-cuda-graph."
                               if disabled is True else
                               "Make sure CUDA graph is not disabled (--disable-cuda-graph, or a feature that "
                               "turns it off).")))
    if disabled is not True:
        backend = server_args.get("attention_backend")
        out.append(Recommendation("--attention-backend", "check", backend if isinstance(backend, str) else None,
                                  None, sids, _severity(raise_),
                                  "CUDA graph is on and still not used for these batches: this attention backend "
                                  "may not support it here; try another one."))
    return out


def _ids(items) -> tuple[str, ...]:
    return tuple(sorted({sid for sid, _ in items}))


def _severity(items) -> str:
    return max((SIGNALS_BY_ID[sid].severity for sid, _ in items), key=_SEVERITY_RANK.__getitem__)


def _current(flag: str, server_args: dict, memory_config: dict):
    key = _arg_name(flag)
    if key is None:
        return None
    value = flags.value(server_args, key)
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
            return round(max(adv.suggested, cur + 0.3), 2)  # type: ignore[call-overload]  # (a number)
        return round(min(adv.suggested, cur / 2), 2)  # type: ignore[call-overload]
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
    if flag == "--cuda-graph-max-bs" and adv.action == "decrease":
        return max(1, int(cur) // 2) if cur is not None else None
    if flag == "--tp-size" and adv.action == "increase":
        return int(cur) * 2 if cur is not None else 2
    if flag == "--cuda-graph-max-bs" and adv.action == "increase":
        base = cur if cur is not None else 160
        return next((s for s in _GRAPH_BS_STEPS if s > base), int(base * 2))
    if flag == "--hicache-ratio" and adv.action == "increase":     # host pool size over the device pool's
        return round(cur * 1.5, 1) if cur is not None else 3.0        # (SGLang's default 2.0)
    if flag == "--chunked-prefill-size":
        if adv.action == "decrease":
            return 2048 if cur is not None and cur <= 4096 else 4096
        return int(cur * 2) if cur is not None else None
    return adv.suggested


def _floor2(x: float) -> float:
    """Round down to 0.01 and keep within what SGLang can run with."""
    return min(0.95, max(0.05, int(x * 100) / 100))
