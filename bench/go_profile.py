"""Where a Go program's CPU went, from its `/debug/pprof/profile` (Prometheus serves one): the share of the
sampled CPU under each of a few named call paths, read without Go's toolchain.

    python bench/go_profile.py PROFILE.pb.gz       # a saved profile: the split and the heaviest functions

The profile is gzipped protobuf (github.com/google/pprof, proto/profile.proto); the few fields read here are
decoded by hand (varints and length-delimited fields), which is all the format needs for this.
"""
from __future__ import annotations

import gzip
import sys
from collections import Counter

# profile.proto field numbers
_SAMPLE, _LOCATION, _FUNCTION, _STRINGS = 2, 4, 5, 6
_SAMPLE_LOCATIONS, _SAMPLE_VALUES = 1, 2
_LOCATION_ID, _LOCATION_LINE = 1, 4
_LINE_FUNCTION = 1
_FUNCTION_ID, _FUNCTION_NAME = 1, 2

# what bench/fleet.py reports: a sample counts for every path one of whose functions is on its stack (Prometheus
# 2.x selects through the querier adapter, 3.x straight from the block querier)
PATHS = {
    "rule evaluation": "rules.(*Group).Eval",
    "  selecting series (postings, sort)": ("storage.(*querierAdapter).Select", "tsdb.(*blockQuerier).Select"),
    "  sorting postings by labels": "tsdb.(*headIndexReader).SortedPostings",
    "  alert templates (parsed, expanded)": "text/template",
    "scraping": "scrape.(*scrapeLoop).run",
    "garbage collection (background)": "runtime.gcBgMarkWorker",
    "garbage collection (assists)": "runtime.gcAssistAlloc",
    "HTTP API queries": "web/api/v1.(*API).query",
}


def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i


def _fields(data: bytes):
    """(field number, wire type, value) of one message: an int for varints, bytes for length-delimited."""
    i = 0
    while i < len(data):
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 2:
            size, i = _varint(data, i)
            value, i = data[i:i + size], i + size
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire} at byte {i}: not a pprof profile")
        yield number, wire, value


def _ints(value, wire: int) -> list[int]:
    """A repeated integer field: packed (length-delimited) or one varint."""
    if wire == 0:
        return [value]
    out, i = [], 0
    while i < len(value):
        n, i = _varint(value, i)
        out.append(n)
    return out


def stacks(profile: bytes) -> list[tuple[list[str], int]]:
    """Each sample's stack (function names, innermost first) and its last value (CPU nanoseconds)."""
    data = gzip.decompress(profile) if profile[:2] == b"\x1f\x8b" else profile
    strings: list[str] = []
    samples, locations, functions = [], {}, {}
    for number, _wire, value in _fields(data):
        if number == _STRINGS:
            strings.append(value.decode("utf-8", "replace"))
        elif number == _SAMPLE:
            ids: list[int] = []
            values: list[int] = []
            for n, w, v in _fields(value):
                if n == _SAMPLE_LOCATIONS:
                    ids += _ints(v, w)
                elif n == _SAMPLE_VALUES:
                    values += _ints(v, w)
            samples.append((ids, values[-1] if values else 0))
        elif number == _LOCATION:
            lid, funcs = 0, []
            for n, _, v in _fields(value):
                if n == _LOCATION_ID:
                    lid = v
                elif n == _LOCATION_LINE:
                    funcs += [f for m, _, f in _fields(v) if m == _LINE_FUNCTION]
            locations[lid] = funcs
        elif number == _FUNCTION:
            fid = name = 0
            for n, _, v in _fields(value):
                if n == _FUNCTION_ID:
                    fid = v
                elif n == _FUNCTION_NAME:
                    name = v
            functions[fid] = name
    return [([strings[functions[f]] for lid in ids for f in locations.get(lid, [])], v) for ids, v in samples]


def split(profile: bytes) -> dict:
    """CPU seconds sampled, and the seconds under each of PATHS."""
    total = 0
    under: Counter = Counter()
    for names, value in stacks(profile):
        total += value
        for label, markers in PATHS.items():
            markers = (markers,) if isinstance(markers, str) else markers
            if any(marker in name for name in names for marker in markers):
                under[label] += value
    return {"seconds": total / 1e9, "paths": {label: under[label] / 1e9 for label in PATHS}}


def heaviest(profile: bytes, n: int = 25) -> list[tuple[str, float]]:
    """The functions with the most CPU on their stack (cumulative seconds)."""
    cumulative: Counter = Counter()
    for names, value in stacks(profile):
        for name in set(names):
            cumulative[name] += value
    return [(name, value / 1e9) for name, value in cumulative.most_common(n)]


def main() -> int:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    with open(sys.argv[1], "rb") as f:
        profile = f.read()
    figures = split(profile)
    print(f"{figures['seconds']:.1f} CPU-s sampled")
    for label, seconds in figures["paths"].items():
        print(f"  {label:40} {seconds:7.2f} s {seconds / max(figures['seconds'], 1e-9):6.1%}")
    print()
    for name, seconds in heaviest(profile):
        print(f"  {seconds:7.2f} s  {name[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
