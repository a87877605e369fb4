"""The Kubernetes log hand-off (exporter/ingest/handoff.py, docs/deploy.md "Log hand-off"), end to end with
the project's follower: bounded disk, nothing lost or duplicated across rename rotations, order kept, and a
byte-exact copy on stdout/stderr so `kubectl logs` keeps working."""
from __future__ import annotations

import argparse
import inspect
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import blocked_signals, thread_ids, wait_until

from exporter.ingest import handoff
from exporter.ingest.handoff import RotatingWriter, parse_size

ROOT = Path(__file__).resolve().parents[1]
HANDOFF = ROOT / "exporter" / "ingest" / "handoff.py"


def _follower():
    from exporter.ingest.follower import Follower  # written by another engineer; the test waits for it

    return Follower


def disk_use(path: Path) -> int:
    """Sum of the sizes of path, path.1, path.2, ... (tolerates a rename racing with the listing)."""
    total = 0
    for entry in os.scandir(path.parent):
        if entry.name == path.name or entry.name.startswith(path.name + "."):
            try:
                total += entry.stat().st_size
            except FileNotFoundError:
                pass
    return total


def make_lines(n: int, seed: int = 7) -> list[str]:
    """SGLang-looking lines with rank prefixes; every 500th is long (4–40 KB)."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        rank = f" DP{i % 2} TP{i % 4}" if i % 3 else ""
        if i % 500 == 499:
            body = "Receive: obj=GenerateReqInput(text='" + "x" * rnd.randint(4000, 40000) + "')"
        else:
            body = (f"Decode batch, #running-req: {i % 256}, #token: {i * 7}, token usage: 0.{i % 100:02d}, "
                    f"cuda graph: True, gen throughput (token/s): {i % 5000}.00, #queue-req: {i % 300}")
        out.append(f"[2025-08-11 17:17:03{rank}] seq={i:07d} {body}")
    return out


def test_parse_size():
    assert parse_size("50MiB") == 50 * 1024 * 1024
    assert parse_size("300k") == 300_000
    assert parse_size("4096") == 4096
    with pytest.raises(argparse.ArgumentTypeError, match="not a size"):
        parse_size("lots")


def test_handoff_is_stdlib_only():
    """It runs with the SGLang image's python3, which does not have our package or its dependencies."""
    import ast

    tree = ast.parse(HANDOFF.read_text())
    mods = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    mods |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    allowed = set(sys.stdlib_module_names)
    assert mods <= allowed, f"non-stdlib imports in handoff.py: {mods - allowed}"
    # runs as a plain script, without the package on the path
    r = subprocess.run([sys.executable, "-I", str(HANDOFF), "--help"], capture_output=True, text=True,
                       cwd="/", timeout=30)
    assert r.returncode == 0 and "--max-bytes" in r.stdout


def test_burst_with_follower_interleaved(tmp_path):
    """200k lines (some long) written in bursts through the rotating writer, rotating every 256 KiB with 2
    backups, the follower polling between bursts: every line exactly once, in order; the disk bound holds
    after every write."""
    Follower = _follower()
    log = tmp_path / "sglang.log"
    max_bytes, backups = 256 * 1024, 2
    w = RotatingWriter(str(log), max_bytes, backups, max_line_bytes=64 * 1024)
    f = Follower([str(log)], from_start=True)
    lines = make_lines(200_000)
    got: list[str] = []
    bound = (backups + 1) * max_bytes
    peak = 0
    burst: list[bytes] = []
    burst_bytes = 0
    for i, line in enumerate(lines):
        data = (line + "\n").encode()
        burst.append(data)
        burst_bytes += len(data)
        # bursts stay below one file's size so the follower never falls `backups` files behind
        if burst_bytes > max_bytes // 3 or i == len(lines) - 1:
            w.write_lines(b"".join(burst))
            burst, burst_bytes = [], 0
            peak = max(peak, disk_use(log))
            assert peak <= bound, f"disk use {peak} > bound {bound}"
            got.extend(x.text for x in f.poll())
    w.close()
    for _ in range(3):
        got.extend(x.text for x in f.poll())
    assert w.rotations > 100, "the test must exercise many rotations"
    assert len(got) == len(lines), f"lost or duplicated lines: {len(got)} != {len(lines)}"
    assert got == lines, "order or content differs"
    assert peak > 2 * max_bytes  # the backups were really used


