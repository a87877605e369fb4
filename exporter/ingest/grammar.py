"""SGLang's log grammar: turns log records (one text line at a time) into typed Events.

Version-tolerant for SGLang 0.3.0 - 0.5.23 (see docs/log-events.md for kinds and fields). The record may
start anywhere in the line (process managers, Ray and Slurm add their own prefixes); time and rank come
from SGLang's own `[date time RANKS]` prefix when present. Unknown lines are counted by reason, never fatal.
Multi-line records (tracebacks, the KV-pool OOM message) are assembled per source: their Event is emitted
when the next record starts or on flush().
"""
from __future__ import annotations

import ast
import calendar
import json
import operator
import re
from collections import Counter
from datetime import datetime, timezone
from itertools import chain
from typing import Any

from exporter.catalog import DEFAULT_FIELD_RANGE, FIELD_RANGES
from exporter.ingest.events import EMPTY_RANK, Event, as_event, compact_encoder

GIB = 1024 ** 3

# "[2025-08-11 17:17:03.123 DP0 TP1] " / "[17:17:03 TP0] " / "[2025-08-11 17:17:03] "
# (ASCII digits only: \d would also accept other scripts' digits.) The rank tags are SGLang's scheduler prefix;
# " encode_server" / " encode_dp_worker[N]" are the encoder-disaggregation servers' (0.5.16+).
_PREFIX = re.compile(
    r"\[(?:([0-9]{4}-[0-9]{2}-[0-9]{2}) )?([0-9]{2}:[0-9]{2}:[0-9]{2})(?:[.,]([0-9]{1,6}))?"
    r"((?: (?:(?:DP|PP|TP|EP|ATTN_CP|MOE_DP)[0-9]+|encode_server|encode_dp_worker\[[0-9]+\]))*)\] ?")
_RANK_TAG = re.compile(r"(DP|PP|TP|EP|ATTN_CP|MOE_DP)([0-9]+)|encode_dp_worker\[([0-9]+)\]")
_BATCH_HEAD = re.compile(
    r"(Prefill|Decode) batch(?:\(mixed #running-req: ([0-9]{1,18})\))?(?: \[([0-9]{1,18})\])?([.,]) ?")
_ACCESS = re.compile(r'INFO: +(\S+) - "(\S+) (\S+) [^"]*" ([0-9]{3})')
_WATCHDOG = re.compile(r"(?:(\w+) )?[Ww]atchdog timeout \((.*)\)")
_EXCEPTION = re.compile(r"(\w+) hit an exception: ?(.*)|Exception in (\w+):")
_FRAME = re.compile(r'\s*File "[^"]*", line [0-9]+, in (\w+)')
_TRY_ALLOC = re.compile(r"Try to allocate ([0-9]{1,18}) tokens")
_AVAIL_TOKENS = re.compile(r"Ava(?:ilable|liable) (?:full )?tokens: ([0-9]{1,18})")
_NUM = r"[0-9]{1,18}(?:\.[0-9]{1,18})?"
_GB_VALUE = re.compile(rf"({_NUM}) GB")
_SUBPROC = re.compile(r"Subprocess (\S+) \(pid=([0-9]{1,18})\) crashed with exit code (-?[0-9]{1,18})")
_RID = re.compile(r"rid='([^']*)'|rid=([\w-]+)|\"rid\": ?\"([^\"]*)\"")
# Request logs (--log-requests) carry user text: prompts, outputs, headers. Their messages: "Receive: obj=...",
# "Receive OpenAI: obj=..." (0.5.8+), "Finish: obj=..., out=..." (0.4.1+), "in=GenerateReqInput(...), out=..."
# (0.3.0-0.4.0) and, with --log-requests-format json (0.5.7+), {"timestamp": ..., "event": "request.received",
# ...}. _REQUEST_MARK finds one anywhere in a line; see docs/log-events.md, "Request logs are not trusted".
_REQUEST_MARK = re.compile(r'(?:Receive(?: OpenAI)?|Finish): obj=|\bin=\w+\(|"event": ?"request\.')
_IN_OUT = re.compile(r"in=\w+\(")
_JSON_REQUEST = re.compile(r'"event": ?"request\.(received|finished)')
_CUDA_OOM = re.compile(r"CUDA out of memory|CUDA error: out of memory")
_EXC_LINE = re.compile(r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")
_TRIED = re.compile(rf"Tried to allocate ({_NUM}) (B|KiB|MiB|GiB|TiB)")
_ELAPSED = re.compile(rf"(?:Time elapsed: |elapsed=|in )({_NUM}) s")
_NUMBER = re.compile(r"-?[0-9]{1,18}(?:\.[0-9]{1,18})?")
_INT_TEXT = re.compile(r"-?[0-9]{1,4000}")
_FLOAT_TEXT = re.compile(r"-?(?:[0-9]{1,300}\.?[0-9]{0,300}|\.[0-9]{1,300})(?:[eE][-+]?[0-9]{1,3})?")

# Message-anchored recognition (docs/log-events.md, "Custom log formats"). A record is known by its message, the
# text SGLang prints, which is stable across releases; whatever stands before it is the prefix, from which the
# time, rank tags, level and pid are taken. _ANCHOR finds where each message SGLang prints may start (the
# request-log and access heads among them: the leftmost anchor wins, so a request log quoting a message is a
# request log); _message then decides, as for a message behind SGLang's own prefix.
_ANCHOR = re.compile(
    r"(?<![\w.])(?:(?:Decode|Prefill) (?:batch\b|out of memory)|KV cache pool is full|Testing retraction"
    r"|max_total_num_tokens=|server_args=|The server is fired up|Load weight (?:begin|end)|Memory pool end"
    r"|(?:(?!(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) )[A-Z][\w-]* )?(?:KV|Mamba) Cache (?:is allocated|VA upper)"
    r"|Capture [\w ]{1,40}(?:begin|end)|(?:\w+ )?[Ww]atchdog timeout \(|\w+ hit an exception|Exception in \w+:"
    r"|Received sigquit|SIGQUIT received|(?:Encoder )?[Hh]ealth check (?:failed|timed out)"
    r"|Initialization failed|Subprocess \S+ \(pid=|LONG GARBAGE COLLECTION DETECTED"
    r"|alloc_req_slots runs out of memory|Not enough memory\. Please try"
    r"|(?:[\w.]+(?:Error|Exception): )?CUDA (?:out of memory|error: out of memory)"
    r"|Receive(?: OpenAI)?: obj=|Finish: obj=|in=\w+\(|INFO: +\S+ - \"|\{\"timestamp\")")
# The parts of a prefix: a time (the rightmost one is SGLang's own: an outer collector's stands before it), rank
# tags in any order and brackets ([gpu=N]: 2024's tag), a level, a pid; other digits are just digits.
_PREFIX_PART = re.compile(
    r"(?<![0-9])(?:([0-9]{4}-[0-9]{2}-[0-9]{2})[ T])?([0-9]{2}:[0-9]{2}:[0-9]{2})(?:[.,]([0-9]{1,9}))?"
    r"(?:Z|[+-][0-9]{2}:?[0-9]{2}(?![0-9]))?(?![0-9])"
    r"|(?<![A-Za-z0-9_])(DP|TP|PP|EP|CP|ATTN_CP|MOE_DP|gpu=)([0-9]{1,6})(?![A-Za-z0-9_])"
    r"|(?<![A-Za-z])(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)(?![A-Za-z])"
    r"|(?:pid=|(?<=[\w)]\[)|(?<=INFO )|(?<=WARNING )|(?<=DEBUG )|(?<=ERROR ))([0-9]{1,9})(?![0-9:.\-])"
    r"|[0-9]+")
_PREFIX_RANKS = {"DP": "dp", "TP": "tp", "PP": "pp", "EP": "ep", "CP": "attn_cp", "ATTN_CP": "attn_cp",
                 "MOE_DP": "moe_dp", "gpu=": "tp"}
_PY_FILE = re.compile(r"[\w-]+\.py")
SGLANG_LAYOUT = "[<time> <rank>] (SGLang's own)"    # the layout name of records behind SGLang's own prefix
MAX_PREFIX_LAYOUTS = 4096   # prefix skeletons per source (when full the table starts afresh)
MAX_KNOWN_PREFIXES = 8      # prefix layouts tried at a line's start before searching it for a message

# Exact printed keys of batch lines -> stable snake_case field names (docs/log-events.md).
_BATCH_KEYS = {
    "#running-req": "running_req", "#queue-req": "queue_req", "#token": "num_tokens",
    "token usage": "token_usage", "gen throughput (token/s)": "gen_throughput",
    "input throughput (token/s)": "input_throughput", "#new-seq": "new_seq", "#new-token": "new_token",
    "#cached-token": "cached_token", "cache hit rate": "cache_hit_rate",
    "accept len": "spec_accept_length", "accept rate": "spec_accept_rate", "cap len": "spec_cap_length",
    "block accept len": "spec_block_accept_length",
    "#full token": "full_num_tokens", "full token usage": "full_token_usage",
    "#swa token": "swa_num_tokens", "swa token usage": "swa_token_usage",
    "mamba num": "mamba_num", "mamba usage": "mamba_usage",
    "#gpu token": "gpu_num_tokens", "gpu token usage": "gpu_token_usage",
    "#cpu token": "cpu_num_tokens", "cpu token usage": "cpu_token_usage",
    "pre-allocated usage": "pre_allocated_usage", "#prealloc-req": "prealloc_req",
    "#transfer-req": "transfer_req", "#retracted-req": "retracted_req", "#host-receive-req": "host_receive_req",
    "#unbootstrapped-req": "unbootstrapped_req", "#transferring-req": "transferring_req",
    "#bootstrap-req": "bootstrap_req", "#inflight-req": "inflight_req", "#optimistic-req": "optimistic_req",
    "#pending-token": "pending_token", "#replay-token": "replay_token", "waiting-image-req": "waiting_image_req",
    "largest-len": "largest_len", "time": "gap_latency",
    "est. prefill TFLOPS/s (per GPU)": "est_tflops_per_gpu", "est. decode TFLOPS/s (per GPU)": "est_tflops_per_gpu",
    "est. read BW (GB/s per GPU)": "est_read_bw_gb_per_s", "est. write BW (GB/s per GPU)": "est_write_bw_gb_per_s",
    "fwd occupancy": "fwd_occupancy", "fwd+idle occupancy": "fwd_idle_occupancy",
}
_BATCH_NAMES = frozenset(_BATCH_KEYS.values())
_GRAPH_KEYS = {"cuda graph": "cuda", "cpu graph": "cpu", "npu graph": "npu", "musa graph": "musa"}
_RETRACT_KEYS = {"#retracted_reqs": "retracted_reqs", "#aborted_retracted_reqs": "aborted_retracted_reqs",
                 "#new_tokens_gained": "new_tokens_gained", "#mamba_num_gained": "mamba_num_gained"}
_UNIT_BYTES = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": GIB, "TiB": 1024 ** 4}
_MAX_RECORD_LINES = 2000  # continuation lines scanned per multi-line record; more are still absorbed


def request_phase(msg: str) -> str | None:
    """"receive" / "finish" when an SGLang message (what follows its prefix) is a request log, else None."""
    c = msg[:1]
    if c == "R":
        if msg.startswith(("Receive: ", "Receive OpenAI: ")):
            return "receive"
    elif c == "F":
        if msg.startswith("Finish: "):
            return "finish"
    elif c == "i":
        if _IN_OUT.match(msg):
            return "finish"
    elif c == "{":
        m = _JSON_REQUEST.search(msg)
        if m:
            return "receive" if m.group(1) == "received" else "finish"
    return None


def request_marked(text: str) -> bool:
    """A request-log marker anywhere in the line (_REQUEST_MARK; substring tests first: they are much cheaper
    than the regex's scan, and most lines have none of them)."""
    return ("obj=" in text or "in=" in text or "request." in text) and _REQUEST_MARK.search(text) is not None


def _unquoted(text: str, end: int) -> bool:
    """No quote character before `end`: what is there is not inside quoted text (a repr'd prompt, a JSON
    string, a path in an access line), so it may be taken for a message of SGLang's own."""
    return text.find("'", 0, end) < 0 and text.find('"', 0, end) < 0


def _rid(text: str, start: int = 0):
    m = _RID.search(text, start, start + 4000)
    return (m.group(1) or m.group(2) or m.group(3)) if m else None


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


# Learned shapes. A source keeps printing its batch lines in one or two exact shapes (one SGLang version, one
# set of options, one prefix layout). The first batch line of a shape takes the generic path; the parser then
# compiles that whole line's shape (prefix layout, header form, keys in order, value classes) into an exact
# regex, and later lines of the shape become batch rows (events.Row; read by skeleton, see below): the
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
                 "fields_json", "limits")

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


