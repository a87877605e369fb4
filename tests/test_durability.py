"""The sidecar never harms the server and loses no line: readiness without traffic, the join before HTTP
answers, history on the log's clock, and exactly-once counting across SIGKILL, restart and rotation.

Real processes, real files, real HTTP on 127.0.0.1; waits are polls with deadlines.
"""
from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from helpers import free_port, wait_until

from exporter.config import Config
from exporter.sidecar import checkpoint
from exporter.sidecar.run import Sidecar
from exporter.web.server import make_server, serve_in_thread

ROOT = Path(__file__).resolve().parent.parent
GIB = 1 << 30


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def startup_block(t: datetime, avail_gb: float = 6.5) -> str:
    return (f"[{stamp(t)}] server_args=ServerArgs(model_path='Qwen/Qwen2.5-7B-Instruct', tp_size=1, "
            f"mem_fraction_static=0.88, max_running_requests=None, cuda_graph_max_bs=160)\n"
            f"[{stamp(t)} TP0] Load weight begin. avail mem=78.50 GB\n"
            f"[{stamp(t)} TP0] max_total_num_tokens=400000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            f"max_running_requests=2048, context_len=32768, available_gpu_mem={avail_gb:.2f} GB\n"
            f"[{stamp(t)}] The server is fired up and ready to roll!\n")


def retraction(t: datetime, n: int) -> str:
    # the number rides in #retracted_reqs so a lost or doubled line changes retracted_requests_total too
    return (f"[{stamp(t)} TP0] KV cache pool is full. Retract requests. #retracted_reqs: {n}, "
            f"#new_token_ratio: 0.7000 -> 0.8000\n")


def metric(text: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def get(url: str, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


# ----------------------------------------------------------------------------------------- readiness


def test_ready_on_a_quiet_log_without_traffic_and_start_up_facts_known(tmp_path):
    """A sidecar started next to a quiet SGLang (start-up printed an hour ago, nothing since) is ready at once
    and knows the headroom from the start-up block it read back: no log line needs to arrive."""
    log = tmp_path / "sglang.log"
    t0 = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(hours=1)
    log.write_text("noise before\n" * 50 + startup_block(t0, avail_gb=6.5))
    hour_ago = time.time() - 3600
    os.utime(log, (hour_ago, hour_ago))
    port = free_port()
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "serve", "--log-file", str(log),
                             "--listen", f"127.0.0.1:{port}"], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        status, _ = wait_until(lambda: _try_get(f"http://127.0.0.1:{port}/readyz"), timeout=20,
                               what="/readyz answering")
        took = time.monotonic() - started
        assert status == 200, "the first answer of /readyz must already be ready: the join precedes HTTP"
        assert took < 2.0 + _python_start_allowance(), f"ready after {took:.2f} s"
        _, text = get(f"http://127.0.0.1:{port}/metrics")
        assert metric(text, "sglang_exporter_gpu_headroom_bytes") == pytest.approx(6.5 * GIB)
        assert metric(text, "sglang_exporter_max_running_requests") == 2048
        # the hour-old start-up is history: it counts as one start, not as a restart now
        assert metric(text, "sglang_exporter_server_restarts_total") == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)


def _try_get(url: str):
    try:
        return get(url, timeout=1.0)
    except OSError:
        return None


def _python_start_allowance() -> float:
    """The interpreter's own start-up (imports), measured here, is not the sidecar's to answer for."""
    t = time.monotonic()
    subprocess.run([sys.executable, "-c", "import exporter.cli, exporter.web.server, exporter.sidecar.run"], cwd=ROOT,
                   check=True)
    return time.monotonic() - t


def _start_in_process(cfg: Config):
    """What `serve` does, in this process: bind, join and replay, then answer."""
    sc = Sidecar(cfg)
    server = make_server(sc, "127.0.0.1", 0)
    sc.start()
    serve_in_thread(server)
    return sc, server, f"http://127.0.0.1:{server.server_address[1]}"


def _stop_in_process(sc: Sidecar, server) -> None:
    server.shutdown()
    server.server_close()
    sc.shutdown(timeout=10)