def test_wrapper_concurrent_with_follower(tmp_path):
    """The wrapper as deployed: a child process writing to stdout AND stderr through pipes, rotation every
    300 KB with 2 backups, the follower polling concurrently. Flow control keeps the test deterministic: the
    child writes a burst (< one file), then waits for a token on stdin that the test sends once the follower
    has caught up. Every line once and in order per stream; byte-exact copies on our stdout and stderr
    (kubectl logs); the disk bound holds; the exit status is passed through."""
    Follower = _follower()
    log = tmp_path / "sglang.log"
    n = 200_000
    max_bytes, backups = 300_000, 2
    gen = tmp_path / "gen.py"
    gen.write_text(
        "import random, sys\n" + inspect.getsource(make_lines) +
        f"size = 0\n"
        f"for i, line in enumerate(make_lines({n})):\n"
        "    (sys.stdout if i % 10 == 0 else sys.stderr).write(line + '\\n')\n"
        "    size += len(line) + 1\n"
        f"    if size > {max_bytes // 3}:\n"
        "        sys.stdout.flush(); sys.stderr.flush()\n"
        "        print(f'BURST {i + 1}', file=sys.stderr, flush=True)\n"
        "        sys.stdin.readline()\n"
        "        size = 0\n"
        "sys.stdout.flush()\n"
        "sys.exit(7)\n")
    out, err = tmp_path / "out", tmp_path / "err"
    got: list[str] = []
    peak = 0
    with open(out, "wb") as fo, open(err, "wb") as fe:
        p = subprocess.Popen([sys.executable, str(HANDOFF), f"--file={log}", f"--max-bytes={max_bytes}",
                              f"--backups={backups}", "--", sys.executable, str(gen)],
                             stdin=subprocess.PIPE, stdout=fo, stderr=fe)
        try:
            wait_until(log.exists, timeout=30, what="the log file")
            f = Follower([str(log)], from_start=True)
            bursts = 0
            state = {"lines": 0, "marker": 0, "markers": 0}

            def caught_up():
                nonlocal peak
                for x in f.poll():
                    got.append(x.text)
                    if x.text.startswith("BURST "):
                        state["marker"] = int(x.text.split()[1])
                        state["markers"] += 1
                    else:
                        state["lines"] += 1
                peak = max(peak, disk_use(log))
                # the burst's lines on both streams and its marker have all been read
                return p.poll() is not None or (state["markers"] == bursts + 1
                                                and state["lines"] == state["marker"])

            while p.poll() is None:
                wait_until(caught_up, timeout=60, interval=0.002,
                           what=f"the follower to read burst {bursts + 1}")
                if p.poll() is None:
                    bursts += 1
                    p.stdin.write(b"go\n")
                    p.stdin.flush()
            for _ in range(3):
                got.extend(x.text for x in f.poll())
        finally:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
    assert p.returncode == 7
    assert bursts > 100, "the test must exercise many rotations"
    got = [x for x in got if not x.startswith("BURST ")]
    lines = make_lines(n)
    want_out = [x for i, x in enumerate(lines) if i % 10 == 0]
    want_err = [x for i, x in enumerate(lines) if i % 10 != 0]
    assert out.read_text().splitlines() == want_out  # byte-exact pass-through per stream
    assert [x for x in err.read_text().splitlines() if not x.startswith("BURST")] == want_err
    assert peak <= (backups + 1) * max_bytes
    assert len(got) == n, f"lost or duplicated lines: {len(got)} != {n}"
    assert sorted(got) == sorted(lines)  # every line exactly once
    outs = set(want_out)
    assert [x for x in got if x in outs] == want_out  # order kept within each stream
    assert [x for x in got if x not in outs] == want_err


