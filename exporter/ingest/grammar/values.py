"""Printed values to typed fields: numbers, batch-line bodies, server_args reprs and container timestamps."""
from __future__ import annotations

import ast
import calendar
import re
from datetime import datetime

from exporter.catalog import DEFAULT_FIELD_RANGE, FIELD_RANGES
from exporter.ingest.grammar.patterns import _BATCH_KEYS, _BATCH_NAMES, _FLOAT_TEXT, _GRAPH_KEYS, _INT_TEXT, _NUMBER


def snake(key: str) -> str:
    """Fallback field name for a printed key we do not know yet: '#foo-bar (x/s)' -> 'foo_bar_x_s'."""
    return re.sub(r"[^0-9a-z]+", "_", key.lower()).strip("_")


def value_of(text: str):
    """A printed value as int / float / bool, percentages as 0-1 ratios; anything else stays a string.

    Only plain ASCII decimal numbers count (no "nan", "inf", "1_000", other scripts' digits, or numbers too big
    for JSON): SGLang prints ints, `:.2f`/`:.4f` floats and `True`/`False`.
    """
    if text.isdigit() and len(text) <= 4000 and text.isascii():
        return int(text)
    if text == "True":
        return True
    if text == "False":
        return False
    num, scale = (text[:-1], 100.0) if text.endswith("%") else (text, 1.0)
    if _INT_TEXT.fullmatch(num):
        return int(num) if scale == 1.0 else int(num) / scale
    if _FLOAT_TEXT.fullmatch(num):
        value = float(num)
        if value - value == 0.0:        # finite (JSON has no NaN / Infinity)
            return value / scale if scale != 1.0 else value
    return text


def fields_in_range(fields: dict) -> bool:
    """Every number of an Event's fields in its field's range (catalog.FIELD_RANGES): finite, not negative
    where a count is, not absurdly large. Booleans and strings are not numbers here, and server_args' lists
    and dicts are not looked into (only its top-level numbers are read)."""
    for name, v in fields.items():
        c = v.__class__
        if c is int or c is float:
            low, high = FIELD_RANGES.get(name, DEFAULT_FIELD_RANGE)
            if not low <= v < high:         # NaN is not either
                return False
    return True


def parse_batch_body(body: str, fields: dict) -> None:
    """Fill `fields` from 'key: value, key: value, ...' (trailing ', ' or ' ' tolerated).

    The generic, tolerant splitter: every printed key becomes a field (known keys by _BATCH_KEYS, unknown ones
    by snake()); `key: a=1, b=2` (0.4.9's hybrid-SWA form) becomes `a_<key>` and `b_<key>`.
    """
    base = None
    if " [" in body:
        body = _INTERVAL.sub(lambda m: _interval(m, fields), body)
    for piece in body.rstrip(", ").split(", "):
        key, sep, val = piece.partition(": ")
        if not sep:
            # continuation of a split value: "#token: full=1, swa=2" -> this piece is "swa=2"
            sub, eq, val = piece.partition("=")
            sub = sub.strip()
            if eq and base and sub.isidentifier():
                fields[f"{sub}_{base}"] = value_of(val.strip())
            continue
        val = val.strip()
        backend = _GRAPH_KEYS.get(key)
        if backend is not None:
            fields["graph_backend"] = backend
            fields["cuda_graph"] = val == "True"
            base = None
            continue
        base = _BATCH_KEYS.get(key)
        if base is None:
            base = snake(key)
            if not base or base in _BATCH_NAMES:    # garbage that would pass for a contract field: not ours
                base = None
                continue
        sub, eq, subval = val.partition("=")
        if eq and sub.isidentifier():
            fields[f"{sub}_{base}"] = value_of(subval)
        else:
            value = value_of(val)
            if type(value) is str and key in _BATCH_KEYS:
                continue                            # a known numeric field keeps its type or is left out
            fields[base] = value


# A value with its interval, as speculative decoding prints its estimates: `est uncap acc len: 3.10 [2.95, 3.25]`.
_INTERVAL = re.compile(r"(?:^|, )([^,:\[\]]{1,80}): ([^ ,\[\]]{1,40}) \[([^ ,\[\]]{1,40}), ([^ ,\[\]]{1,40})\]")


def _interval(m, fields: dict) -> str:
    """`key: v [low, high]` -> fields name, name_low, name_high (numbers, as value_of reads them)."""
    key = m.group(1)
    name = _BATCH_KEYS.get(key) or snake(key)
    if name and name not in _BATCH_NAMES or key in _BATCH_KEYS:
        fields[name] = value_of(m.group(2))
        fields[name + "_low"] = value_of(m.group(3))
        fields[name + "_high"] = value_of(m.group(4))
    return ""



def split_top_level(text: str, sep: str) -> list[str]:
    """Split at `sep` outside quotes and brackets (server_args reprs contain nested lists and strings)."""
    parts, depth, quote, start, i, n = [], 0, None, 0, 0, len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return parts


def _json_safe(value) -> bool:
    if isinstance(value, float):
        return value - value == 0.0      # finite: JSON has no NaN / Infinity
    if value is None or isinstance(value, (str, int, bool)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_json_safe(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_safe(v) for k, v in value.items())
    return False


def literal(text: str):
    """A repr'd Python literal as a JSON-safe value; anything else (enums, objects, sets) as its text."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return text
    return value if _json_safe(value) else text


def parse_server_args(text: str) -> dict | None:
    """server_args=ServerArgs(k=v, ...) (<= 0.5.18) or server_args={'k': v, ...} (0.5.19+), never eval'd."""
    text = text.strip()
    if text.startswith("ServerArgs(") and text.endswith(")"):
        items, kv_sep = text[len("ServerArgs("):-1], "="
    elif text.startswith("{") and text.endswith("}"):
        items, kv_sep = text[1:-1], ": "
    else:
        return None
    args = {}
    for item in split_top_level(items, ", "):
        key, sep, val = item.partition(kv_sep)
        if not sep:
            continue
        key = key.strip().strip("'\"")
        if key.isidentifier():
            args[key] = literal(val.strip())
    return args


def _first_number(text: str):
    m = _NUMBER.search(text)
    return value_of(m.group(0)) if m else None


def _container_ts(stamp: str) -> float | None:
    """RFC3339(Nano) container timestamp -> epoch seconds."""
    try:
        s = stamp.rstrip("Z")
        if "." in s:
            head, frac = s.split(".", 1)
            digits = "".join(ch for ch in frac if ch.isdigit())[:6]
            tail = frac[len("".join(ch for ch in frac if ch.isdigit())):]
            s = f"{head}.{digits}{tail}"
        dt = datetime.fromisoformat(s if stamp.endswith("Z") is False else s + "+00:00")
        if dt.tzinfo is None:
            return calendar.timegm(dt.timetuple()) + dt.microsecond / 1e6
        return dt.timestamp()
    except ValueError:
        return None

