"""Fault injection: a writer of numbered lines, rotation in every mode, the follower killed and restarted from
its saved positions at random points. Every complete line must be handed out exactly once, in order.

The writer, the rotations, the polls, the saves of positions and the kills are steps of one seeded random
schedule on one thread, so an interleaving that fails is reproduced by its seed; time is a fake clock. A
"kill" is what SIGKILL leaves behind: the follower's state is dropped (its descriptors closed, as the kernel
does), and the consumer's lines are rolled back to its last save (the sidecar saves positions and counters in one file, after ingesting).
One test at the end runs a real writer thread at >= 1,000 lines/s against a real `Follower.run`.

In the rename modes a path may be rotated any number of times between two polls and since the last saved
position (the files in between are found by their modification times and names). What the schedule does not
do, because no reader can survive it (docs/tailing.md, "Limits"): in the other modes, two rotations since the
last saved position (kubelet compresses the file in between; a copy is recognised by a head the save may not
have); truncate or delete a file whose end was not yet saved (the data is gone); copytruncate a file whose
first line was not yet saved (nothing identifies the copy); rotate by copy or truncation in the middle of a
line.
"""
from __future__ import annotations

import gzip
import os
import random
import re
import shutil
import threading
from pathlib import Path

import pytest
from helpers import wait_until

from exporter.ingest.follower import Follower
from exporter.sidecar import checkpoint

GRACE = 5.0
N_LINES = 240
# seeds per mode (FAULT_SEEDS=150 for a longer hunt), with the ones that once failed: cri 73 and 115 read
# lines twice (an inode reused)
SEEDS = sorted({*range(int(os.environ.get("FAULT_SEEDS", "30"))), 73, 115})
NUM = re.compile(rb"(\d{6}) KV cache pool is full")


def line_bytes(i: int, cri: bool) -> bytes:
    msg = f"[2025-08-11 17:17:03 TP0] {i:06d} KV cache pool is full. Retract requests. #retracted_reqs: {i % 5}"
    msg += " " + "x" * (i % 11)
    if cri:
        return f"2025-08-11T17:17:03.{i:09d}Z stdout F {msg}\n".encode()
    return (msg + "\n").encode()


class Writer:
    """The program writing the log, and the rotation tool, as steps."""

    def __init__(self, d: Path, mode: str, rng: random.Random) -> None:
        self.d, self.mode, self.rng = d, mode, rng
        self.cri = mode == "cri"
        if mode == "cri":
            pod = d / "pods" / "ns_sglang-0_0f0e" / "sglang"
            pod.mkdir(parents=True)
            (d / "containers").mkdir()
            self.file = pod / "0.log"
            self.path = d / "containers" / "sglang-0_ns_sglang-0f0e.log"
            self.file.touch()
            os.symlink(os.path.relpath(self.file, self.path.parent), self.path)
        elif mode == "symlink":
            (d / "targets").mkdir()
            self.file = d / "targets" / "seg0.log"
            self.path = d / "current.log"
            self.file.touch()
            os.symlink(self.file, self.path)
        else:
            self.file = self.path = d / "app.log"
        self.fh = open(self.file, "ab", buffering=0)  # noqa: SIM115 - the writer's long-lived descriptor
        self.next = 0            # number of the next line to start
        self.pieces: list[bytes] = []
        self.reopen_in: int | None = None   # lines still written to the old file before reopening
        self.rot = 0

    @property
    def busy(self) -> bool:
        return bool(self.pieces) or self.reopen_in is not None

    def step(self) -> None:
        """Write one piece of the current line (a line is written in 1 to 3 pieces)."""
        if not self.pieces:
            if self.reopen_in == 0:
                self._reopen()
            elif self.reopen_in is not None:
                self.reopen_in -= 1
            data = line_bytes(self.next, self.cri)
            self.next += 1
            cuts = sorted(self.rng.sample(range(1, len(data)), self.rng.randrange(3)))
            self.pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
        self.fh.write(self.pieces.pop(0))

    def _reopen(self) -> None:
        self.fh.close()
        self.fh = open(self.file, "ab", buffering=0)  # noqa: SIM115
        self.reopen_in = None

    def _shift(self, base: Path) -> None:
        """logrotate's numbered names: app.log.1 -> app.log.2, ...; then app.log -> app.log.1."""
        for k in range(self.rot, 0, -1):
            src = Path(f"{base}.{k}")
            if src.exists():
                os.rename(src, f"{base}.{k + 1}")
        os.rename(base, f"{base}.1")

    def rotate(self) -> None:
        self.rot += 1
        m = self.mode
        if m in ("rename_create", "rename_delayed_reopen", "never_reopen"):
            self._shift(self.path)
            self.path.touch()                        # logrotate `create`
            if m == "rename_create":
                self.reopen_in = 0                   # the writer reopens before its next line
            elif m == "rename_delayed_reopen":
                self.reopen_in = self.rng.randrange(1, 40)
        elif m == "rename_missing":                  # the writer itself re-creates the file, later
            self._shift(self.path)
            self.reopen_in = self.rng.randrange(0, 20)
        elif m == "copytruncate":
            self._shift_copies()
            shutil.copyfile(self.path, f"{self.path}.1")
            os.truncate(self.path, 0)                # the writer's O_APPEND descriptor writes at 0 now
        elif m == "truncate":
            self.fh.close()
            self.fh = open(self.path, "wb", buffering=0)  # noqa: SIM115
        elif m == "delete_recreate":
            os.unlink(self.path)
            self._reopen()
        elif m == "symlink":                         # kubelet after a container restart: a new target
            new = self.file.parent / f"seg{self.rot}.log"
            new.touch()
            tmp = self.d / "link.tmp"
            os.symlink(new, tmp)
            os.replace(tmp, self.path)
            self.file = new
            self._reopen()
        elif m == "cri":                             # kubelet: rename to 0.log.<time>, compress the older ones
            stamp = f"20250811-1717{self.rot:02d}"
            for old in self.file.parent.glob("0.log.2*"):
                if not old.name.endswith(".gz"):
                    old.with_name(old.name + ".gz").write_bytes(gzip.compress(old.read_bytes()))
                    old.unlink()
            os.rename(self.file, f"{self.file}.{stamp}")
            self._reopen()                           # the runtime reopens at once
        else:
            raise AssertionError(m)

    def _shift_copies(self) -> None:
        for k in range(self.rot - 1, 0, -1):
            os.rename(f"{self.path}.{k}", f"{self.path}.{k + 1}")