def test_rank_prefixes_and_partial_lines_survive(tmp_path):
    log = tmp_path / "s.log"
    prog = ("import sys\n"
            "sys.stderr.write('[2025-08-11 17:17:03 DP1 PP0 TP3 EP3] Decode batch, #running-req: 1\\n')\n"
            "sys.stderr.write('Capturing batches (bs=8): 50%|\\r')\n"
            "sys.stderr.write('no newline at the end')\n")
    r = subprocess.run([sys.executable, str(HANDOFF), f"--file={log}", "--", sys.executable, "-c", prog],
                       capture_output=True, timeout=60)
    assert r.returncode == 0
    assert r.stderr.endswith(b"no newline at the end")  # pass-through is byte-exact
    text = log.read_text()
    assert text.startswith("[2025-08-11 17:17:03 DP1 PP0 TP3 EP3] Decode batch")
    assert text.endswith("no newline at the end\n")  # completed at EOF in the file only


def test_signal_forwarding_and_exit_status(tmp_path):
    log = tmp_path / "s.log"
    prog = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *a: (print('got SIGTERM', file=sys.stderr, flush=True),"
            " sys.exit(0)))\n"
            "print('ready', file=sys.stderr, flush=True)\n"
            "while True: time.sleep(0.05)\n")
    # its own process group: a failure must not leave the wrapped program (SGLang's stand-in) running
    p = subprocess.Popen([sys.executable, str(HANDOFF), f"--file={log}", "--", sys.executable, "-c", prog],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_until(lambda: log.exists() and "ready" in log.read_text(), timeout=30, what="child ready")
        # only the main thread may take a forwarded signal: one handed to a pump thread would never run its
        # handler while the main thread waits for SGLang, and SGLang would never hear of the stop
        main, *pumps = thread_ids(p.pid)
        forwarded = {getattr(signal, name) for name in handoff.FORWARDED}
        assert len(pumps) == 2 and all(forwarded <= blocked_signals(p.pid, t) for t in pumps)
        assert not forwarded & blocked_signals(p.pid, main)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass                            # the group is gone: handoff and its child both exited
        p.wait()
    assert "got SIGTERM" in log.read_text()
    # killed by a signal: 128 + N, like a shell
    r = subprocess.run([sys.executable, str(HANDOFF), f"--file={log}", "--", sys.executable, "-c",
                        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], timeout=60)
    assert r.returncode == 128 + signal.SIGKILL


def test_file_errors_never_stop_the_server(tmp_path):
    """An unwritable log directory: the pass-through and the exit status are untouched."""
    target = tmp_path / "missing-dir" / "s.log"
    r = subprocess.run([sys.executable, str(HANDOFF), f"--file={target}", "--", sys.executable, "-c",
                        "import sys; [print(i, file=sys.stderr) for i in range(1000)]"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    assert [x for x in r.stderr.splitlines() if x.isdigit()] == [str(i) for i in range(1000)]
    assert r.stderr.count("handoff: open") == 1  # reported once, not per line


def test_overlong_line_keeps_the_bound(tmp_path):
    log = tmp_path / "s.log"
    w = RotatingWriter(str(log), 4096, 1, max_line_bytes=1024)
    w.write_lines(b"a" * 10_000 + b"\n" + b"short\n")
    w.close()
    assert disk_use(log) <= 2 * 4096
    assert w.lines_cut == 1
    assert log.read_bytes().endswith(b"short\n")


def test_restart_appends(tmp_path):
    """Container restart (emptyDir survives): the writer appends and keeps counting the size."""
    log = tmp_path / "s.log"
    RotatingWriter(str(log), 1000, 1).write_lines(b"x" * 600 + b"\n")
    w = RotatingWriter(str(log), 1000, 1)
    assert w.size == 601
    w.write_lines(b"y" * 600 + b"\n")
    assert (tmp_path / "s.log.1").read_bytes() == b"x" * 600 + b"\n"
    assert log.read_bytes() == b"y" * 600 + b"\n"


def test_module_entry_point(tmp_path):
    """`python3 -m exporter.ingest.handoff` works where the package is installed (exporter image, local)."""
    log = tmp_path / "s.log"
    r = subprocess.run([sys.executable, "-m", "exporter.ingest.handoff", f"--file={log}", "--",
                        sys.executable, "-c", "print('hello')"], capture_output=True, text=True,
                       cwd=ROOT, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0 and r.stdout == "hello\n" and log.read_text() == "hello\n"
    assert handoff.main is not None
