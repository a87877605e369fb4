"""A followed path rotated more than once between the saved position and a restart, or between two polls.

The files it went through in between (created and rotated away again while nobody read them) are read whole,
oldest first, after the file last read and before the file the path names now: every complete line exactly
once, in order. Older generations are not read again, also where the file system keeps coarse modification
times (ties are told apart by the copies' names). Waits are polls of the follower, driven by the test.
"""
from __future__ import annotations

import os
import re
import shutil
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
from exporter.sidecar import checkpoint
from exporter.sidecar.run import Sidecar


def restart(f: Follower, patterns: list[str], **kw) -> Follower:
    """What a restart sees: the positions saved through the positions file's bytes, a new follower."""
    data = checkpoint.Checkpoint(f.positions()).to_bytes()
    return Follower(patterns, positions=checkpoint.parse(data, "positions.json").positions, **kw)


def append(p: Path, *lines: str) -> None:
    with open(p, "a") as fh:
        fh.write("".join(ln + "\n" for ln in lines))


def rotate_numbered(p: Path, keep: int = 5) -> None:
    """logrotate `create` / RotatingFileHandler: a.log.N -> a.log.N+1, ..., a.log -> a.log.1, new a.log."""
    for i in range(keep - 1, 0, -1):
        if (p.parent / f"{p.name}.{i}").exists():
            os.rename(p.parent / f"{p.name}.{i}", p.parent / f"{p.name}.{i + 1}")
    os.rename(p, p.parent / f"{p.name}.1")
    p.touch()


def read_one_line(p: Path) -> Follower:
    """A follower of ``p`` that has read its first line, "1"."""
    append(p, "1")
    f = Follower([str(p)], from_start=True)
    assert texts(f) == ["1"]
    return f


def rotated_twice(p: Path) -> None:
    """"2" written, a rotation, "3" written, a rotation: a.log.2 holds 1-2, a.log.1 holds 3, a.log is new."""
    append(p, "2")
    rotate_numbered(p)
    append(p, "3")
    rotate_numbered(p)


def texts(f: Follower) -> list[str]:
    out = []
    for _ in range(20):                             # a few polls: each file read on its own budget
        got = [ln.text for ln in f.poll()]
        if not got and out:
            break
        out += got
    return out


def tick(paths, ns: int) -> None:
    """Set modification times: distinct ticks (a fine clock) or one shared tick (a coarse one)."""
    for i, p in enumerate(paths):
        os.utime(p, ns=(ns + i, ns + i) if ns else (10**18, 10**18))


@pytest.mark.parametrize("coarse", [False, True], ids=["fine-mtime", "coarse-mtime"])
def test_two_rename_rotations_while_down_read_the_file_between(tmp_path, coarse):
    p = tmp_path / "a.log"
    append(p, "old 1")
    rotate_numbered(p)                              # an older generation, read long ago: a.log.1 -> a.log.3
    append(p, "1", "2")
    f = Follower([str(p)], from_start=True)
    assert texts(f) == ["1", "2"]
    f.poll()
    append(p, "3")                                  # written after the last saved position
    rotate_numbered(p)                              # the saved file is a.log.1
    append(p, "4", "5")
    rotate_numbered(p)                              # a file created and rotated away while down: a.log.1
    append(p, "6")
    rotate_numbered(p)                              # and another: saved a.log.3, between a.log.2, a.log.1
    append(p, "7")
    ordered = [tmp_path / f"a.log.{i}" for i in (4, 3, 2, 1)] + [p]
    tick(ordered, 0 if coarse else 1_700_000_000_000_000_000)
    g = restart(f, [str(p)])
    assert texts(g) == ["3", "4", "5", "6", "7"]
    assert g.stats[str(p)].rotations == 3 and g.stats[str(p)].rotated_unread == 0


def test_dated_copies_through_a_symlink_kubelet_style(tmp_path):
    pod = tmp_path / "pods" / "ns_sglang-0_0f0e" / "sglang"
    pod.mkdir(parents=True)
    (tmp_path / "containers").mkdir()
    link, cur = tmp_path / "containers" / "sglang-0.log", pod / "0.log"
    append(cur, "a")
    os.symlink(cur, link)
    f = Follower([str(link)], from_start=True)
    assert texts(f) == ["a"]
    append(cur, "b")
    for stamp, lines in [("20261127-120000", ["c"]), ("20261127-120010", ["d", "e"]), ("20261127-120020", [])]:
        os.rename(cur, pod / f"0.log.{stamp}")
        append(cur, *lines)
    (pod / "0.log.20261127-110000.gz").write_bytes(b"\x1f\x8b older, compressed")
    append(cur, "f")
    tick([pod / "0.log.20261127-120000", pod / "0.log.20261127-120010", pod / "0.log.20261127-120020", cur], 0)
    g = restart(f, [str(link)])
    assert texts(g) == ["b", "c", "d", "e", "f"]


