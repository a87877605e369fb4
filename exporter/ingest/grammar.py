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
import re
from collections import Counter
from datetime import datetime

from exporter.ingest.events import EMPTY_RANK, Event

GIB = 1024 ** 3

# "[2025-08-11 17:17:03.123 DP0 TP1] " / "[17:17:03 TP0] " / "[2025-08-11 17:17:03] "
_PREFIX = re.compile(
    r"\[(?:(\d{4}-\d{2}-\d{2}) )?(\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?((?: (?:DP|PP|TP|EP|ATTN_CP|MOE_DP)\d+)*)\] ?")
_RANK_TAG = re.compile(r"(DP|PP|TP|EP|ATTN_CP|MOE_DP)(\d+)")
_BATCH_HEAD = re.compile(r"(Prefill|Decode) batch(?:\(mixed #running-req: (\d+)\))?(?: \[(\d+)\])?([.,]) ?")
_ACCESS = re.compile(r'INFO: +(\S+) - "(\S+) (\S+) [^"]*" (\d{3})')
_WATCHDOG = re.compile(r"(?:(\w+) )?[Ww]atchdog timeout \((.*)\)")
_EXCEPTION = re.compile(r"(\w+) hit an exception: ?(.*)|Exception in (\w+):")
_FRAME = re.compile(r'\s*File "[^"]*", line \d+, in (\w+)')
_TRY_ALLOC = re.compile(r"Try to allocate (\d+) tokens")
_AVAIL_TOKENS = re.compile(r"Ava(?:ilable|liable) (?:full )?tokens: (\d+)")
_GB_VALUE = re.compile(r"([\d.]+) GB")
_SUBPROC = re.compile(r"Subprocess (\S+) \(pid=(\d+)\) crashed with exit code (-?\d+)")
_RID = re.compile(r"rid='([^']*)'|rid=([\w-]+)")
_CUDA_OOM = re.compile(r"CUDA out of memory|CUDA error: out of memory")
_TRIED = re.compile(r"Tried to allocate ([\d.]+) (B|KiB|MiB|GiB|TiB)")

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
_GRAPH_KEYS = {"cuda graph": "cuda", "cpu graph": "cpu", "npu graph": "npu", "musa graph": "musa"}
_RETRACT_KEYS = {"#retracted_reqs": "retracted_reqs", "#aborted_retracted_reqs": "aborted_retracted_reqs",
                 "#new_tokens_gained": "new_tokens_gained", "#mamba_num_gained": "mamba_num_gained"}
