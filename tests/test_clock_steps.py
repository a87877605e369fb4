"""History on its own clock, in pieces: a sidecar that starts after the log's clock stepped (DST fall-back, an
NTP step either way, a burst of lines stamped ahead) replays each stretch where it happened, and nothing old
pages now. Real files and the real sidecar start-up; the log's times are built around the real clock."""
from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone

import pytest

from exporter.config import Config
from exporter.sidecar import readback
from exporter.sidecar.run import Sidecar
from exporter.sidecar.steady_clock import SteadyClock

PAGING = ("retraction_storm", "retractions_frequent")


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def startup(t: datetime) -> str:
    return (f"[{stamp(t)}] server_args=ServerArgs(model_path='m', tp_size=1, max_running_requests=None)\n"
            f"[{stamp(t)} TP0] Load weight begin. avail mem=78.50 GB\n"
            f"[{stamp(t)} TP0] max_total_num_tokens=400000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            f"max_running_requests=2048, context_len=32768, available_gpu_mem=6.50 GB\n"
            f"[{stamp(t)}] The server is fired up and ready to roll!\n")


def retraction(t: datetime) -> str:
    return (f"[{stamp(t)} TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
            f"#new_token_ratio: 0.7000 -> 0.8000\n")


def decode(t: datetime) -> str:
    return (f"[{stamp(t)} TP0] Decode batch. #running-req: 8, #token: 9000, token usage: 0.50, cuda graph: True, "
            f"gen throughput (token/s): 500.00, #queue-req: 0\n")


def real_now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def storm(first: datetime, minutes: int, zone: timedelta) -> list[str]:
    """20 retractions a minute for `minutes` from real time `first`, stamped on a clock `zone` ahead."""
    return [retraction(first + zone + timedelta(seconds=3 * i)) for i in range(20 * minutes)]


def quiet(first: datetime, minutes: int, zone: timedelta) -> list[str]:
    """A decode batch line every 10 s, no retraction."""
    return [decode(first + zone + timedelta(seconds=10 * i)) for i in range(6 * minutes)]


def judge(log, **cfg) -> tuple[dict, Sidecar]:
    os.utime(log, None)                                  # its last line was written just now
    sc = Sidecar(Config(log_files=(str(log),), **cfg))
    sc.prepare()
    view = sc.view()
    sc.shutdown()
    return {sid: view.snapshot.judgements[sid].firing for sid in PAGING}, sc


@pytest.mark.parametrize("resumed", [False, True], ids=["fresh", "resumed"])
def test_dst_fall_back_replays_the_hour_before_it_where_it_happened(tmp_path, resumed):
    """Central Europe, 25 minutes after the clocks went back: the log's clock read 02:00-02:59 twice. A storm
    in the hour before the step ended 25 minutes ago; on one offset it is replayed as now (both signals fire).
    Fresh: no positions file, the latest start-up replayed. Resumed: a sidecar counted the storm and stopped;
    the lines after the step were written while none ran."""
    now, log, pos = real_now(), tmp_path / "sglang.log", tmp_path / "positions.json"
    summer, winter = timedelta(hours=2), timedelta(hours=1)
    step = now - timedelta(minutes=25)
    before = [startup(step - timedelta(minutes=70) + summer)] + storm(step - timedelta(minutes=60), 60, summer)
    after = quiet(step, 25, winter)
    cfg = {"positions_file": str(pos)} if resumed else {}
    if resumed:
        log.write_text("".join(before))
        first = Sidecar(Config(log_files=(str(log),), **cfg))
        first.prepare()
        first.shutdown()
        with open(log, "a") as fh:
            fh.write("".join(after))
    else:
        log.write_text("".join(before + after))
    firing, sc = judge(log, **cfg)
    assert firing == {"retraction_storm": False, "retractions_frequent": False}
    assert sc.engine.state.retractions_total == 1200          # every line is counted, where it happened
    assert sc.engine.state.restarts == 0


def test_a_forward_ntp_step_replays_without_a_page(tmp_path):
    """A clock 50 minutes slow stepped forward 20 minutes ago; the storm before the step ended then."""
    now, log = real_now(), tmp_path / "sglang.log"
    step = now - timedelta(minutes=20)
    slow = -timedelta(minutes=50)
    lines = [startup(step - timedelta(minutes=40) + slow)]
    lines += storm(step - timedelta(minutes=30), 30, slow)
    lines += quiet(step, 20, timedelta(0))
    log.write_text("".join(lines))
    firing, sc = judge(log)
    assert firing == {"retraction_storm": False, "retractions_frequent": False}
    assert sc.engine.state.retractions_total == 600


def test_a_burst_stamped_ahead_of_now_is_never_pinned_to_now(tmp_path):
    """A clock 3 hours fast for ten minutes of storm, an hour ago, then set right: those lines are stamped
    ahead of now. They are placed before the lines that follow them, not at the moment they are read."""
    now, log = real_now(), tmp_path / "sglang.log"
    lines = [startup(now - timedelta(minutes=90))]
    lines += quiet(now - timedelta(minutes=89), 19, timedelta(0))
    lines += storm(now - timedelta(minutes=70), 10, timedelta(hours=3))
    lines += quiet(now - timedelta(minutes=60), 60, timedelta(0))
    log.write_text("".join(lines))
    firing, sc = judge(log, from_start=True)
    assert firing == {"retraction_storm": False, "retractions_frequent": False}
    assert sc.engine.state.retractions_total == 200


