#!/usr/bin/env python3
"""Memory of `exporter serve` under hostile and heavy log input: RSS after bursts and at a steady rate.

    python bench/memory_bench.py [--cases random-20,random-100,random-300,long-100,sglang-100,steady]
                                 [--steady-seconds 30] [--rate 1000] [--seed 1] [--timeout 300]

Each case starts its own `python -m exporter serve --log-file F --listen 127.0.0.1:<free port>` (so VmHWM is
that case's peak), waits until /metrics answers, then:
  random-N   appends N MB of random bytes (NUL, invalid UTF-8, a newline every ~256 bytes) in one go;
  long-N     appends N MB as 10 MiB lines without a newline inside (each is cut at max_line_bytes);
  sglang-N   appends N MB of realistic SGLang 0.5.x lines (bench/genlog.py) in one go (a backlog);
  steady     appends realistic lines at --rate lines/s for --steady-seconds (after a 5 s warm-up);
  page-N     serves an N MB SGLang /metrics page (one histogram family, many label sets) on 127.0.0.1 and
             has the sidecar scrape it once (--sglang-url, scrape_timeout 280 s so the parse completes).
A page case is done when /metrics' sglang_exporter_scrape_success is 1. A burst is "drained" when /metrics'
sglang_exporter_log_lines_read_total reaches the number of lines written (polled with a deadline). Figures
from /proc/<pid>/status: VmRSS before the burst, VmHWM (the peak since the process started), VmRSS once
drained and again 3 s later (after the sidecar went idle). 127.0.0.1 only; every process is killed at the end.
Exit status 1 when the sidecar breaks (dies, never drains).
"""
from __future__ import annotations

import argparse
import http.server
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
import genlog  # noqa: E402
from sidecar_bench import Writer, free_port, scrape, status_kb  # noqa: E402

MB = 1 << 20
LINES_READ = re.compile(r"^sglang_exporter_log_lines_read_total\{[^}]*\} (\S+)", re.MULTILINE)


def lines_read(port: int) -> float:
    body, _ = scrape(port, timeout=10.0)
    return sum(float(v) for v in LINES_READ.findall(body))


def wait(predicate, timeout: float, what: str, proc: subprocess.Popen):
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited with {proc.returncode} while waiting for {what}")
        try:
            if predicate():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def start(log: str, port: int, *extra: str, env: dict | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "exporter", "serve", "--log-file", log, "--listen", f"127.0.0.1:{port}", *extra]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})

    def serving():      # (not /readyz: it waits for a first line, and the file starts empty)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return r.status == 200
    wait(serving, 30, "/metrics", proc)
    return proc


def burst_chunks(kind: str, size: int, seed: int):
    """The burst's bytes in chunks of up to 4 MiB (the writer never holds the whole burst)."""
    rng = random.Random(seed)
    left = size
    if kind == "sglang":
        stream = [ln for chunk in genlog.generate(200_000, seed=seed) for ln in chunk]
        i = 0
        while left > 0:
            chunk = []
            n = 0
            while n < 4 * MB and n < left:
                line = stream[i % len(stream)] + "\n"
                i += 1
                chunk.append(line)
                n += len(line)
            data = "".join(chunk).encode()
            left -= len(data)
            yield data
        return
    while left > 0:
        n = min(4 * MB, left)
        if kind == "random":
            data = rng.randbytes(n)
        else:                                   # long: 10 MiB lines, a newline at each line's end
            data = bytearray(b"x" * n)
            done = size - left
            for k in range(10 * MB - done % (10 * MB) - 1, n, 10 * MB):
                data[k] = 0x0A
            data = bytes(data)
        left -= n
        yield data


def run_burst(kind: str, mb: int, seed: int, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "sglang.log")
        Path(log).touch()
        port = free_port()
        proc = start(log, port)
        try:
            time.sleep(1.0)                     # settle after start-up (bench figure, not a test)
            before = status_kb([proc.pid], "VmRSS")
            newlines = 0
            t0 = time.monotonic()
            with open(log, "ab") as f:
                for data in burst_chunks(kind, mb * MB, seed):
                    newlines += data.count(b"\n")
                    f.write(data)
                f.write(b"\n")                  # end the last line so every line counts as read
                newlines += 1
            wait(lambda: lines_read(port) >= newlines, timeout, f"{newlines} lines read", proc)
            drained = time.monotonic() - t0
            after = status_kb([proc.pid], "VmRSS")
            time.sleep(3.0)
            idle = status_kb([proc.pid], "VmRSS")
            peak = status_kb([proc.pid], "VmHWM")
        finally:
            proc.kill()
            proc.wait()
    return {"case": f"{kind}-{mb}", "before": before, "peak": peak, "after": after, "idle": idle,
            "seconds": drained}