def test_the_path_rotated_away_twice_and_not_created_again(tmp_path):
    p = tmp_path / "a.log"
    f = read_one_line(p)
    rotated_twice(p)
    os.unlink(p)                                    # the writer has not created it yet
    tick([tmp_path / "a.log.2", tmp_path / "a.log.1"], 1_700_000_000_000_000_000)
    g = restart(f, [str(p)])
    assert texts(g) == ["2", "3"]
    append(p, "4")
    assert texts(g) == ["4"]


def test_two_copytruncates_while_down(tmp_path):
    p = tmp_path / "a.log"
    append(p, "2026-11-27 cycle one 1")
    f = Follower([str(p)], from_start=True)
    assert len(texts(f)) == 1
    append(p, "2026-11-27 cycle one 2")
    for cycle in ("two", "three"):
        if (tmp_path / "a.log.1").exists():
            os.rename(tmp_path / "a.log.1", tmp_path / "a.log.2")
        shutil.copyfile(p, tmp_path / "a.log.1")
        os.truncate(p, 0)
        append(p, f"2026-11-27 cycle {cycle} 1")
    tick([tmp_path / "a.log.2", tmp_path / "a.log.1", p], 1_700_000_000_000_000_000)
    g = restart(f, [str(p)])
    assert texts(g) == ["2026-11-27 cycle one 2", "2026-11-27 cycle two 1", "2026-11-27 cycle three 1"]


def test_a_restart_while_the_files_between_are_drained_reads_each_line_once(tmp_path):
    p = tmp_path / "a.log"
    append(p, "0")
    f = Follower([str(p)], from_start=True)
    texts(f)
    big = [f"line {i:04d} " + "x" * 40 for i in range(400)]
    append(p, *big[:100])
    for part in (big[100:200], big[200:300]):
        rotate_numbered(p)
        append(p, *part)
    rotate_numbered(p)
    append(p, *big[300:])
    tick([tmp_path / f"a.log.{i}" for i in (3, 2, 1)] + [p], 1_700_000_000_000_000_000)
    g = restart(f, [str(p)], poll_budget=3000, read_chunk=512)   # stops inside the files between
    first = [ln.text for ln in g.poll()] + [ln.text for ln in g.poll()]
    assert first == big[:len(first)] and 0 < len(first) < 300
    h = restart(g, [str(p)], poll_budget=3000, read_chunk=512)
    assert first + texts(h) == big


@pytest.mark.parametrize("rotations", [1, 2])
def test_a_file_stopped_at_the_poll_budget_holds_newer_ones_back(tmp_path, rotations):
    p = tmp_path / "a.log"
    append(p, "0")
    f = Follower([str(p)], from_start=True, poll_budget=2000, read_chunk=512)
    texts(f)
    big = [f"line {i:04d} " + "y" * 40 for i in range(300)]
    append(p, *big[:100])
    for i in range(rotations):                      # between two polls, live
        rotate_numbered(p)
        append(p, *big[100 * (i + 1):100 * (i + 2)])
    append(p, *big[100 * (rotations + 1):])
    tick([tmp_path / f"a.log.{i}" for i in range(rotations, 0, -1)] + [p], 1_700_000_000_000_000_000)
    got = []
    for _ in range(40):
        got += [ln.text for ln in f.poll()]
    assert got == big
    assert f.stats[str(p)].rotations == rotations


def test_two_rotations_between_polls_lose_nothing(tmp_path):
    p = tmp_path / "a.log"
    f = read_one_line(p)
    rotated_twice(p)
    append(p, "4")
    assert texts(f) == ["2", "3", "4"]
    held = len(f.tails[str(p)].old)                 # drained until quiet for rotate_grace
    for i in range(5, 25):                          # twenty between two polls: closed once read, except the
        rotate_numbered(p, keep=30)                 # newest (its writer may not have left it) and the one
        append(p, str(i))                           # open before
    assert texts(f) == [str(i) for i in range(5, 25)]
    assert len(f.tails[str(p)].old) - held == 2
    append(p, "25")
    rotate_numbered(p, keep=30)                     # one rotation: as before
    append(p, "26")
    assert texts(f) == ["25", "26"]


# -- the sidecar's start-up: a log first seen after the last save ------------------------------------------
STARTUP = ("[{t}] server_args=ServerArgs(model_path='m', served_model_name='m', schedule_conservativeness=1.0)\n"
           "[{t}] The server is fired up and ready to roll!\n")


