"""Where the follower stands in each followed file, as data that survives a restart (the positions file).

A position names one file by device + inode, the offset of the first byte not yet handed out as a complete
line, the number of the last line handed out, and the file's first bytes (the head fingerprint) so that a
reused inode or a rewritten file is not taken for the same one; a file seen empty (no head yet) may carry
``copy_after_ns``, the time after which a rotated sibling is its copytruncate copy (exporter/ingest/recover.py).
`validate_positions` checks every field and
raises `PositionsError` (one exception, naming the key) on anything else; the positions file that holds them
(with the counters they belong to) is checkpoint.py's. The rules that apply a position on
start are in `Follower` (docs/tailing.md, "Restart").
"""
from __future__ import annotations

from typing import Any

FINGERPRINT_BYTES = 1024          # head of a file kept to recognise it (and to detect rewrites)

_FIELDS = {"dev": int, "ino": int, "offset": int, "lineno": int, "fp_len": int, "fp": str, "skip": bool,
           "name": str}


class PositionsError(ValueError):
    """The positions data is not ours or is damaged; the message names the key."""


def validate_positions(positions: Any) -> dict:
    """Check a positions dict (as `Follower.positions()` returns it) field by field; return it."""
    if not isinstance(positions, dict):
        raise PositionsError("\"sources\" must be an object of path -> position")
    for path, entry in positions.items():
        if not isinstance(path, str) or not path:
            raise PositionsError(f"source {path!r}: the key must be a non-empty path")
        _check_entry(entry, f"source {path!r}")
        draining = entry.get("draining", [])
        if not isinstance(draining, list):
            raise PositionsError(f"source {path!r}: \"draining\" must be a list")
        for i, d in enumerate(draining):
            _check_entry(d, f"source {path!r} draining[{i}]")
            if "draining" in d:
                raise PositionsError(f"source {path!r} draining[{i}]: nested \"draining\"")
    return positions


def _check_entry(e: Any, where: str) -> None:
    if not isinstance(e, dict):
        raise PositionsError(f"{where}: must be an object")
    for key, typ in _FIELDS.items():
        if key not in e:
            raise PositionsError(f"{where}: missing \"{key}\"")
        v = e[key]
        # bool is an int in Python: a flag where a number belongs is damage too
        if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
            raise PositionsError(f"{where}: \"{key}\" must be {typ.__name__}, not {type(v).__name__}")
        if typ is int and isinstance(v, int) and not 0 <= v < 1 << 64:
            raise PositionsError(f"{where}: \"{key}\" = {v} is out of range")
    after = e.get("copy_after_ns")
    if after is not None and (after.__class__ is not int or not 0 <= after < 1 << 64):
        raise PositionsError(f"{where}: \"copy_after_ns\" must be an int in range, not {after!r}")
    unknown = set(e) - set(_FIELDS) - {"draining", "copy_after_ns"}
    if unknown:
        raise PositionsError(f"{where}: unknown key {sorted(unknown)[0]!r}")
    if e["fp_len"] > FINGERPRINT_BYTES:
        raise PositionsError(f"{where}: \"fp_len\" = {e['fp_len']} is out of range")
    try:
        fp = bytes.fromhex(e["fp"])
    except ValueError:
        raise PositionsError(f"{where}: \"fp\" is not hex") from None
    if len(fp) != e["fp_len"]:
        raise PositionsError(f"{where}: \"fp\" has {len(fp)} bytes, \"fp_len\" says {e['fp_len']}")
    if e["ino"] == 0 and (e["offset"] or e["lineno"] or e["fp_len"]):
        raise PositionsError(f"{where}: no file (ino 0) but a position in it")
