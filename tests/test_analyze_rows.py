"""analyze's replay loop: the Rows between two evaluations go to the state in one call (ServerState.apply_rows);
the result must be the one of applying every item on its own, as the loop did before."""
from __future__ import annotations

import math
import random
import re
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from exporter.config import Config
from exporter.ingest.grammar import Parser
from exporter.ingest.pipeline import SourceParser
from exporter.report import analyze as analyze_module
from exporter.report.analyze import analyze, next_due
from exporter.state import ServerState

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import genlog  # noqa: E402


def test_next_due_is_the_loops_evaluation_check():
    """`t >= next_due(last_eval, step)` exactly when `t - last_eval >= step`, also where the subtraction rounds."""
    rng = random.Random(5)
    cases = [(1_754_932_203.0, 5.0), (1_754_932_203.1, 0.1), (1_754_932_203.123456, 1 / 3), (0.0, 5.0),
             (86399.9, 7.3), (1e15 + 0.5, 0.25), (3.0, 1e-12)]
    cases += [(rng.uniform(0, 2e9), rng.choice([5.0, 0.5, 1.0, rng.uniform(1e-3, 60)])) for _ in range(300)]
    for last_eval, step in cases:
        due = next_due(last_eval, step)
        t = last_eval + step
        for _ in range(8):
            t = math.nextafter(t, -math.inf)
        for _ in range(16):
            assert (t >= due) == (t - last_eval >= step), (last_eval, step, t, due)
            t = math.nextafter(t, math.inf)
    assert next_due(10.0, 0.0) == -math.inf and next_due(10.0, -1.0) == -math.inf
    assert next_due(10.0, math.nan) == math.inf and next_due(10.0, math.inf) == math.inf


def _one_at_a_time(self, items, last, due):
    """apply_rows stopping at every item: analyze's loop then applies each one by itself (apply_row, apply_event)."""
    return next(items, None), last


def _shuffled_times(text: str, seed: int) -> str:
    """Some lines stamped up to 3 s early or late (ranks interleave out of order) and some sub-second stamps,
    so rows reach the loop with earlier, equal and later times than the latest."""
    rng = random.Random(seed)
    stamp = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
    out = []
    for line in text.splitlines():
        m = stamp.match(line)
        r = rng.random()
        if m and r < 0.15:
            t = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S") + timedelta(seconds=rng.randint(-3, 3))
            line = f"[{t:%Y-%m-%d %H:%M:%S}" + line[m.end():]
        elif m and r < 0.2:
            line = f"[{m.group(1)}.{rng.randrange(1000):03d}" + line[m.end():]
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("interval", [5.0, 0.7, 30.0])
def test_rows_applied_in_runs_give_the_report_of_one_at_a_time(tmp_path, monkeypatch, interval):
    """The whole report, charts included, of a generated tp=4 log (start-ups, crashes, restarts, every TP rank's
    batch lines, request logs, access lines) with shuffled times: the same whether the state takes the Rows
    between two evaluations in one call or one at a time."""
    log = tmp_path / "gen.log"
    genlog.write(5000, str(log), seed=11)
    mixed = tmp_path / "mixed.log"
    mixed.write_text(_shuffled_times(log.read_text(), seed=interval))
    config = Config(evaluate_interval=interval)
    in_runs = []
    apply_rows = ServerState.apply_rows

    def counted(self, items, last, due):
        before = sum(self.events_total.values())
        stop, last = apply_rows(self, items, last, due)
        in_runs.append(sum(self.events_total.values()) - before)
        return stop, last
    for path in (log, mixed):
        with monkeypatch.context() as m:
            m.setattr(ServerState, "apply_rows", counted)
            fast = analyze([str(path)], config, progress=False, series=True)
        with monkeypatch.context() as m:
            m.setattr(ServerState, "apply_rows", _one_at_a_time)
            slow = analyze([str(path)], config, progress=False, series=True)
        assert fast == slow
        assert len(fast["series"]["t"]) > 20
    assert sum(in_runs) > 0.6 * 2 * 5000        # most lines went through the runs


def _cri(text: str) -> str:
    """Each line as a CRI record (containerd's log files), with a time of its own that a line's valid date wins over."""
    return "".join(f"2025-08-11T17:10:00.{k % 10 ** 9:09d}Z stdout F {line}\n"
                   for k, line in enumerate(text.splitlines()))


