#!/usr/bin/env python3
"""HTTP listener benchmark: scrape latency of `exporter serve` while idle and slowloris connections are held,
and what basic auth costs a scrape.

    python bench/http_bench.py [--idle 500] [--slow 50] [--seconds 10] [--scrapers 4] [--interval 0.1]
                               [--bcrypt-cost 12] [--attackers 16]

What it does (127.0.0.1 only, bounded runtime, every `serve` it starts is killed at the end):
  1. starts `python -m exporter serve --log-file F --listen 127.0.0.1:<free port>`;
  2. baseline: 200 keep-alive scrapes of /metrics, one after the other: p50, p99;
  3. hostile: holds --idle connections that send nothing and --slow slowloris connections that send a request
     head one byte every 0.5 s (each reopened when the exporter cuts it at its head deadline, so the counts hold
     for the whole phase); meanwhile --scrapers Prometheus-like clients (half keep-alive, half a new connection
     each time) GET /metrics every --interval s for --seconds: p50, p99, max, failures, and the exporter's
     thread count (/proc/<pid>/status);
  4. auth (needs bcrypt): a second `serve` with basic_auth_users (5 users, hashes of --bcrypt-cost): 1st and 2nd
     scrape of each user (median), unknown user vs wrong password (median of 7 each), and remembered-credential
     scrapes while --attackers clients send wrong passwords nonstop: p50, max.
Exit status 0 when measured, 1 when `serve` never answers.
"""
from __future__ import annotations