# Skeletons. A line's skeleton is its bytes with every digit made "0": lines of one learned shape whose numbers
# have the same widths share it (a tp=4 log of 200k lines has about 60 batch-line skeletons), and in a line of
# a known skeleton every group of its shape sits at the same offsets. So the block path reads a batch line by
# one dict lookup of its skeleton and two slices (time, rank tags), and the regex runs once per skeleton.
# Exact: every part of a shape's regex other than [0-9] is literal, so a line whose skeleton is that of a line
# the regex matched is matched by the regex too, with the same group offsets. Only lines that start with "["
# and are short enough to be batch lines get a skeleton.
_SKELETON = bytes.maketrans(b"123456789", b"000000000")
MAX_SKELETONS = 4096        # per source; when full the table starts afresh
MAX_SKELETON_CHARS = 600    # longer lines (request logs) are never batch lines worth a skeleton
HEAD_CHARS = 64             # a request-log line is known by the skeleton of its head (see _EventLayout)


class _Layout:
    """A learned shape at the offsets of one skeleton (that of the line `m` matched): the `shape` of the
    rows of its lines (events.py), which keep their text. The parser slices out only the time and rank
    tags; the other groups are sliced out when someone asks for the numbers, the Event or its JSON.

    `values(text)` is the shape's `values` of the line's groups, but a function of the layout's own: the engine
    reads the numbers of every sample (and of each rank's latest unread line), and slicing all the shape's groups
    to convert five of them was most of that cost. Generated on the first call (_first_values) from the shape's
    `value_exprs`, each group read at its constant offsets (see _layout_values): the same expressions, so the
    same values and types, and the parser never pays for it. (Not a __getattr__ filling the unset slot: a class
    with one loses CPython's fast attribute reads, and the parser reads a layout's slots on every line.)"""
    __slots__ = ("shape", "kind", "source", "groups", "dt", "frac", "rank", "spans", "values", "check_at",
                 "check_max", "check_more")
    batch = True                # its rows are batch lines (the engine reads their numbers)

    def __init__(self, shape: _Shape, m):
        self.spans = spans = [slice(*m.span(k)) for k in range(shape.first, shape.first + shape.ngroups)]
        self.shape, self.kind, self.source = shape, shape.kind, shape.source
        self.groups = operator.itemgetter(*spans)
        self.dt, self.frac, self.rank = spans[0], spans[1] if shape.has_frac else None, spans[shape.rk]
        self.values = self._first_values    # a cycle until the first call replaces it (gc frees unused ones)
        # The skeleton fixes each number's digit count, not its digits: a range that is not 0 <= n < 10**k
        # (a ratio below 2) needs its leading digit looked at when the whole part has the limit's width. A
        # line of this layout is in range when text[check_at] <= check_max (check_at -1: nothing to look at)
        # and check_more(text), when there is more than one such digit (hybrid pools, PD decode lines): the
        # first comparison inline in feed_items, as most lines have one (token usage), a call for the others.
        starts: list[tuple[int, str]] = []
        for k, (width, c) in shape.limits.items():
            whole = m.string[spans[k]].split(".", 1)[0]
            if len(whole) == width:
                starts.append((spans[k].start, c))
        self.check_at, self.check_max = starts[0] if starts else (-1, "")
        self.check_more = _layout_check(tuple(starts[1:])) if len(starts) > 1 else None

    def _first_values(self, text: str) -> tuple:
        """The layout's `values` until its first call: generates the layout's own, which replaces this."""
        self.values = values = _layout_values(self.shape.value_exprs, self.spans)
        return values(text)

    def event(self, text: str, ts, iso, rank, line) -> Event:
        return self.shape.event(self.groups(text), ts, iso, rank, line)

    def fields_json(self, text: str) -> str:
        return self.shape.fields_json(self.groups(text))