def retractions(n: int) -> list[str]:
    t = datetime.now(timezone.utc).replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S")
    return [f"[{t} TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
            f"#new_token_ratio: 0.7000 -> 0.8000"] * n


def killed(sc: Sidecar) -> None:
    """SIGKILL as far as the positions file sees it: no save at the end; the lock dropped as the kernel does."""
    sc.follower.close()
    checkpoint.release(sc.positions_lock)


@pytest.mark.parametrize("startup", [False, True], ids=["no-start-up", "start-up"])
@pytest.mark.parametrize("pattern", ["glob", "path"])
def test_a_log_created_after_the_last_save_and_rotated_while_down_is_counted_whole(tmp_path, pattern, startup):
    """The sidecar saved its positions when sglang.log did not exist yet, read 4 retractions from it and was
    killed before the next save; while it was down the log got 3 more, was rotated, got 5, was rotated, got 2.
    Resumed: every retraction since (14), not only the current file's, on top of what was saved; an older
    generation (sglang.log.9, from before the save: 50, counted at the first start only by the glob, which
    matched it while sglang.log was missing) is not read again. With or without an SGLang start-up at its top
    (without one, the start-up history replay cannot reach back to it)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    live, pos = logs / "sglang.log", tmp_path / "positions.json"
    old = logs / "sglang.log.9"
    append(old, *retractions(50))
    os.utime(old, (1_700_000_000, 1_700_000_000))
    patterns = (f"{live}*",) if pattern == "glob" else (str(live),)
    sc = Sidecar(Config(log_files=patterns, positions_file=str(pos)))
    sc.prepare()                                    # saves: no sglang.log yet
    before = 50 if pattern == "glob" else 0
    assert sc.view().retractions_total == before
    append(live, *([STARTUP.format(t="2026-11-27 12:00:00").rstrip("\n")] if startup else []), *retractions(4))
    sc.poll_logs_once()
    assert sc.view().retractions_total == before + 4
    killed(sc)
    append(live, *retractions(3))
    rotate_numbered(live, keep=3)
    append(live, *retractions(5))
    rotate_numbered(live, keep=3)
    append(live, *retractions(2))
    resumed = Sidecar(Config(log_files=patterns, positions_file=str(pos)))
    resumed.prepare()
    resumed.poll_logs_once()
    assert resumed.view().retractions_total == before + 14
    resumed.shutdown()


def test_serve_killed_then_its_log_rotated_three_times_counts_every_line_once(tmp_path):
    """The real process: `serve` on `sglang.log*` with a positions file, SIGKILLed after it counted 30
    retractions (10 more written after its last save); while it is down the log is rotated three times with
    lines between. Restarted, it counts each of the 66 once. Processes on 127.0.0.1; waits are polls."""
    root = Path(__file__).resolve().parents[1]
    logs, pos = tmp_path / "logs", tmp_path / "positions.json"
    logs.mkdir()
    live = logs / "sglang.log"
    live.touch()
    port = free_port()

    def serve(interval: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", "exporter", "serve", "--log-file", f"{live}*", "--positions-file", str(pos),
             "--listen", f"127.0.0.1:{port}"], cwd=root, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "serve.err", "ab"),
            env={**os.environ, "SGLANG_EXPORTER_POLL_INTERVAL": "0.05", "SGLANG_EXPORTER_POSITIONS_INTERVAL": interval},
            start_new_session=True)

    def counted() -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return None
        m = re.search(r"^sglang_exporter_retractions_total (\S+)$", text, re.M)
        return float(m.group(1)) if m else None

    def saved() -> int:
        try:
            return checkpoint.parse(pos.read_bytes(), str(pos)).positions[str(live)]["offset"]
        except (OSError, KeyError, checkpoint.CheckpointError):
            return -1

    proc = serve("3600")                            # saves at start and at its end only
    try:
        wait_until(lambda: counted() is not None, timeout=60, what="serve to answer")
        append(live, *retractions(20))
        wait_until(lambda: counted() == 20, timeout=30, what="20 counted")
        os.killpg(proc.pid, signal.SIGTERM)         # a clean stop saves them
        assert proc.wait(timeout=30) == 0 and saved() == live.stat().st_size
        proc = serve("3600")
        wait_until(lambda: counted() == 20, timeout=60, what="restart")
        append(live, *retractions(10))
        wait_until(lambda: counted() == 30, timeout=30, what="10 more counted")
        os.killpg(proc.pid, signal.SIGKILL)          # its last save holds 20
        proc.wait(timeout=10)
        for n in (11, 12, 13):
            rotate_numbered(live)
            append(live, *retractions(n))
        proc = serve("0.1")
        wait_until(lambda: counted() == 66, timeout=60, what=lambda: f"66 counted ({counted()})")
        assert saved() == live.stat().st_size
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def test_a_saved_files_inode_given_to_the_paths_new_file_is_not_read_twice(tmp_path, caplog):
    """kubelet gzips a rotated file and deletes it; the file system may give its inode to the next 0.log. A
    saved position of that rotated file, taken while it was empty (no head to check), then names the path's
    own new file: it is the path's file, read once from its start, not also drained as the rotated one (the
    fault suite's cri schedule, seeds 73 and 115 of 200, read 15 lines twice)."""
    p = tmp_path / "0.log"
    append(p, "1")
    f = Follower([str(p)], from_start=True)
    assert texts(f) == ["1"]
    append(p, "2")
    os.rename(p, tmp_path / "0.log.20261127-120000")
    append(p, "3", "4")
    saved = checkpoint.parse(checkpoint.Checkpoint(f.positions()).to_bytes(), "p").positions
    st = os.stat(p)                                 # as if the empty file rotated away had had this inode
    saved[str(p)]["draining"] = [{"dev": st.st_dev, "ino": st.st_ino, "offset": 0, "lineno": 0, "skip": False,
                                  "fp": "", "fp_len": 0, "name": str(tmp_path / "0.log.20261127-115900")}]
    g = Follower([str(p)], positions=saved)
    assert texts(g) == ["2", "3", "4"]


