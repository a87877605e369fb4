"""Hostile input through the whole pipeline: arbitrary bytes and arbitrary numbers in every field of every line
kind we read -> a real file -> the real follower -> grammar -> state -> our exposition. Our /metrics always
answers and parses, no counter decreases, every sample is a finite number, the evaluation never raises.
And the exposition on its own: arbitrary View contents never fail a scrape (one bad family is dropped and
counted), and `promtool check metrics` accepts what is served."""
from __future__ import annotations

import math
import os
import subprocess
import tempfile
from collections import Counter

from helpers import require_tool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.catalog import METRICS, NS, SIGNALS_BY_ID
from exporter.config import Config
from exporter.engine import SignalHistory, Snapshot
from exporter.ingest.events import as_event
from exporter.ingest.grammar import Parser
from exporter.sidecar.run import Sidecar, View
from exporter.signals.advice import Recommendation
from exporter.signals.judgement import Judgement
from exporter.web.expose import SidecarCollector, families

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
T0 = 1_754_932_623.0


# -- numbers and bytes a hostile or broken writer may put anywhere ---------------------------------------------
NUMBERS = st.one_of(
    st.integers(0, 10 ** 6).map(str),
    st.integers(-10 ** 20, 10 ** 20).map(str),
    st.integers(0, 500).map(lambda n: "9" * n),                    # digits-only, 0..500 long ("" included)
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(min_value=0, max_value=3).map(lambda f: f"{f:.2f}"),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "-0", "-1", "0.5", "2.00", "1.99", "199%", "200%", "1_000",
                     "１２", "0x10", "", " "]),
)


def _line(template: str):
    """A line kind: `template` with every {} filled by an arbitrary number."""
    n = template.count("{}")
    return st.tuples(*[NUMBERS] * n).map(lambda nums: template.format(*nums))