_GROUP_REF = re.compile(r"g\[([0-9]+)\]")
_GRAPH_REF = re.compile(r"g\[([0-9]+)\] == 'True'")
_LAYOUT_VALUES: dict[tuple, object] = {}    # (value exprs, their groups' offsets) -> their function
MAX_LAYOUT_VALUES = 4096


def _layout_values(exprs: tuple, spans: list):
    """`values(text)` of a layout: the shape's value expressions, each group `g[k]` read as the slice `text[gk]`
    of its span (a global of the function: `text[a:b]` would build the slice object on every call). A graph
    flag (`g[k] == 'True'`, its group `(True|False)`) is read by its first character, `text[start] == 'T'`,
    which allocates nothing. Kept by the expressions and the offsets, so layouts that put the five numbers at
    the same offsets (other groups' widths differ) share one function; the table starts afresh when full."""
    used = sorted({int(k) for e in exprs for k in _GROUP_REF.findall(e)})
    key = (exprs, tuple((spans[k].start, spans[k].stop) for k in used))
    values = _LAYOUT_VALUES.get(key)
    if values is None:
        code = ", ".join(_GROUP_REF.sub(r"text[g\1]",
                                        _GRAPH_REF.sub(lambda m: f"text[{spans[int(m.group(1))].start}] == 'T'", e))
                         for e in exprs)
        namespace = {f"g{k}": spans[k] for k in used}
        exec(f"def values(text):\n    return ({code})\n", namespace)  # noqa: S102 - built above
        if len(_LAYOUT_VALUES) >= MAX_LAYOUT_VALUES:
            _LAYOUT_VALUES.clear()
        values = _LAYOUT_VALUES[key] = namespace["values"]
    return values


_LAYOUT_CHECKS: dict[tuple, object] = {}


def _layout_check(starts: tuple):
    """`check(text)` of a layout: the digit at each start offset is <= its limit (one comparison per limited
    number, no slicing); shared by layouts with the same offsets."""
    check = _LAYOUT_CHECKS.get(starts)
    if check is None:
        code = " and ".join(f"text[{i}] <= {c!r}" for i, c in starts)
        namespace: dict = {}
        exec(f"def check(text):\n    return {code}\n", namespace)  # noqa: S102 - built above from ints
        if len(_LAYOUT_CHECKS) >= MAX_LAYOUT_VALUES:
            _LAYOUT_CHECKS.clear()
        check = _LAYOUT_CHECKS[starts] = namespace["check"]
    return check


class _Tally:
    """What a learned shape is to the parser's counts, for the lines of the _EventLayouts of one kind."""
    __slots__ = ("kind", "count")
    batch = False

    def __init__(self, kind: str):
        self.kind, self.count = kind, 0


_FIELDS_JSON = compact_encoder()    # JsonLines' own encoding, so a row's JSON is its Event's


class _EventLayout:
    """The layout of a frequent line that is not a batch line, learned from a line the generic path read. Its
    lines become rows too (events.Row, `batch` False: the engine only counts them), so bulk readers skip
    the generic path's regexes and Event; the Event is built when someone asks. Two kinds, each found by a key
    that decides everything the generic path decides about the line (its regexes treat every digit alike, so
    lines of one skeleton take the same branches and have their groups at the same offsets):
    - uvicorn access lines (`INFO:     127.0.0.1:40000 - "GET /metrics HTTP/1.1" 200 OK`): by their skeleton,
      as batch lines are;
    - --log-requests lines (`Receive: obj=...` / `Finish: obj=...`, 400-900 characters, a hex rid that makes
      every skeleton new): by the skeleton of their first HEAD_CHARS characters, which hold the whole prefix and
      the message's first word, and only without a NUL byte (the generic path calls those binary); the rid
      is searched for when the Event is built, as the generic path searches for it.
    Dated prefixes only (a time-only prefix's day count is the generic path's state), and learned on the block
    path, which starts with a source's first learned batch shape."""
    __slots__ = ("shape", "kind", "source", "dt", "frac", "rank", "msg", "phase", "groups")
    batch = False
    check_at = -1               # (as _Layout's: nothing to look at)

    def __init__(self, tally: _Tally, source: str, m, a: int, access=None):
        self.shape, self.kind, self.source = tally, tally.kind, source
        self.dt = slice(m.start(a), m.end(a + 1))       # "date time", as a batch layout's first group
        self.frac = slice(*m.span(a + 2)) if m.group(a + 2) is not None else None
        self.rank = slice(*m.span(a + 3))
        self.msg = m.end()
        self.phase = request_phase(m.string[self.msg:self.msg + 16]) if access is None else None
        self.groups = None if access is None else operator.itemgetter(*(slice(*access.span(k)) for k in range(1, 5)))

    def fields(self, text: str) -> dict:
        if self.groups is None:
            return {"phase": self.phase, "rid": _rid(text, self.msg)}
        client, method, path, status = self.groups(text)
        return {"client": client, "method": method, "path": path, "status": int(status)}

    def event(self, text: str, ts, iso, rank, line) -> Event:
        return Event(self.kind, self.fields(text), iso, ts, rank, self.source, line)

    def fields_json(self, text: str) -> str:
        return _FIELDS_JSON(self.fields(text))


def _head_key(text: str) -> bytes | None:
    try:
        return text[:HEAD_CHARS].encode().translate(_SKELETON)
    except UnicodeEncodeError:      # a lone surrogate (not from a splitter): no key
        return None


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


class _Pending:
    """A multi-line record being assembled (traceback / KV-pool OOM message)."""
    __slots__ = ("event", "lines", "funcs", "oom_line", "oom_text", "last", "exc")

    def __init__(self, event: Event):
        self.event = event
        self.lines = 0
        self.funcs: list[str] = []
        self.oom_line = 0
        self.oom_text = ""
        self.last = ""
        self.exc = ""        # the last line that starts an exception ("RuntimeError: ..."): the cause