@pytest.mark.parametrize(("interval", "lines"), [(5.0, 6000), (0.7, 6000), (0.0, 150)])
def test_request_logs_counted_without_rows_give_the_report_of_rows(tmp_path, monkeypatch, interval, lines):
    """analyze counts a request log at the time of the Row before it instead of reading its Row
    (Parser.fold_request_logs). The whole report, charts included, must be the one of reading each as a Row: on a
    busy server's log (request logs and access lines between every TP leader's batch lines), with shuffled times
    (request logs earlier and later than the Row before them, sub-second stamps), as CRI records and behind a
    custom prefix; with evaluations every item (interval 0) it folds none."""
    logs = []
    for name, layout, leaders in (("lead", "sglang", True), ("all", "sglang", False), ("custom", "custom", True)):
        log = tmp_path / f"{name}.log"
        genlog.write(lines, str(log), seed=7, layout=layout, profile="realistic", leaders_only=leaders)
        logs.append(log)
    mixed = tmp_path / "mixed.log"
    mixed.write_text(_shuffled_times(logs[0].read_text(), seed=3))
    wrapped = tmp_path / "cri.log"
    wrapped.write_text(_cri(mixed.read_text()))
    folded = []
    take = SourceParser.take_folded

    def counted(self):
        n = take(self)
        folded.append(n)
        return n
    for path in logs + [mixed, wrapped]:
        config = Config(evaluate_interval=interval)
        with monkeypatch.context() as m:
            m.setattr(SourceParser, "take_folded", counted)
            fast = analyze([str(path)], config, progress=False, series=True)
        with monkeypatch.context() as m:
            m.setattr(analyze_module, "SourceParser", lambda source, **_: SourceParser(source))
            slow = analyze([str(path)], config, progress=False, series=True)
        assert fast == slow, path.name
        assert fast["records"]["request_log"] > 0
    if interval > 0:
        assert sum(folded) > 0.5 * sum(1 for line in logs[0].open() if "Receive:" in line or "Finish:" in line)
    else:
        assert sum(folded) == 0


def _lines(rng: random.Random, n: int) -> list[str]:
    """Batch lines of four TP ranks and a DP rank, request logs and retractions, some seconds apart."""
    out = []
    for i in range(n):
        t = datetime(2025, 8, 11, 17, 0, 0) + timedelta(seconds=i // 3 + rng.choice([0, 0, 0, -2, 1]))
        prefix = f"[{t:%Y-%m-%d %H:%M:%S} {rng.choice(['TP0', 'TP1', 'TP2', 'TP3', 'DP1 TP4'])}]"
        r = rng.random()
        if r < 0.25:
            out.append(f"{prefix} Prefill batch, #new-seq: 1, #new-token: {rng.randrange(9999)}, #cached-token: "
                       f"{rng.randrange(999)}, token usage: 0.{rng.randrange(10, 99)}, #running-req: "
                       f"{rng.randrange(50)}, #queue-req: {rng.randrange(300)}")
        elif r < 0.3:
            out.append(f"{prefix} Receive: obj=GenerateReqInput(rid='{rng.randrange(10**6)}', text='hi')")
        elif r < 0.32:
            out.append(f"{prefix} KV cache pool is full. Retract requests. #retracted_reqs: 1, "
                       f"#new_token_ratio: 0.4 -> 0.5")
        else:
            graph = f"cuda graph: {rng.choice(['True', 'False'])}, " if rng.random() < 0.9 else ""
            out.append(f"{prefix} Decode batch, #running-req: {rng.randrange(50)}, #token: {rng.randrange(9999)}, "
                       f"token usage: 0.{rng.randrange(10, 99)}, {graph}gen throughput (token/s): "
                       f"{rng.randrange(999)}.{rng.randrange(10, 99)}, #queue-req: {rng.randrange(300)}")
    return out


def test_apply_rows_stops_where_it_must_and_matches_apply_row():
    """apply_rows stops at an Event or at the first Row whose time reaches `due`, returns it unapplied with the
    latest time so far, and leaves the state apply_row leaves, each Row at that time."""
    rng = random.Random(3)
    parser = Parser("runs")
    lines = _lines(rng, 3000)
    items = [item for k in range(0, len(lines), 100) for item in parser.feed_items(lines[k:k + 100], k + 1)]
    assert sum(item.__class__ is tuple for item in items) > 2500
    params = Config(profile="offline").signal_params()
    runs, single = ServerState(params), ServerState(params)

    def seen(st: ServerState):
        ranks = {k: (v.queue, v.running, v.usage, v.throughput, v.cuda_graph) for k, v in st.ranks.items()}
        return (ranks, dict(st.events_total), list(st.events_total), [st.samples.count(i) for i in range(10)],
                st.last_batch_t, st.last_progress_t, st.retractions_total, st.tuning.prefix.total,
                st.tuning.chunked.total)

    it = iter(items)
    last = items[0].ts if items[0].__class__ is not tuple else items[0][2]
    k = 0       # items[k] is the next item `single` takes
    while True:
        due = last + rng.choice([0.5, 1.0, 3.0, 20.0])
        stop, run_last = runs.apply_rows(it, last, due)
        # the same items, one at a time, up to the one it stopped at
        while k < len(items) and items[k] is not stop:
            item = items[k]
            assert item.__class__ is tuple
            ts = item[2]
            last = max(last, ts) if ts is not None else last
            assert last < due
            single.apply_row(item, last)
            k += 1
        assert run_last == last
        assert seen(runs) == seen(single)
        if stop is None:
            break
        k += 1
        ts = stop[2] if stop.__class__ is tuple else stop.ts
        if stop.__class__ is tuple:
            assert ts >= due
        last = max(last, ts) if ts is not None else last
        for st in (runs, single):
            (st.apply_row if stop.__class__ is tuple else st.apply_event)(stop, last)
    assert k == len(items)
    assert seen(runs)[1]["retraction"] > 10
