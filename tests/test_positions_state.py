"""State you can trust: one sidecar per positions file (a second is refused with exit 2, naming the holder),
counters continued only for the logs the file was written for, SIGHUP a clean stop, and a positions file
that cannot be written warned about once per change. Real processes on 127.0.0.1; waits are polls."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

from helpers import free_port, wait_until

from exporter.config import Config
from exporter.sidecar import checkpoint
from exporter.sidecar.run import Sidecar

ROOT = Path(__file__).resolve().parent.parent


def retractions(n: int) -> str:
    t = datetime.now(timezone.utc).replace(tzinfo=None).strftime("%Y-%m-%d %H:%M:%S")
    return "".join(f"[{t} TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
                   f"#new_token_ratio: 0.7000 -> 0.8000\n" for _ in range(n))


def serve(log: Path, positions: Path, port: int, err: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "exporter", "serve", "--log-file", str(log),
                             "--positions-file", str(positions), "--listen", f"127.0.0.1:{port}"],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=open(err, "wb"),  # noqa: SIM115
                            env={**os.environ, "SGLANG_EXPORTER_POLL_INTERVAL": "0.05"})


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        return r.read().decode()


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def test_a_second_sidecar_on_one_positions_file_is_refused_with_exit_2_naming_the_holder(tmp_path):
    log, pos = tmp_path / "sglang.log", tmp_path / "positions.json"
    log.write_text(retractions(3))
    port = free_port()
    first = serve(log, pos, port, tmp_path / "first.err")
    try:
        wait_until(lambda: ready(port), timeout=60, what="the first sidecar ready")
        second = subprocess.run([sys.executable, "-m", "exporter", "serve", "--log-file", str(log),
                                 "--positions-file", str(pos), "--listen", f"127.0.0.1:{free_port()}"],
                                cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert f"pid {first.pid}, host " in second.stderr and "in use by another sidecar" in second.stderr
        assert str(pos) in second.stderr
        assert first.poll() is None                      # the holder is untouched
    finally:
        stop(first)
    # the kernel dropped the killed holder's lock: the next sidecar starts
    fd = checkpoint.claim(str(pos))
    assert fd is not None
    checkpoint.release(fd)


def test_counters_of_another_log_are_not_merged(tmp_path):
    """Sidecar A follows a.log (40 retractions) and stops; sidecar B, on b.log (3), is given the same file:
    B starts fresh at 3, not 43. A, restarted on its own file, continues at 40."""
    a, b, pos = tmp_path / "a.log", tmp_path / "b.log", tmp_path / "positions.json"
    a.write_text(retractions(40))
    b.write_text(retractions(3))
    first = Sidecar(Config(log_files=(str(a),), positions_file=str(pos)))
    first.prepare()
    assert first.view().retractions_total == 40
    first.shutdown()
    other = Sidecar(Config(log_files=(str(b),), positions_file=str(pos)))
    other.prepare()
    assert other.view().retractions_total == 3
    other.shutdown()
    assert checkpoint.load(str(pos)).logs == [str(b)]
    # a file from before the logs were recorded: judged by the files its positions name
    doc = json.loads(pos.read_text())
    doc.pop("logs")
    doc["counters"]["retractions_total"] = 1000
    pos.write_text(json.dumps(doc))
    again = Sidecar(Config(log_files=(str(a),), positions_file=str(pos)))
    again.prepare()
    assert again.view().retractions_total == 40
    again.shutdown()
    with open(a, "a") as fh:
        fh.write(retractions(2))
    resumed = Sidecar(Config(log_files=(str(a),), positions_file=str(pos)))
    resumed.prepare()
    assert resumed.view().retractions_total == 42
    resumed.shutdown()


def test_sighup_is_a_clean_stop_logged_with_positions_saved(tmp_path):
    log, pos, err = tmp_path / "sglang.log", tmp_path / "positions.json", tmp_path / "serve.err"
    log.write_text(retractions(5))
    port = free_port()
    proc = serve(log, pos, port, err)
    try:
        wait_until(lambda: ready(port), timeout=60, what="ready")
        with open(log, "a") as fh:
            fh.write(retractions(2))
        wait_until(lambda: "sglang_exporter_retractions_total 7.0" in metrics(port), timeout=30, what="7 counted")
        proc.send_signal(signal.SIGHUP)
        assert proc.wait(timeout=30) == 0
    finally:
        stop(proc)
    assert "received SIGHUP: stopping cleanly" in err.read_text()
    saved = checkpoint.load(str(pos))
    assert saved is not None and saved.counters["retractions_total"] == 7
    fd = checkpoint.claim(str(pos))                       # released
    assert fd is not None
    checkpoint.release(fd)


def test_an_unwritable_positions_file_is_warned_about_once_per_change(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    log, where = tmp_path / "sglang.log", tmp_path / "state"
    log.write_text("")
    sc = Sidecar(Config(log_files=(str(log),), positions_file=str(where / "positions.json")))
    sc.prepare()
    for _ in range(20):                                   # twenty saves due, each with new counts
        with open(log, "a") as fh:
            fh.write(retractions(1))
        sc.poll_logs_once()
        sc.save_positions(force=True)
    assert sc.view().retractions_total == 20 and sc.worker_errors["positions"] >= 20
    assert caplog.text.count("cannot write") == 1
    where.mkdir()                                         # the volume is back
    with open(log, "a") as fh:
        fh.write(retractions(1))
    sc.poll_logs_once()
    sc.save_positions(force=True)
    assert caplog.text.count("written again") == 1
    assert checkpoint.load(str(where / "positions.json")).counters["retractions_total"] == 21
    sc.shutdown()
