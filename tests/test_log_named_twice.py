"""Log files named more than once: a `--log-file` glob that matches the live log and its rotated copies
(`sglang.log*`), and one file under two names (`a.log` and `./a.log`, a path and a glob matching it, a symlink).
Every line is counted once, at start-up (history replayed from the copy as part of the live file) and while
following (each rotation's copy is read as part of the live file, never on its own), across restarts; copies
and second names are no sources of their own. Waits are polls of the follower, driven by the test."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pytest
from helpers import free_port, wait_until

from exporter.config import Config
from exporter.ingest.follower import Follower
from exporter.ingest.rotation import in_log_order, rotated_copies
from exporter.sidecar.run import Sidecar

STARTUP = ("[{t}] server_args=ServerArgs(model_path='m', served_model_name='m', schedule_conservativeness=1.0)\n"
           "[{t}] The server is fired up and ready to roll!\n")


def now() -> str:
    return datetime.now(timezone.utc).replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S")


def retractions(n: int) -> str:
    return "".join(f"[{now()} TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
                   f"#new_token_ratio: 0.7000 -> 0.8000\n" for _ in range(n))


def rotate(live) -> None:
    """logrotate's numbered rename rotation: live.log.1 -> live.log.2, live.log -> live.log.1, a new live.log."""
    one, two = f"{live}.1", f"{live}.2"
    if os.path.exists(one):
        os.replace(one, two)
    os.replace(live, one)
    live.write_text("")


def sidecar(patterns, positions=None) -> Sidecar:
    sc = Sidecar(Config(log_files=tuple(str(p) for p in patterns), positions_file=str(positions) if positions
                        else None))
    sc.prepare()
    return sc


def test_rotated_copies_are_the_names_rotated_from_another():
    names = ["/a/live.log", "/a/live.log.1", "/a/live.log-20261127", "/a/live.log_2", "/a/live.logx",
             "/a/other.log", "/b/live.log.1", "/a/x.log.1.2"]
    assert rotated_copies(names) == {"/a/live.log.1": "/a/live.log", "/a/live.log-20261127": "/a/live.log",
                                     "/a/live.log_2": "/a/live.log"}


def test_in_log_order_puts_each_files_copies_before_it_oldest_first():
    assert in_log_order(["s.log", "s.log.1", "s.log.10", "s.log.2"]) == ["s.log.10", "s.log.2", "s.log.1", "s.log"]
    assert in_log_order(["a.log", "s.log", "s.log-20261127", "s.log-20261125", "b.log"]) == [
        "a.log", "s.log-20261125", "s.log-20261127", "s.log", "b.log"]
    assert in_log_order(["0.log", "0.log.20261127-120000", "0.log.20261126-235959"]) == [
        "0.log.20261126-235959", "0.log.20261127-120000", "0.log"]            # kubelet's
    assert in_log_order(["b.log", "a.log", "s.log.1"]) == ["b.log", "a.log", "s.log.1"]   # no live file: as given


@pytest.mark.parametrize("resume", [False, True], ids=["fresh", "resumed"])
def test_start_up_history_reaching_into_a_copy_the_glob_matches_is_counted_once(tmp_path, resume):
    """Start-up and 7 retractions went to live.log.1 before it rotated, 5 more to live.log since: 12 counted,
    by the glob as by the path, and again after a restart from the positions file (+2 written meanwhile)."""
    live = tmp_path / "live.log"
    (tmp_path / "live.log.1").write_text(STARTUP.format(t=now()) + retractions(7))
    live.write_text(retractions(5))
    pos = tmp_path / "positions.json"
    glob_sc = sidecar([f"{live}*"], pos)
    path_sc = sidecar([live])
    assert glob_sc.view().retractions_total == path_sc.view().retractions_total == 12
    assert [s for s in glob_sc.view().sources] == [str(live)]
    path_sc.shutdown()
    if resume:
        glob_sc.shutdown()
        with open(live, "a") as fh:
            fh.write(retractions(2))
        glob_sc = sidecar([f"{live}*"], pos)
        assert glob_sc.view().retractions_total == 14
    glob_sc.shutdown()