MODES = ["rename_create", "rename_delayed_reopen", "rename_missing", "never_reopen", "copytruncate", "truncate",
         "delete_recreate", "symlink", "cri"]
AT_LINE_BOUNDARY = {"copytruncate", "truncate", "delete_recreate", "symlink", "cri"}
RENAMED_AWAY = {"rename_create", "rename_delayed_reopen", "rename_missing", "never_reopen"}   # numbered copies
DESTRUCTIVE = {"truncate", "delete_recreate"}      # the old content is gone: its end must be saved first


class Run:
    """One seeded schedule: the writer, the follower (or none while killed) and the consumer."""

    def __init__(self, d: Path, mode: str, seed: int) -> None:
        self.rng = random.Random(seed)
        self.mode = mode
        self.now = 0.0
        self.w = Writer(d, mode, self.rng)
        self.w.step()
        while self.w.pieces:                         # a first line, so the first file has a head
            self.w.step()
        self.got: list[int] = []
        self.saved_len = 0
        self.saved: dict | None = None
        self.f: Follower | None = self.start(None)
        self.commit()
        self.down = 0
        self.kills = self.restarts = 0

    def start(self, positions: dict | None) -> Follower:
        f = Follower([str(self.w.path)], from_start=True, rotate_grace=GRACE, clock=lambda: self.now,
                     positions=positions)
        assert set(f.join().values()) <= {"open", "missing"}
        return f

    def poll(self) -> None:
        for ln in self.f.poll():
            m = NUM.search(ln.text.encode())
            assert m, f"not a whole line: {ln.text!r}"
            assert ln.source == str(self.w.path)    # rotated and copied files speak for the followed path
            self.got.append(int(m.group(1)))

    def commit(self) -> None:
        # through the on-disk form, as the sidecar does
        self.saved = roundtrip(self.f.positions())
        self.saved_len = len(self.got)

    def kill(self) -> None:
        # Nothing of the old follower's state survives but the last save. Its descriptors are released as the
        # kernel does for a killed process (close() does nothing else: no flush, no save).
        self.f.close()
        self.f = None
        del self.got[self.saved_len:]
        self.down = self.rng.randrange(0, 30)
        self.kills += 1

    def saved_knows_current(self) -> bool:
        """The saved positions name the file the path names now (so at most one rotation since the save)."""
        e = self.saved[str(self.w.path)]
        try:
            st = os.stat(self.w.path)
        except FileNotFoundError:
            return False
        if (st.st_dev, st.st_ino) != (e["dev"], e["ino"]):
            return False
        if self.mode == "copytruncate":
            # the copy is recognised by the head saved; lines start alike (a timestamp), so a head shorter
            # than the first line does not tell this file's content from the next (docs/tailing.md)
            fp = bytes.fromhex(e["fp"])
            with open(self.w.path, "rb") as fh:
                return b"\n" in fp and fh.read(len(fp)) == fp
        return True

    def can_rotate(self) -> bool:
        w = self.w
        if w.reopen_in is not None or (self.mode in AT_LINE_BOUNDARY and w.pieces):
            return False
        if self.mode in DESTRUCTIVE:
            return self.f is not None          # rotate() saves the end first
        return self.mode in RENAMED_AWAY or self.saved_knows_current()

    def rotate(self) -> None:
        if self.mode in DESTRUCTIVE:
            self.poll()
            self.commit()
        self.w.rotate()

    def step(self) -> None:
        self.now += self.rng.uniform(0.0, 0.02)
        if self.f is None:
            if self.down == 0:
                self.f = self.start(self.saved)
                self.restarts += 1
            self.down -= 1
        r = self.rng.random()
        if r < 0.55:
            if self.w.next < N_LINES or self.w.pieces:
                self.w.step()
        elif r < 0.80:
            if self.f is not None:
                self.poll()
                if self.rng.random() < 0.4:
                    self.commit()
        elif r < 0.86:
            if self.can_rotate() and self.w.next < N_LINES:
                self.rotate()
        elif r < 0.875 and self.f is not None:
            self.kill()

    def finish(self) -> None:
        while self.w.next < N_LINES or self.w.pieces:
            self.step()
        if self.w.reopen_in is not None:
            self.w._reopen()
        if self.f is None:
            self.f = self.start(self.saved)
        for _ in range(3):
            self.poll()
            self.now += GRACE + 1


