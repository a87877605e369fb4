"""The parser's block path (grammar/block.py) against the generic path, on the lines its shortcuts are for."""
from __future__ import annotations

import json

from helpers import assert_block_path_is_generic


def test_block_path_shortcuts_give_the_generic_paths_answers():
    """The block path's shortcuts (no skeleton for a line longer than every learned one, the last skeleton's
    entry kept, one conversion per second and fraction, rows counted per run) change nothing: the same
    lines, in blocks that end inside runs, give the generic path's events and counts."""
    def dec(s, tp, usage, frac=""):
        return (f"[2025-08-11 17:17:0{s}{frac} TP{tp}] Decode batch, #running-req: 12, #token: 1000, "
                f"token usage: {usage}, cuda graph: True, gen throughput (token/s): 100.25, #queue-req: 0")

    def req(s, pad):
        return f"[2025-08-11 17:17:0{s}] Receive: obj=GenerateReqInput({'x' * pad}rid='cc22af58be65', text='hi')"

    lines = []
    for s in range(4):
        lines += [dec(s, tp, "0.50") for tp in range(4)]          # one skeleton, four ranks
        lines += [dec(s, 0, "2.50"), dec(s, 1, "0.75")]          # out of range, then the same skeleton in range
        lines += [req(s, 100), req(s, 450), req(s, 700)]          # shorter and longer than any batch line
        lines += [dec(s, 2, "0.25", ".123"), dec(s, 3, "0.25", ".123"), dec(s, 2, "0.25", ".4")]
        lines += [dec(3 - s, 0, "0.50", ".123")]                 # back to an earlier second
        lines += ["", "[2025-08-11 17:17:09] INFO:     127.0.0.1:4000 - \"GET /metrics HTTP/1.1\" 200 OK"]
    lines *= 2
    for block in (1, 3, 7, len(lines)):
        fast, _ = assert_block_path_is_generic(lines, block, "sc")
        assert fast.unparsed["value_out_of_range"] == 8
    assert fast._layout_len < 300 and len(lines[2 * 0 + 6 + 2]) > 600   # the longest request log had no skeleton


def test_json_request_logs_are_rows_known_by_their_head_up_to_the_event():
    """--log-requests-format json lines (0.5.8+: behind SGLang's "[time] " prefix) are request logs by their event,
    the key SGLang writes after the timestamp: the block path reads them as rows by their head up to it, and
    gives the generic path's Events (the timestamp with and without microseconds, the OpenAI variant); a line
    whose event is another one is no request log, whatever its user text says."""
    def dec(s):
        return (f"[2025-08-11 17:17:0{s} TP0] Decode batch, #running-req: 12, #token: 1000, token usage: 0.50, "
                "cuda graph: True, gen throughput (token/s): 100.25, #queue-req: 0")

    def req(s, event, text="hi", micro=".587228"):
        obj = json.dumps({"text": text, "sampling_params": {"max_new_tokens": 8}})
        return (f'[2025-08-11 17:17:0{s}] {{"timestamp": "2025-08-11T17:17:0{s}{micro}", "event": "{event}", '
                f'"rid": "cc22af58be6{s}", "obj": {obj}}}')

    lines = []
    for s in range(4):
        lines += [dec(s), req(s, "request.received"), req(s, "request.finished", "done"),
                  req(s, "request.received.openai"), req(s, "request.received", micro=""),
                  req(s, "request.aborted", 'say "event": "request.received"'), dec(s)]
    for block in (1, 3, len(lines)):
        fast, _ = assert_block_path_is_generic(lines, block, "json")
        assert fast.kinds["request_log"] == 4 * 4          # all but the aborted ones
    fast.feed_items(lines, 1)       # (a block read before the first batch shape is learned learns no head)
    rows = [item for item in fast.feed_items(lines, 1) if item.__class__ is tuple]
    assert sum(row[0].kind == "request_log" for row in rows) == 4 * 4


def test_request_logs_of_every_form_are_rows_behind_either_prefix():
    """Text request logs ("Receive: ", "Finish: ", 0.5.8+'s "Receive OpenAI: ", 0.3.0-0.4.0's "in=Name(") and
    JSON ones, behind SGLang's prefix and behind a custom logging config's: each form's head is learned, so the
    second sight of it is a row, and the rows give the generic path's Events."""
    def dec(s, custom):
        head = f"2025-08-11 17:17:0{s} INFO 7 [TP0 scheduler.py:1] " if custom else f"[2025-08-11 17:17:0{s} TP0] "
        return (head + "Decode batch, #running-req: 12, #token: 1000, token usage: 0.50, cuda graph: True, "
                "gen throughput (token/s): 100.25, #queue-req: 0")

    def reqs(s, custom):
        head = f"2025-08-11 17:17:0{s} INFO 7 [tokenizer_manager.py:1] " if custom else f"[2025-08-11 17:17:0{s}] "
        obj = json.dumps({"text": "hi"})
        return [head + f"Receive: obj=GenerateReqInput(rid='a{s}', text='hi')",
                head + f"Finish: obj=GenerateReqInput(rid='a{s}'), out={{'text': 'yo'}}",
                head + f"Receive OpenAI: obj=ChatCompletionRequest(rid='b{s}', messages=[])",
                head + f"in=GenerateReqInput(rid='c{s}', text='hi'), out={{'text': 'yo'}}",
                head + f'{{"timestamp": "2025-08-11T17:17:0{s}.5", "event": "request.received", "rid": "d{s}", '
                       f'"obj": {obj}}}']

    for custom in (False, True):
        lines = []
        for s in range(4):
            lines += [dec(s, custom), *reqs(s, custom), dec(s, custom)]
        for block in (1, 4, len(lines)):
            fast, _ = assert_block_path_is_generic(lines, block, "forms")
            assert fast.kinds["request_log"] == 4 * 5, custom
        fast.feed_items(lines, 1)
        rows = [item for item in fast.feed_items(lines, 1) if item.__class__ is tuple]
        assert sum(row[0].kind == "request_log" for row in rows) == 4 * 5, custom