P = "[2025-08-11 17:17:03 TP0] "
KINDS = [
    P + "Decode batch, #running-req: {}, #token: {}, token usage: {}, cuda graph: True, "
        "gen throughput (token/s): {}, #queue-req: {}",
    P + "Decode batch. #running-req: {}, #token: {}, token usage: {}, accept len: {}, accept rate: {}, "
        "cuda graph: False, gen throughput (token/s): {}, #queue-req: {}, ",
    P + "Prefill batch, #new-seq: {}, #new-token: {}, #cached-token: {}, token usage: {}, #running-req: {}, "
        "#queue-req: {}, input throughput (token/s): {}",
    P + "Prefill batch. #new-seq: {}, #new-token: {}, #cached-token: {}, cache hit rate: {}%, #running-req: {}, "
        "#queue-req: {}",
    P + "Decode batch [{}], #running-req: {}, #full token: {}, full token usage: {}, #swa token: {}, "
        "swa token usage: {}, cuda graph: True, gen throughput (token/s): {}, #queue-req: {}, ",
    P + "KV cache pool is full. Retract requests. #retracted_reqs: {}, #new_token_ratio: {} -> {}",
    P + "KV cache pool is full. Retract requests. #retracted_reqs: {}, #aborted_retracted_reqs: {}, "
        "#new_tokens_gained: {}, #new_token_ratio: {} -> {}",
    "[17:17:03 TP0] Decode out of memory happened. #retracted_reqs: {}, #new_token_ratio: {} -> {}",
    P + "max_total_num_tokens={}, chunked_prefill_size={}, max_prefill_tokens={}, max_running_requests={}, "
        "context_len={}, available_gpu_mem={} GB",
    "[2025-08-11 17:17:00] server_args=ServerArgs(model_path='m', tp_size={}, max_running_requests={}, "
    "cuda_graph_max_bs={}, mem_fraction_static={}, schedule_conservativeness={}, chunked_prefill_size={})",
    "[2025-08-11 17:17:00] server_args={{'model_path': 'm', 'max_running_requests': {}, 'cuda_graph_max_bs': {}}}",
    P + "Scheduler watchdog timeout (self.watchdog_timeout={}, self.soft=False)",
    P + "Watchdog timeout (self.watchdog_timeout={})",
    P + "Load weight begin. avail mem={} GB",
    P + "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem={} GB, mem usage={} GB.",
    P + "Memory pool end. avail mem={} GB",
    P + "KV Cache is allocated. #tokens: {}, K size: {} GB, V size: {} GB",
    P + "Capture cuda graph end. Time elapsed: {} s. avail mem={} GB. mem usage={} GB.",
    P + "LONG GARBAGE COLLECTION DETECTED | Duration: {}s",
    "[2025-08-11 17:17:03] Subprocess scheduler_0 (pid={}) crashed with exit code {}.",
    P + "Decode out of memory. Try to lower your batch size.\nTry to allocate {} tokens.\nAvailable tokens: {} "
        "(available_size=0 + evictable_size=0)",
    P + "Scheduler hit an exception: Traceback (most recent call last):\n  File \"x.py\", line 1, in run_batch\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {} GiB.",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {} MiB. GPU 0 has a total capacity of {} GiB",
    '[2025-08-11 17:17:03] INFO:     127.0.0.1:{} - "GET /metrics HTTP/1.1" {} OK',
    "[2025-08-11 17:17:03] Receive: obj=GenerateReqInput(rid='{}', text='KV cache pool is full. Retract "
    "requests. #retracted_reqs: {}')",
    "(SchedulerActor pid={}, ip=10.0.0.1) " + P + "KV cache pool is full. Retract requests. #retracted_reqs: {}",
]
LINES = st.one_of([_line(k) for k in KINDS])
RAW = st.one_of(
    LINES.map(lambda s: s.encode()),
    st.binary(max_size=300),                                        # NUL, invalid UTF-8, \r, bare \n
    st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=3), st.integers(1, 20_000)),   # long
    LINES.map(lambda s: s.encode() + b"\r"),
    LINES.map(lambda s: s.encode()[: len(s) // 2]),                 # cut short
)


def counters(text: str, state_gauges: bool = True) -> dict:
    """(name, labels) -> value of every counter sample, checking on the way that every sample is finite (and,
    with `state_gauges`, that the gauges of counts, ratios and bytes are not negative)."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            assert math.isfinite(s.value), (s.name, s.labels, s.value)
            if fam.type == "counter":
                assert s.value >= 0, (s.name, s.value)
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
            if state_gauges and s.name.startswith(f"{NS}_") and s.name.endswith(("_requests", "_ratio", "_bytes",
                                                                   "_tokens_per_second")):
                assert s.value >= 0, (s.name, s.labels, s.value)
    return out


@SETTINGS
@given(st.lists(st.lists(RAW, max_size=12), min_size=1, max_size=4))
def test_hostile_log_never_breaks_metrics_or_counters(chunks):
    """Chunks of hostile lines appended to a followed file, a poll after each: /metrics answers and parses
    every time, every sample is finite, no counter goes down, and the evaluation (sidecar.view) never raises."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sglang.log")
        open(path, "wb").close()
        now = [T0]
        sc = Sidecar(Config(log_files=(path,)), clock=lambda: now[0])
        reg = CollectorRegistry(auto_describe=False)
        collector = SidecarCollector(sc)
        reg.register(collector)
        try:
            before: dict = {}
            for chunk in chunks + [[]]:                 # a last, empty poll flushes held multi-line records
                with open(path, "ab") as f:
                    f.write(b"".join(raw + b"\n" for raw in chunk))
                sc.poll_logs_once()
                now[0] += 7
                sc.view()
                after = counters(generate_latest(reg).decode())
                for key, value in before.items():
                    assert after.get(key, value) >= value, key
                before = after
            assert not collector.errors, collector.errors       # valid state: no family had to be dropped
        finally:
            sc.shutdown()