def test_the_clock_map_places_each_stretch_by_itself(tmp_path):
    """The map's offsets: the newest stretch by the file's mtime (zone snapped), each older one ending where
    the next begins; a jump forward is a pause, not a step."""
    log = tmp_path / "sglang.log"
    t0 = datetime(2025, 10, 26, 2, 0, 0)
    lines = [decode(t0 + timedelta(seconds=10 * i)) for i in range(360)]          # 02:00:00-02:59:50 CEST
    lines += [decode(t0 + timedelta(seconds=10 * i)) for i in range(90)]           # 02:00:00-02:14:50 CET
    lines += [decode(t0 + timedelta(hours=5) + timedelta(seconds=10 * i)) for i in range(6)]   # after a pause
    log.write_text("".join(lines))
    last = (t0 + timedelta(hours=5, seconds=50) - datetime(1970, 1, 1)).total_seconds()
    written = last - 3600 + 2                                 # the log is in UTC+1, its last line 2 s ago
    os.utime(log, (written, written))
    now = time.time()
    cmap = readback.clock_map([(str(log), 0, log.stat().st_size)], str(log), now)
    assert cmap is not None and cmap.steps == 1
    assert cmap.offsets[1] == -3600
    assert cmap.offsets[0] == -3600 - 3590        # 02:59:50 CEST lands where 02:00:00 CET does (one step)
    placer = cmap.placer()
    placed = [placer.place(ts) for ts in (last - 5 * 3600 - 50 + 3590, last - 5 * 3600 - 50)]
    assert placed[0] == placed[1]


# ---------------------------------------------------------------------------------------------- the live clock
class FakeTime:
    """The system's wall clock and monotonic clock, moved by the test."""

    def __init__(self):
        self.wall, self.mono = 1_800_000_000.0, 5_000.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def test_the_steady_clock_follows_the_monotonic_clock_and_tells_each_step_once(caplog):
    t = FakeTime()
    clock = SteadyClock(wall=lambda: t.wall, mono=lambda: t.mono)
    caplog.set_level("WARNING", logger="exporter.sidecar.steady_clock")
    t.advance(10)
    assert clock() == 1_800_000_010.0 and clock.step() == 0.0
    t.wall -= 3600                                  # NTP steps the system clock back an hour
    t.advance(5)
    assert clock() == 1_800_000_015.0 and clock.step() == -3600.0
    clock.tell_step()
    clock.tell_step()
    t.wall += 20                                    # a small correction after it: not a new step worth a line
    clock.tell_step()
    t.wall += 7200                                  # then forward two hours: a new one
    clock.tell_step()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said
    assert said[0].startswith("the system clock moved -3600 s from the one sglang-exporter keeps")
    assert said[0].endswith("the dates it shows are 3600 s ahead of the system's until it restarts")
    assert said[1].startswith("the system clock moved +3620 s")


def live_sidecar(tmp_path, clock_kind: str):
    """A prepared sidecar on an empty log, its clock the steady one or (the control) the wall clock itself,
    both read from a FakeTime; returns (sidecar, time, log path)."""
    log = tmp_path / "sglang.log"
    log.write_text("")
    t = FakeTime()
    clock = SteadyClock(wall=lambda: t.wall, mono=lambda: t.mono) if clock_kind == "steady" else (lambda: t.wall)
    sc = Sidecar(Config(log_files=(str(log),)), clock=clock)
    sc.prepare()
    return sc, t, log


@pytest.mark.parametrize("clock_kind", ["steady", "wall"])
def test_a_backward_step_of_the_system_clock_pages_no_storm(tmp_path, clock_kind):
    """20 minutes of a retraction storm, quiet for 15, one quiet minute's worth of retractions (frequent, not a
    storm), then the system clock steps back an hour. With the sidecar's steady clock the storm stays over,
    20 minutes later too; the control, a sidecar on the wall clock, pages a storm out of that quiet minute
    (its retractions counted as still to come for the next hour)."""
    sc, t, log = live_sidecar(tmp_path, clock_kind)

    def retract(n: int) -> None:
        with open(log, "a") as fh:
            fh.write(f"[{stamp(datetime.now())} TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
                     "#new_token_ratio: 0.7000 -> 0.8000\n" * n)
        sc.poll_logs_once()

    def firing() -> set[str]:
        return {sid for sid, j in sc.view().snapshot.judgements.items() if j.firing and sid in PAGING}

    for _ in range(20):
        retract(20)
        t.advance(60)
        sc.evaluate_once()
    assert firing() == set(PAGING)
    for _ in range(15):
        t.advance(60)
        sc.evaluate_once()
    retract(20)
    assert firing() == {"retractions_frequent"}
    t.wall -= 3600
    sc.evaluate_once()
    try:
        if clock_kind == "wall":
            assert "retraction_storm" in firing()   # the control: what a step did before steady_clock.py
            return
        assert firing() == {"retractions_frequent"}
        for _ in range(20):
            t.advance(60)
            sc.evaluate_once()
        assert firing() == set()
    finally:
        sc.shutdown()


@pytest.mark.parametrize("clock_kind", ["steady", "wall"])
def test_a_forward_step_of_the_system_clock_takes_no_server_for_stalled(tmp_path, clock_kind):
    """A server printing a decode line every 5 s with requests queued; the system clock jumps 10 minutes ahead
    between two of its lines. On the steady clock nothing stalled; the control, on the wall clock, judges ten
    silent minutes and fires `stalled` (a critical page) until the next line."""
    sc, t, log = live_sidecar(tmp_path, clock_kind)
    try:
        for _ in range(60):
            with open(log, "a") as fh:
                fh.write(f"[{stamp(datetime.now())} TP0] Decode batch, #running-req: 5, #token: 100, token usage: "
                         "0.50, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 3\n")
            sc.poll_logs_once()
            t.advance(5)
            sc.evaluate_once()
        t.wall += 600
        sc.evaluate_once()
        stalled = sc.view().snapshot.judgements["stalled"].firing
        assert stalled is (clock_kind == "wall")
    finally:
        sc.shutdown()
