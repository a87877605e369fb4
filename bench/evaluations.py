#!/usr/bin/env python3
"""Instructions per evaluation of `analyze` (Engine.evaluate every 5 s of log time), counted by valgrind.

    python bench/evaluations.py [--lines 20000] [--seed 1] [--root DIR] [--layout sglang|custom]
                                [--profile bench|realistic] [--tp N] [--leaders-only] [--judges | --in-replay]

`analyze` runs twice on the same generated log under callgrind: with the default evaluation interval, and with
one longer than the log (a single evaluation, at its end). The difference, divided by the difference in
evaluations, is the cost of one evaluation (window expiry, the judges, history, advice), start-up and the
per-line work taken out. `--judges` instead times, in this process (wall clock: pin it, `taskset -c 0`), each
judge, window expiry and a whole evaluation on the state at the log's end, best of 5 x 2,000 calls: which
judges an evaluation's cost is. `--in-replay` times the same parts during the replay, where the state moves
between two evaluations: each judge, window expiry, the sayings kept anew and the whole evaluation, per
evaluation (a judge costs more there than on the final state, and so does the evaluation). The default mode
counts instructions, not seconds: the machine is shared (see instructions.py); it needs valgrind.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import genlog  # noqa: E402  (bench/ is not a package)
from instructions import instructions  # noqa: E402

# analyze with an evaluation interval; prints how many evaluations ran (counted by wrapping Engine.judge, which
# the replay calls, or Engine.evaluate in a checkout before it)
CODE = """from exporter import engine
from exporter.report.analyze import analyze
from exporter.config import Config
calls = [0]
name = "judge" if hasattr(engine.Engine, "judge") else "evaluate"
evaluate = getattr(engine.Engine, name)
def counted(self, now):
    calls[0] += 1
    return evaluate(self, now)
setattr(engine.Engine, name, counted)
analyze([LOG], Config(evaluate_interval={interval}), progress=False)
print(calls[0])
"""


def evaluations(root: str, log: Path, interval: float) -> int:
    script = f"import sys\nsys.path.insert(0, {root!r})\nLOG = {str(log)!r}\n" + CODE.format(interval=interval)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    genlog.add_log_arguments(ap, lines=20000)
    ap.add_argument("--root", default=str(HERE.parent), help="the checkout to measure (default: this one)")
    ap.add_argument("--judges", action="store_true", help="time each judge on the log's final state (see above)")
    ap.add_argument("--in-replay", action="store_true",
                    help="time each judge and each part of an evaluation during the replay, on the state as it "
                         "changes (a judge costs more there than on the final state: its inputs move)")
    a = ap.parse_args(argv)
    if a.judges:
        return time_judges(a)
    if a.in_replay:
        return time_in_replay(a)
    if not shutil.which("valgrind"):
        print("valgrind not installed (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="evaluations-") as tmp:
        log = Path(tmp) / "bench.log"
        genlog.write_log(a, str(log))
        counts, cost = {}, {}
        for interval in (5.0, 1e12):
            counts[interval] = evaluations(a.root, log, interval)
            cost[interval] = instructions(a.root, CODE.format(interval=interval), log, tmp)
        n = counts[5.0] - counts[1e12]
        per = (cost[5.0] - cost[1e12]) / n
        print(f"root: {a.root}; log: {genlog.log_description(a)}")
        print(f"{counts[5.0]:,} evaluations: {per:,.0f} instructions each, {per * n / a.lines:,.0f} per line")
    return 0


def time_judges(a) -> int:
    """Microseconds per call of each judge, of window expiry and of a whole evaluation, at the end of the log."""
    import time

    sys.path.insert(0, a.root)
    from exporter.config import Config
    from exporter.engine import Engine
    from exporter.report import analyze as report

    engines: list[Engine] = []

    class Kept(Engine):         # the engine analyze builds, kept to be timed after the replay
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            engines.append(self)

    report.Engine = Kept        # type: ignore[misc]
    with tempfile.TemporaryDirectory(prefix="evaluations-") as tmp:
        log = Path(tmp) / "bench.log"
        genlog.write_log(a, str(log))
        report.analyze([str(log)], Config(), progress=False)
    e = engines[0]
    st, now = e.state, e.last.now if e.last is not None else 0.0

    def best(call) -> float:
        times = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(2000):
                call()
            times.append(time.perf_counter() - t)
        return min(times) / 2000 * 1e6

    rows = [(best(lambda j=judge, p=p, w=window: j(st, p, e.sources, now, w)), sid)
            for sid, judge, p, window in e._evaluate._judging]
    judged = sum(us for us, _ in rows)
    rows += [(best(lambda: st.expire(now)), "(window expiry)"), (best(lambda: e.evaluate(now)), "(a whole evaluation)")]
    print(f"root: {a.root}; log: {genlog.log_description(a)}")
    print("| judge | µs per call |\n|---|---|")
    for us, sid in sorted(rows, reverse=True):
        print(f"| {sid} | {us:.2f} |")
    print(f"| (all judges) | {judged:.2f} |")
    return 0


def time_in_replay(a) -> int:
    """Microseconds per evaluation of each judge, of window expiry, of the sayings kept anew (the changed
    ones) and of the whole evaluation, summed over the replay of the log (wall clock: pin it, `taskset -c 0`)."""
    import time

    sys.path.insert(0, a.root)
    from exporter.config import Config
    from exporter.engine import Engine
    from exporter.report import analyze as report

    spent: dict[str, int] = {}      # part -> ns over the replay
    calls = [0]                     # evaluations
    clock = time.perf_counter_ns

    def timed(name: str, call):
        def run(*args):
            t = clock()
            out = call(*args)
            spent[name] = spent.get(name, 0) + clock() - t
            return out
        return run

    class Timed(Engine):        # analyze's engine, its evaluation taken apart
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            ev = self._evaluate
            ev._plan = tuple((sid, sev, window, timed(sid, judge), p) for sid, sev, window, judge, p in ev._plan)
            ev._take = timed("(sayings kept anew)", ev._take)
            self.state.expire = timed("(window expiry)", self.state.expire)

        def judge(self, now):       # (the replay's evaluations; the last one is evaluate(), which calls this)
            calls[0] += 1
            return timed("(a whole evaluation)", super().judge)(now)

    report.Engine = Timed       # type: ignore[misc]
    with tempfile.TemporaryDirectory(prefix="evaluations-") as tmp:
        log = Path(tmp) / "bench.log"
        genlog.write_log(a, str(log))
        t = time.process_time()
        report.analyze([str(log)], Config(), progress=False)
        total = time.process_time() - t
    n = calls[0]
    print(f"root: {a.root}; log: {genlog.log_description(a)}")
    print(f"analyze {total:.2f} CPU s; {n:,} evaluations, {spent['(a whole evaluation)'] / 1e9:.2f} s in all "
          "(with the timers' own cost)")
    print("| part | µs per evaluation |\n|---|---|")
    for name, ns in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {ns / n / 1000:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