def test_value_out_of_range_is_counted_and_not_stored(tmp_path):
    """The issue's lines: a 400-digit count, a negative count, NaN and infinity in gauges. None reaches state,
    each is counted as value_out_of_range, /metrics answers, retracted_requests_total does not move."""
    big = "9" * 400
    log = tmp_path / "sglang.log"
    lines = [
        P + "Decode batch, #running-req: 5, #token: 10, token usage: 0.50, cuda graph: True, "
            "gen throughput (token/s): 10.00, #queue-req: 3",
        P + f"KV cache pool is full. Retract requests. #retracted_reqs: {big}, #new_token_ratio: 0.9 -> 1.0",
        P + "KV cache pool is full. Retract requests. #retracted_reqs: -1, #new_token_ratio: 0.9 -> 1.0",
        P + f"max_total_num_tokens=1000, max_prefill_tokens=100, max_running_requests={big}, context_len=10",
        P + "Decode batch, #running-req: -1, #token: 10, token usage: 0.50, cuda graph: True, "
            "gen throughput (token/s): 10.00, #queue-req: 3",
        P + f"Decode batch, #running-req: 5, #token: 10, token usage: 0.50, cuda graph: True, "
            f"gen throughput (token/s): 10.00, #queue-req: {big}",
        P + "Decode batch, #running-req: 5, #token: 10, token usage: 7.50, cuda graph: True, "   # its skeleton
            "gen throughput (token/s): 10.00, #queue-req: 3",                                     # is learned
        P + "Decode batch, #running-req: 5, #token: 10, token usage: 1e400, cuda graph: True, "
            "gen throughput (token/s): 10.00, #queue-req: 3",
        P + "Scheduler watchdog timeout (self.watchdog_timeout=-5, self.soft=False)",
    ]
    log.write_text("\n".join(lines) + "\n")
    sc = Sidecar(Config(log_files=(str(log),), from_start=True), clock=lambda: T0)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SidecarCollector(sc))
    try:
        sc.poll_logs_once()
        view = sc.view()
        text = generate_latest(reg).decode()
    finally:
        sc.shutdown()
    assert view.unparsed.get("value_out_of_range") == 7, view.unparsed
    assert view.retractions_total == 0 and view.retracted_requests_total == 0 and view.watchdog_total == 0
    assert view.max_running_requests is None
    ((queue, running, usage, _, _),) = view.ranks.values()
    assert (queue, running, usage) == (3, 5, 0.5)
    assert 'sglang_exporter_log_lines_unparsed_total{reason="value_out_of_range"} 7.0' in text
    # "token usage: 1e400" is not a number at all: the line keeps its other fields (docs/log-events.md)
    assert view.events_total["decode_batch"] == 2


def test_block_path_checks_the_leading_digit_a_skeleton_cannot_see():
    """Lines of one skeleton differ only in digits: "0.50" and "7.50" share one, so a learned layout looks at
    a ratio's leading digit. Both paths agree on every line."""
    lines = [P + f"Decode batch, #running-req: 5, #token: 10, token usage: {u}, cuda graph: True, "
                 f"gen throughput (token/s): 10.00, #queue-req: 3" for u in ("0.50", "0.50", "7.50", "1.50", "2.00")]
    fast, generic = Parser("f"), Parser("g")
    generic.learning = False
    fast.feed_items(lines[:1], 1)
    rows = fast.feed_items(lines[1:], 2)
    assert [r.__class__ for r in rows] == [tuple, tuple]            # 0.50 and 1.50 are rows; 7.50 and 2.00 not
    for n, line in enumerate(lines, 1):
        generic.feed(line, n)
    assert fast.unparsed == generic.unparsed == Counter({"value_out_of_range": 2})


def test_block_path_checks_every_limited_digit_of_a_line():
    """A hybrid model's line has two pool usages (and a percent): each one's leading digit is looked at."""
    def line(full, swa, hit):
        return (P + f"Prefill batch, #new-seq: 1, #new-token: 5, #cached-token: 0, cache hit rate: {hit}%, "
                f"full token usage: {full}, swa token usage: {swa}, #running-req: 5, #queue-req: 3")
    lines = [line("0.50", "0.50", "150.00"), line("0.50", "0.50", "150.00"), line("0.50", "7.50", "150.00"),
             line("7.50", "0.50", "150.00"), line("0.50", "0.50", "250.00"), line("1.50", "1.50", "199.99")]
    fast, generic = Parser("f"), Parser("g")
    generic.learning = False
    items = fast.feed_items(lines[:1], 1) + fast.feed_items(lines[1:], 2)     # learned, then rows
    for n, text in enumerate(lines, 1):
        generic.feed(text, n)
    assert [as_event(i).line for i in items] == [1, 2, 6]
    assert [i.__class__ for i in items[1:]] == [tuple, tuple]
    assert fast.unparsed == generic.unparsed == Counter({"value_out_of_range": 3})