import argparse
import base64
import http.client
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOG = "".join([
    "[2025-08-11 17:17:00] server_args=ServerArgs(model_path='m', served_model_name='m', "
    "schedule_conservativeness=1.0, cuda_graph_max_bs=160)\n",
    "[2025-08-11 17:17:02] The server is fired up and ready to roll!\n",
    "[2025-08-11 17:17:03 TP0] Decode batch, #running-req: 5, #token: 100, token usage: 0.50, cuda graph: True, "
    "gen throughput (token/s): 10.00, #queue-req: 0\n",
])

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Serve:
    def __init__(self, workdir: Path, web_yaml: str | None = None):
        self.port = free_port()
        log = workdir / "sglang.log"
        log.write_text(LOG)
        args = [sys.executable, "-m", "exporter", "serve", "--log-file", str(log), "--from-start",
                "--listen", f"127.0.0.1:{self.port}"]
        if web_yaml:
            web = workdir / "web.yaml"
            web.write_text(web_yaml)
            args += ["--web-config", str(web)]
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if get(self.port, "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise SystemExit("serve never answered /readyz")

    def threads(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        return -1

    def stop(self):
        self.proc.kill()
        self.proc.wait(10)


def get(port, path, headers=None, conn=None):
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path, headers=headers or {})
        resp = c.getresponse()
        resp.read()
        return resp.status, resp
    finally:
        if conn is None:
            c.close()


def timed(port, path, headers=None, conn=None) -> tuple[int, float]:
    t0 = time.perf_counter()
    status, _ = get(port, path, headers, conn)
    return status, time.perf_counter() - t0


def pct(values, q) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


def baseline(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    lat = [timed(port, "/metrics", conn=conn)[1] for _ in range(200)]
    conn.close()
    print(f"baseline: 200 keep-alive scrapes: p50 {ms(pct(lat, .5))}, p99 {ms(pct(lat, .99))}")


class Hostile:
    """Holds `idle` silent and `slow` slowloris connections, reopening what the exporter cuts."""

    def __init__(self, port, idle, slow):
        self.port, self.stop = port, threading.Event()
        self.idle = [self._open() for _ in range(idle)]
        self.slow = [self._open(b"GET /metrics HTTP/1.1\r\n") for _ in range(slow)]
        self.reopened = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _open(self, first=b""):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.setblocking(False)
        if first:
            s.send(first)
        return s

    def _alive(self, s) -> bool:
        try:
            return s.recv(4096) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False

    def _run(self):
        while not self.stop.wait(0.5):
            for pool, first in ((self.idle, b""), (self.slow, b"GET /metrics HTTP/1.1\r\n")):
                for i, s in enumerate(pool):
                    if not self._alive(s):
                        s.close()
                        pool[i] = self._open(first)
                        self.reopened += 1
                    elif first:
                        try:
                            s.send(b"X")
                        except OSError:
                            pass

    def close(self):
        self.stop.set()
        self.thread.join(10)
        for s in self.idle + self.slow:
            s.close()


def hostile(serve, args):
    h = Hostile(serve.port, args.idle, args.slow)
    lat, failures, lock = [], [], threading.Lock()
    deadline = time.monotonic() + args.seconds

    def scraper(keep_alive):
        conn = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=10) if keep_alive else None
        while time.monotonic() < deadline:
            try:
                status, t = timed(serve.port, "/metrics", conn=conn)
                with lock:
                    (lat if status == 200 else failures).append(t if status == 200 else status)
            except OSError as exc:
                with lock:
                    failures.append(repr(exc))
                if conn:
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", serve.port, timeout=10)
            time.sleep(args.interval)
        if conn:
            conn.close()
    threads = [threading.Thread(target=scraper, args=(i % 2 == 0,)) for i in range(args.scrapers)]
    for t in threads:
        t.start()
    peak_threads = serve.threads()
    for t in threads:
        t.join(args.seconds + 30)
    peak_threads = max(peak_threads, serve.threads())
    h.close()
    print(f"hostile: {args.idle} idle + {args.slow} slowloris connections held for {args.seconds:g} s "
          f"({h.reopened} reopened after the exporter cut them)")
    print(f"  {len(lat)} scrapes: p50 {ms(pct(lat, .5))}, p99 {ms(pct(lat, .99))}, max {ms(max(lat))}; "
          f"failures: {len(failures)} {failures[:3]}; exporter threads: {peak_threads}")


def auth(workdir, args):
    try:
        import bcrypt
    except ImportError:
        print("auth: skipped (pip install bcrypt)")
        return
    users = {f"prom{i}": bcrypt.hashpw(f"pw{i}".encode(), bcrypt.gensalt(rounds=args.bcrypt_cost)).decode()
             for i in range(5)}
    serve = Serve(workdir, "basic_auth_users:\n" + "".join(f"  {u}: '{h}'\n" for u, h in users.items()))
    try:
        def basic(user, pw):
            return {"Authorization": "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()}
        probe = get(serve.port, "/healthz")[0]
        bare = get(serve.port, "/metrics")[0]
        first, second = [], []
        for i in range(5):
            first.append(timed(serve.port, "/metrics", basic(f"prom{i}", f"pw{i}"))[1])
            second.append(timed(serve.port, "/metrics", basic(f"prom{i}", f"pw{i}"))[1])
        unknown = [timed(serve.port, "/metrics", basic(f"eve{i}", "pw0"))[1] for i in range(7)]
        wrong = [timed(serve.port, "/metrics", basic(f"prom{i % 5}", "nope"))[1] for i in range(7)]
        f, s, u, w = (statistics.median(x) for x in (first, second, unknown, wrong))
        print(f"auth (bcrypt cost {args.bcrypt_cost}): /healthz without credentials {probe}, /metrics without {bare}")
        print(f"  1st scrape {ms(f)}, 2nd {ms(s)} ({f / s:.0f}x faster); unknown user {ms(u)} vs wrong password "
              f"{ms(w)} ({abs(u - w) / max(u, w) * 100:.1f} % apart); medians")
        stop = threading.Event()

        def attacker():
            while not stop.is_set():
                try:
                    get(serve.port, "/metrics", basic("prom0", "guess"))
                except OSError:
                    pass
        attackers = [threading.Thread(target=attacker, daemon=True) for _ in range(args.attackers)]
        for t in attackers:
            t.start()
        time.sleep(1.0)        # let the guesses fill the bcrypt queue
        lat = []
        for _ in range(20):
            lat.append(timed(serve.port, "/metrics", basic("prom0", "pw0"))[1])
            time.sleep(0.1)
        stop.set()
        for t in attackers:
            t.join(30)
        print(f"  remembered-credential scrapes while {args.attackers} clients guess passwords: "
              f"p50 {ms(pct(lat, .5))}, max {ms(max(lat))}")
    finally:
        serve.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--idle", type=int, default=500)
    ap.add_argument("--slow", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--scrapers", type=int, default=4)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--bcrypt-cost", type=int, default=12)
    ap.add_argument("--attackers", type=int, default=16)
    args = ap.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="http-bench-") as tmp:
        serve = Serve(Path(tmp))
        try:
            baseline(serve.port)
            hostile(serve, args)
        finally:
            serve.stop()
        auth(Path(tmp), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
