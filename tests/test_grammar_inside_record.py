"""Inside a pending record (a traceback, a KV-pool OOM's message) or a request's text, a line with neither a
time nor uvicorn's access line at its start goes on the record without a search for a message
(anchored.inside_record). The shortcut must be exact: the parser gives what it gives when every such line is
searched, on lines built to start records where they can and to look like records where they cannot."""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers import assert_same_event
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.ingest.grammar import Parser, anchored

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "tests" / "fixtures" / "layouts").glob("*.log")) + \
    sorted((ROOT / "tests" / "fixtures" / "failures").glob("*.log"))

DECODE = ("Decode batch, #running-req: 12, #token: 1000, token usage: 0.50, cuda graph: True, "
          "gen throughput (token/s): 100.25, #queue-req: 0")
# record starts (a traceback, a KV-pool OOM, a handled request error, a request log) behind SGLang's prefix,
# a custom one and none; lines that go on them; and lines that look like records inside one: a message
# without a time before it, a clock inside the text, an undated access line, a bare CUDA OOM
LINES = [
    f"[2025-08-11 17:17:03 TP0] {DECODE}",
    "[2025-08-11 17:17:03 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    "[2025-08-11 17:17:04] Error in request: 'Requested token count exceeds the model's maximum context'",
    "[2025-08-11 17:17:05 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
    "#new_token_ratio: 0.7000 -> 0.8000",
    "[2025-08-11 17:17:06 TP0] Prefill out of memory. Try to lower your batch size.",
    "[2025-08-11 17:17:07] Receive: obj=GenerateReqInput(rid='ab12', text='a prompt with\\nlines')",
    "2025-08-11 17:17:08,123 INFO 4242 [TP0 scheduler.py:1234] Scheduler hit an exception: Traceback",
    "17:17:09 INFO [TP0] KV cache pool is full. Retract requests.",
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", line 2650, in run_scheduler',
    "    raise ValueError(",
    "ValueError: Requested token count exceeds the model's maximum context length",
    "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
    "CUDA out of memory",
    "Decode batch, #running-req: 1, #queue-req: 0",
    "KV cache pool is full. Retract requests.",
    "worker | Decode out of memory happened",
    "the job ran from 17:17:03 to 17:18:04: KV cache pool is full. Retract requests.",
    "at 17:17:03 Scheduler hit an exception: boom",
    'INFO:     127.0.0.1:45078 - "POST /generate HTTP/1.1" 500 Internal Server Error',
    '  INFO:     127.0.0.1:45078 - "POST /generate HTTP/1.1" 200 OK',
    "pod-1 | [2025-08-11 17:17:10 TP0] " + DECODE,
    "pod-1 | Traceback (most recent call last):",
    "The server is fired up and ready to roll!",
    "",
    "   ",
    "a prompt's next line: 'KV cache pool is full' and \"Load weight end\"",
]


def _parse(lines: list[str], shortcut: bool) -> tuple:
    with pytest.MonkeyPatch.context() as m:
        if not shortcut:
            m.setattr(anchored, "inside_record", lambda p, text: False)
        p = Parser("src")
        events = p.feed_lines(lines, 1) + p.flush()
        # the generic path line by line, too (feed), where a container time comes with each line
        q = Parser("src")
        fed = [ev for n, text in enumerate(lines, 1) for ev in q.feed(text, n, "2025-08-12T09:00:00.5Z")]
        fed += q.flush()
    return events, fed, p.unparsed, p.skipped, q.unparsed, q.skipped


def _assert_exact(lines: list[str]) -> None:
    fast, searched = _parse(lines, True), _parse(lines, False)
    for got, want in ((fast[0], searched[0]), (fast[1], searched[1])):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            assert_same_event(a, b)
    assert fast[2:] == searched[2:]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(LINES), min_size=1, max_size=40))
def test_the_shortcut_gives_what_the_search_gives(lines):
    _assert_exact(lines)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_the_shortcut_gives_what_the_search_gives_on_the_fixtures(path):
    _assert_exact(path.read_text(encoding="utf-8", errors="replace").splitlines())


def test_a_traceback_goes_on_its_record_and_a_dated_line_ends_it():
    """What the shortcut stands on: inside a record in a file with prefixes, a line without a time is a line
    of it, even one holding a message, and a line with a time starts the next record."""
    p = Parser("src")
    lines = ["[2025-08-11 17:17:03 TP0] Scheduler hit an exception: Traceback (most recent call last):",
             '  File "/x/scheduler.py", line 3, in event_loop_overlap',
             "KV cache pool is full. Retract requests.",
             "RuntimeError: CUDA error: an illegal memory access was encountered",
             "[2025-08-11 17:17:04 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
             "#new_token_ratio: 0.7000 -> 0.8000"]
    assert anchored.inside_record(p, lines[1]) is False      # no record pending yet
    events = p.feed_lines(lines, 1) + p.flush()
    assert [ev.kind for ev in events] == ["scheduler_exception", "retraction"]
    assert events[0].fields["message"].startswith("RuntimeError: CUDA error")
    assert events[1].line == 5