def test_from_start_on_a_glob_replays_the_copies_it_matched_oldest_first_then_the_live_file(tmp_path):
    """--from-start with `live.log*` over live.log.2 (the start-up and 3 retractions), live.log.1 (4), a
    compressed live.log.3.gz and live.log (5): 12 counted, once each, on one clock; with the path alone only
    live.log's 5 (the path names one file)."""
    live = tmp_path / "live.log"
    (tmp_path / "live.log.2").write_text(STARTUP.format(t=now()) + retractions(3))
    (tmp_path / "live.log.1").write_text(retractions(4))
    (tmp_path / "live.log.3.gz").write_bytes(b"\x1f\x8b\x08\x00 not lines")
    live.write_text(retractions(5))
    for patterns, want in (([f"{live}*"], 12), ([live], 5)):
        sc = Sidecar(Config(log_files=tuple(str(p) for p in patterns), from_start=True))
        sc.prepare()
        assert sc.view().retractions_total == want, patterns
        assert list(sc.view().sources) == [str(live)]
        sc.shutdown()


def test_rotations_while_following_a_glob_count_each_line_once(tmp_path):
    """Three logrotate rotations (live -> .1 -> .2) while a sidecar follows `live.log*`: every retraction once,
    only live.log a source, and the same again in a sidecar resumed from the positions file."""
    live, pos = tmp_path / "live.log", tmp_path / "positions.json"
    live.write_text(STARTUP.format(t=now()))
    sc = sidecar([f"{live}*"], pos)
    written = 0
    for n in (3, 4, 5):
        with open(live, "a") as fh:
            fh.write(retractions(n))
        written += n
        sc.poll_logs_once()
        rotate(live)
        sc.poll_logs_once()
        assert sc.view().retractions_total == written
    with open(live, "a") as fh:
        fh.write(retractions(2))
    sc.poll_logs_once()
    view = sc.view()
    assert view.retractions_total == written + 2 == 14
    assert list(view.log_sources) == [str(live)] and [s for s in view.sources] == [str(live)]
    sc.save_positions(force=True)
    sc.shutdown()
    resumed = sidecar([f"{live}*"], pos)
    resumed.poll_logs_once()
    assert resumed.view().retractions_total == 14
    resumed.shutdown()


def test_a_copy_followed_before_its_live_file_appeared_is_let_go(tmp_path):
    """Only live.log.1 is there at join: followed on its own. live.log appears: the copy is let go (its source
    with it), live.log read from its start, and the next rotation of live.log into live.log.1 reads nothing twice."""
    live, one = tmp_path / "live.log", tmp_path / "live.log.1"
    one.write_text("old 1\n")
    f = Follower([f"{live}*"], from_start=True)
    assert [ln.text for ln in f.poll()] == ["old 1"] and set(f.stats) == {str(one)}
    live.write_text("new 1\n")
    assert [(ln.source, ln.text) for ln in f.poll()] == [(str(live), "new 1")]
    assert set(f.stats) == {str(live)} and set(f.positions()) == {str(live)}
    with open(live, "a") as fh:
        fh.write("new 2\n")
    os.replace(live, one)                          # rotated, then recreated
    live.write_text("new 3\n")
    assert [ln.text for ln in f.poll()] == ["new 2", "new 3"]
    assert f.poll() == [] and set(f.stats) == {str(live)}
    f.close()


def test_a_live_file_gone_while_its_copies_are_there_keeps_them_from_being_read(tmp_path):
    """live.log deleted and not recreated (the server stopped) while live.log.1, an older rotation, is there:
    once the deleted file is drained and let go, live.log.1 is still a copy, not a new file to read from its
    start; a new live.log is read from its start."""
    live, one = tmp_path / "live.log", tmp_path / "live.log.1"
    live.write_text("a\n")
    clock = [0.0]
    f = Follower([f"{live}*"], from_start=True, rotate_grace=1.0, clock=lambda: clock[0])
    assert [ln.text for ln in f.poll()] == ["a"]
    os.replace(live, one)
    live.write_text("b\n")
    assert [ln.text for ln in f.poll()] == ["b"]
    live.unlink()
    clock[0] = 5.0                                 # past the grace: the deleted file is let go
    assert f.poll() == [] and f.poll() == []
    assert set(f.stats) == {str(live)} and not f.stats[str(live)].up
    live.write_text("c\n")
    assert [ln.text for ln in f.poll()] == ["c"]
    f.close()


