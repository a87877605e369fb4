"""The parser's block path (grammar/block.py) against the generic path, on the lines its shortcuts are for."""
from __future__ import annotations

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
