"""Shared test mechanics: find real tools (fail in CI, skip elsewhere), poll with a deadline, pick ports."""
from __future__ import annotations

import os
import shutil
import socket
import time

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_tool(name: str) -> str:
    """Path of a real binary (promtool, amtool, prometheus, alertmanager, mtail, chromium).

    Missing: a failure under CI=true (a skip must not hide a real-component test there), a skip elsewhere.
    """
    path = shutil.which(name)
    if path:
        return path
    msg = f"{name} is not installed (apt-get install prometheus prometheus-alertmanager); .ci/run installs it"
    if IN_CI:
        pytest.fail(msg)
    pytest.skip(msg)


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02, what: str = "condition"):
    """Poll `predicate` until it returns a truthy value or the deadline passes; returns that value."""
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
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last error: {last_exc!r}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