@pytest.mark.parametrize("rep", range(50))
def test_lines_written_right_after_metrics_first_answers_are_all_counted(tmp_path, rep):
    """The start race: whatever is appended once /metrics has answered is read, never taken for old content."""
    log = tmp_path / "sglang.log"
    t = datetime.now(timezone.utc).replace(tzinfo=None)
    log.write_text("".join(retraction(t, 1) for _ in range(7)))      # existing content: not counted
    sc, server, base = _start_in_process(Config(log_files=(str(log),), from_end=True, poll_interval=0.02))
    try:
        status, text = get(base + "/metrics")
        assert status == 200
        before = metric(text, "sglang_exporter_retractions_total")
        n = 1 + rep % 5
        with open(log, "a") as fh:
            fh.write("".join(retraction(t, 1) for _ in range(n)))
        wait_until(lambda: metric(get(base + "/metrics")[1], "sglang_exporter_retractions_total") == before + n,
                   timeout=10, what=f"{n} retractions counted")
    finally:
        _stop_in_process(sc, server)
    assert before == 0


def test_history_is_replayed_on_the_logs_clock_and_never_pages(tmp_path):
    """300 retractions spread over the last three hours are 1.7/min of history, not a storm now: replayed with
    --from-start they land where they happened (the log's clock, mapped to real time by the file's mtime)."""
    log = tmp_path / "sglang.log"
    now = datetime.now(timezone.utc).replace(tzinfo=None) + timedelta(hours=5)   # a log in UTC+5 local time
    start = now - timedelta(hours=3)
    lines = [startup_block(start - timedelta(minutes=1))]
    for i in range(300):
        lines.append(retraction(start + timedelta(seconds=36 * i), 1))
    log.write_text("".join(lines))
    sc, server, base = _start_in_process(Config(log_files=(str(log),), from_start=True, poll_interval=0.05))
    try:
        doc = __import__("json").loads(get(base + "/api/v1/signals")[1])
        states = {s["id"]: s["state"] for s in doc["signals"]}
        assert states["retraction_storm"] != "firing"
        _, text = get(base + "/metrics")
        assert metric(text, "sglang_exporter_retractions_total") == 300
        per_min = metric(text, "sglang_exporter_retractions_per_minute")
        assert per_min is not None and per_min < 3, per_min        # ~1.7/min over the last 10 minutes
        assert metric(text, "sglang_exporter_gpu_headroom_bytes") == pytest.approx(6.5 * GIB)
    finally:
        _stop_in_process(sc, server)


def test_a_corrupt_positions_file_is_a_warning_and_a_fresh_start(tmp_path, caplog):
    log = tmp_path / "sglang.log"
    log.write_text("")
    pos = tmp_path / "positions.json"
    for junk in (b"\x00\xff garbage", b'{"format": "something-else"}', b"[1, 2]",
                 b'{"format": "sglang-exporter-positions", "version": 99}'):
        pos.write_bytes(junk)
        sc = Sidecar(Config(log_files=(str(log),), positions_file=str(pos)))
        sc.prepare()
        assert sc.ready() and sc.follower is not None
        # and the file is ours again, readable
        assert checkpoint.load(str(pos)) is not None
        sc.shutdown()
    assert "starting fresh" in caplog.text


# ----------------------------------------------------------------------------------------- kill points


def _append(path: Path, t: datetime, numbers) -> None:
    with open(path, "a") as fh:
        fh.write("".join(retraction(t, n) for n in numbers))


def _rotate(log: Path, mode: str) -> Path:
    """Rotate `log` the way `mode` does; returns the file the writer goes on writing to for now."""
    rotated = log.with_name(log.name + ".1")
    if mode == "copytruncate":
        rotated.write_bytes(log.read_bytes())
        os.truncate(log, 0)
        # the copy is written later than the follower last looked (file-system time): a real copytruncate
        # never falls in the same timestamp tick, a test on a coarse-clock file system might
        later = time.time_ns() + 1_000_000_000
        os.utime(rotated, ns=(later, later))
        return log
    os.rename(log, rotated)
    log.touch()                                   # logrotate's create; the writer reopens later
    return rotated