def test_counters_only_grow_whatever_the_event():
    """State adds to retracted_requests_total only a count in range, even for an Event the grammar did not
    build (a negative, a float, a bool, a huge int)."""
    from exporter.engine import Engine
    from exporter.ingest.events import Event
    eng = Engine(Config(), log_fed=True)
    totals = []
    for n in (3, -1, 2.5, True, 10 ** 400, None, "7", 4):
        eng.ingest(Event("retraction", {"retracted_reqs": n, "testing": False}, ts=T0), T0)
        totals.append(eng.state.retracted_requests_total)
    assert totals == [3, 3, 3, 3, 3, 3, 3, 7]
    assert eng.state.retractions_total == 8


# -- the exposition on its own: arbitrary View contents ---------------------------------------------------------
ANY = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(10 ** 300, 10 ** 5000),
                st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5), st.just([1]))
LABEL = st.one_of(st.text(max_size=8), st.just("\ud800"), st.just('a"b\\c\nd'))
SIDS = st.sampled_from(sorted(SIGNALS_BY_ID))


def _views():
    judgement = st.builds(lambda sid, firing, value: Judgement(sid, "warning", firing, value),
                          SIDS, st.one_of(st.none(), st.booleans()), ANY)
    history = st.builds(lambda since: SignalHistory(state="ok", since=since), ANY)
    advice = st.builds(lambda flag, cur, sug: Recommendation(flag, "increase", cur, sug, ("x",), "warning", ""),
                       LABEL, ANY, ANY)
    snapshot = st.builds(lambda now, js, hist, adv: Snapshot(now, {j.id: j for j in js}, adv, hist),
                         st.floats(0, 2e9), st.lists(judgement, max_size=5),
                         st.dictionaries(SIDS, history, max_size=3), st.lists(advice, max_size=3))
    rank_key = st.tuples(st.one_of(st.none(), st.integers(), LABEL), st.one_of(st.none(), st.integers()),
                         st.one_of(st.none(), st.integers(-1, 10 ** 5000)))
    source = st.fixed_dictionaries({"lines_read": ANY, "rotations": ANY, "truncations": ANY, "lines_cut": ANY,
                                    "up": ANY})
    return st.builds(
        View, snapshot=snapshot,
        ranks=st.dictionaries(rank_key, st.tuples(ANY, ANY, ANY, ANY, ANY), max_size=4),
        max_running_requests=ANY, headroom_bytes=ANY, retractions_per_minute=ANY, retractions_total=ANY,
        retracted_requests_total=ANY, oom_total=st.dictionaries(st.sampled_from(["prefill", "decode", "x"]), ANY),
        watchdog_total=ANY, restarts=ANY, last_batch_age=ANY, format_family=LABEL, model=LABEL,
        log_sources=st.dictionaries(LABEL, source, max_size=3),
        unparsed=st.dictionaries(LABEL, ANY, max_size=3), events_total=st.dictionaries(LABEL, ANY, max_size=3),
        scrape=st.one_of(st.none(), st.fixed_dictionaries({"success": ANY, "duration": ANY, "error": ANY})),
        version=LABEL)


class _Fixed:
    def __init__(self, fams):
        self.fams = fams

    def collect(self):
        return self.fams


def _expose(view: View, errors: Counter) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(_Fixed(families(view, errors)))
    return generate_latest(reg).decode()