@pytest.mark.parametrize("mode", MODES)
def test_every_line_exactly_once_through_rotations_and_kills(tmp_path, mode):
    totals = {"kills": 0, "rotations": 0}
    for seed in SEEDS:
        d = tmp_path / f"seed{seed}"
        d.mkdir()
        run = Run(d, mode, seed)
        run.finish()
        run.f.close()
        assert run.got == list(range(N_LINES)), (
            f"mode {mode} seed {seed}: missing {sorted(set(range(N_LINES)) - set(run.got))[:10]}, "
            f"repeated {sorted({i for i in run.got if run.got.count(i) > 1})[:10]}")
        totals["kills"] += run.kills
        totals["rotations"] += run.w.rot
        run.w.fh.close()
    # the schedule really exercised what the test claims
    assert totals["kills"] >= len(SEEDS) and totals["rotations"] >= 2 * len(SEEDS), totals


def test_never_reopening_writer_is_read_on_and_reported_stale(tmp_path, caplog):
    p = tmp_path / "sglang.log"
    fh = open(p, "ab", buffering=0)  # noqa: SIM115 - `python -m sglang... > sglang.log`: never reopened
    now = [0.0]
    f = Follower([str(p)], from_start=True, rotate_grace=GRACE, clock=lambda: now[0])
    f.join()
    fh.write(b"a\n")
    assert [ln.text for ln in f.poll()] == ["a"]
    os.rename(p, tmp_path / "sglang.log.1")
    p.touch()                                        # logrotate `create`
    fh.write(b"b\n")
    assert [ln.text for ln in f.poll()] == ["b"]
    st = f.stats[str(p)]
    assert not st.stale and st.rotations == 1
    now[0] = GRACE + 0.5
    fh.write(b"c\nd\n")
    with caplog.at_level("WARNING"):
        assert [ln.text for ln in f.poll()] == ["c", "d"]
    assert st.stale and st.rotated_writes == 2
    assert sum("does not reopen" in r.getMessage() for r in caplog.records) == 1
    now[0] = 100.0                                   # quiet for long: still held, the writer has not moved on
    assert f.poll() == [] and st.stale
    fh.write(b"e\n")
    assert [ln.text for ln in f.poll()] == ["e"] and st.rotated_writes == 3
    fh.close()                                       # SGLang restarted: it writes to the new file now
    with open(p, "ab") as fh2:
        fh2.write(b"f\n")
    assert [ln.text for ln in f.poll()] == ["f"]
    now[0] = 200.0
    assert f.poll() == []
    assert not st.stale and f.positions()[str(p)]["draining"] == []
    f.close()


