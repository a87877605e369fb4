"""Prometheus' Go template functions the catalog's alert descriptions use, reproduced so the generated promtool
tests can state each description exactly as Prometheus renders it."""
from __future__ import annotations

import math
import re


def _g4(v: float) -> str:
    s = "%.4g" % v
    if "e" in s:  # Go prints e+06 like Python; keep as is
        mant, exp = s.split("e")
        s = f"{mant}e{exp[0]}{int(exp[1:]):02d}"
    return s


def _go_value(v: float) -> str:
    if math.isfinite(v) and float(v).is_integer() and abs(v) < 1e21:
        return str(int(v))
    return repr(float(v))


def _humanize_duration(v: float) -> str:
    if math.isnan(v) or math.isinf(v):
        return "%.4g" % v
    if v == 0:
        return "0s"
    sign = "-" if v < 0 else ""
    v = abs(v)
    if v >= 1:
        sec = int(v)
        s, m, h, d = sec % 60, (sec // 60) % 60, (sec // 3600) % 24, sec // 86400
        if d:
            return f"{sign}{d}d {h}h {m}m {s}s"
        if h:
            return f"{sign}{h}h {m}m {s}s"
        if m:
            return f"{sign}{m}m {s}s"
        return f"{sign}{_g4(v)}s"
    for unit in ("ms", "us", "ns"):
        v *= 1000
        if v >= 1 or unit == "ns":
            return f"{sign}{_g4(v)}{unit}"
    raise AssertionError


def _humanize1024(v: float) -> str:
    if abs(v) <= 1 or not math.isfinite(v):
        return _g4(v)
    prefix = ""
    for p in ("ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"):
        if abs(v) < 1024:
            break
        prefix = p
        v /= 1024
    return _g4(v) + prefix


_ACTION = re.compile(r"{{\s*(.*?)\s*}}")
# `{{ with $labels.x }}...{{ . }}...{{ end }}` (not nested): the body, with `.` the value, when x is set
_WITH_LABEL = re.compile(r"{{\s*with\s+\$labels\.(\w+)\s*}}(.*?){{\s*end\s*}}", re.DOTALL)


def expand_label_blocks(tmpl: str, labels: dict) -> str:
    """The template with every `with $labels.x` block resolved against `labels`."""
    def one(m):
        value = labels.get(m.group(1), "")
        return re.sub(r"{{\s*\.\s*}}", lambda _: value, m.group(2)) if value else ""
    return _WITH_LABEL.sub(one, tmpl)


# `{{ with printf "<selector>" args | query }}{{ . | first | label "x" }}{{ end }}`: a label of the first
# series a query returns (rules.cause_lookup), or nothing when it returns none
_QUERY_LABEL = re.compile(r'{{\s*with\s+printf\s+"(?:[^"\\]|\\.)*"[^|}]*\|\s*query\s*}}'
                          r'{{\s*\.\s*\|\s*first\s*\|\s*label\s+"(\w+)"\s*}}{{\s*end\s*}}')


def render_template(tmpl: str, labels: dict, value: float, queried: dict | None = None) -> str:
    """Render the subset of Prometheus' Go templates the catalog uses (fails loudly on anything else).
    `queried`: the labels of the series a `query` in the template finds (None: it finds none)."""
    tmpl = _QUERY_LABEL.sub(lambda m: (queried or {}).get(m.group(1), ""), tmpl)
    tmpl = expand_label_blocks(tmpl, labels)

    def one(m):
        expr = m.group(1)
        if expr.startswith("$labels."):
            return labels.get(expr[len("$labels."):], "")
        if expr == "$value":
            return _go_value(value)
        fm = re.fullmatch(r'\$value\s*\|\s*(\w+)(?:\s+"([^"]*)")?', expr)
        if not fm:
            raise ValueError(f"template action not supported by the test generator: {{{{ {expr} }}}}")
        fn, arg = fm.groups()
        if fn == "printf":
            return arg % value
        if fn == "humanizePercentage":
            return _g4(value * 100) + "%"
        if fn == "humanize1024":
            return _humanize1024(value)
        if fn == "humanizeDuration":
            return _humanize_duration(value)
        if fn == "humanize":
            raise ValueError("humanize is not supported by the test generator")
        raise ValueError(f"unknown template function {fn}")
    return _ACTION.sub(one, tmpl)
