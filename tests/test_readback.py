"""Finding the latest SGLang start-up in a log and placing the log's clock in real time."""
from __future__ import annotations

import calendar
import os

from exporter.ingest.lines import read_range
from exporter.sidecar import readback

ARGS_OLD = "[2025-06-01 10:00:00] server_args=ServerArgs(model_path='a', tp_size=1)\n"
ARGS_NEW = "[2025-06-01 12:00:00] server_args={'model_path': 'b', 'tp_size': 2}\n"
BATCH = ("[2025-06-01 12:00:05 TP0] Decode batch. #running-req: 1, #token: 10, token usage: 0.01, "
         "cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0\n")
QUOTED = ("[2025-06-01 12:00:06] Receive: obj=GenerateReqInput(text='please print "
          "server_args={\\'model_path\\': \\'evil\\'}', sampling_params={})\n")


def test_finds_the_latest_start_up_and_not_a_prompt_that_quotes_one(tmp_path):
    log = tmp_path / "sglang.log"
    log.write_text(ARGS_OLD + BATCH * 3 + ARGS_NEW + BATCH * 2 + QUOTED + BATCH)
    start = readback.find_startup(str(log), log.stat().st_size)
    assert log.read_bytes()[start:].startswith(ARGS_NEW.encode())


def test_search_is_bounded_and_stops_at_the_end_it_is_given(tmp_path):
    log = tmp_path / "sglang.log"
    text = ARGS_OLD + BATCH * 1000
    log.write_text(text + ARGS_NEW)
    size = log.stat().st_size
    # the newest start-up lies past `end`: the one before it is found
    assert readback.find_startup(str(log), len(text)) == 0
    # a bound shorter than the distance to the only start-up in reach finds none
    assert readback.find_startup(str(log), len(text), max_bytes=len(BATCH) * 10) is None
    assert readback.find_startup(str(log), size, max_bytes=len(ARGS_NEW) + 5) == len(text)
    assert readback.find_startup(str(tmp_path / "missing.log"), 100) is None


def test_a_start_up_line_across_read_chunks_is_found(tmp_path, monkeypatch):
    monkeypatch.setattr(readback, "_CHUNK", 64)
    log = tmp_path / "sglang.log"
    log.write_text(BATCH * 7 + ARGS_NEW + BATCH * 5)
    start = readback.find_startup(str(log), log.stat().st_size)
    assert start == len(BATCH) * 7


def offset(path) -> float | None:
    cmap = readback.clock_map([(str(path), 0, path.stat().st_size)], str(path))
    return None if cmap is None else cmap.offsets[-1]


def test_the_clock_map_snaps_to_the_logs_zone(tmp_path):
    log = tmp_path / "sglang.log"
    log.write_text(ARGS_NEW + BATCH)
    last = calendar.timegm((2025, 6, 1, 12, 0, 5, 0, 0, 0))       # the last line's time, read as UTC
    real = last - 8 * 3600 + 3                                    # written in UTC+8, 3 s later
    os.utime(log, (real, real))
    assert offset(log) == -8 * 3600
    odd = last + 1234.5                                           # a clock simply off: taken as measured
    os.utime(log, (odd, odd))
    assert abs(offset(log) - 1234.5) < 1e-3
    bare = tmp_path / "bare.log"
    bare.write_text("no timestamps here\n")
    assert offset(bare) is None


def test_complete_end_leaves_an_unfinished_last_line_to_the_follower(tmp_path):
    log = tmp_path / "sglang.log"
    log.write_text(BATCH + "[2025-06-01 12:00:07 TP0] Decode ba")
    end, dev, ino = readback.complete_end(str(log))
    assert end == len(BATCH) and ino == log.stat().st_ino
    blocks = list(read_range(str(log), 0, end))
    assert [t for b in blocks for t in b.texts] == [BATCH.rstrip("\n")]


def test_a_start_up_in_a_rotated_file_is_reached_through_the_siblings(tmp_path):
    log = tmp_path / "sglang.log"
    old, older = tmp_path / "sglang.log.1", tmp_path / "sglang.log.2"
    older.write_text(BATCH * 2 + ARGS_OLD + BATCH)
    old.write_text(BATCH * 4)
    log.write_text(BATCH * 3)
    (tmp_path / "sglang.log.3.gz").write_bytes(b"\x1f\x8b compressed")
    (tmp_path / "sglang.logger").write_text(ARGS_NEW)        # another file that only shares the prefix
    for i, p in enumerate((older, old, log)):
        os.utime(p, (1000 + i, 1000 + i))
    ranges = readback.history(str(log), log.stat().st_size)
    assert ranges == [(str(older), len(BATCH) * 2, older.stat().st_size), (str(old), 0, old.stat().st_size),
                      (str(log), 0, log.stat().st_size)]
    # no start-up in reach: the current file alone when it fits (its per-rank lines and windows), else nothing
    assert readback.history(str(log), log.stat().st_size, max_bytes=len(BATCH) * 8) == \
        [(str(log), 0, log.stat().st_size)]
    assert readback.history(str(log), log.stat().st_size, max_bytes=len(BATCH) * 2) == []