class Parser:
    """Parses one source's records. Not thread-safe; one instance per followed file."""

    def __init__(self, source: str = ""):
        self.source = source
        self.unparsed: Counter = Counter()
        self._recognised = 0          # records recognised, and per kind, except those counted per learned shape
        self._kinds: Counter = Counter()
        self.format_family: str | None = None
        self._pending: _Pending | None = None
        self._date_key, self._date_ts, self._date_iso = "", 0.0, ""   # last "date time" seen (one per second)
        self._row_time = ("", 0.0, "")   # the same, for feed_items' learned lines ("date time" with its space)
        self._day = ""                          # _date_time's last date and its midnight (None: not a date)
        self._midnight: int | None = None
        self._rank_cache: dict[str, dict] = {"": EMPTY_RANK}
        self._day_offset = 0.0       # time-only prefixes (SGLang 0.3.0-0.3.3): add a day when the clock wraps
        self._last_tod = -1.0
        self._last_kv_oom_line = -10**9
        self.learning = True          # learn batch-line shapes (tests turn it off to compare both paths)
        self._shapes: list[_Shape] = []
        self._by_marker: dict[int | None, _Shape] = {}   # (get(None): a match without a group)
        self._line_re = _PREFIX
        self._prefix_at = 1          # group number of the generic prefix's first group in _line_re
        self._layouts: dict[bytes | None, _Layout | _EventLayout] = {}   # skeleton -> its layout: "Skeletons"
        self._heads: dict[bytes | None, _EventLayout] = {}   # head skeleton -> a request-log layout
        self._tallies = {kind: _Tally(kind) for kind in ("http_access", "request_log")}
        self._fruitless = 0
        self._in_request = False     # the last record was a request log: bare lines after it are its text
        self._prefixes: dict[bytes, _PrefixLayout] = {}   # prefix skeleton -> its layout (message-anchored)
        self.layouts: Counter = Counter()   # records read behind each prefix layout found by message (template)
        self.skipped: Counter = Counter()   # the lines counted as no_sglang_prefix, by what they look like
        self._prefixed = False       # a record behind a prefix seen: a message at a line's start is not a record
                                     # while a request's text runs on (see _anchored)
        self._carried: float | None = None   # midnight of the last dated line: the day of a time-only one
        self.untimed = 0             # records found by message without any time in their line
        self._known: list = []       # the prefix regexes of the layouts records were found behind, latest first

    # ------------------------------------------------------------------ public API
    @property
    def recognised(self) -> int:
        """Records turned into Events so far."""
        return self._recognised + sum(s.count for s in self._shapes) + sum(t.count for t in self._tallies.values())

    @property
    def kinds(self) -> Counter:
        """Events so far, by kind."""
        out = Counter(self._kinds)
        for s in self._shapes:
            out[s.kind] += s.count
        for t in self._tallies.values():
            if t.count:
                out[t.kind] += t.count
        return out

    def feed(self, text: str, lineno: int = 0, container_time: str | None = None) -> list[Event]:
        """One physical line (or container record) -> the Events it completes (usually 0 or 1)."""
        out: list[Event] = []
        try:
            self._feed(text, lineno, container_time, out)
        except Exception:  # noqa: BLE001 - a source never crashes the process; the line counts as malformed
            self._pending = None
            self.unparsed["malformed"] += 1
        return out

    def feed_lines(self, texts: list[str], first: int) -> list[Event]:
        """Consecutive lines of a plain-text source (line `first` first) -> the Events they complete."""
        return list(map(as_event, self.feed_items(texts, first)))

    def feed_items(self, texts: list[str], first: int) -> list:
        """`feed_lines`, except that a line of a learned layout stays a Row (events.py): the block path
        of `analyze`, `parse` and `serve`, where most lines are batch lines and Event objects would cost more
        than reading them."""
        out: list = []
        if not self._shapes:
            for lineno, text in enumerate(texts, first):
                self._feed_safely(text, lineno, out, None)
            return out
        layouts, heads, rank_cache = self._layouts, self._heads, self._rank_cache
        last_dt, last_ts, last_iso = self._row_time
        last_shape: Any = None
        lineno = first - 1
        for text in texts:
            lineno += 1
            skeleton: bytes | None = None
            layout: Any = None
            if text[:1] == "[":
                if len(text) <= MAX_SKELETON_CHARS:
                    try:
                        skeleton = text.encode().translate(_SKELETON)
                    except UnicodeEncodeError:      # a lone surrogate (not from a splitter): no skeleton
                        pass
                    else:
                        layout = layouts.get(skeleton)
                        if layout is not None and layout.check_at >= 0 and (
                                text[layout.check_at] > layout.check_max
                                or layout.check_more is not None and not layout.check_more(text)):
                            layout = None       # a number out of its range: the generic path counts the line
                if layout is None and heads and "\x00" not in text:
                    layout = heads.get(_head_key(text))
            if layout is None:
                m = self._line_re.match(text)
                sh = self._by_marker.get(m.lastindex) if m is not None else None
                if sh is None:                  # not a learned shape's line: the generic path
                    n = len(out)
                    self._feed_safely(text, lineno, out, m)
                    last_shape = None           # it may have set the format family, or learned a shape
                    layouts = self._layouts
                    if len(out) > n and m is not None and out[-1].kind in self._tallies:
                        self._learn_event_layout(text, lineno, skeleton, m, out[-1])
                    continue
                layout = _Layout(sh, m)
                if skeleton is not None:
                    if len(layouts) >= MAX_SKELETONS:
                        layouts.clear()
                    layouts[skeleton] = layout
            sh = layout.shape
            if self._pending is not None:
                out += self.flush()
            dt = text[layout.dt]
            if dt != last_dt:
                last_dt = dt
                last_ts, last_iso = self._date_time(dt[:10], dt[11:])
            ts, iso = last_ts, last_iso
            if layout.frac is not None and ts is not None:
                frac = text[layout.frac]
                ts += int(frac) / 10 ** len(frac)
                iso = f"{iso}.{frac}"
            ranks = text[layout.rank]
            rank = rank_cache.get(ranks)
            if rank is None:
                rank = self._rank(ranks)
            if sh is not last_shape:
                last_shape = sh
                self._in_request = sh.kind == "request_log"
                if layout.batch:
                    self.format_family = sh.family or self._family(sh.sep, sh.has_iter, sh.trailing,
                                                                   sh.has_graph, False, False)
            sh.count += 1
            out.append((layout, text, ts, iso, rank, lineno))
        self._row_time = last_dt, last_ts, last_iso
        return out

    def _learn_event_layout(self, text: str, lineno: int, skeleton: bytes | None, m, ev: Event) -> None:
        """After the generic path read line `lineno` (m: the line regex's match) and emitted `ev`, an access or
        request-log Event: the layout that reads the next lines of its key as rows (see _EventLayout)."""
        a = self._prefix_at
        if ev.line != lineno or m.group(a) is None:
            return
        tally = self._tallies[ev.kind]
        if ev.kind == "http_access":
            access = _ACCESS.match(text, m.end())
            if skeleton is not None and access is not None:
                if len(self._layouts) >= MAX_SKELETONS:
                    self._layouts.clear()
                self._layouts[skeleton] = _EventLayout(tally, self.source, m, a, access)
        elif text.startswith(("Receive: ", "Finish: "), m.end()) and m.end() + len("Receive: ") <= HEAD_CHARS:
            key = _head_key(text)
            if key is not None:
                if len(self._heads) >= MAX_SKELETONS:
                    self._heads.clear()
                self._heads[key] = _EventLayout(tally, self.source, m, a)

    def _feed_safely(self, text: str, lineno: int, out: list, m) -> None:
        try:
            self._feed(text, lineno, None, out, m)
        except Exception:  # noqa: BLE001 - as in feed()
            self._pending = None
            self.unparsed["malformed"] += 1

    def _feed(self, text: str, lineno: int, container_time: str | None, out: list, m=None) -> None:
        """One line; `m`: the line regex's match at its start, when the caller has it already."""
        if m is None:
            if not text or text.isspace():
                p = self._pending
                if p is not None:           # part of a multi-line record (the KV-pool OOM message ends with "\n")
                    p.lines += 1
                else:
                    self.unparsed["empty"] += 1
                return
            if "\x00" in text:
                self.unparsed["binary"] += 1
                return
            m = self._line_re.match(text) if text[0] == "[" else None
            if m is None and self._known and self._anchored(text, lineno, container_time, out, True):
                return                      # behind a prefix layout of this file's (no search of the line)
            if m is None and "[" in text:
                m = self._line_re.search(text)
                if m is not None and not _wrapping(text, m):
                    m = None
            if m is None:
                if not self._anchored(text, lineno, container_time, out):
                    self._bare(text, lineno, container_time, out)
                return
        elif "\x00" in text:
            self.unparsed["binary"] += 1
            return
        if self._pending:
            out += self.flush()
        shape = self._by_marker.get(m.lastindex)
        if shape is not None:      # a learned shape, found by search (a foreign prefix) or in a container record
            self._in_request = False
            self._learned_event(shape, m, lineno, container_time, out)
            return
        a = self._prefix_at
        date, tod, frac, ranks = m.group(a, a + 1, a + 2, a + 3)
        ts: float | None
        if date is not None:
            key = date + tod
            if key == self._date_key:
                ts, iso = self._date_ts, self._date_iso
            else:
                ts, iso = self._date_time(date, tod)
            if frac and ts is not None:
                ts += int(frac) / 10 ** len(frac)
                iso = f"{iso}.{frac}"
            if ts is None and container_time:
                ts, iso = _container_ts(container_time), container_time
        elif container_time:
            # time-only prefix (0.3.0-0.3.3): the container's full timestamp says which day it is
            self._time_only(tod, frac)
            ts, iso = _container_ts(container_time), container_time
        else:
            ts, iso = self._time_only(tod, frac)
        rank = self._rank_cache.get(ranks) if ranks else EMPTY_RANK
        if rank is None:
            rank = self._rank(ranks)
        msg = text[m.end():]
        ev = self._message(msg, date is None)
        self._in_request = ev is not None and ev.kind == "request_log"
        self._prefixed = True
        if ev is None:
            if not self._anchored(text, lineno, container_time, out):     # more prefix before the message?
                self.unparsed["unknown_message"] += 1
            return
        if ev is _MALFORMED:
            self.unparsed["malformed"] += 1
            return
        kind = ev.kind
        if kind not in _MULTILINE and not fields_in_range(ev.fields):     # (multi-line ones: at flush)
            self.unparsed["value_out_of_range"] += 1
            return
        ev.time, ev.ts, ev.rank, ev.source, ev.line = iso, ts, rank, self.source, lineno
        if kind in _MULTILINE:
            self._pending = _Pending(ev)
            if kind == "oom":
                self._last_kv_oom_line = lineno
            return
        self._recognised += 1
        self._kinds[kind] += 1
        out.append(ev)
        if (kind == "decode_batch" or kind == "prefill_batch") and self.learning and date is not None:
            self._learn(msg, frac, ranks, text[m.end() - 1] == " ")

    def _learned_event(self, shape: _Shape, m, lineno: int, container_time: str | None, out: list) -> None:
        """The Event of a learned-shape line outside the block path: what the block path's row would become."""
        g = m.group(*range(shape.first, shape.first + shape.ngroups))
        dt = g[0]
        date, tod = dt[:10], dt[11:]
        ts, iso = (self._date_ts, self._date_iso) if date + tod == self._date_key else self._date_time(date, tod)
        if shape.has_frac and ts is not None:
            frac = g[1]
            ts += int(frac) / 10 ** len(frac)
            iso = f"{iso}.{frac}"
        if ts is None and container_time:
            ts, iso = _container_ts(container_time), container_time
        ranks = g[shape.rk]
        rank = self._rank_cache.get(ranks) or self._rank(ranks)
        self.format_family = shape.family or self._family(shape.sep, shape.has_iter, shape.trailing,
                                                          shape.has_graph, False, False)
        shape.count += 1
        out.append(shape.event(g, ts, iso, rank, lineno))

    def _learn(self, msg: str, frac: str | None, ranks: str, space: bool) -> None:
        if self._fruitless >= MAX_FRUITLESS_LEARNING:
            return
        shape = learn_shape(msg, frac, ranks, space)
        if shape is None or any(s.key == shape.key for s in self._shapes):
            self._fruitless += 1
            return
        _compile_shape(shape, self.source)
        self._shapes.append(shape)
        for old in self._shapes[:-MAX_SHAPES]:
            self._kinds[old.kind] += old.count
            self._recognised += old.count
        del self._shapes[:-MAX_SHAPES]
        self._compile_shapes()

    def _compile_shapes(self) -> None:
        """One regex for the whole line: one of the learned shapes to the end of the line, or else SGLang's
        generic prefix (its groups from group `_prefix_at`; m.end() is where the message starts). m.lastindex,
        the last group that matched, is a shape's last group when a shape matched (`_by_marker`)."""
        alts, by_marker = [], {}
        first = 1
        for sh in self._shapes:
            sh.first = first
            first += sh.ngroups
            by_marker[first - 1] = sh
            sh.family = None if sh.sep == "." and sh.kind == "prefill_batch" else \
                self._family(sh.sep, sh.has_iter, sh.trailing, sh.has_graph, False, sh.kind == "decode_batch")
            alts.append(sh.regex)
        self._prefix_at = first
        self._line_re = re.compile("(?:" + "".join(a + r"\Z|" for a in alts) + _PREFIX.pattern + ")")
        self._by_marker = by_marker
        self._layouts = {}     # the layouts point at these shapes: a dropped shape must not count on

    def flush(self) -> list[Event]:
        """Emit a pending multi-line record (call at end of input or when a source goes idle)."""
        p, self._pending = self._pending, None
        if p is None:
            return []
        ev = p.event
        out = [ev]
        if ev.kind == "scheduler_exception" or ev.kind == "traceback":
            # an exception's message may run on over lines ("Try to allocate ..."): its first line is the cause
            ev.fields["message"] = (p.exc or p.last)[:500]
            if p.oom_line:
                # SGLang logs its KV-pool OOM, then raises it: the traceback repeats the same OOM.
                repeat = "out of memory. Try to lower" in p.oom_text and \
                    0 <= p.oom_line - self._last_kv_oom_line <= _MAX_RECORD_LINES
                if not repeat:
                    out.append(Event("oom", _oom_fields(p.oom_text, _phase_from_frames(p.funcs)), ev.time, ev.ts,
                                     ev.rank, self.source, p.oom_line))
        if not all(fields_in_range(e.fields) for e in out):      # continuation lines filled numbers in
            self.unparsed["value_out_of_range"] += 1
            return []
        self._recognised += len(out)
        for e in out:
            self._kinds[e.kind] += 1
        return out

    # ------------------------------------------------------------------ internals
    def _bare(self, text: str, lineno: int, container_time: str | None, out: list) -> None:
        """A line without SGLang's prefix: a continuation of a pending record, or a bare message."""
        p = self._pending
        if p is not None:
            p.lines += 1
            if p.lines <= _MAX_RECORD_LINES:
                self._continue(p, text, lineno)
            return
        if self._in_request or request_marked(text):
            # a line of request text (a prompt printed with its newlines by early 0.4.x), or a request log
            # without SGLang's prefix (0.5.7's JSON, another log format): never an event, nor are the bare
            # lines after it until the next SGLang record
            self._in_request = True
            self.unparsed["no_sglang_prefix"] += 1
            self.skipped["request_text"] += 1
            return
        if text.startswith("Traceback (most recent call last):"):
            # a process's traceback without SGLang's prefix (the launcher's, a child's): a record like the
            # scheduler's exception, its last line the cause
            ts = _container_ts(container_time) if container_time else None
            self._pending = _Pending(Event("traceback", {"component": ""}, container_time, ts, EMPTY_RANK,
                                           self.source, lineno))
            return
        m = _CUDA_OOM.search(text)
        if m and _unquoted(text, m.start()):
            ts = _container_ts(container_time) if container_time else None
            ev = Event("oom", _oom_fields(text, "unknown"), container_time, ts, EMPTY_RANK, self.source, lineno)
            if not fields_in_range(ev.fields):
                self.unparsed["value_out_of_range"] += 1
                return
            self._recognised += 1
            self._kinds["oom"] += 1
            out.append(ev)
            return
        i = text.find("Watchdog caught collective operation timeout")
        if i >= 0 and _unquoted(text, i):
            ts = _container_ts(container_time) if container_time else None
            ev = Event("nccl_timeout", {"message": text.strip()[:500]}, container_time, ts, EMPTY_RANK,
                       self.source, lineno)
            self._recognised += 1
            self._kinds["nccl_timeout"] += 1
            out.append(ev)
            return
        self.unparsed["no_sglang_prefix"] += 1
        self.skipped[_foreign(text)] += 1

    def _anchored(self, text: str, lineno: int, container_time: str | None, out: list,
                  known_only: bool = False) -> bool:
        """A record found by its message anywhere in the line (_ANCHOR), whatever prefix stands before it; False
        when the line holds none. User text never passes: a message inside an open quote, or in a line that is a
        request log (its head, the leftmost anchor, makes it one) is not a record. Lines that go on a pending
        multi-line record or a request's text (see _bare) start a record only behind a prefix with a time, or,
        in a file whose records have no prefix at all, with the message at the line's start. `known_only`: look
        only where a prefix layout of this file's ends (False when none fits)."""
        if "\x00" in text:
            return False
        marked = None
        anchors = None
        for rx in self._known:          # the file's layouts: the message where their prefix ends, no search
            m = rx.match(text)
            if m is not None:
                a = _ANCHOR.match(text, m.end())
                if a is not None:
                    anchors = chain((a,), _ANCHOR.finditer(text, a.end()))
                    break
        if anchors is None and known_only:
            return False
        for a in anchors or _ANCHOR.finditer(text):
            start = a.start()
            if start == 0 and a.group().endswith("memory"):
                return False                # a bare CUDA OOM: _bare's one-line record, as always
            if not _closed_quotes(text, start):
                return False                # the rest of the line is inside quoted text
            msg = text[start:]
            head = msg[:1]
            if not (head == "R" or head == "F" or head == "i" or head == "{" or head == "I"):
                if marked is None:
                    marked = request_marked(text)
                if marked:
                    return False            # a request log's text quoting a message
            layout = self._prefix_layout(text, start) if start else _NO_PREFIX
            if layout is None:
                continue
            # inside a traceback or a request's raw text only a dated prefix starts a record (a bare message
            # does too in a file without prefixes, as a request's text cannot be told from it there)
            if (self._pending is not None or self._in_request) and layout.time is None and not (
                    start == 0 and not self._prefixed):
                return False
            if layout.tags is not None and (head == "D" or head == "P") and self._batch_by_shape(
                    text, msg, layout, lineno, container_time, out):
                return True
            ev = self._message(msg, False)
            if ev is None:
                continue
            if self._pending is not None:
                out += self.flush()
            self._in_request = ev.kind == "request_log"
            if ev is _MALFORMED:
                self.unparsed["malformed"] += 1
                return True
            kind = ev.kind
            if kind not in _MULTILINE and not fields_in_range(ev.fields):
                self.unparsed["value_out_of_range"] += 1
                return True
            ts = iso = None
            if layout.time is not None:
                date, tod, frac = layout.clock(text)
                if date is not None:
                    ts, iso = (self._date_ts, self._date_iso) if date + tod == self._date_key else \
                        self._date_time(date, tod)
                    if frac and ts is not None:
                        frac = frac[:6]
                        ts += int(frac) / 10 ** len(frac)
                        iso = f"{iso}.{frac}"
                elif container_time is None:
                    ts, iso = self._time_only(tod, frac[:6] if frac else frac)
            if ts is None and container_time:
                ts, iso = _container_ts(container_time), container_time
            if ts is None:
                self.untimed += 1
            if start:
                self._prefixed = True
                self._know(layout, text, start)
            ev.time, ev.ts, ev.rank, ev.source, ev.line = iso, ts, layout.rank_of(text), self.source, lineno
            level, pid = layout.level_pid(text)
            if level is not None or pid is not None:
                ev.prefix = {"level": level, "pid": pid}
            self.layouts[layout.template] += 1
            if kind in _MULTILINE:
                self._pending = _Pending(ev)
                if kind == "oom":
                    self._last_kv_oom_line = lineno
                return True
            self._recognised += 1
            self._kinds[kind] += 1
            out.append(ev)
            if (kind == "decode_batch" or kind == "prefill_batch") and layout.tags is not None and self.learning:
                date, _, frac = layout.clock(text)
                if date is not None:
                    self._learn(msg, frac[:6] if frac else None, layout.ranks_text(text), True)
            return True
        return False

    def _batch_by_shape(self, text: str, msg: str, layout, lineno: int, container_time, out: list) -> bool:
        """A batch line behind a custom prefix with a date, read by a learned shape (see "Learned shapes"): the
        line as SGLang's own prefix would print it, so the shapes learned from either layout serve both."""
        date, tod, frac = layout.clock(text)
        if date is None or not self._shapes:
            return False
        m = self._line_re.match(f"[{date} {tod}{'.' + frac[:6] if frac else ''}{layout.ranks_text(text)}] {msg}")
        shape = self._by_marker.get(m.lastindex) if m is not None else None
        if shape is None:
            return False
        if self._pending is not None:
            out += self.flush()
        self._in_request = False
        self._prefixed = True
        self._know(layout, text, len(text) - len(msg))
        self._learned_event(shape, m, lineno, container_time, out)
        ev = out[-1]
        ev.line = lineno
        level, pid = layout.level_pid(text)
        if level is not None or pid is not None:
            ev.prefix = {"level": level, "pid": pid}
        self.layouts[layout.template] += 1
        return True

    def _know(self, layout, text: str, end: int) -> None:
        """Remember a prefix layout a record was found behind: its lines' messages are then looked for where
        the prefix ends (its skeleton as a regex: each digit any digit, the rest as printed)."""
        if layout.known:
            return
        layout.known = True
        rx = re.compile(re.sub(r"[0-9]", "[0-9]", re.escape(text[:end])))
        self._known = [rx] + self._known[:MAX_KNOWN_PREFIXES - 1]

    def _prefix_layout(self, text: str, end: int):
        """The layout of the prefix text[:end]: learned once per skeleton (digits as 0), so a file's prefix is
        taken apart once, not per line; None when it is not text a prefix can be (a lone surrogate)."""
        try:
            key = text[:end].encode().translate(_SKELETON)
        except UnicodeEncodeError:
            return None
        layout = self._prefixes.get(key)
        if layout is None:
            if len(self._prefixes) >= MAX_PREFIX_LAYOUTS:
                self._prefixes.clear()
            layout = self._prefixes[key] = _PrefixLayout(text[:end])
        return layout

    def _continue(self, p: _Pending, text: str, lineno: int) -> None:
        ev = p.event
        stripped = text.strip()
        if not stripped:
            return
        if ev.kind == "oom":
            m = _TRY_ALLOC.search(text)
            if m:
                ev.fields["requested_tokens"] = int(m.group(1))
            m = _AVAIL_TOKENS.search(text)
            if m:
                ev.fields["available_tokens"] = int(m.group(1))
            return
        f = _FRAME.match(text)
        if f:
            p.funcs.append(f.group(1))
            if len(p.funcs) > 64:
                del p.funcs[:32]
            return
        if not p.oom_line and _oom_in(text):
            # raised RuntimeErrors surface only inside the traceback, never as their own log record
            p.oom_line, p.oom_text = lineno, stripped
        if not stripped.startswith(("^", "~")):
            p.last = stripped
            if _EXC_LINE.match(stripped):
                p.exc = stripped

    def _time_only(self, tod: str, frac):
        """`HH:MM:SS` without a date (0.3.0-0.3.3, custom formats): on the day of the last dated line when there
        was one, else seconds since the first day of the log; day by day (a clock going back by over 12 h)."""
        h, m, s = int(tod[:2]), int(tod[3:5]), int(tod[6:8])
        sod = h * 3600 + m * 60 + s + (int(frac) / 10 ** len(frac) if frac else 0.0)
        if sod + 43200 < self._last_tod:
            self._day_offset += 86400.0
        self._last_tod = sod
        shown = tod + (f".{frac}" if frac else "")
        if self._carried is not None:
            ts = self._carried + self._day_offset + sod
            return ts, datetime.fromtimestamp(ts - sod + 1, tz=timezone.utc).strftime("%Y-%m-%dT") + shown
        return self._day_offset + sod, shown

    def _date_time(self, date: str, tod: str):
        if date != self._day:      # timegm is linear in the time of day: the date's midnight, once per day
            try:
                midnight = calendar.timegm((int(date[:4]), int(date[5:7]), int(date[8:10]), 0, 0, 0, 0, 0, 0))
            except (ValueError, OverflowError):
                midnight = None
            self._day, self._midnight = date, midnight
            if midnight is not None:
                self._carried, self._day_offset = float(midnight), 0.0
        if self._midnight is None:
            return None, None
        ts = float(self._midnight + int(tod[:2]) * 3600 + int(tod[3:5]) * 60 + int(tod[6:8]))
        iso = f"{date}T{tod}"
        self._date_key, self._date_ts, self._date_iso = date + tod, ts, iso
        return ts, iso

    def _rank(self, ranks: str) -> dict:
        rank = dict(EMPTY_RANK)
        for tag, num, encoder_dp in _RANK_TAG.findall(ranks):
            if tag:
                rank[tag.lower()] = int(num)
            else:
                rank["dp"] = int(encoder_dp)
        if len(self._rank_cache) < 4096:
            self._rank_cache[ranks] = rank
        return rank

    def _family(self, sep: str, has_iter: bool, trailing: bool, has_graph: bool, time_only: bool,
                decode: bool) -> str:
        """The SGLang version family a batch line's shape points to (docs/log-events.md, "Format family")."""
        if time_only:
            return "0.3.0-0.3.3"
        if sep == ".":
            if has_graph:
                return "0.4.7-0.5.3"
            if decode:
                return "0.3.4-0.4.6"
            # a prefill line looks the same in 0.3.4-0.5.3: keep what a decode line said
            current = self.format_family
            return current if current in ("0.3.4-0.4.6", "0.4.7-0.5.3") else "0.3.4-0.5.3"
        if trailing:
            return "0.5.4-0.5.8" if has_iter else "0.5.5-0.5.8"
        return "0.5.9-0.5.23"

    def _message(self, msg: str, time_only: bool):
        c = msg[:1]
        # the frequent ones first: uvicorn access lines and --log-requests lines
        if c == "I" and msg.startswith("INFO:"):
            m = _ACCESS.match(msg)
            if m:
                client, method, path, status = m.groups()
                return Event("http_access", {"client": client, "method": method, "path": path,
                                             "status": int(status)}, None, None, EMPTY_RANK)
            return None
        if c == "R" or c == "F" or c == "i" or c == "{":
            phase = request_phase(msg)
            if phase is not None:       # user text follows: nothing in it is read (see _REQUEST_MARK)
                return Event("request_log", {"phase": phase, "rid": _rid(msg)}, None, None, EMPTY_RANK)
        if c == "D" or c == "P":
            if msg.startswith(("Decode batch", "Prefill batch")):
                return self._batch(msg, time_only)
            if msg.startswith("Decode out of memory happened"):
                return _retraction(msg, legacy=True)
            if msg.startswith(("Prefill out of memory", "Decode out of memory")):
                phase = "prefill" if c == "P" else "decode"
                return Event("oom", {"phase": phase, "source": "kv_pool"})
        if msg.startswith(("KV cache pool is full", "Testing retraction")):
            return _retraction(msg, legacy=False)
        if msg.startswith("max_total_num_tokens="):
            return _memory_config(msg)
        if msg.startswith("server_args="):
            args = parse_server_args(msg[len("server_args="):])
            return Event("server_args", args) if args is not None else _MALFORMED
        if msg.startswith("The server is fired up"):
            return Event("server_ready", {})
        if msg.startswith("Load weight "):
            return _load_weight(msg)
        if msg.startswith("Memory pool end"):
            return Event("memory_pool", _avail(msg, "avail mem="))
        if ("Cache is allocated" in msg or "Cache VA upper bound" in msg) and _unquoted(msg, msg.find("Cache ")):
            return _kv_alloc(msg)
        if msg.startswith("Capture ") and (" begin" in msg or " end" in msg):
            return _capture(msg)
        if "atchdog timeout (" in msg:
            m = _WATCHDOG.search(msg)
            if m and _unquoted(msg, m.start()):
                return Event("watchdog_timeout", {"component": m.group(1) or "Scheduler",
                                                  "soft": "self.soft=True" in m.group(2),
                                                  "timeout_seconds": _first_number(m.group(2))})
        if "hit an exception" in msg or msg.startswith("Exception in "):
            m = _EXCEPTION.match(msg)
            if m:
                return Event("scheduler_exception", {"component": m.group(1) or m.group(3)})
        if msg.startswith(("Received sigquit", "SIGQUIT received")):
            return Event("sigquit", {})
        if ("ealth check failed" in msg or "ealth check timed out" in msg) and _unquoted(msg, msg.find("ealth check")):
            return Event("health_check_failed", {"message": msg[:300]})
        if msg.startswith("Initialization failed"):
            return Event("init_failed", {"message": msg[:300]})
        if msg.startswith("Subprocess ") and "crashed" in msg:
            m = _SUBPROC.match(msg)
            if m:
                return Event("subprocess_crash", {"name": m.group(1), "pid": int(m.group(2)),
                                                  "exit_code": int(m.group(3))})
        if msg.startswith("LONG GARBAGE COLLECTION DETECTED"):
            return Event("gc_warning", {"duration_seconds": _first_number(msg.split("Duration:", 1)[-1])})
        if msg.startswith("alloc_req_slots runs out of memory"):
            return Event("oom", {"phase": "decode", "source": "req_pool"})
        if msg.startswith("Not enough memory. Please try to increase --mem-fraction-static"):
            return Event("oom", {"phase": "startup", "source": "startup"})
        m = _CUDA_OOM.search(msg)
        if m and _unquoted(msg, m.start()):
            return Event("oom", _oom_fields(msg, "unknown"))
        return None

    def _batch(self, msg: str, time_only: bool):
        m = _BATCH_HEAD.match(msg)
        if m is None:
            return _MALFORMED
        decode = m.group(1) == "Decode"
        fields: dict = {}
        if m.group(2) is not None:
            fields["mixed_running_req"] = int(m.group(2))
        if m.group(3) is not None:
            fields["forward_iter"] = int(m.group(3))
        body = msg[m.end():]
        parse_batch_body(body, fields)
        if "running_req" not in fields and "new_seq" not in fields:
            return _MALFORMED
        self.format_family = self._family(m.group(4), m.group(3) is not None, body.endswith(", "),
                                          "cuda_graph" in fields, time_only, decode)
        return Event("decode_batch" if decode else "prefill_batch", fields, None, None, EMPTY_RANK)