def test_one_file_under_several_names_is_one_log(tmp_path, monkeypatch, caplog):
    """live.log named as a path, as ./live.log, through a symlink and by a glob: its 9 retractions count 9
    (at start-up and for lines written later), it is the one source, and the glob is not reported missing."""
    monkeypatch.chdir(tmp_path)
    live = tmp_path / "live.log"
    live.write_text(STARTUP.format(t=now()) + retractions(9))
    (tmp_path / "link.log").symlink_to(live)
    caplog.set_level("INFO", logger="exporter.ingest.follower")
    sc = sidecar([live, "./live.log", tmp_path / "link.log", tmp_path / "*.log"])
    assert sc.view().retractions_total == 9
    with open(live, "a") as fh:
        fh.write(retractions(3))
    sc.poll_logs_once()
    view = sc.view()
    assert view.retractions_total == 12 and list(view.sources) == [str(live)]
    assert "missing" not in sc.follower.join_status().values()
    said = sorted(r.getMessage() for r in caplog.records if "not followed on its own" in r.getMessage())
    assert said == sorted(f"log {name} (from --log-file {pat}) is not followed on its own: it is the same file "
                          f"as {live} (read once, as that)" for name, pat in [
                              ("./live.log", "./live.log"), (str(tmp_path / "link.log"), str(tmp_path / "link.log"))])
    sc.shutdown()


def test_serve_on_a_glob_over_the_handoffs_rotations_counts_each_line_once(tmp_path):
    """As deployed with the log hand-off rotating every 4 KiB (3 backups) and `--log-file 'sglang.log*'`: 20
    bursts of 20 retractions, each released once the sidecar has read the one before, through about ten
    rotations: the count is what was written after every burst (a copy read again would show at once), and
    the live file is the one source. Real processes on 127.0.0.1; waits are polls with deadlines."""
    root = Path(__file__).resolve().parents[1]
    logs, go = tmp_path / "logs", tmp_path / "go"
    logs.mkdir()
    go.mkdir()
    writer = tmp_path / "writer.py"
    writer.write_text(
        "import os, sys, time\nfrom datetime import datetime, timezone\n"
        "for burst in range(20):\n"
        "    t = datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M:%S')\n"
        "    for _ in range(20):\n"
        "        print(f'[{t} TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, '\n"
        "              '#new_token_ratio: 0.7000 -> 0.8000', flush=True)\n"
        f"    while not os.path.exists(os.path.join({str(go)!r}, str(burst))):\n"
        "        time.sleep(0.005)      # released by the test once the sidecar read this burst\n")
    port = free_port()
    serve = subprocess.Popen([sys.executable, "-m", "exporter", "serve", "--log-file", f"{logs}/sglang.log*",
                              "--listen", f"127.0.0.1:{port}"], cwd=root, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env={**os.environ, "SGLANG_EXPORTER_POLL_INTERVAL": "0.05"},
                             start_new_session=True)
    handoff = None

    def exposed() -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            lines = r.read().decode().splitlines()
        return {k: float(v) for k, v in (ln.rsplit(" ", 1) for ln in lines if ln and not ln.startswith("#"))}

    try:
        wait_until(lambda: exposed(), timeout=30, what="serve to answer")
        handoff = subprocess.Popen([sys.executable, str(root / "exporter" / "ingest" / "handoff.py"),
                                    f"--file={logs}/sglang.log", "--max-bytes=4KiB", "--backups=3", "--no-copy",
                                    "--", sys.executable, str(writer)], start_new_session=True)
        for burst in range(20):
            want = 20 * (burst + 1)
            got = wait_until(lambda want=want: (n := exposed().get("sglang_exporter_retractions_total", 0)) >= want
                             and n, timeout=30, what=f"burst {burst} read")
            assert got == want, f"after burst {burst}: {got} counted, {want} written"
            (go / str(burst)).touch()
        assert handoff.wait(timeout=30) == 0
        metrics = exposed()
        assert metrics["sglang_exporter_retractions_total"] == 400
        assert metrics[f'sglang_exporter_log_rotations_total{{source="{logs}/sglang.log"}}'] >= 5
        assert sorted(k for k in metrics if k.startswith("sglang_exporter_source_up{")) == [
            f'sglang_exporter_source_up{{source="{logs}/sglang.log"}}']
    finally:
        for proc in (handoff, serve):
            if proc is not None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