@pytest.mark.parametrize("seed", range(3))
def test_real_writer_thread_at_1000_lines_per_second_with_run(tmp_path, seed):
    """A real writer thread (>= 1,000 lines/s, rotating by rename+create, delayed reopen and copytruncate)
    against a real Follower.run on the sidecar's settings (timer polls, no wake on appends)."""
    p = tmp_path / "app.log"
    p.touch()
    n, per_tick = 2400, 25
    rng = random.Random(seed)
    # at least one poll (0.25 s = ~300 lines) between rotations: a file filled and copytruncated within one
    # poll interval is the "two rotations between polls" limit (docs/tailing.md)
    rotate_at = [300 + k * 500 + rng.randrange(100) for k in range(4)]
    stop_writer = threading.Event()
    pace = threading.Event()                         # never set: its wait() paces the writer

    def writer() -> None:
        fh = open(p, "ab", buffering=0)  # noqa: SIM115
        reopen_at = None
        for i in range(n):
            if i in rotate_at:
                kind = rotate_at.index(i) % 3
                if kind == 2:
                    shutil.copyfile(p, f"{p}.{i}")
                    os.truncate(p, 0)
                else:
                    os.rename(p, f"{p}.{i}")
                    p.touch()
                    reopen_at = i + (100 if kind == 1 else 0)
            if reopen_at is not None and i >= reopen_at:
                fh.close()
                fh = open(p, "ab", buffering=0)  # noqa: SIM115
                reopen_at = None
            fh.write(line_bytes(i, False))
            if i % per_tick == per_tick - 1 and not stop_writer.is_set():
                pace.wait(0.02)                      # 25 lines / 20 ms = 1,250 lines/s at most
        fh.close()

    got: list[int] = []
    lock = threading.Lock()

    def on_lines(blocks) -> None:
        with lock:
            got.extend(int(NUM.search(t.encode()).group(1)) for b in blocks for t in b.texts)

    f = Follower([str(p)], rotate_grace=GRACE)
    f.join()
    stop = threading.Event()
    follow = threading.Thread(target=f.run, args=(on_lines, stop, 0.25),
                              kwargs={"wake_on_append": False, "blocks": True}, daemon=True)
    write = threading.Thread(target=writer, daemon=True)
    follow.start()
    write.start()
    try:
        write.join(timeout=30)
        assert not write.is_alive()
        wait_until(lambda: len(got) >= n, timeout=10, what="every line delivered")
    finally:
        stop_writer.set()
        stop.set()
        follow.join(timeout=10)
    f.close()
    assert got == list(range(n))
    assert f.stats[str(p)].rotations == 3 and f.stats[str(p)].truncations == 1


def test_stale_source_reaches_the_exposition(tmp_path):
    """FollowStats.stale -> the sidecar's View -> sglang_exporter_log_source_stale{source} on /metrics."""
    from prometheus_client import CollectorRegistry, generate_latest

    from exporter.config import Config
    from exporter.sidecar.run import Sidecar
    from exporter.web.expose import SidecarCollector

    p = tmp_path / "sglang.log"
    fh = open(p, "ab", buffering=0)  # noqa: SIM115
    sc = Sidecar(Config(log_files=(str(p),)))
    sc.prepare()
    now = [0.0]
    sc.follower.clock = lambda: now[0]
    registry = CollectorRegistry()
    registry.register(SidecarCollector(sc))
    series = f'sglang_exporter_log_source_stale{{source="{p}"}}'
    sc.poll_logs_once()
    os.rename(p, f"{p}.1")
    p.touch()
    sc.poll_logs_once()
    assert f"{series} 0.0" in generate_latest(registry).decode()
    now[0] = 60.0
    fh.write(b"[2025-08-11 17:17:03] still writing to the renamed file\n")
    sc.poll_logs_once()
    assert f"{series} 1.0" in generate_latest(registry).decode()
    assert sc.view().log_sources[str(p)]["lines_read"] == 1
    fh.close()
    sc.shutdown()


def roundtrip(positions: dict) -> dict:
    """Positions through the positions file's bytes, as a restarted sidecar reads them."""
    return checkpoint.parse(checkpoint.Checkpoint(positions).to_bytes(), "positions.json").positions