_MALFORMED = Event("malformed", {})


def _wrapping(text: str, m) -> bool:
    """Whether the SGLang record `m` found inside `text` (not at its start) is one: what precedes it is a
    foreign prefix (Ray, docker compose, syslog, Slurm, kubectl --prefix), not quoted text, and the line is not
    a request log quoting one (its marker may come before or after the quote: JSON keys have no order)."""
    start = m.start()
    if not _unquoted(text, start):
        return False
    return not request_marked(text) or request_phase(text[m.end():m.end() + 4000]) is not None
_MULTILINE = frozenset({"scheduler_exception", "oom"})


def _closed_quotes(text: str, end: int) -> bool:
    """No quoted string open at `end`: every ' and " before it is closed (a prefix may quote a name; a message
    inside a repr'd prompt or a JSON string is not one of SGLang's)."""
    return text.count("'", 0, end) % 2 == 0 and text.count('"', 0, end) % 2 == 0


class _PrefixLayout:
    """One prefix skeleton's parts (_PREFIX_PART), at fixed offsets in every prefix with that skeleton: the
    rightmost time (SGLang's own wins over an outer collector's), the rank tags, the level and the pid;
    `template` names the layout for people ("[<time>][<file>:<n>][<level>]: ")."""
    __slots__ = ("time", "date", "frac", "ranks", "level", "pid", "template", "_rank", "tags", "known")

    def __init__(self, prefix: str):
        self.time: Any = None       # (start, end) of each part in the prefix, once found
        self.date: Any = None
        self.frac: Any = None
        self.level: Any = None
        self.pid: Any = None
        self.ranks: list = []
        self._rank: dict | None = None
        self.known = False
        # the rank tags as SGLang's own prefix prints them (" DP0 TP1"), when they come after the time and
        # SGLang prints each of them: a batch line of the layout is then read by a learned shape
        self.tags: list | None = []
        parts, last = [], 0
        for m in _PREFIX_PART.finditer(prefix):
            parts.append(_PY_FILE.sub("<file>", prefix[last:m.start()]))
            last = m.end()
            if m.group(2) is not None:
                self.time = m.span(2)
                self.date = m.span(1) if m.group(1) is not None else None
                self.frac = m.span(3) if m.group(3) is not None else None
                parts.append("<time>")
            elif m.group(5) is not None:
                self.ranks.append((_PREFIX_RANKS[m.group(4)], m.span(5)))
                if self.tags is not None:
                    self.tags = self.tags + [(m.group(4), m.span(5))] if m.group(4) in _SGLANG_TAGS and \
                        self.time is not None else None
                parts.append("<rank>")
            elif m.group(6) is not None:
                self.level = m.span(6)
                parts.append("<level>")
            elif m.group(7) is not None:
                self.pid = m.span(7)
                parts.append(prefix[m.start():m.start(7)] + "<pid>")
            else:
                parts.append("<n>")
        parts.append(_PY_FILE.sub("<file>", prefix[last:]))
        self.template: str = re.sub(r"<rank>( <rank>)+", "<rank>", "".join(parts))[:120]
        if not self.ranks:
            self._rank = EMPTY_RANK
        if self.time is None or self.date is None:
            self.tags = None

    def ranks_text(self, text: str) -> str:
        return "".join(f" {tag}{text[a:b]}" for tag, (a, b) in self.tags or ())

    def clock(self, text: str):
        d, f = self.date, self.frac
        return (text[d[0]:d[1]] if d else None, text[self.time[0]:self.time[1]], text[f[0]:f[1]] if f else None)

    def rank_of(self, text: str) -> dict:
        if self._rank is not None:
            return self._rank
        rank = dict(EMPTY_RANK)
        for key, (a, b) in self.ranks:
            rank[key] = int(text[a:b])
        return rank

    def level_pid(self, text: str):
        lv, pid = self.level, self.pid
        return (text[lv[0]:lv[1]] if lv else None, int(text[pid[0]:pid[1]]) if pid else None)


