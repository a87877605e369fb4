"""SGLang's messages to Events: which message a record holds, and the fields of each kind."""
from __future__ import annotations

import re

from exporter.ingest.events import EMPTY_RANK, Event
from exporter.ingest.grammar.patterns import (
    _ACCESS,
    _AVAIL_TOKENS,
    _CUDA_OOM,
    _ELAPSED,
    _EXC_LINE,
    _EXCEPTION,
    _FRAME,
    _GB_VALUE,
    _RETRACT_KEYS,
    _SUBPROC,
    _TRIED,
    _TRY_ALLOC,
    _UNIT_BYTES,
    _WATCHDOG,
    DISCONNECTED,
    GIB,
    REQUEST_ERROR_STARTS,
    _rid,
    _unquoted,
    request_phase,
)
from exporter.ingest.grammar.values import _first_number, parse_server_args, snake, value_of

_MALFORMED = Event("malformed", {})


def message(msg: str, time_only: bool, batch):
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
            return batch(msg, time_only)
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
    if msg.startswith(REQUEST_ERROR_STARTS):     # before the phrases below: its text may quote anything
        return _request_error(msg)
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

def _request_error(msg: str) -> Event:
    """A request that failed while the server kept serving (patterns.REQUEST_ERRORS). `message` is the
    record's first line (the error as SGLang printed it: it may quote the request, so it is only ever shown,
    never parsed); `disconnected`: the client went away and SGLang aborted the request."""
    first = msg.split("\n", 1)[0]
    disconnected = DISCONNECTED in first or first.startswith("[http_server] Client disconnected")
    return Event("request_error", {"message": first[:300], "disconnected": disconnected})


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
    fields: dict = {"phase": phase, "source": "cuda"}
    m = _TRIED.search(text)
    if m:
        fields["requested_bytes"] = int(float(m.group(1)) * _UNIT_BYTES[m.group(2)])
    return fields


class _Pending:
    """A multi-line record being assembled (traceback / KV-pool OOM message)."""
    __slots__ = ("event", "lines", "funcs", "oom_line", "oom_text", "last", "exc", "prefix")

    def __init__(self, event: Event, prefix: str = ""):
        self.event = event
        self.prefix = prefix   # what stood before the record's message: a wrapper's part of it repeats on every
                               # line of the traceback ("myapp | worker-3 | RuntimeError: ...")
        self.lines = 0
        self.funcs: list[str] = []
        self.oom_line = 0
        self.oom_text = ""
        self.last = ""
        self.exc = ""        # the last line that starts an exception ("RuntimeError: ..."): the cause


_WRAPPER_END = frozenset(" \t|:]>")


def _unwrapped(prefix: str, text: str) -> str:
    """A continuation line without the wrapper it shares with its record's line: the two lines' common start,
    when it ends at a separator (a wrapper stamping each line with its own time shares only part of it, and
    keeps it)."""
    k = 0
    for a, b in zip(prefix, text):
        if a != b:
            break
        k += 1
    return text[k:] if k and text[k - 1] in _WRAPPER_END else text


def continue_record(p: _Pending, text: str, lineno: int) -> None:
    """A continuation line of a pending multi-line record: the OOM's numbers, a frame's function, the cause."""
    ev = p.event
    if p.prefix:
        text = _unwrapped(p.prefix, text)
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
