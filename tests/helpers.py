"""Shared test mechanics: find real tools (fail in CI, skip elsewhere), poll with a deadline, pick ports, stop
the processes a test started."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


# The Prometheus stacks the bundle is tested on: the machine's own on PATH (apt-get install: Prometheus 2.42 and
# Alertmanager 0.25 on Debian 12), and Debian testing's (3.x LTS, 0.3x: what a cluster set up today runs), which
# scripts/current-prometheus fetches
PROMETHEUS_RELEASES = ("installed", "current")
CURRENT_PROMETHEUS = Path(os.environ.get("SGLANG_EXPORTER_CURRENT_PROMETHEUS")
                          or Path.home() / ".cache" / "sglang-exporter" / "tools" / "prometheus-forky")


def require_tool(name: str, release: str = "installed") -> str:
    """Path of a real binary (promtool, amtool, prometheus, prometheus-alertmanager, mtail, chromium); for
    the Prometheus tools, of `release` (PROMETHEUS_RELEASES).

    Missing: a failure under CI=true (a skip must not hide a real-component test there), a skip elsewhere.
    """
    if release == "current":
        path = CURRENT_PROMETHEUS / {"prometheus-alertmanager": "alertmanager"}.get(name, name)
        if os.access(path, os.X_OK):
            return str(path)
        msg = f"{path} is missing: scripts/current-prometheus fetches it (scripts/test does)"
    else:
        found = shutil.which(name)
        if found:
            return found
        msg = f"{name} is not installed (apt-get install prometheus prometheus-alertmanager); .ci/run installs it"
    if IN_CI:
        pytest.fail(msg)
    pytest.skip(msg)


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02, what="condition"):
    """Poll `predicate` until it returns a truthy value or the deadline passes; returns that value. `what`
    names the condition in the failure, or is called then to say it (with the state it failed in)."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - keep polling through transient errors, report the last
            last_exc = exc
        if time.monotonic() > deadline:
            what = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last error: {last_exc!r}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_same_event(a, b) -> None:
    """Two Events are the same in every way a reader sees: kind, time, rank, line, prefix, fields with their
    key order and value types."""
    assert (a.kind, a.time, a.ts, a.rank, a.line, a.prefix) == (b.kind, b.time, b.ts, b.rank, b.line, b.prefix)
    assert a.fields == b.fields and list(a.fields) == list(b.fields)
    for k, v in a.fields.items():
        assert type(b.fields[k]) is type(v), k


def assert_block_path_is_generic(lines: list[str], block: int, source: str):
    """Feed `lines` to the parser's block path (feed_items, `block` lines at a time, rows turned into Events) and,
    line by line, to a parser that learns nothing (the generic path); assert they give the same Events and
    counts. Returns (block-path parser, generic parser) for what a test checks beyond that."""
    from exporter.ingest.events import as_event
    from exporter.ingest.grammar import Parser

    fast, generic = Parser(source), Parser(source)
    generic.learning = False
    got = []
    for i in range(0, len(lines), block):
        got += map(as_event, fast.feed_items(lines[i:i + block], i + 1))
    got += fast.flush()
    want = [ev for n, text in enumerate(lines, 1) for ev in generic.feed(text, n)] + generic.flush()
    assert len(got) == len(want)
    for a, b in zip(want, got):
        assert_same_event(a, b)
    assert fast.kinds == generic.kinds and fast.recognised == generic.recognised
    assert fast.unparsed == generic.unparsed
    return fast, generic


def stop_process(proc: subprocess.Popen, timeout: float = 15) -> None:
    """Stop a process a test started: politely, then for good; returns once it has exited."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


def signal_thread(pid: int, tid: int, sig: int) -> None:
    """Send `sig` to one thread of a process (tgkill): the kernel may hand a process's signal to any thread not
    blocking it, so a test picks the thread a busy process would pick at random."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.tgkill(pid, tid, sig) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def thread_ids(pid: int) -> list[int]:
    """A Linux process's thread ids, the main thread (== pid) first."""
    return sorted((int(t) for t in os.listdir(f"/proc/{pid}/task")), key=lambda t: (t != pid, t))


def blocked_signals(pid: int, tid: int) -> set[int]:
    """The signals a thread blocks, from /proc (SigBlk, a hex mask where bit N-1 is signal N)."""
    with open(f"/proc/{pid}/task/{tid}/status") as fh:
        mask = int(next(line for line in fh if line.startswith("SigBlk:")).split()[1], 16)
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}
