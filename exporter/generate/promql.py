"""PromQL text helpers shared by the rule, test and runbook generators: durations, numbers, selectors."""
from __future__ import annotations

import re

_DUR = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def parse_duration(d: str) -> float:
    if d in ("0", ""):
        return 0.0
    parts = _DUR.findall(d)
    if not parts or "".join(a + b for a, b in parts) != d:
        raise ValueError(f"bad duration {d!r}")
    return float(sum(int(a) * _UNIT[b] for a, b in parts))


def fmt_duration(seconds: float) -> str:
    """A Prometheus duration, to the millisecond (`2s500ms`)."""
    ms = int(round(seconds * 1000))
    if ms == 0:
        return "0s"
    out = ""
    for unit, n in (("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        if ms >= n:
            out += f"{ms // n}{unit}"
            ms %= n
    return out


def num(v) -> str:
    """A number as PromQL/YAML text: integers without a trailing .0."""
    v = float(v)
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def by(labels) -> str:
    return ", ".join(labels)


def sel(selector: str, *extra: str) -> str:
    parts = [p for p in (selector.strip(),) + extra if p]
    return "{" + ", ".join(parts) + "}"


_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')


def selector_labels(selector: str, override: dict | None) -> dict:
    """Concrete label values that satisfy `selector` (for test series)."""
    if override is not None:
        return dict(override)
    out, pos = {}, 0
    while pos < len(selector):
        m = _MATCHER.match(selector, pos)
        if not m:
            raise ValueError(f"cannot parse selector {selector!r}")
        name, op, val = m.groups()
        if op == "=" or op == "=~" and re.fullmatch(val, val):
            out[name] = val
        elif op in ("!=", "!~"):
            pass
        else:
            raise ValueError(f"selector {selector!r}: give test labels (alerts.exporter_test_labels / "
                             f"alerts.sglang_test_labels) for the regex matcher on {name!r}")
        pos = m.end()
    return out