_SGLANG_TAGS = frozenset(("DP", "PP", "TP", "EP", "ATTN_CP", "MOE_DP"))
_NO_PREFIX = _PrefixLayout("")
_NO_PREFIX.template = "(none)"


def _foreign(text: str) -> str:
    """What a line without any SGLang message looks like (`parse --stats`, the analyze report)."""
    stripped = text.lstrip()
    if stripped.startswith(("File \"", "Traceback", "raise ", "^", "~")) or text[:1] in " \t" or \
            _EXC_LINE.match(stripped):
        return "traceback"
    if "NCCL" in text or "nccl" in text:
        return "nccl"
    if "it/s]" in text or "s/it]" in text or "%|" in text:
        return "progress_bar"
    if "Warning" in text or "WARNING" in text or "warn(" in text:
        return "warning"
    if '" 200' in text or "HTTP/1.1" in text:
        return "access_log"
    return "other"


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


def _retraction(msg: str, legacy: bool) -> Event:
    fields: dict = {"variant": "decode_oom_legacy" if legacy else "kv_cache_full",
                    "testing": msg.startswith("Testing retraction")}
    start = msg.find("#")
    if start < 0:
        return _MALFORMED
    for piece in msg[start:].split(", "):
        key, _, val = piece.partition(": ")
        if key == "#new_token_ratio":
            before, _, after = val.partition(" -> ")
            fields["new_token_ratio_before"] = value_of(before.strip())
            fields["new_token_ratio_after"] = value_of(after.strip())
        elif key:
            fields[_RETRACT_KEYS.get(key) or snake(key)] = value_of(val.strip())
    if not isinstance(fields.get("retracted_reqs"), int):
        return _MALFORMED
    return Event("retraction", fields)


