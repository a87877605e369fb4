"""Memory stays flat: a long synthetic stream with many rank tags and thousands of retractions keeps every
window and table bounded, and allocations stop growing once the windows are full."""
from __future__ import annotations

import gc
import tracemalloc

from test_signals import T0, decode, oom, retraction, watchdog

from exporter.config import Config
from exporter.engine import MAX_INTERVALS, Engine
from exporter.state import MAX_RANKS, MAX_WINDOW_BUCKETS, MAX_WINDOW_SAMPLES

N = 500_000
STEP = 0.01          # 100 events per second: 30 000 in a 5-minute window, more than MAX_WINDOW_SAMPLES


def stream(start: int, stop: int):
    """Event i of the stream (deterministic): decode lines over 1000 distinct rank tags, a retraction every
    50 events, an OOM and a watchdog now and then, alternating healthy / unhealthy phases."""
    for i in range(start, stop):
        if i % 50 == 0:
            yield i, retraction(n=2)
        elif i % 20011 == 0:
            yield i, oom("decode")
        elif i % 30011 == 0:
            yield i, watchdog()
        else:
            phase = (i // 7000) % 2
            yield i, decode(queue=0 if phase else 3000, running=10, usage=0.5, graph=bool(phase),
                            tp=i % 8, dp=(i // 8) % 125, pp=0)


def run(eng: Engine, start: int, stop: int) -> None:
    for i, ev in stream(start, stop):
        t = T0 + i * STEP
        eng.ingest(ev, t)
        if i % 1000 == 0:
            eng.evaluate(t)


def check_bounded(eng: Engine) -> None:
    st = eng.state
    assert len(st.ranks) <= MAX_RANKS
    # 1-second buckets: the 5-minute window holds ~300 of them (plus what arrived since the last evaluation
    # expired it), however many samples it counts
    assert len(st.samples.items) <= min(MAX_WINDOW_BUCKETS, 300 + 10 + 1)
    for series in (*st.fraction.values(), st.graph_off):
        assert 0 <= series.hits <= series.total <= (300 + 10 + 1) / STEP
    for w in (st.retractions, *st.ooms.values(), st.watchdogs):
        assert len(w.items) <= MAX_WINDOW_SAMPLES
    # the retraction window holds only its 10 minutes (2 per second), plus what arrived since the last
    # evaluation expired it (10 s)
    assert len(st.retractions.items) <= (600 + 10) * 2 + 2
    for h in eng.history.values():
        assert len(h.intervals) <= MAX_INTERVALS
    assert set(st.events_total) <= {"decode_batch", "retraction", "oom", "watchdog_timeout"}
    assert all(len(h.snapshots) <= 1000 for h in st.histograms.values())


def test_memory_flat_over_long_stream():
    eng = Engine(Config(profile="offline"), log_fed=True)
    run(eng, 0, 20_000)                   # warm up: windows fill, code paths and caches allocate
    gc.collect()
    tracemalloc.start()
    try:
        run(eng, 20_000, 100_000)
        gc.collect()
        at_100k, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        run(eng, 100_000, N)
        gc.collect()
        at_500k, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    check_bounded(eng)
    st = eng.state
    assert st.retractions_total == N // 50 and st.retracted_requests_total == 2 * (N // 50)
    assert len(st.ranks) == MAX_RANKS and ("other", None, None) in st.ranks
    assert eng.history["queue_above_range"].fired and eng.history["queue_below_range"].fired
    # 400k more events: no growth beyond noise, and no transient blow-up
    assert at_500k - at_100k < 1_000_000, (at_100k, at_500k)
    assert peak - at_100k < 3_000_000, (at_100k, peak)


def test_interval_history_bounded():
    eng = Engine(Config(profile="offline"), log_fed=True)
    t = T0
    for _ in range(MAX_INTERVALS + 300):        # fire / clear the stall signal over and over
        eng.ingest(decode(queue=5), t)
        eng.evaluate(t)
        eng.evaluate(t + 61)
        t += 62
    h = eng.history["stalled"]
    assert len(h.intervals) == MAX_INTERVALS and h.dropped_intervals >= 299


def test_a_burst_is_read_a_bounded_slice_at_a_time(tmp_path):
    """8 MiB of random bytes and a 12 MiB line appended at once: the sidecar reads them LOG_POLL_BUDGET bytes
    per poll, so what Python holds at any moment stays a few MB (6.4 MB traced; with the former 16 MiB budget
    27 MB here, and 110 MB RSS after a 100 MB burst in bench/memory_bench.py), and nothing is kept once the
    backlog is read."""
    import random

    from exporter.sidecar.run import LOG_POLL_BUDGET, Sidecar
    log = tmp_path / "sglang.log"
    log.touch()
    sc = Sidecar(Config(profile="offline", log_files=(str(log),)), clock=lambda: 1e9)
    sc.poll_logs_once()
    rng = random.Random(1)
    with open(log, "ab") as f:
        for _ in range(2):
            f.write(rng.randbytes(4 << 20))
        f.write(b"x" * (12 << 20) + b"\n")
    gc.collect()
    tracemalloc.start()
    try:
        polls = 0
        while True:         # what the follower's loop does: poll again at once while a backlog is left
            sc.poll_logs_once()
            polls += 1
            if not sc.follower.backlog or polls > 100:
                break
            sc.follower.backlog = False
        gc.collect()
        now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        sc.shutdown()
    (stats,) = sc.view().log_sources.values()
    assert polls >= (20 << 20) // LOG_POLL_BUDGET - 1 and stats["lines_cut"] == 1
    assert peak < 10_000_000, peak
    assert now < 1_000_000, now
