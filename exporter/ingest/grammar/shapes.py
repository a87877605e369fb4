"""Learned batch-line shapes: a batch line the generic path read, compiled into an exact regex and the
generated functions that read later lines of its shape."""
from __future__ import annotations

import ast
import json
import re
from typing import Any

from exporter.catalog import DEFAULT_FIELD_RANGE, FIELD_RANGES
from exporter.ingest.events import Event
from exporter.ingest.grammar.patterns import _BATCH_HEAD, _BATCH_KEYS, _GRAPH_KEYS

# Learned shapes. A source keeps printing its batch lines in one or two exact shapes (one SGLang version, one
# set of options, one prefix layout). The first batch line of a shape takes the generic path; the parser then
# compiles that whole line's shape (prefix layout, header form, keys in order, value classes) into an exact
# regex, and later lines of the shape become batch rows (events.Row; read by skeleton, see layouts.py): the
# fields are converted only when someone asks. A value class is exactly the numbers of its field's catalog range
# (FIELD_RANGES; digit classes, no per-line check), so a row's numbers are valid by construction. A line whose
# values leave the learned classes (a negative number, "nan", a value out of range, odd spacing) simply does not
# match and takes the generic path; the fields (or the rejection) are the same either way
# (tests/test_grammar_properties.py checks).


def _below(high: float) -> str:
    """Regex of the digit strings of the integers 0 <= n < high, for high = d * 10**k (d in 1..9). A
    longer spelling with leading zeros is not matched: its line takes the generic path, which reads it alike."""
    text = str(high)
    d, k = int(text[0]), len(text) - 1
    if text[1:] != "0" * k or d == 0:
        raise ValueError(f"a learned shape's range must end at d * 10**k, not {high}")
    if k == 0:
        return f"[0-{d - 1}]"
    if d == 1:
        return f"[0-9]{{1,{k}}}"
    return f"(?:[0-9]{{1,{k}}}|[1-{d - 1}][0-9]{{{k}}})"


def _value_class(name: str, is_float: bool, percent: bool) -> tuple[str, tuple | None]:
    """A learned shape's group for field `name`: exactly the numbers of its catalog range (FIELD_RANGES), so
    a line with a value out of range does not match its shape, and the generic path counts it as such. With
    it, the limit a skeleton cannot see (it spells every digit alike): None when the range is 0 <= n < 10**k
    (the skeleton's digit count says it all), else (width, c): a whole part of `width` digits must start with a
    digit <= c (see _Layout.check)."""
    low, high = FIELD_RANGES.get(name, DEFAULT_FIELD_RANGE)
    if low > 0:
        raise ValueError(f"batch field {name} must have a range from 0 or below, not {low}")
    high = high * 100 if percent else high
    k = len(str(high)) - 1
    d = high // 10 ** k
    limit = (k + 1, str(d - 1)) if d > 1 or k == 0 else None
    return "(" + _below(high) + ("\\.[0-9]{1,18}" if is_float else "") + ")", limit


_I, _ = _value_class("forward_iter", False, False)
_INT_VALUE = re.compile("[0-9]{1,18}")
_FLOAT_VALUE = re.compile("[0-9]{1,18}\\.[0-9]{1,18}")
_DATE_TIME = "([0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2})"
_HYBRID_USAGE = ("full_token_usage", "swa_token_usage", "mamba_usage", "gpu_token_usage")   # usage_of's order
MAX_SHAPES = 8              # learned shapes per source; more are rare (the least recent one is dropped)
MAX_FRUITLESS_LEARNING = 64  # batch lines that taught nothing new before a source stops trying


class _Shape:
    """A learned batch-line shape: its regex and, per group of it, the field it fills (`convs`: field name and
    a conversion template, "{}" where the group's index goes). `event` and `values` (see _compile_shape) read
    the tuple of its groups, wherever the shape sits in the parser's line regex."""
    __slots__ = ("key", "kind", "regex", "convs", "ngroups", "sep", "has_iter", "trailing", "has_graph",
                 "has_frac", "family", "count", "rk", "first", "source", "event", "values", "value_exprs",
                 "fields_json", "limits", "template")

    def __init__(self, key, kind, regex, convs, ngroups, sep, has_iter, trailing, has_graph, has_frac):
        self.key, self.kind, self.regex, self.convs, self.ngroups = key, kind, regex, convs, ngroups
        self.sep, self.has_iter, self.trailing, self.has_graph = sep, has_iter, trailing, has_graph
        self.has_frac = has_frac
        self.family = None      # the format family it implies, when that does not depend on the line
        self.count = 0          # lines parsed by it (folded into the parser's counts)
        self.rk = 1 + has_frac  # index of its rank tags in its groups (0: "date time", 1: the fraction if any)
        self.first = 0          # number of its first group in the parser's line regex
        self.source = ""
        # filled by _compile_shape once the shape is complete: functions generated for it, and their source
        self.event: Any = None
        self.values: Any = None
        self.value_exprs: Any = None
        self.fields_json: Any = None
        self.limits: dict = {}  # group index -> (width, c): see _value_class
        self.template = None    # a copy counting the rows behind a custom prefix: that prefix layout's template


def _prefix_regex(frac: str | None, ranks: str, space: bool) -> str:
    """The exact regex of one dated SGLang prefix layout: the rank tags in their order, any numbers."""
    tags = "".join(" " + re.sub("[0-9]+", "[0-9]+", re.escape(tag)) for tag in ranks.split())
    return (r"\[" + _DATE_TIME + (r"[.,]([0-9]{1,6})" if frac is not None else "") + "(" + tags + r")\]"
            + (" " if space else ""))