@SETTINGS
@given(_views())
def test_any_view_is_exposed_and_bad_families_are_counted(view):
    errors: Counter = Counter()
    text = _expose(view, errors)
    served = {f.name for f in text_string_to_metric_families(text)}
    for spec in METRICS:
        name = spec.name.removesuffix("_total") if spec.type == "counter" else spec.name
        assert name in served or errors[spec.name] > 0, spec.name
    counters(text, state_gauges=False)      # every sample served is finite, counters are not negative


def test_promtool_accepts_an_exposition_with_dropped_families():
    promtool = require_tool("promtool")
    now = 1e9
    snap = Snapshot(now, {"stalled": Judgement("stalled", "critical", True, float("nan"))}, [],
                    {"stalled": SignalHistory(state="firing", since=now - 5)})
    view = View(snapshot=snap, ranks={(0, 1, None): (10 ** 400, 3, 0.5, float("inf"), True)},
                max_running_requests=-1, headroom_bytes=float("nan"), retractions_per_minute=0.5,
                retractions_total=-3, retracted_requests_total=10 ** 400, oom_total={"decode": 2}, watchdog_total=0,
                restarts=1, last_batch_age=None, format_family="0.5.9-0.5.23", model="m\ud800",
                log_sources={"/var/log/s.log": {"lines_read": 10, "rotations": 0, "truncations": 0, "lines_cut": 0,
                                                "up": True}},
                unparsed={"value_out_of_range": 2}, events_total={"decode_batch": 10}, scrape=None)
    errors: Counter = Counter()
    text = _expose(view, errors)
    assert set(errors) == {f"{NS}_signal_value", f"{NS}_signal_value_seconds", f"{NS}_queue_requests", f"{NS}_gen_throughput_tokens_per_second",
                           f"{NS}_gpu_headroom_bytes", f"{NS}_retractions_total", f"{NS}_retracted_requests_total",
                           f"{NS}_sglang_info"}
    assert f'{NS}_exposition_errors_total{{family="{NS}_queue_requests"}} 1.0' in text
    assert f"{NS}_running_requests{{" in text and f"{NS}_oom_events_total{{" in text
    proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stdout.strip() and not proc.stderr.strip(), proc.stdout + proc.stderr


def test_collector_serves_the_error_family_when_no_view_can_be_taken():
    class Broken:
        def view(self):
            raise OverflowError("int too large to convert to float")
    reg = CollectorRegistry(auto_describe=False)
    collector = SidecarCollector(Broken())
    reg.register(collector)
    generate_latest(reg)
    text = generate_latest(reg).decode()
    assert f'{NS}_exposition_errors_total{{family="view"}} 2.0' in text


def test_threads_survive_hostile_lines(tmp_path):
    """The running sidecar (follower, evaluation threads) reads the issue's lines and random bytes, evaluates
    after them, and every thread is still alive."""
    import random
    import time

    from helpers import wait_until
    log = tmp_path / "sglang.log"
    log.touch()
    sc = Sidecar(Config(log_files=(str(log),), from_start=True, poll_interval=0.05, evaluate_interval=0.05))
    sc.start()
    try:
        big = "9" * 400
        lines = [P + f"KV cache pool is full. Retract requests. #retracted_reqs: {big}",
                 P + f"max_total_num_tokens=1, max_prefill_tokens=1, max_running_requests={big}, context_len=1",
                 P + f"Decode batch, #running-req: 5, #token: 1, token usage: 0.50, cuda graph: True, "
                     f"gen throughput (token/s): 1.00, #queue-req: {big}"]
        data = ("\n".join(lines) + "\n").encode() + random.Random(1).randbytes(1 << 20) + b"\n"
        with open(log, "ab") as f:
            f.write(data)
        stats = sc.follower.stats
        wait_until(lambda: sum(s.lines_read for s in stats.values()) >= data.count(b"\n"), timeout=30,
                   what="the lines read")
        read_at = time.time()
        wait_until(lambda: sc.engine.last is not None and sc.engine.last.now > read_at, timeout=10,
                   what="an evaluation after the lines")
        assert all(t.is_alive() for t in sc.threads), [t.name for t in sc.threads if not t.is_alive()]
        assert sc.view().unparsed["value_out_of_range"] == 3
    finally:
        sc.shutdown()
