"""`sglang-exporter healthcheck` (the image's HEALTHCHECK) against a real `serve` subprocess: it finds serve's
listen address in serve's own command line, whichever place set it, and fails when nothing answers there.
The same check inside a container: tests/test_image.py."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from helpers import free_port, stop_process, wait_until

from exporter.cli.healthcheck import probe_url, serve_argv

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("cmdline, argv", [
    (["/opt/sglang-exporter/bin/python3", "/opt/sglang-exporter/bin/sglang-exporter", "serve", "--listen", ":1"],
     ["serve", "--listen", ":1"]),
    (["sglang-exporter", "serve"], ["serve"]),
    (["/usr/bin/python3", "-m", "exporter", "serve", "--config", "c.yaml"], ["serve", "--config", "c.yaml"]),
    (["/opt/sglang-exporter/bin/sglang-exporter", "simulate", "--scenario", "serve"], None),
    (["/opt/sglang-exporter/bin/sglang-exporter", "healthcheck"], None),
    (["/usr/bin/catatonit", "--", "sleep"], None),
])
def test_serve_argv(cmdline, argv):
    assert serve_argv(cmdline) == argv


@pytest.mark.parametrize("listen, url", [
    (("0.0.0.0", 10060), "http://127.0.0.1:10060/healthz"),
    (("", 10060), "http://127.0.0.1:10060/healthz"),          # the default, every address
    (("::", 9000), "http://[::1]:9000/healthz"),
    (("10.1.2.3", 10060), "http://10.1.2.3:10060/healthz"),
])
def test_probe_url(listen, url):
    assert probe_url(listen, tls=False) == url


def _healthcheck(pid: int, *options: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exporter", "healthcheck", "--pid", str(pid), *options], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("where", ["flag", "environment", "config"])
def test_healthcheck_follows_serve(tmp_path, where):
    port = free_port()
    log = tmp_path / "sglang.log"
    log.write_text("")
    args, env = ["serve", "--log-file", str(log)], {k: v for k, v in os.environ.items()
                                                    if not k.startswith("SGLANG_EXPORTER_")}
    if where == "flag":
        args += ["--listen", f"127.0.0.1:{port}"]
    elif where == "environment":
        env["SGLANG_EXPORTER_LISTEN"] = f"127.0.0.1:{port}"
    else:
        (tmp_path / "config.yaml").write_text(f"listen: 127.0.0.1:{port}\n")
        args += ["--config", str(tmp_path / "config.yaml")]
    proc = subprocess.Popen([sys.executable, "-m", "exporter", *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).status == 200,
                   timeout=30, interval=0.1, what="serve's /healthz")
        # the same environment: a container's HEALTHCHECK runs with the container's
        ok = _healthcheck(proc.pid, env=env)
        assert ok.returncode == 0, ok.stdout + ok.stderr
    finally:
        stop_process(proc, timeout=30)


def test_healthcheck_fails_without_serve(tmp_path):
    """A pid that is not serve, and a serve that no longer answers: exit 1 with the reason."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        r = _healthcheck(sleeper.pid)
        assert r.returncode == 1 and "no `sglang-exporter serve`" in r.stdout
    finally:
        sleeper.kill()
        sleeper.wait()
    port = free_port()
    # a serve command line whose port has no listener: stopped by SIGSTOP, it keeps its cmdline but answers nothing
    log = tmp_path / "sglang.log"
    log.write_text("")
    proc = subprocess.Popen([sys.executable, "-m", "exporter", "serve", "--log-file", str(log), "--listen",
                             f"127.0.0.1:{port}"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2).status == 200,
                   timeout=30, interval=0.1, what="serve's /healthz")
        proc.send_signal(signal.SIGSTOP)
        r = _healthcheck(proc.pid, "--timeout", "1")
        assert r.returncode == 1 and f"127.0.0.1:{port}/healthz" in r.stdout, r.stdout
    finally:
        proc.kill()
        proc.wait(timeout=30)
