"""Scripted faults on real expositions: the series of a release's own collector output (tests/conformance/),
values edited, labels kept, for the serving signals' tests (tests/test_serving_signals.py, the promtool check
of the native rules).

The conformance runner fed only the scheduler collector's `log_stats`, so families SGLang's other collector
paths set (PD failure counters, HiCache drops, start-up times, cached_tokens_total{cache_source}) are not in
those files. For them `add_family` writes the family with the label set the release defines (exporter/releases:
the collector's base labels, copied from that exposition's own scheduler series, plus the family's own label
names) rather than inventing a bare one.
"""
from __future__ import annotations

import re
from pathlib import Path

from exporter import releases

CONFORMANCE = Path(__file__).resolve().parent / "conformance"
EXPOSITIONS = CONFORMANCE / "expositions"           # a two-GPU TP server per release
FIXTURES = CONFORMANCE / "fixtures"                 # <release>/<layout>.prom

_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def exposition(release: str, layout: str | None = None) -> str:
    path = EXPOSITIONS / f"{release}.prom" if layout is None else FIXTURES / release / f"{layout}.prom"
    return path.read_text()


def samples(text: str):
    """(name, labels, value) of every sample line."""
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = _SAMPLE.match(line)
        if m:
            yield m["name"], dict(_LABEL.findall(m["labels"] or "")), float(m["value"])


def edit(text: str, name: str, value_of) -> str:
    """`text` with every sample of `name` set to value_of(labels, old value); labels and order kept."""
    out = []
    for line in text.splitlines():
        m = None if line.startswith("#") else _SAMPLE.match(line)
        if m and m["name"] == name:
            labels = dict(_LABEL.findall(m["labels"] or ""))
            line = f"{name}{{{m['labels']}}} {value_of(labels, float(m['value']))!r}" if m["labels"] is not None \
                else f"{name} {value_of({}, float(m['value']))!r}"
        out.append(line)
    return "\n".join(out) + "\n"


def scheduler_labels(text: str) -> list[dict]:
    """The label sets of the release's scheduler series (num_queue_reqs, one per scheduler rank)."""
    return [labels for name, labels, _ in samples(text) if name == "sglang:num_queue_reqs"]


def family_labels(release: str, short: str) -> list[str]:
    """The label names `release` gives family `short` beyond the collector's base labels."""
    for fam in releases.metric_families(release).values():
        if fam.short == short:
            spec = fam.labels[0] if fam.labels else ""
            if spec and not spec.startswith("<"):
                return []          # an own label set (http_responses_total): not the scheduler's
            return re.findall(r"'(\w+)'", spec)
    raise KeyError(f"{release} defines no family {short}")


def defines(release: str, short: str) -> bool:
    return any(f.short == short for f in releases.metric_families(release).values())


def add_family(text: str, release: str, short: str, kind: str, rows: list[tuple[dict, float]]) -> str:
    """`text` plus family `short` (`kind` counter|gauge), one series per row: the exposition's first scheduler
    label set, the family's own labels from the row, and its value. A family the text has already is edited
    in place instead (its series' values set from the rows matching their own labels)."""
    name = "sglang:" + short
    if any(n == name for n, _, _ in samples(text)):
        def value_of(labels, old):
            for extra, value in rows:
                if all(labels.get(k) == v for k, v in extra.items()):
                    return value
            return old
        return edit(text, name, value_of)
    own = family_labels(release, short)
    base = scheduler_labels(text)[0]
    lines = [f"# HELP {name} scripted fault", f"# TYPE {name} {kind}"]
    for extra, value in rows:
        assert set(extra) <= set(own) | set(base), (short, extra, own)
        labels = {**base, **extra}
        inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        lines.append(f"{name}{{{inner}}} {value!r}")
    return text.rstrip("\n") + "\n" + "\n".join(lines) + "\n"


def with_releases(short: str) -> list[str]:
    """The releases with a collector exposition that define family `short`."""
    have = sorted((p.stem for p in EXPOSITIONS.glob("*.prom")), key=releases.version_key)
    return [r for r in have if defines(r, short)]