def _memory_config(msg: str) -> Event:
    fields: dict = {}
    for piece in msg.split(", "):
        key, _, val = piece.partition("=")
        val = val.strip()
        if key in ("available_gpu_mem", "available_cpu_mem"):
            m = _GB_VALUE.match(val)
            if m:
                fields[f"{key}_bytes"] = int(float(m.group(1)) * GIB)
        elif key:
            fields[key] = value_of(val)
    if not isinstance(fields.get("max_total_num_tokens"), int):
        return _MALFORMED
    return Event("memory_config", fields)


def _avail(msg: str, marker: str) -> dict:
    fields: dict = {}
    i = msg.find(marker)
    if i >= 0:
        m = _GB_VALUE.match(msg, i + len(marker))
        if m:
            fields["avail_mem_bytes"] = int(float(m.group(1)) * GIB)
    j = msg.find("mem usage=")
    if j >= 0:
        m = _GB_VALUE.match(msg, j + len("mem usage="))
        if m:
            fields["mem_usage_bytes"] = int(float(m.group(1)) * GIB)
    return fields


def _load_weight(msg: str) -> Event:
    fields = _avail(msg, "avail mem=")
    fields["phase"] = "begin" if msg.startswith("Load weight begin") else "end"
    m = re.search(r"type=(\w+)", msg)
    if m:
        fields["model_type"] = m.group(1)
    m = re.search(r"dtype=([\w.]+)", msg)
    if m:
        fields["dtype"] = m.group(1)
    m = re.search(r"quant=([\w.-]+)", msg)
    if m:
        fields["quantization"] = m.group(1)
    m = _ELAPSED.search(msg)
    if m:
        fields["elapsed_seconds"] = float(m.group(1))
    return Event("load_weight", fields)