def metrics_page(size: int) -> bytes:
    """An SGLang /metrics page of `size` bytes: one histogram family with many label sets."""
    out = ["# HELP sglang:time_to_first_token_seconds ttft\n# TYPE sglang:time_to_first_token_seconds histogram\n"]
    n, i = 0, 0
    while n < size:
        for le in ("0.1", "0.5", "1.0", "5.0", "+Inf"):
            line = (f'sglang:time_to_first_token_seconds_bucket{{model_name="m",tp_rank="0",client="c{i}",'
                    f'le="{le}"}} {i}\n')
            out.append(line)
            n += len(line)
        i += 1
    return "".join(out).encode()


def run_page(mb: int) -> dict:
    body = metrics_page(mb * MB - 4096)

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "sglang.log")
        Path(log).touch()
        port = free_port()
        t0 = time.monotonic()
        proc = start(log, port, "--sglang-url", f"http://127.0.0.1:{upstream.server_address[1]}",
                     env={"SGLANG_EXPORTER_SCRAPE_TIMEOUT": "280", "SGLANG_EXPORTER_SCRAPE_INTERVAL": "290"})
        try:
            before = status_kb([proc.pid], "VmRSS")

            def scraped():
                return re.search(r"^sglang_exporter_scrape_success\{[^}]*\} 1", scrape(port, timeout=10.0)[0],
                                 re.MULTILINE) is not None
            wait(scraped, 300, "one good scrape", proc)
            seconds = time.monotonic() - t0
            after = status_kb([proc.pid], "VmRSS")
            time.sleep(3.0)
            idle = status_kb([proc.pid], "VmRSS")
            peak = status_kb([proc.pid], "VmHWM")
        finally:
            proc.kill()
            proc.wait()
            upstream.shutdown()
            upstream.server_close()
    return {"case": f"page-{mb}", "before": before, "peak": peak, "after": after, "idle": idle, "seconds": seconds}


def run_steady(rate: float, seconds: float, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "sglang.log")
        Path(log).touch()
        port = free_port()
        proc = start(log, port)
        writer = Writer(log, [ln for chunk in genlog.generate(50_000, seed=seed) for ln in chunk], rate)
        try:
            before = status_kb([proc.pid], "VmRSS")
            writer.start()
            time.sleep(5.0)                     # warm-up
            samples = []
            t_end = time.monotonic() + seconds
            while time.monotonic() < t_end:
                samples.append(status_kb([proc.pid], "VmRSS"))
                scrape(port)
                time.sleep(1.0)
            peak = status_kb([proc.pid], "VmHWM")
        finally:
            writer.stop.set()
            writer.join(5)
            proc.kill()
            proc.wait()
    return {"case": f"steady {rate:g} lines/s, {seconds:g} s", "before": before, "peak": peak,
            "after": sum(samples) / len(samples), "idle": max(samples), "seconds": seconds}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default="random-20,random-100,random-300,long-100,sglang-100,steady")
    p.add_argument("--steady-seconds", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=1000.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds a burst may take to drain")
    args = p.parse_args(argv)
    rows = []
    for case in args.cases.split(","):
        try:
            if case == "steady":
                rows.append(run_steady(args.rate, args.steady_seconds, args.seed))
            elif case.startswith("page-"):
                rows.append(run_page(int(case.rsplit("-", 1)[1])))
            else:
                kind, mb = case.rsplit("-", 1)
                rows.append(run_burst(kind, int(mb), args.seed, args.timeout))
        except RuntimeError as exc:
            print(f"{case}: sidecar broken: {exc}", file=sys.stderr)
            return 1
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    print("| case | RSS before (MB) | peak VmHWM (MB) | RSS drained (MB) | RSS idle 3 s later (MB) | drain (s) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        if r["case"].startswith("steady"):
            print(f"| {r['case']} | {r['before'] / 1024:.1f} | {r['peak'] / 1024:.1f} | mean {r['after'] / 1024:.1f}"
                  f" | max {r['idle'] / 1024:.1f} | - |")
        else:
            print(f"| {r['case']} MB | {r['before'] / 1024:.1f} | {r['peak'] / 1024:.1f} | {r['after'] / 1024:.1f}"
                  f" | {r['idle'] / 1024:.1f} | {r['seconds']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
