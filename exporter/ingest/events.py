"""The typed records the SGLang grammar emits: one Event per recognised log record.

Kinds and field names are a public contract (docs/log-events.md); add, never rename.
"""
from __future__ import annotations

import json
import json.encoder
from dataclasses import dataclass, field

# Every kind the parser can emit. Order is documentation order.
KINDS = (
    "prefill_batch",        # "Prefill batch. ..." / "Prefill batch, ..." / "Prefill batch [N], ..."
    "decode_batch",         # "Decode batch. ..." and its later forms
    "retraction",           # "KV cache pool is full. Retract requests." / old "Decode out of memory happened."
    "memory_config",        # "max_total_num_tokens=..., available_gpu_mem=... GB" (the capacity line)
    "server_args",          # "server_args=ServerArgs(...)" or "server_args={...}"
    "server_ready",         # "The server is fired up and ready to roll!"
    "load_weight",          # "Load weight begin/end. ..."
    "memory_pool",          # "Memory pool end. avail mem=... GB"
    "kv_cache_allocated",   # "KV Cache is allocated. ..."
    "graph_capture",        # "Capture cuda graph begin/end ..." (all later spellings)
    "oom",                  # CUDA OOM, "Prefill/Decode out of memory. Try to lower your batch size.", ...
    "watchdog_timeout",     # "Watchdog timeout (...)" / "Scheduler watchdog timeout (...)"
    "scheduler_exception",  # "Scheduler hit an exception: Traceback ..." and the other "<X> hit an exception"
    "sigquit",              # "Received sigquit from a child process..." / "SIGQUIT received. ..."
    "health_check_failed",  # "Health check failed. Server couldn't get a response from detokenizer ..."
    "init_failed",          # "Initialization failed. warmup error: ..."
    "subprocess_crash",     # "Subprocess X (pid=N) crashed with exit code N."
    "nccl_timeout",         # PyTorch ProcessGroupNCCL watchdog caught collective operation timeout
    "request_error",        # "Error in request: ..." and the other handled errors of one request (the server
                            # kept serving; a traceback after it is part of it), client disconnects included
    "gc_warning",           # "LONG GARBAGE COLLECTION DETECTED | ..."
    "http_access",          # uvicorn access line: INFO:     127.0.0.1:1234 - "GET /metrics HTTP/1.1" 200 OK
    "request_log",          # --log-requests "Receive: obj=..." / "Finish: obj=..."
)

RANK_KEYS = ("dp", "tp", "pp", "ep", "attn_cp", "moe_dp")
EMPTY_RANK: dict[str, int | None] = {k: None for k in RANK_KEYS}

# Reasons a line was not turned into an Event (the `reason` label of the unparsed counter).
UNPARSED_REASONS = (
    "no_sglang_prefix",   # no "[time ...]" record start anywhere in the line and no known bare message
    "unknown_message",    # an SGLang record whose message we do not know
    "malformed",          # a known message whose fields did not parse
    "value_out_of_range",  # a known message with a number outside its field's range (catalog.FIELD_RANGES)
    "binary",             # control characters / NUL bytes: not text
    "empty",              # blank line
)


@dataclass(slots=True)
class Event:
    kind: str
    fields: dict
    time: str | None = None          # ISO-8601 as the log printed it (no zone), or the container's time
    ts: float | None = None          # seconds since the epoch (log time read as UTC); None when unknown
    rank: dict = field(default_factory=lambda: dict(EMPTY_RANK))
    source: str = ""
    line: int = 0
    prefix: dict | None = None       # level and pid, when a custom prefix printed them ("Custom log formats")

    def to_json(self) -> dict:
        out = {"source": self.source, "line": self.line, "kind": self.kind, "time": self.time,
               "rank": self.rank, "fields": self.fields}
        if self.prefix is not None:
            out["prefix"] = self.prefix
        return out