def _kv_alloc(msg: str) -> Event:
    fields: dict = {}
    m = re.match(r"(.*?) (?:is allocated|VA upper bound)", msg)
    if m:
        fields["cache"] = m.group(1)[:100]
    m = re.search(r"#tokens: ([0-9]{1,18})", msg)
    if m:
        fields["num_tokens"] = int(m.group(1))
    for key, name in (("K size: ", "k_size_bytes"), ("V size: ", "v_size_bytes"), ("KV size: ", "kv_size_bytes")):
        i = msg.find(key)
        if i >= 0 and (key != "V size: " or msg[i - 1:i] != "K"):
            g = _GB_VALUE.match(msg, i + len(key))
            if g:
                fields[name] = int(float(g.group(1)) * GIB)
    m = re.search(r"dtype: ([\w.]+)", msg)
    if m:
        fields["dtype"] = m.group(1)
    return Event("kv_cache_allocated", fields)


def _capture(msg: str) -> Event:
    fields = _avail(msg, "avail mem=")
    fields["phase"] = "begin" if " begin" in msg.split(".", 1)[0] else "end"
    head = msg[len("Capture "):].split(" begin", 1)[0].split(" end", 1)[0]
    fields["target"] = head[:100]
    m = _ELAPSED.search(msg)
    if m:
        fields["elapsed_seconds"] = float(m.group(1))
    return Event("graph_capture", fields)


_OOM_TEXTS = re.compile(r"CUDA out of memory|CUDA error: out of memory|out of memory\. Try to lower"
                        r"|alloc_req_slots runs out of memory|Not enough memory\. Please try to increase")


def _oom_in(text: str) -> bool:
    """A traceback line that reports an OOM, not inside quoted text (an exception quoting a request)."""
    m = _OOM_TEXTS.search(text)
    return m is not None and _unquoted(text, m.start())


def _phase_from_frames(funcs: list[str]) -> str:
    for name in reversed(funcs):
        low = name.lower()
        if "capture" in low or "warmup" in low or "init_" in low or "load_model" in low:
            return "startup"
        if "extend" in low or "prefill" in low:
            return "prefill"
        if "decode" in low:
            return "decode"
    return "unknown"


def _oom_fields(text: str, phase: str) -> dict:
    if "Prefill out of memory" in text:
        return {"phase": "prefill", "source": "kv_pool"}
    if "Decode out of memory" in text:
        return {"phase": "decode", "source": "kv_pool"}
    if "alloc_req_slots runs out of memory" in text:
        return {"phase": "decode", "source": "req_pool"}
    if "Not enough memory. Please try to increase" in text:
        return {"phase": "startup", "source": "startup"}
    fields: dict[str, str | int] = {"phase": phase, "source": "cuda"}
    m = _TRIED.search(text)
    if m:
        fields["requested_bytes"] = int(float(m.group(1)) * _UNIT_BYTES[m.group(2)])
    return fields
