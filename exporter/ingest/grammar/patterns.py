"""The grammar's shared patterns: SGLang's record prefix, the messages a record is anchored on, the printed
batch keys, and the request-log markers that keep user text from becoming records."""
from __future__ import annotations

import re

GIB = 1024 ** 3

# "[2025-08-11 17:17:03.123 DP0 TP1] " / "[17:17:03 TP0] " / "[2025-08-11 17:17:03] "
# (ASCII digits only: \d would also accept other scripts' digits.) The rank tags are SGLang's scheduler prefix;
# " encode_server" / " encode_dp_worker[N]" are the encoder-disaggregation servers' (0.5.16+).
# a prefix's time of day; anchored.inside_record looks for it too (a line without one starts no record)
CLOCK = r"[0-9]{2}:[0-9]{2}:[0-9]{2}"
_PREFIX = re.compile(
    r"\[(?:([0-9]{4}-[0-9]{2}-[0-9]{2}) )?(" + CLOCK + r")(?:[.,]([0-9]{1,6}))?"
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
# A --log-requests-format json line's head, up to the event that makes it a request log (_JSON_REQUEST's first
# match: the keys SGLang writes first, before any user text)
_JSON_REQUEST_HEAD = re.compile(r'\{"timestamp": "[^"\\]{1,40}", "event": ?"request\.(?:received|finished)')
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
    r"(?<![0-9])(?:([0-9]{4}-[0-9]{2}-[0-9]{2})[ T])?(" + CLOCK + r")(?:[.,]([0-9]{1,9}))?"
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


_RECEIVE_WORDS = ("Receive: ", "Receive OpenAI: ")     # a text request log's first words (the second: 0.5.8+)
_FINISH_WORD = "Finish: "
REQUEST_WORDS = (*_RECEIVE_WORDS, _FINISH_WORD)


def request_phase(msg: str) -> str | None:
    """"receive" / "finish" when an SGLang message (what follows its prefix) is a request log, else None."""
    c = msg[:1]
    if c == "R":
        if msg.startswith(_RECEIVE_WORDS):
            return "receive"
    elif c == "F":
        if msg.startswith(_FINISH_WORD):
            return "finish"
    elif c == "i":
        if _IN_OUT.match(msg):
            return "finish"
    elif c == "{":
        m = _JSON_REQUEST.search(msg)
        if m:
            return "receive" if m.group(1) == "received" else "finish"
    return None


def request_decided(text: str, at: int, words: tuple = REQUEST_WORDS) -> int | None:
    """Where what makes the message at `at` a request log (request_phase) ends: one of `words`, `in=Name(`
    (0.3.0-0.4.0) or, --log-requests-format json, the event; None when it is none of them. A request log's
    layout is keyed by its head up to here at least (grammar/block.py)."""
    for word in words:
        if text.startswith(word, at):
            return at + len(word)
    m = _IN_OUT.match(text, at) or _JSON_REQUEST_HEAD.match(text, at)
    return None if m is None else m.end()


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



def _wrapping(text: str, m) -> bool:
    """Whether the SGLang record `m` found inside `text` (not at its start) is one: what precedes it is a
    foreign prefix (Ray, docker compose, syslog, Slurm, kubectl --prefix), not quoted text, and the line is not
    a request log quoting one (its marker may come before or after the quote: JSON keys have no order)."""
    start = m.start()
    if not _unquoted(text, start):
        return False
    return not request_marked(text) or request_phase(text[m.end():m.end() + 4000]) is not None
_MULTILINE = frozenset({"scheduler_exception", "oom", "request_error"})

# SGLang's handled request errors: the HTTP server or an OpenAI-compatible handler caught an exception of one
# request, answered it with an error status and kept serving. Some log it with `logger.exception`, so a
# traceback without prefix follows: it belongs to this record (a request error), never a crash.
# (message start, where it is logged, releases)
REQUEST_ERRORS = (
    ("Error in request: ", "openai/serving_base.py, logger.exception, 500 (0.4.9+)"),
    ("[http_server] Error: ", "http_server.py /generate, a ValueError, 400 (0.5.0+)"),
    ("[http_server] Client disconnected: ", "http_server.py /generate stream, client left (0.5.23)"),
    ("Error in preprocessing prompt inputs", "openai/serving_responses.py, logger.exception (0.5.0+)"),
    ("Background request failed for ", "openai/serving_responses.py, logger.exception (0.5.0+)"),
    ("Error handling VL reranker request", "openai/serving_rerank.py, logger.exception (0.5.2x)"),
    ("Error processing Anthropic request: ", "anthropic/serving.py, logger.exception (0.5.x)"),
    ("Error converting Anthropic request: ", "anthropic/serving.py, logger.exception (0.5.x)"),
    ("Error converting streaming request: ", "anthropic/serving.py, logger.exception (0.5.x)"),
    ("Error converting count_tokens request: ", "anthropic/serving.py, logger.exception (0.5.x)"),
    ("Error counting tokens: ", "anthropic/serving.py, logger.exception (0.5.x)"),
    ("Failed to open OpenAI stream: ", "anthropic/serving.py, logger.exception (0.5.x)"),
    ("OpenAI stream raised mid-flight: ", "anthropic/serving.py, logger.exception (0.5.x)"),
    ("Error in detect_and_parse: ", "function_call/*_detector.py, a tool call not parsed, some exc_info (0.4.x+)"),
    ("Error in Kimi K3 detect_and_parse: ", "function_call/kimik3_detector.py, exc_info (0.5.2x)"),
    ("Error in parse_streaming_increment: ", "function_call/*_detector.py, a streamed tool call (0.4.x+)"),
    ("Error in pythonic tool call parsing", "function_call/pythonic_detector.py, logger.exception (0.4.x+)"),
    ("Tool call parsing error: ", "openai/serving_chat.py, serving_responses.py (0.5.x)"),
    ("Reasoning parsing error: ", "openai/serving_chat.py (0.5.x)"),
    ("Error in dynamic batch processing: ", "managers/async_dynamic_batch_tokenizer.py (0.5.x)"),
    ("Error: ", "http_server.py /generate, a ValueError, 400 (0.4.x)"),
    ("Exception: ", "openai_api/adapter.py stream, logger.error (0.4.x)"),
    ("error: ", "openai_api/adapter.py batch file, logger.error with the traceback text (0.4.x)"),
    ("error in SGLang:", "openai_api/adapter.py, logger.error (0.4.x)"),
)
REQUEST_ERROR_STARTS = tuple(start for start, _ in REQUEST_ERRORS)
# the tokenizer manager's ValueError when the client went away (0.4.x-0.5.23: "(type 1)" waiting, "(type 3)"
# running); the request is aborted, so its work leaves the queue
DISCONNECTED = "Request is disconnected from the client side"


def _closed_quotes(text: str, end: int) -> bool:
    """No quoted string open at `end`: every ' and " before it is closed (a prefix may quote a name; a message
    inside a repr'd prompt or a JSON string is not one of SGLang's)."""
    return text.count("'", 0, end) % 2 == 0 and text.count('"', 0, end) % 2 == 0