@pytest.mark.parametrize("mode", ["copytruncate", "rename_late"])
@pytest.mark.parametrize("kill_after", ["start", "read", "ingest", "save"])
def test_a_kill_at_any_step_before_a_rotation_counts_every_line_once(tmp_path, mode, kill_after):
    """A sidecar killed after it started, after a poll read lines, after it ingested them, or after it saved
    its positions; the log rotated while it is down; a new sidecar from the positions file counts every line
    once. (The first three leave a positions file from a moment the log was still empty: no head fingerprint
    tells the copytruncate copy apart, its time does.) Steps are driven by hand: no threads, no sleeps."""
    log, pos = tmp_path / "sglang.log", tmp_path / "positions.json"
    log.write_text("")
    t = datetime.now(timezone.utc).replace(tzinfo=None)
    cfg = Config(log_files=(str(log),), positions_file=str(pos), from_end=True, positions_interval=3600.0)
    first = Sidecar(cfg)
    first.prepare()                               # saves the (empty) start position
    _append(log, t, range(1, 51))
    if kill_after != "start":
        blocks = first.follower.poll_blocks()
        if kill_after != "read":
            first.on_lines(blocks)                # ingested; the positions file is not due yet
            assert first.view().retractions_total == 50
        if kill_after == "save":
            first.save_positions(force=True)
    # SIGKILL: `first` is dropped as it is (no shutdown, no save); the kernel drops a dead process's lock
    checkpoint.release(first.positions_lock)
    writing = _rotate(log, mode)
    _append(writing, t, range(51, 76))            # copytruncate: into the truncated file; rename: the old one
    _append(log, t, range(76, 101))               # the writer has reopened
    second = Sidecar(cfg)
    second.prepare()
    second.poll_logs_once()
    view = second.view()
    assert (view.retractions_total, view.retracted_requests_total) == (100, 100 * 101 // 2)
    second.shutdown()


# ----------------------------------------------------------------------------------------- SIGKILL


class Writer(threading.Thread):
    """Appends numbered retraction lines at a steady rate (>= 1,000 lines/s) to `target` and rotates the log
    once, at line `rotate_at`, the way it is done in `mode`:

    - rename: logrotate's create (rename, the writer reopening at once);
    - rename_late: the same with a writer that reopens 100 lines later (a postrotate signal handled late);
    - copytruncate: copy, then truncate in place under the open writer;
    - symlink: the followed path is a symlink that is switched to a new file;
    - cri: kubelet's container log: CRI-framed lines, the file renamed to `0.log.<time>` and a new `0.log`,
      followed through a /var/log/containers-style symlink."""

    def __init__(self, path: Path, total: int, rate: float, mode: str = "none", rotate_at: int = -1):
        super().__init__(daemon=True)
        self.path, self.total, self.rate, self.mode, self.rotate_at = path, total, rate, mode, rotate_at
        self.written = 0
        self.reopen_at = -1
        self.target = path.resolve()
        self.fh = open(self.target, "a", buffering=1)  # noqa: SIM115 - closed at the end of run

    def line(self, n: int) -> str:
        text = retraction(self.base, n)
        if self.mode == "cri":
            return f"{datetime.now(timezone.utc).isoformat().replace('+00:00', 'Z')} stderr F {text}"
        return text

    def run(self) -> None:
        t0 = time.monotonic()
        self.base = datetime.now(timezone.utc).replace(tzinfo=None)
        while self.written < self.total:
            due = min(int((time.monotonic() - t0) * self.rate) + 1, self.total)
            while self.written < due:
                if self.written == self.rotate_at:
                    self.rotate()
                if self.written == self.reopen_at:
                    self.fh.close()
                    self.fh = open(self.target, "a", buffering=1)  # noqa: SIM115
                self.fh.write(self.line(self.written + 1))
                self.written += 1
            self.fh.flush()
            time.sleep(0.001)    # pacing the writer, not waiting for a condition
        self.fh.close()

    def rotate(self) -> None:
        self.fh.flush()
        if self.mode in ("rename", "rename_late", "cri"):
            suffix = ".20250811-171703" if self.mode == "cri" else ".1"
            os.rename(self.target, str(self.target) + suffix)
            if self.mode == "rename_late":
                self.target.touch()                     # logrotate's create; the writer reopens later
                self.reopen_at = self.written + 100
                return
            self.fh.close()
            self.fh = open(self.target, "a", buffering=1)  # noqa: SIM115
        elif self.mode == "copytruncate":
            with open(self.target, "rb") as src, open(str(self.target) + ".1", "wb") as dst:
                dst.write(src.read())
            os.truncate(self.target, 0)
        elif self.mode == "symlink":
            new = self.target.with_name("b.log")
            new.touch()
            tmp = self.path.with_name("link.tmp")
            os.symlink(new, tmp)
            os.replace(tmp, self.path)                  # switched atomically, as a deploy tool does
            self.fh.close()
            self.target = new
            self.fh = open(new, "a", buffering=1)  # noqa: SIM115


def _serve(log: Path, positions: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "exporter", "serve", "--log-file", str(log),
                             "--positions-file", str(positions), "--from-end", "--listen", f"127.0.0.1:{port}"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(positions.with_suffix(".err"), "ab"),
                            env={**os.environ, "SGLANG_EXPORTER_POLL_INTERVAL": "0.05",
                                 "SGLANG_EXPORTER_POSITIONS_INTERVAL": "0.2"})


def _counts(port: int):
    r = _try_get(f"http://127.0.0.1:{port}/metrics")
    if r is None or r[0] != 200:
        return None
    return (metric(r[1], "sglang_exporter_retractions_total"),
            metric(r[1], "sglang_exporter_retracted_requests_total"))


MODES = ("none", "rename", "rename_late", "copytruncate", "symlink", "cri")


@pytest.mark.parametrize("mode,rep", [(m, r) for m in MODES for r in range(4)])
def test_sigkill_restart_and_rotation_count_every_line_exactly_once(tmp_path, mode, rep):
    """A writer at 2,000 lines/s; the sidecar is SIGKILLed at random points and restarted from its positions
    file, and the log is rotated meanwhile: at the end, every line is counted once (the retraction count and
    the sum of the numbers the lines carry both match what was written). The follower's own suite
    (tests/test_follower_faults.py) drives nine rotation modes x 20 seeds in-process; this one is the real
    process, killed for real."""
    rnd = random.Random(f"{mode}-{rep}")
    positions = tmp_path / "positions.json"
    if mode == "cri":
        pod = tmp_path / "pods" / "ns_sglang-0_uid" / "sglang"
        pod.mkdir(parents=True)
        (pod / "0.log").write_text("")
        log = tmp_path / "containers" / "sglang-0_ns_sglang-abc.log"
        log.parent.mkdir()
        log.symlink_to(pod / "0.log")
    elif mode == "symlink":
        (tmp_path / "a.log").write_text("")
        log = tmp_path / "sglang.log"
        log.symlink_to(tmp_path / "a.log")
    else:
        log = tmp_path / "sglang.log"
        log.write_text("")
    total = 2400
    writer = Writer(log, total, rate=2000, mode=mode, rotate_at=rnd.randrange(300, total - 300))
    port = free_port()
    proc = _serve(log, positions, port)
    try:
        wait_until(lambda: _counts(port) is not None, timeout=60, what="first answer")
        writer.start()
        for k in sorted(rnd.sample(range(200, total - 200), 2)):
            wait_until(lambda k=k: writer.written >= k, timeout=20, interval=0.001, what=f"line {k} written")
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
            proc = _serve(log, positions, port)
            wait_until(lambda: _counts(port) is not None, timeout=60, what="answer after restart")
        writer.join(timeout=30)
        expected = (total, total * (total + 1) // 2)
        try:
            wait_until(lambda: _counts(port) == expected, timeout=20, what=f"counts {expected}")
        except AssertionError:
            # what the sidecars said (warnings about the positions file, rotations) is the diagnosis
            err = positions.with_suffix(".err")
            raise AssertionError(f"counts {_counts(port)}, expected {expected}; the sidecars' stderr:\n"
                                 + (err.read_text()[-4000:] if err.exists() else "")) from None
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


def test_a_save_cut_short_by_a_kill_leaves_no_temporary_file_past_the_next_start(tmp_path):
    """A SIGKILL between mkstemp and the rename leaves a temporary file; the next start removes it (and only
    this positions file's: another file's temporaries in the same folder stay)."""
    log = tmp_path / "sglang.log"
    log.write_text("")
    pos = tmp_path / "positions.json"
    left = tmp_path / ".positions.json.tmp-abc123"
    left.write_bytes(b'{"format": "sglang-exporter-posi')        # torn: the kill came mid-write
    other = tmp_path / ".other.json.tmp-xyz"
    other.write_bytes(b"not ours")
    sc = Sidecar(Config(log_files=(str(log),), positions_file=str(pos)))
    sc.prepare()
    sc.save_positions(force=True)
    assert not left.exists() and other.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.json.tmp-xyz", "positions.json",
                                                          "positions.json.lock", "sglang.log"]


def test_an_unwritable_positions_file_costs_durability_not_monitoring(tmp_path, caplog):
    log = tmp_path / "sglang.log"
    log.write_text("")
    sc = Sidecar(Config(log_files=(str(log),), positions_file=str(tmp_path / "no-such-dir" / "positions.json")))
    sc.prepare()
    with open(log, "a") as fh:
        fh.write(retraction(datetime.now(timezone.utc).replace(tzinfo=None), 3))
    sc.poll_logs_once()
    view = sc.view()
    assert view.retractions_total == 1 and view.worker_errors["positions"] >= 1
    assert "cannot write" in caplog.text
    sc.shutdown()


def test_positions_that_would_not_read_back_are_not_written_and_counting_goes_on(tmp_path, monkeypatch, caplog):
    """A positions snapshot that fails validation (a fault of ours) is an error counted and logged: the file
    keeps its last good content and lines are still counted, not a consumer exception on every poll."""
    log, pos = tmp_path / "sglang.log", tmp_path / "positions.json"
    log.write_text("")
    sc = Sidecar(Config(log_files=(str(log),), positions_file=str(pos)))
    sc.prepare()
    good = pos.read_bytes()
    monkeypatch.setattr(sc.follower, "positions", lambda: {str(log): {"ino": "not a number"}})
    _append(log, datetime.now(timezone.utc).replace(tzinfo=None), [3])
    sc.poll_logs_once()
    sc.save_positions(force=True)
    view = sc.view()
    assert view.retractions_total == 1 and view.worker_errors["positions"] >= 1
    assert pos.read_bytes() == good and "positions are invalid" in caplog.text
    sc.shutdown()


def test_a_stuck_follower_reads_as_down_and_fails_healthz(tmp_path, monkeypatch):
    """A follow thread that stops finishing polls (blocked on a hung filesystem, say) must not leave its
    sources frozen at up: they read down and /healthz fails, so the kubelet restarts the exporter."""
    import exporter.sidecar.run as sidecar_mod
    log = tmp_path / "sglang.log"
    log.write_text("")
    sc, server, base = _start_in_process(Config(log_files=(str(log),), poll_interval=0.02))
    try:
        wait_until(lambda: sc.follower.last_poll is not None, what="a first poll")
        assert get(base + "/healthz")[0] == 200
        assert metric(get(base + "/metrics")[1], f'sglang_exporter_source_up{{source="{log}"}}') == 1
        release = threading.Event()
        monkeypatch.setattr(sc.follower, "poll_blocks", lambda: release.wait(30) and [])   # hangs
        monkeypatch.setattr(sidecar_mod, "FOLLOW_STUCK_SECONDS", 0.3)
        wait_until(lambda: get(base + "/healthz")[0] == 503, timeout=10, what="/healthz failing")
        assert metric(get(base + "/metrics")[1], f'sglang_exporter_source_up{{source="{log}"}}') == 0
        release.set()
    finally:
        _stop_in_process(sc, server)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_worker_that_dies_fails_healthz_and_one_that_raises_is_restarted(tmp_path):
    log = tmp_path / "sglang.log"
    log.write_text("")
    sc, server, base = _start_in_process(Config(log_files=(str(log),), poll_interval=0.02))
    try:
        calls = []

        def flaky():
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("a bug")
            sc.stop.wait()
        sc._spawn("flaky", flaky)
        wait_until(lambda: len(calls) >= 2, timeout=10, what="the loop run again after its error")
        assert sc.view().worker_errors.get("flaky") == 1 and get(base + "/healthz")[0] == 200

        sc._spawn("doomed", lambda: (_ for _ in ()).throw(SystemExit()))    # escapes the supervisor
        wait_until(lambda: get(base + "/healthz")[0] == 503, timeout=10, what="/healthz failing")
        assert get(base + "/healthz")[1].strip() == "doomed_stopped"
    finally:
        _stop_in_process(sc, server)


@pytest.mark.parametrize("with_server_args", [True, False])
def test_a_restarted_sidecar_keeps_start_up_facts_and_counts_once(tmp_path, with_server_args):
    """Resumed from its positions file, the sidecar replays the start-up before its position for the facts
    (headroom, limits) and counts only what came after; a log whose server_args line is gone (lost head, a
    logging set-up that drops it) still gives its per-rank capacity lines."""
    log, pos = tmp_path / "sglang.log", tmp_path / "positions.json"
    t = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(minutes=30)
    block = startup_block(t, avail_gb=4.0)
    if not with_server_args:
        block = "".join(ln for ln in block.splitlines(True) if "server_args" not in ln)
    log.write_text(block + retraction(t, 2))
    cfg = Config(log_files=(str(log),), positions_file=str(pos))
    first = Sidecar(cfg)
    first.prepare()
    assert first.view().headroom_bytes == pytest.approx(4.0 * GIB)
    assert first.view().retractions_total == 1
    first.shutdown()
    with open(log, "a") as fh:
        fh.write(retraction(t + timedelta(minutes=1), 3))       # written while no sidecar ran
    second = Sidecar(cfg)
    second.prepare()
    view = second.view()
    assert view.headroom_bytes == pytest.approx(4.0 * GIB)
    assert (view.retractions_total, view.retracted_requests_total, view.restarts) == (2, 5, 0)
    second.shutdown()