# A Row is a line that a parser's learned layout read (grammar/shapes.py, grammar/layouts.py),
# before anyone asked for its Event: the tuple (layout, text, ts, time, rank, line), `text` being the line.
# `Parser.feed_items` returns them among Events; `as_event` turns one into the Event the line stands for,
# `layout.kind` is that Event's kind and `layout.fields_json(text)` its fields as JSON. Most rows are batch
# lines (`layout.batch`): `layout.values(text)` gives the five numbers the engine reads of every batch line,
# (queue_req, running_req, token usage, gen_throughput, cuda_graph), each None when the line does not print it
# (throughput and graph: decode lines only). The others are access lines and request logs, which the engine
# only counts.


def as_event(item) -> Event:
    """An Event as it is; a Row as the Event of its line."""
    return item if item.__class__ is not tuple else item[0].event(*item[1:])


class JsonLines:
    """Event -> its JSON Lines record (docs/log-events.md), byte for byte what
    ``json.dumps(ev.to_json(), separators=(",", ":"), ensure_ascii=False, default=str)`` gives, with the parts
    that repeat from event to event (source, rank, time) encoded once and reused."""

    def __init__(self):
        self.encode = compact_encoder()
        self._sources: dict[str, str] = {}
        self._ranks: dict[int, tuple[dict, str]] = {}     # id(rank) -> (that rank dict, its JSON)
        self._time: str | None = None
        self._time_json = "null"

    def __call__(self, ev: Event) -> str:
        src = self._sources.get(ev.source)
        if src is None:
            src = self._sources[ev.source] = self.encode(ev.source)
        cached = self._ranks.get(id(ev.rank))
        if cached is None or cached[0] is not ev.rank:     # the entry keeps the dict alive: ids stay unique
            if len(self._ranks) > 4096:
                self._ranks.clear()
            cached = self._ranks[id(ev.rank)] = (ev.rank, self.encode(ev.rank))
        if ev.time != self._time:
            self._time, self._time_json = ev.time, self.encode(ev.time)
        tail = "}" if ev.prefix is None else f',"prefix":{self.encode(ev.prefix)}}}'
        return (f'{{"source":{src},"line":{ev.line},"kind":"{ev.kind}","time":{self._time_json},'
                f'"rank":{cached[1]},"fields":{self.encode(ev.fields)}{tail}')

    def row(self, row: tuple) -> str:
        """A Row -> what __call__ gives for its Event, without building the Event."""
        shape, text, _, time, rank, line = row
        src = self._sources.get(shape.source)
        if src is None:
            src = self._sources[shape.source] = self.encode(shape.source)
        cached = self._ranks.get(id(rank))
        if cached is None or cached[0] is not rank:
            if len(self._ranks) > 4096:
                self._ranks.clear()
            cached = self._ranks[id(rank)] = (rank, self.encode(rank))
        if time != self._time:
            self._time, self._time_json = time, self.encode(time)
        prefix = shape.prefix_json      # a custom prefix's level and pid (grammar/layouts.py, "Custom prefixes")
        if prefix is None:
            return (f'{{"source":{src},"line":{line},"kind":"{shape.kind}","time":{self._time_json},'
                    f'"rank":{cached[1]},"fields":{shape.fields_json(text)}}}')
        return (f'{{"source":{src},"line":{line},"kind":"{shape.kind}","time":{self._time_json},'
                f'"rank":{cached[1]},"fields":{shape.fields_json(text)},"prefix":{prefix(text)}}}')


def compact_encoder():
    """json.dumps(o, separators=(",", ":"), ensure_ascii=False, default=str) as one reusable C encoder:
    JSONEncoder.encode builds a new one per call, which costs more than encoding a small dict."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:        # no C accelerator (other Pythons): the plain way
        return json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode
    encode_one = make(None, str, json.encoder.encode_basestring, None, ":", ",", False, False, True)
    join = "".join
    return lambda o: join(encode_one(o, 0))