_UNIT_BYTES = {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": GIB, "TiB": 1024 ** 4}
_MAX_RECORD_LINES = 2000  # continuation lines scanned per multi-line record; more are still absorbed


def snake(key: str) -> str:
    """Fallback field name for a printed key we do not know yet: '#foo-bar (x/s)' -> 'foo_bar_x_s'."""
    return re.sub(r"[^0-9a-z]+", "_", key.lower()).strip("_")


def value_of(text: str):
    """A printed value as int / float / bool, percentages as 0-1 ratios; anything else stays a string."""
    if text.isdigit():
        return int(text)
    if text == "True":
        return True
    if text == "False":
        return False
    if text.endswith("%"):
        try:
            return float(text[:-1]) / 100.0
        except ValueError:
            return text
    try:
        return float(text)
    except ValueError:
        try:
            return int(text)
        except ValueError:
            return text


def parse_batch_body(body: str, fields: dict) -> None:
    """Fill `fields` from 'key: value, key: value, ...' (trailing ', ' or ' ' tolerated)."""
    base = None
    for piece in body.rstrip(", ").split(", "):
        key, sep, val = piece.partition(": ")
        if not sep:
            # continuation of a split value: "#token: full=1, swa=2" -> this piece is "swa=2"
            sub, eq, val = piece.partition("=")
            if eq and base:
                fields[f"{sub.strip()}_{base}"] = value_of(val.strip())
            continue
        val = val.strip()
        backend = _GRAPH_KEYS.get(key)
        if backend is not None:
            fields["cuda_graph"] = val == "True"
            fields["graph_backend"] = backend
            base = None
            continue
        base = _BATCH_KEYS.get(key) or snake(key)
        sub, eq, subval = val.partition("=")
        if eq and sub.isidentifier():
            fields[f"{sub}_{base}"] = value_of(subval)
        else:
            fields[base] = value_of(val)


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
    if value is None or isinstance(value, (str, int, float, bool)):
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
    __slots__ = ("event", "lines", "funcs", "oom_line", "oom_text", "last")

    def __init__(self, event: Event):
        self.event = event
        self.lines = 0
        self.funcs: list[str] = []
        self.oom_line = 0
        self.oom_text = ""
        self.last = ""


class Parser:
    """Parses one source's records. Not thread-safe; one instance per followed file."""

    def __init__(self, source: str = ""):
        self.source = source
        self.unparsed: Counter = Counter()
        self.recognised = 0
        self.kinds: Counter = Counter()
        self.format_family: str | None = None
        self._pending: _Pending | None = None
        self._date_cache: tuple[str, float] = ("", 0.0)
        self._rank_cache: dict[str, dict] = {"": EMPTY_RANK}
        self._day_offset = 0.0       # time-only prefixes (SGLang 0.3.0-0.3.3): add a day when the clock wraps
        self._last_tod = -1.0
        self._last_kv_oom_line = -10**9

    # ------------------------------------------------------------------ public API
    def feed(self, text: str, lineno: int = 0, container_time: str | None = None) -> list[Event]:
        if not text or text.isspace():
            self.unparsed["empty"] += 1
            return []
        if "\x00" in text:
            self.unparsed["binary"] += 1
            return []
        m = _PREFIX.match(text) if text[0] == "[" else None
        if m is None and "[" in text:
            m = _PREFIX.search(text)
        if m is None:
            return self._bare(text, lineno, container_time)
        out = self.flush() if self._pending else []
        date, tod, frac, ranks = m.group(1, 2, 3, 4)
        ts, iso = self._time(date, tod, frac)
        if ts is None and container_time:
            ts, iso = _container_ts(container_time), container_time
        rank = self._rank_cache.get(ranks) if ranks else EMPTY_RANK
        if rank is None:
            rank = self._rank(ranks)
        ev = self._message(text[m.end():], date is None)
        if ev is None:
            self.unparsed["unknown_message"] += 1
            return out
        if ev is _MALFORMED:
            self.unparsed["malformed"] += 1
            return out
        ev.time, ev.ts, ev.rank, ev.source, ev.line = iso, ts, rank, self.source, lineno
        if ev.kind in _MULTILINE:
            self._pending = _Pending(ev)
            if ev.kind == "oom":
                self._last_kv_oom_line = lineno
            return out
        self.recognised += 1
        self.kinds[ev.kind] += 1
        out.append(ev)
        return out

    def flush(self) -> list[Event]:
        """Emit a pending multi-line record (call at end of input or when a source goes idle)."""
        p, self._pending = self._pending, None
        if p is None:
            return []
        ev = p.event
        out = [ev]
        if ev.kind == "scheduler_exception":
            ev.fields["message"] = p.last[:500]
            if p.oom_line:
                # SGLang logs its KV-pool OOM, then raises it: the traceback repeats the same OOM.
                repeat = "out of memory. Try to lower" in p.oom_text and \
                    0 <= p.oom_line - self._last_kv_oom_line <= _MAX_RECORD_LINES
                if not repeat:
                    out.append(Event("oom", _oom_fields(p.oom_text, _phase_from_frames(p.funcs)), ev.time, ev.ts,
                                     ev.rank, self.source, p.oom_line))
        self.recognised += len(out)
        for e in out:
            self.kinds[e.kind] += 1
        return out

    # ------------------------------------------------------------------ internals
    def _bare(self, text: str, lineno: int, container_time: str | None) -> list[Event]:
        """A line without SGLang's prefix: a continuation of a pending record, or a bare message."""
        p = self._pending
        if p is not None:
            p.lines += 1
            if p.lines <= _MAX_RECORD_LINES:
                self._continue(p, text, lineno)
            return []
        if _CUDA_OOM.search(text):
            ts = _container_ts(container_time) if container_time else None
            ev = Event("oom", _oom_fields(text, "unknown"), container_time, ts, EMPTY_RANK, self.source, lineno)
            self.recognised += 1
            self.kinds["oom"] += 1
            return [ev]
        if "Watchdog caught collective operation timeout" in text:
            ts = _container_ts(container_time) if container_time else None
            ev = Event("nccl_timeout", {"message": text.strip()[:500]}, container_time, ts, EMPTY_RANK,
                       self.source, lineno)
            self.recognised += 1
            self.kinds["nccl_timeout"] += 1
            return [ev]
        self.unparsed["no_sglang_prefix"] += 1
        return []

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
        if not p.oom_line and (_CUDA_OOM.search(text) or "out of memory. Try to lower" in text):
            p.oom_line, p.oom_text = lineno, stripped
        if not stripped.startswith(("^", "~")):
            p.last = stripped

    def _time(self, date, tod, frac):
        if date is None:
            h, m, s = int(tod[:2]), int(tod[3:5]), int(tod[6:8])
            sod = h * 3600 + m * 60 + s + (int(frac) / 10 ** len(frac) if frac else 0.0)
            if sod + 43200 < self._last_tod:
                self._day_offset += 86400.0
            self._last_tod = sod
            return self._day_offset + sod, tod + (f".{frac}" if frac else "")
        key = date + tod
        cached_key, cached_ts = self._date_cache
        if key == cached_key:
            ts = cached_ts
        else:
            try:
                ts = float(calendar.timegm((int(date[:4]), int(date[5:7]), int(date[8:10]),
                                            int(tod[:2]), int(tod[3:5]), int(tod[6:8]), 0, 0, 0)))
            except (ValueError, OverflowError):
                return None, None
            self._date_cache = (key, ts)
        iso = f"{date}T{tod}"
        if frac:
            ts += int(frac) / 10 ** len(frac)
            iso += f".{frac}"
        return ts, iso

    def _rank(self, ranks: str) -> dict:
        rank = dict(EMPTY_RANK)
        for tag, num in _RANK_TAG.findall(ranks):
            rank[tag.lower()] = int(num)
        if len(self._rank_cache) < 4096:
            self._rank_cache[ranks] = rank
        return rank

    def _family(self, head_sep: str, iteration, body: str, has_graph: bool, time_only: bool) -> str:
        if time_only:
            return "0.3.0-0.3.3"
        if head_sep == ".":
            return "0.4.7-0.5.3" if has_graph else "0.3.4-0.4.6"
        if iteration is not None and self.format_family in (None, "0.5.4"):
            return "0.5.4"
        return "0.5.5-0.5.8" if body.endswith(", ") else "0.5.9-0.5.23"

    def _message(self, msg: str, time_only: bool):
        c = msg[:1]
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
        if "Cache is allocated" in msg or "Cache VA upper bound" in msg:
            return _kv_alloc(msg)
        if msg.startswith("Capture ") and (" begin" in msg or " end" in msg):
            return _capture(msg)
        if msg.startswith("INFO:"):
            m = _ACCESS.match(msg)
            if m:
                return Event("http_access", {"client": m.group(1), "method": m.group(2), "path": m.group(3),
                                             "status": int(m.group(4))})
            return None
        if msg.startswith(("Receive: ", "Finish: ")):
            m = _RID.search(msg, 0, 4000)
            return Event("request_log", {"phase": "receive" if msg[0] == "R" else "finish",
                                         "rid": (m.group(1) or m.group(2)) if m else None})
        if "atchdog timeout (" in msg:
            m = _WATCHDOG.search(msg)
            if m:
                return Event("watchdog_timeout", {"component": m.group(1) or "Scheduler",
                                                  "soft": "self.soft=True" in m.group(2),
                                                  "timeout_seconds": _first_number(m.group(2))})
        if "hit an exception" in msg or msg.startswith("Exception in "):
            m = _EXCEPTION.match(msg)
            if m:
                return Event("scheduler_exception", {"component": m.group(1) or m.group(3)})
        if msg.startswith(("Received sigquit", "SIGQUIT received")):
            return Event("sigquit", {})
        if "ealth check failed" in msg or "ealth check timed out" in msg:
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
        if _CUDA_OOM.search(msg):
            return Event("oom", _oom_fields(msg, "unknown"))
        return None

    def _batch(self, msg: str, time_only: bool):
        m = _BATCH_HEAD.match(msg)
        if m is None:
            return _MALFORMED
        kind = "decode_batch" if m.group(1) == "Decode" else "prefill_batch"
        fields: dict = {}
        if m.group(2) is not None:
            fields["mixed_running_req"] = int(m.group(2))
        if m.group(3) is not None:
            fields["forward_iter"] = int(m.group(3))
        body = msg[m.end():]
        parse_batch_body(body, fields)
        if "running_req" not in fields and "new_seq" not in fields:
            return _MALFORMED
        self.format_family = self._family(m.group(4), m.group(3), body, "cuda_graph" in fields, time_only)
        return Event(kind, fields)


_MALFORMED = Event("malformed", {})
_MULTILINE = frozenset({"scheduler_exception", "oom"})


def _first_number(text: str):
    m = re.search(r"-?\d+(?:\.\d+)?", text)
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
    m = re.search(r"elapsed=([\d.]+) s", msg)
    if m:
        fields["elapsed_seconds"] = float(m.group(1))
    return Event("load_weight", fields)


def _kv_alloc(msg: str) -> Event:
    fields: dict = {}
    m = re.search(r"#tokens: (\d+)", msg)
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
    fields["target"] = head
    m = re.search(r"(?:Time elapsed: |elapsed=)([\d.]+) s", msg)
    if m:
        fields["elapsed_seconds"] = float(m.group(1))
    return Event("graph_capture", fields)


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
    fields = {"phase": phase, "source": "cuda"}
    m = _TRIED.search(text)
    if m:
        fields["requested_bytes"] = int(float(m.group(1)) * _UNIT_BYTES[m.group(2)])
    return fields