def learn_shape(msg: str, frac: str | None = None, ranks: str = "", space: bool = True):
    """The exact shape of a batch line the generic path parsed (its message, the fraction of a second and rank
    tags of its dated prefix, whether a space follows the prefix), or None when it has parts this scheme does
    not cover (0.3.x mixed prefill, hybrid `a=1, b=2` values, keys we do not know, odd spacing)."""
    m = _BATCH_HEAD.match(msg)
    if m is None or m.group(2) is not None:
        return None
    kind = "decode_batch" if m.group(1) == "Decode" else "prefill_batch"
    has_iter = m.group(3) is not None
    head = msg[:m.end()]
    regex = [_prefix_regex(frac, ranks, space),
             re.escape(head.split(" [", 1)[0]) + (r" \[" + _I + r"\]" + re.escape(head[head.index("]") + 1:])
                                                  if has_iter else "")]
    convs = [("forward_iter", "int(g[{}])")] if has_iter else []
    group = 2 + (frac is not None) + has_iter     # index of the next group (date time, fraction, ranks, iter)
    limits = {}
    body = msg[m.end():]
    stripped = body.rstrip(", ")
    has_graph = False
    pieces = []
    for piece in stripped.split(", "):
        key, sep, val = piece.partition(": ")
        if not sep or val != val.strip():
            return None
        backend = _GRAPH_KEYS.get(key)
        if backend is not None:
            if val not in ("True", "False"):
                return None
            pieces.append(re.escape(key) + ": (True|False)")
            convs += [("graph_backend", repr(backend)), ("cuda_graph", "g[{}] == 'True'")]
            has_graph = True
            group += 1
            continue
        name = _BATCH_KEYS.get(key)
        if name is None or "=" in val:
            return None
        percent = val.endswith("%")
        num = val[:-1] if percent else val
        if _INT_VALUE.fullmatch(num):
            (cls, limit), conv = _value_class(name, False, percent), ("int(g[{}]) / 100.0" if percent
                                                                      else "int(g[{}])")
        elif _FLOAT_VALUE.fullmatch(num):
            (cls, limit), conv = _value_class(name, True, percent), ("float(g[{}]) / 100.0" if percent
                                                                     else "float(g[{}])")
        else:
            return None
        if not re.fullmatch(cls, num):
            return None                             # out of range: the generic path did not take it either
        if limit is not None:
            limits[group] = limit
        group += 1
        pieces.append(re.escape(key) + ": " + cls + ("%" if percent else ""))
        convs.append((name, conv))
    regex.append(", ".join(pieces) + re.escape(body[len(stripped):]))
    text = "".join(regex)
    ngroups = re.compile(text).groups
    if ngroups != group:        # (cannot happen: a group per counted part) no shape rather than wrong limits
        return None
    shape = _Shape((kind, text), kind, text, convs, ngroups, m.group(4), has_iter, body.endswith(", "), has_graph,
                   frac is not None)
    shape.limits = limits
    return shape


def _compile_shape(shape: _Shape, source: str) -> None:
    """Generate the shape's `event(groups, ts, iso, rank, line)` (its Event: the fields one dict literal),
    `values(groups)` (the five numbers the engine reads of every batch line, see events.Row) and
    `fields_json(groups)` (that Event's fields as compact JSON, what json.dumps gives: ints as digits, floats
    by repr, bools as true/false), `groups` being the tuple of the shape's groups: one call per line, no loop.
    `value_exprs` keeps the source of `values`' five expressions for the layouts' own (_Layout.values)."""
    group = iter(range(shape.rk + 1, shape.ngroups))
    fields = {name: conv.format(next(group)) if "{}" in conv else conv for name, conv in shape.convs}
    usage = fields.get("token_usage")
    if usage is None:
        hybrid = [fields[k] for k in _HYBRID_USAGE if k in fields]
        usage = "max(" + ", ".join(hybrid) + ")" if len(hybrid) > 1 else hybrid[0] if hybrid else "None"
    decode = shape.kind == "decode_batch"
    values = (fields.get("queue_req", "None"), fields.get("running_req", "None"), usage,
              fields.get("gen_throughput", "None") if decode else "None",
              fields.get("cuda_graph", "None") if decode else "None")
    template, args = [], []
    for name, conv in fields.items():
        if "{}" not in conv and "[" not in conv:            # a constant (graph_backend)
            template.append(f'"{name}":' + json.dumps(ast.literal_eval(conv)).replace("%", "%%"))
        elif conv.endswith("== 'True'"):
            template.append(f'"{name}":%s')
            args.append(f"('true' if {conv} else 'false')")
        else:
            template.append(f'"{name}":%r')                 # repr: an int's digits, a float as json.dumps
            args.append(conv)
    namespace: dict = {"Event": Event, "source": source}
    exec(f"def event(g, ts, iso, rank, line):\n    return Event({shape.kind!r}, {{"  # noqa: S102 - built above
         + ", ".join(f"{name!r}: {conv}" for name, conv in fields.items()) + "}, iso, ts, rank, source, line)\n"
         + "def values(g):\n    return (" + ", ".join(values) + ")\n"
         + "def fields_json(g):\n    return " + repr("{" + ",".join(template) + "}") + " % (" + "".join(
             a + ", " for a in args) + ")\n", namespace)
    shape.source, shape.value_exprs = source, values
    shape.event, shape.values, shape.fields_json = namespace["event"], namespace["values"], namespace["fields_json"]

