"""Custom log formats (docs/log-events.md, "Custom log formats"): a record is found by its message wherever it
sits in the line, and time, rank, level and pid come from whatever prefix stands before it. Golden fixtures of
every layout (tests/fixtures/layouts/, each says where its layout comes from), the property that any known
message behind any printable prefix is read alike, and that the same messages inside request text never are.

Regenerate the goldens after a deliberate change: `scripts/refresh-parser-fixtures` (from fixture_files())."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.ingest.grammar import _ANCHOR, Parser, request_marked
from exporter.ingest.pipeline import SourceParser, iter_file_events, layouts_read

ROOT = Path(__file__).resolve().parent.parent
LAYOUTS = ROOT / "tests" / "fixtures" / "layouts"
FIXTURES = sorted(LAYOUTS.glob("*.log"))


def _events(path: Path, stats: SourceParser | None = None) -> list[dict]:
    return [e.to_json() | {"source": path.name} for e in iter_file_events(str(path), stats=stats)]


def fixture_files() -> dict[Path, str]:
    """Each layout fixture's golden events, as the parser reads them now (scripts/refresh-parser-fixtures): review
    the diff after a deliberate change."""
    return {path.with_suffix(".expected.json"): json.dumps(_events(path), indent=1) + "\n" for path in FIXTURES}


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_layout_fixture_golden(path):
    want = json.loads(path.with_suffix(".expected.json").read_text())
    assert _events(path) == want


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_every_record_line_of_a_fixture_is_read(path):
    """Each fixture holds only records (and a comment line, a traceback's body): all of them are read."""
    sp = SourceParser(str(path))
    _events(path, sp)
    skipped = sp.parser.unparsed.get("no_sglang_prefix", 0)
    comment = 1 if path.read_text().startswith("#") else 0
    assert skipped == comment and set(sp.parser.unparsed) <= {"no_sglang_prefix"}, sp.parser.unparsed


def test_the_same_records_as_sglang_prints_them():
    """A layout's records carry the same kinds and fields as SGLang's own prefix gives (only the prefix
    differs): the ray and compose fixtures wrap SGLang's prefix, logging_config_level_pid replaces it."""
    own = Parser()
    line = ("[2025-06-01 10:00:00 DP0 TP0 EP0] Decode batch, #running-req: 12, #token: 4096, token usage: 0.31, "
            "cuda graph: True, gen throughput (token/s): 812.40, #queue-req: 3")
    want = own.feed(line)[0]
    got = _events(LAYOUTS / "logging_config_level_pid.log")[0]
    assert (got["kind"], got["fields"], got["rank"], got["time"]) == (want.kind, want.fields, want.rank, want.time)
    assert got["prefix"] == {"level": "INFO", "pid": 4242}


def test_sglang_time_wins_over_the_collectors():
    times = [e["time"] for e in _events(LAYOUTS / "outer_collector.log")]
    assert times == ["2025-06-01T10:00:00", "2025-06-01T10:00:01"]


def test_time_only_lines_carry_the_date_across_midnight():
    times = [e["time"] for e in _events(LAYOUTS / "time_only.log")]
    assert times == ["2025-06-01T23:59:59", "2025-06-01T23:59:59", "2025-06-02T00:00:01"]


def test_speculative_interval_is_numbers():
    f = _events(LAYOUTS / "speculative.log")[0]["fields"]
    assert (f["est_uncap_acc_len"], f["est_uncap_acc_len_low"], f["est_uncap_acc_len_high"]) == (3.1, 2.95, 3.25)
    assert f["spec_accept_length"] == 3.05 and f["queue_req"] == 0


def test_two_layouts_in_one_file_are_read_whole():
    """A restart under a new logging config: SGLang's own layout, then a custom one; every record is read and
    the report names both layouts."""
    path = LAYOUTS / "mixed_restart.log"
    sp = SourceParser(str(path))
    kinds = [e["kind"] for e in _events(path, sp)]
    assert kinds == ["decode_batch", "server_ready", "memory_config", "decode_batch", "retraction"]
    lay = layouts_read([sp])
    assert lay["layouts"] == {"[<time> <rank>] (SGLang's own)": 2, "<time> <level> [<file>:<n>] ": 3}
    assert lay["share_read"] == round(5 / 6, 4)     # the comment line is not a record


def test_request_text_behind_a_custom_layout_is_no_record():
    kinds = [e["kind"] for e in _events(LAYOUTS / "request_text.log")]
    assert kinds == ["request_log", "decode_batch"]


def test_a_generated_log_reads_the_same_behind_a_custom_layout(tmp_path):
    """bench/genlog.py's log (every record kind the bench has, --log-requests, crashes, restarts) and the same
    lines behind a custom logging config's prefix: the same records, fields, ranks and times (learned shapes
    serve the custom layout's batch lines too)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import genlog
    own, custom = tmp_path / "own.log", tmp_path / "custom.log"
    genlog.write(6000, str(own), seed=3)
    custom.write_text(genlog.custom_layout(own.read_text()))

    def records(path):
        return [(e.line, e.kind, e.fields, e.rank, e.ts) for e in iter_file_events(str(path))]
    want = records(own)
    assert len(want) > 5900
    assert records(custom) == want
    sp = SourceParser(str(custom))
    list(iter_file_events(str(custom), stats=sp))
    assert sum(sp.parser.layouts.values()) > 0.99 * len(want)     # (bare traceback lines: no prefix)


@pytest.mark.parametrize("fmt", ["0.3", "0.4.7", "0.5.23"])
@pytest.mark.parametrize("wrapper", ["myapp | worker-3 | ", "\x1b[0m10:00:01 app> "])
def test_a_traceback_wrapped_line_by_line_names_its_cause_without_the_wrapper(tmp_path, fmt, wrapper):
    """A logging set-up that stamps every line, the traceback's too, once put its stamp into the crash's cause
    ("myapp | worker-3 | RuntimeError: NCCL error ..."); the cause reads as SGLang wrote it."""
    from exporter.simulate import Simulator, load_scenario
    own, wrapped = tmp_path / "own.log", tmp_path / "wrapped.log"
    sc = load_scenario("server_crash")
    Simulator(sc, seed=0, fmt=fmt).write_log(own)
    wrapped.write_text("".join(wrapper + line for line in own.read_text().splitlines(keepends=True)))

    def crashes(path):
        return [e.fields["message"] for e in iter_file_events(str(path))
                if e.kind in ("scheduler_exception", "traceback")]
    want = crashes(own)
    assert want and want[-1].startswith("RuntimeError: NCCL error")
    assert crashes(wrapped) == want


def test_analyze_and_html_name_the_layouts_and_the_share_read():
    from exporter.config import Config
    from exporter.report.analyze import analyze
    from exporter.report.html import render_html
    from exporter.report.text import render_text
    rep = analyze([str(LAYOUTS / "mixed_restart.log")], Config(), progress=False)
    assert rep["layouts"]["layouts"] == {"[<time> <rank>] (SGLang's own)": 2, "<time> <level> [<file>:<n>] ": 3}
    assert rep["layouts"]["clock"] == "log" and rep["layouts"]["share_read"] == round(5 / 6, 4)
    text = render_text(rep)
    assert "83.3% of non-blank lines read as records (only partly understood)" in text
    assert "<time> <level> [<file>:<n>]" in text
    page = render_html(rep)
    assert "Layouts learned" in page and "&lt;time&gt; &lt;level&gt; [&lt;file&gt;:&lt;n&gt;]" in page
    bare = analyze([str(LAYOUTS / "bare.log")], Config(), progress=False)
    assert bare["layouts"]["clock"] == "file order" and bare["layouts"]["untimed"] == 5
    assert "no line has a time: records are taken in file order" in render_text(bare)


# -------------------------------------------------------------------------------- properties
MESSAGES = [
    "Decode batch, #running-req: 7, #token: 100, token usage: 0.10, cuda graph: True, gen throughput (token/s): "
    "5.00, #queue-req: 42",
    "Decode batch. #running-req: 8, #token: 2048, token usage: 0.12, gen throughput (token/s): 401.55, #queue-req: 1",
    "Prefill batch, #new-seq: 2, #new-token: 1024, #cached-token: 128, token usage: 0.30, #running-req: 10, "
    "#queue-req: 4",
    "KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_token_ratio: 0.7000 -> 0.8500",
    "max_total_num_tokens=130000, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=2048, "
    "context_len=131072, available_gpu_mem=6.50 GB",
    "The server is fired up and ready to roll!",
    "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=60.12 GB, mem usage=15.10 GB.",
    "Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
    "Subprocess scheduler_0 (pid=1) crashed with exit code -9.",
    "Received sigquit from a child process. It usually means the child failed.",
    "LONG GARBAGE COLLECTION DETECTED | Generation 2 | Duration: 1.25s",
]
_PRINTABLE = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FFF, blacklist_categories=("Cs", "Cc")),
                     max_size=60)


def _fields(line: str):
    p = Parser()
    evs = p.feed(line, 1) + p.flush()
    return [(e.kind, e.fields) for e in evs]


def _plain_prefix(prefix: str) -> bool:
    """A prefix a collector could print: no message of SGLang's or request-log head in it, no open quote, and
    nothing that would make the message part of a longer word."""
    return (_ANCHOR.search(prefix) is None and not request_marked(prefix) and prefix.count("'") % 2 == 0
            and prefix.count('"') % 2 == 0 and (not prefix or not (prefix[-1].isalnum() or prefix[-1] in "_.")))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(st.sampled_from(MESSAGES), _PRINTABLE)
def test_any_message_behind_any_prefix_is_read_alike(msg, prefix):
    if not _plain_prefix(prefix):
        return
    want = _fields(msg)
    assert want, msg
    assert _fields(prefix + msg) == want, prefix


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(MESSAGES), _PRINTABLE)
def test_messages_inside_request_text_are_never_events(msg, prefix):
    q = repr(prefix + msg)
    lines = [f"{prefix}Receive: obj=GenerateReqInput(text={q}, rid='r1')",
             f"2025-06-01 10:00:00 INFO 1 [TP0 tokenizer_manager.py:1] Finish: obj=GenerateReqInput(rid='r'), "
             f"out={{'text': {q}}}",
             f"Receive OpenAI: obj=ChatCompletionRequest(messages=[{{'role': 'user', 'content': {q}}}])",
             '{"timestamp": "2025-06-01T10:00:00", "event": "request.received", "obj": {"text": '
             + json.dumps(prefix + msg) + "}}"]
    for line in lines:
        assert all(kind == "request_log" for kind, _ in _fields(line)), line


def test_not_an_sglang_log_says_what_it_saw(tmp_path):
    log = tmp_path / "other.log"
    log.write_text('Traceback (most recent call\n  File "x.py", line 1\nNCCL INFO ring 0\n100%|####| 3/3 [00:01<00:00, 2.9it/s]\n')
    proc = subprocess.run([sys.executable, "-m", "exporter", "parse", str(log)], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    assert proc.returncode == 1 and "not an SGLang log?" in proc.stderr and "traceback" in proc.stderr, proc.stderr


def test_a_log_with_foreign_lines_is_read_and_stats_say_why(tmp_path):
    log = tmp_path / "mixed.log"
    log.write_text((LAYOUTS / "logging_config_brackets.log").read_text()
                   + 'NCCL INFO ring 0\n  File "x.py", line 1, in f\nUserWarning: something\n')
    proc = subprocess.run([sys.executable, "-m", "exporter", "parse", "--stats", str(log)], capture_output=True,
                          text=True, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stderr)
    assert stats["records"] == 5 and stats["skipped"] == {"nccl": 1, "other": 1, "traceback": 1, "warning": 1}
    assert stats["layouts"] == {"[<time>][<file>:<n>][<level>]: ": 5}


# The block path's custom layouts (grammar/layouts.py, "Custom prefixes"): once the generic path read a line behind
# a custom prefix, later lines of its skeleton (a request log: of its head) are rows read at fixed offsets.
_CUSTOM = "2025-06-01 10:00:0{s},{ms:03d} {level} {pid} [DP0 TP{tp} scheduler.py:1234] "
_MAIN = "2025-06-01 10:00:0{s},{ms:03d} INFO {pid} [main tokenizer_manager.py:88] "


def _custom_lines(quoted: str = "KV cache pool is full. Retract requests. #retracted_reqs: 3") -> list[str]:
    lines = []
    for i in range(8):
        batch = _CUSTOM.format(s=i, ms=7 * i, level="INFO", pid=4000 + i, tp=i % 4)
        lines += [batch + f"Decode batch, #running-req: {10 + i}, #token: {900 + i}, token usage: 0.{40 + i}, "
                          f"cuda graph: True, gen throughput (token/s): {100 + i}.50, #queue-req: {i}",
                  _MAIN.format(s=i, ms=i, pid=5000 + i) + f'INFO:     127.0.0.1:4{i}123 - "GET /metrics HTTP/1.1" '
                                                          f"{200 if i % 2 else 503} OK",
                  _MAIN.format(s=i, ms=i, pid=5000 + i) + f"Receive: obj=GenerateReqInput(rid='a{i}f', "
                                                          f"text={quoted!r})",
                  _MAIN.format(s=i, ms=i, pid=5000 + i) + f"Finish: obj=GenerateReqInput(rid='a{i}f'), "
                                                          f"out={{'text': {quoted!r}}}"]
    lines.append(_CUSTOM.format(s=9, ms=1, level="WARNING", pid=1, tp=0) + "KV cache pool is full. Retract requests. "
                 "#retracted_reqs: 2, #new_token_ratio: 0.5000 -> 0.6000")
    lines.append(_CUSTOM.format(s=9, ms=2, level="INFO", pid=1, tp=0) + "Decode batch, #running-req: 1, #token: 9, "
                 "token usage: 7.50, cuda graph: True, gen throughput (token/s): 1.50, #queue-req: 0")  # out of range
    return lines


def test_custom_layout_lines_become_rows_read_as_the_generic_path_reads_them():
    from exporter.ingest.events import JsonLines, as_event
    lines = _custom_lines()
    fast, generic = Parser("c"), Parser("c")
    generic.learning = False
    items = fast.feed_items(lines[:4], 1) + fast.feed_items(lines[4:], 5) + fast.flush()
    want = [ev for n, text in enumerate(lines, 1) for ev in generic.feed(text, n)] + generic.flush()
    rows = [item for item in items if item.__class__ is tuple]
    # the first block has no learned shape yet; the second one's first four lines teach the four layouts
    assert len(rows) == 4 * 6
    assert {r[0].kind for r in rows} == {"decode_batch", "http_access", "request_log"}
    got = [as_event(item) for item in items]
    assert [(e.kind, e.time, e.ts, e.rank, e.line, e.fields, e.prefix) for e in got] == \
        [(e.kind, e.time, e.ts, e.rank, e.line, e.fields, e.prefix) for e in want]
    assert [e.kind for e in got].count("retraction") == 1 and fast.unparsed["value_out_of_range"] == 1
    assert got[4].prefix == {"level": "INFO", "pid": 4001} and got[4].rank["tp"] == 1
    assert got[4].time == "2025-06-01T10:00:01.007" and got[5].fields["status"] == 200
    write = JsonLines()
    for item in rows:
        assert write.row(item) == JsonLines()(as_event(item))
    assert fast.layouts == generic.layouts and fast.kinds == generic.kinds and fast.recognised == generic.recognised


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(MESSAGES), _PRINTABLE)
def test_messages_inside_request_text_behind_a_learned_custom_layout_are_never_events(msg, prefix):
    """The request logs of a learned custom layout are read by their head: whatever their text quotes, they
    stay request logs (and the same lines read by the generic path say the same)."""
    lines = _custom_lines(prefix + msg)
    p = Parser("inj")
    items = p.feed_items(lines[:4], 1) + p.feed_items(lines[4:-2], 5)
    kinds = [item[0].kind if item.__class__ is tuple else item.kind for item in items]
    assert kinds == ["decode_batch", "http_access", "request_log", "request_log"] * 8