def test_an_older_copy_its_writer_finished_late_is_not_read_again(tmp_path):
    """A writer that finishes its line in the renamed file after the new one was created leaves the older copy
    with the later modification time. When the new file, still empty, is rotated away in its turn, that
    older copy (long read and let go) is no file in between: it is older by its name."""
    clock = [0.0]
    p = tmp_path / "a.log"
    append(p, "1")
    f = Follower([str(p)], from_start=True, clock=lambda: clock[0])
    assert texts(f) == ["1"]
    rotate_numbered(p)                              # a.log -> a.log.1, a new empty a.log
    append(tmp_path / "a.log.1", "2")               # the writer's last line, after the new file appeared
    os.utime(p, ns=(1_700_000_000_000_000_000,) * 2)
    os.utime(tmp_path / "a.log.1", ns=(1_700_000_001_000_000_000,) * 2)
    assert texts(f) == ["2"]
    clock[0] += 10                                  # quiet for rotate_grace: a.log.1 is let go
    f.poll()
    assert f.tails[str(p)].old == []
    rotate_numbered(p)                              # the empty file goes to a.log.1, the older to a.log.2
    append(p, "3")
    assert texts(f) == ["3"]


def copytruncate(p: Path) -> None:
    """logrotate copytruncate with numbered copies: a.log.1 -> a.log.2, a copy of a.log to a.log.1, a.log
    emptied in place."""
    if (p.parent / f"{p.name}.1").exists():
        os.rename(p.parent / f"{p.name}.1", p.parent / f"{p.name}.2")
    shutil.copyfile(p, p.parent / f"{p.name}.1")
    os.truncate(p, 0)


def test_two_copytruncates_between_polls(tmp_path):
    p = tmp_path / "a.log"
    append(p, "2026-11-27 cycle one 1")
    f = Follower([str(p)], from_start=True)
    assert texts(f) == ["2026-11-27 cycle one 1"]
    append(p, "2026-11-27 cycle one 2")
    copytruncate(p)
    append(p, "2026-11-27 cycle two 1")
    copytruncate(p)
    append(p, "2026-11-27 cycle three 1")
    tick([tmp_path / "a.log.2", tmp_path / "a.log.1", p], 1_700_000_000_000_000_000)
    assert texts(f) == ["2026-11-27 cycle one 2", "2026-11-27 cycle two 1", "2026-11-27 cycle three 1"]


def test_a_copy_read_to_the_poll_budget_holds_the_truncated_file_back(tmp_path):
    p = tmp_path / "a.log"
    append(p, "2026-11-27 first")
    f = Follower([str(p)], from_start=True, poll_budget=2000, read_chunk=512)
    texts(f)
    big = [f"2026-11-27 line {i:04d} " + "z" * 40 for i in range(200)]
    append(p, *big[:100])                           # unread when the file is copied and truncated
    copytruncate(p)
    append(p, *big[100:])
    got = []
    for _ in range(40):
        got += [ln.text for ln in f.poll()]
    assert got == big