@pytest.mark.parametrize("at_call", range(5))
def test_a_rotation_at_any_point_of_the_restore_loses_nothing(tmp_path, monkeypatch, at_call):
    """The log is renamed away (logrotate create, a writer that reopens late) just before the n-th look the
    restoring follower takes at the followed path (a stat or an open, in whatever order it takes them):
    whichever file it finds there, the saved one is finished from its offset, the writer's late lines to it
    included, and the new one is read from its start. (Comparing a stat of the path with a file opened after
    it took the new, empty file for ours truncated, read ours once as its copy and lost the late lines.)"""
    log = tmp_path / "app.log"
    now = 0.0
    with open(log, "ab") as fh:
        fh.write(b"".join(line_bytes(i, False) for i in range(10)))
    first = Follower([str(log)], from_start=True, rotate_grace=GRACE, clock=lambda: now)
    got = [int(NUM.search(ln.text.encode()).group(1)) for ln in first.poll()]
    saved = roundtrip(first.positions())
    first.close()
    with open(log, "ab") as fh:
        fh.write(b"".join(line_bytes(i, False) for i in range(10, 20)))     # after the save: read again
    rotated = tmp_path / "app.log.1"
    real_open = os.open
    looks = 0

    def rotate() -> None:
        os.rename(log, rotated)
        os.close(real_open(log, os.O_CREAT | os.O_WRONLY))     # logrotate's create

    def rotate_first(fn):
        def look(p, *args, **kwargs):
            nonlocal looks
            if isinstance(p, (str, os.PathLike)) and os.fspath(p) == str(log):
                looks += 1
                if looks == at_call + 1:
                    rotate()
            return fn(p, *args, **kwargs)
        return look

    monkeypatch.setattr(os, "stat", rotate_first(os.stat))
    monkeypatch.setattr(os, "open", rotate_first(os.open))
    second = Follower([str(log)], rotate_grace=GRACE, clock=lambda: now, positions=saved)
    assert second.join() == {str(log): "open"}
    monkeypatch.undo()
    if looks <= at_call:                          # the restore looked fewer times: the rotation comes after
        rotate()
    got += [int(NUM.search(ln.text.encode()).group(1)) for ln in second.poll()]
    with open(rotated, "ab") as fh:               # the writer has not reopened yet
        fh.write(b"".join(line_bytes(i, False) for i in range(20, 30)))
    with open(log, "ab") as fh:
        fh.write(b"".join(line_bytes(i, False) for i in range(30, 40)))
    for _ in range(3):
        got += [int(NUM.search(ln.text.encode()).group(1)) for ln in second.poll()]
        now += GRACE / 2
    second.close()
    assert got == list(range(40))


def test_lines_appended_while_a_rotated_file_is_read_do_not_end_its_drain(tmp_path, monkeypatch):
    """A writer that reopens late appends to the renamed file while the follower reads it, so the read ends
    past the size taken just before it. That is growth, not a truncation: the file is drained on, and what
    the writer appends to it until it reopens is read. (Judged on the size before the read, it was let go at
    once and the rest of the writer's lines to it were lost, with nothing logged.)"""
    log, rotated = tmp_path / "app.log", tmp_path / "app.log.1"
    now = 0.0

    def write(path: Path, numbers) -> None:
        with open(path, "ab") as fh:
            fh.write(b"".join(line_bytes(i, False) for i in numbers))

    def poll(f: Follower) -> list[int]:
        return [int(NUM.search(ln.text.encode()).group(1)) for ln in f.poll()]

    write(log, range(10))
    f = Follower([str(log)], from_start=True, rotate_grace=GRACE, clock=lambda: now)
    got = poll(f)
    fd = f.tails[str(log)].cur.fd
    os.rename(log, rotated)
    log.touch()                                   # logrotate's create; the writer has not reopened yet
    write(rotated, [10])
    real_fstat, appended = os.fstat, []

    def fstat_then_append(x):
        st = real_fstat(x)
        if x == fd and not appended:              # the writer's line lands between the size and the read
            appended.append(1)
            write(rotated, [11])
        return st

    monkeypatch.setattr(os, "fstat", fstat_then_append)
    got += poll(f)
    monkeypatch.undo()
    assert appended and got == list(range(12))
    write(rotated, range(12, 20))
    write(log, range(20, 30))                     # reopened
    for _ in range(3):
        now += GRACE / 2
        got += poll(f)
    f.close()
    assert got == list(range(30))
