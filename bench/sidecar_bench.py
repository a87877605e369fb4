#!/usr/bin/env python3
"""Sidecar cost benchmark: CPU, RSS and line-to-gauge latency of `exporter serve` following a live log.

    python bench/sidecar_bench.py [--rate 1000] [--seconds 60] [--scrape-interval 15]
                                  [--warmup 5] [--latency-seconds 20] [--poll-interval 0.05] [--seed 1]

What it does (127.0.0.1 only, bounded runtime, the sidecar is killed at the end):
  1. starts `python -m exporter serve --log-file F --listen 127.0.0.1:<free port>` (pinned to one core when
     there are two or more; this script runs on another core);
  2. a writer appends realistic SGLang 0.5.x lines (bench/genlog.py's stream, timestamps rewritten to now) to F
     at --rate lines/s, in 10 ms batches; a Prometheus-like scraper GETs /metrics every --scrape-interval s;
  3. steady state (--seconds, after --warmup): the sidecar's CPU as % of one core from /proc/<pid>/stat
     utime+stime deltas (its threads and any child processes), RSS from /proc/<pid>/status VmRSS (sampled every
     second: mean and max) and VmHWM;
  4. latency (--latency-seconds): every TP0 decode line now carries a marker, #queue-req = 1000000 + sequence
     number; a fast poller GETs /metrics every --poll-interval s and, for each marker, records the time from
     its write() returning to the first poll response whose `sglang_exporter_queue_requests` shows a value
     >= the marker (an upper bound: it includes up to one poll interval). Reported: p50, p99, max.
     The fast poller runs only in this phase so it does not inflate the CPU figure of step 3.
Targets reported against: <= 1 % of one core, <= 40 MB RSS, p99 <= 1 s.
Exit status: 0 when measured (whatever the figures) or when `serve` does not exist yet (skipped with a note);
1 when the sidecar is broken (crashes, never serves /metrics, never shows a marker).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
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
import genlog
from parse_bench import machine_line

MARKER_BASE = 1_000_000
TARGET_CPU_PCT, TARGET_RSS_MB, TARGET_P99_S = 1.0, 40.0, 1.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
GAUGE = "sglang_exporter_queue_requests"
QUEUE_RE = re.compile(rf"^{GAUGE}(?:\{{[^}}]*\}})? (\S+)", re.MULTILINE)


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_tree(pid: int) -> list[int]:
    """pid and its descendants (a serve that forks workers is charged for them too)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = Path(f"/proc/{d}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def cpu_ticks(pids: list[int]) -> int:
    total = 0
    for p in pids:
        try:
            f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(f[11]) + int(f[12])  # utime, stime (fields 14, 15)
    return total


def status_kb(pids: list[int], key: str) -> int:
    total = 0
    for p in pids:
        try:
            m = re.search(rf"^{key}:\s+(\d+) kB", Path(f"/proc/{p}/status").read_text(), re.MULTILINE)
        except OSError:
            continue
        if m:
            total += int(m.group(1))
    return total


def scrape(port: int, timeout: float = 5.0) -> tuple[str, float]:
    t = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        body = r.read().decode("utf-8", "replace")
    return body, time.perf_counter() - t


def queue_max(body: str) -> float | None:
    vals = [float(v) for v in QUEUE_RE.findall(body) if v not in ("NaN", "+Inf", "-Inf")]
    return max(vals) if vals else None


class Writer(threading.Thread):
    """Appends the generated stream at `rate` lines/s; in marker mode TP0 decode lines carry a sequence."""

    def __init__(self, path: str, lines: list[str], rate: float):
        super().__init__(daemon=True)
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.lines, self.rate = lines, rate
        self.stop = threading.Event()
        self.marking = False
        self.markers: list[tuple[int, float]] = []  # (value, monotonic time the write returned)
        self.written = 0
        self.bytes = 0
        self.seq = 0
        self._sec, self._stamp = -1, ""

    def _rewrite(self, line: str, now_sec: int) -> tuple[str, int | None]:
        if now_sec != self._sec:
            self._sec, self._stamp = now_sec, genlog.stamp(now_sec)
        marker = None
        if line.startswith("[20"):
            line = "[" + self._stamp + line[20:]
            if self.marking and line.startswith(" TP0] Decode batch", 20):
                self.seq += 1
                marker = MARKER_BASE + self.seq
                line = line.rsplit("#queue-req: ", 1)[0] + f"#queue-req: {marker}"
        return line, marker

    def run(self):
        t0 = time.monotonic()
        i, n = 0, len(self.lines)
        while not self.stop.is_set():
            due = int(self.rate * (time.monotonic() - t0)) - self.written
            if due > 0:
                now_sec = int(time.time())
                batch, marks = [], []
                for _ in range(due):
                    line, m = self._rewrite(self.lines[i % n], now_sec)
                    i += 1
                    batch.append(line)
                    if m is not None:
                        marks.append(m)
                data = ("\n".join(batch) + "\n").encode()
                os.write(self.fd, data)
                t_w = time.monotonic()
                self.markers.extend((m, t_w) for m in marks)
                self.written += due
                self.bytes += len(data)
            self.stop.wait(0.01)
        os.close(self.fd)


class Poller(threading.Thread):
    """Fast /metrics poller: (monotonic time of the response, max queue gauge) samples."""

    def __init__(self, port: int, interval: float):
        super().__init__(daemon=True)
        self.port, self.interval = port, interval
        self.stop = threading.Event()
        self.samples: list[tuple[float, float]] = []
        self.errors = 0

    def run(self):
        while not self.stop.is_set():
            t = time.monotonic()
            try:
                body, _ = scrape(self.port, timeout=2.0)
                v = queue_max(body)
                if v is not None:
                    self.samples.append((time.monotonic(), v))
            except OSError:
                self.errors += 1
            self.stop.wait(max(0.0, self.interval - (time.monotonic() - t)))


def latencies(markers, samples) -> tuple[list[float], int]:
    """For each marker, time from write to the first sample at/after it showing a value >= the marker."""
    out, unseen, j = [], 0, 0
    samples = sorted(samples)
    for value, t_w in sorted(markers, key=lambda m: m[1]):
        while j < len(samples) and samples[j][0] < t_w:
            j += 1
        k = j
        while k < len(samples) and samples[k][1] < value:
            k += 1
        if k < len(samples):
            out.append(samples[k][0] - t_w)
        else:
            unseen += 1
    return out, unseen


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100.0 * len(xs) + 0.5) - 1))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=1000.0, help="lines per second written to the log")
    ap.add_argument("--seconds", type=float, default=60.0, help="steady-state measurement window")
    ap.add_argument("--scrape-interval", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=5.0)
    ap.add_argument("--latency-seconds", type=float, default=20.0)
    ap.add_argument("--poll-interval", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--positions", action="store_true", help="run serve with a positions file (written every "
                    "5 s, as deployed) to measure what durability costs")
    ap.add_argument("--keep", action="store_true", help="keep the log and the sidecar's stderr in bench/out/")
    ap.add_argument("--serve-cmd", help="measure another follower instead: a command with {log} and {port} "
                    "placeholders, e.g. mtail (then also --gauge)")
    ap.add_argument("--gauge", default=GAUGE, help="the gauge that shows #queue-req (default %(default)s)")
    a = ap.parse_args(argv)
    global QUEUE_RE
    QUEUE_RE = re.compile(rf"^{re.escape(a.gauge)}(?:\{{[^}}]*\}})? (\S+)", re.MULTILINE)

    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    base = [sys.executable, "-m", "exporter", "serve"]
    print(f"machine: {machine_line()}")
    p = subprocess.run(base + ["--help"], capture_output=True, text=True, env=env, cwd=REPO, timeout=60, check=False)
    if p.returncode != 0 and not a.serve_cmd:
        why = " | ".join((p.stderr or p.stdout).strip().splitlines()[-2:])
        print(f"SKIPPED: `python -m exporter serve --help` failed (serve not there yet?): {why}")
        return 0

    workdir = Path(tempfile.mkdtemp(prefix="sidecar_bench_"))
    if a.keep:
        workdir = BENCH / "out" / f"sidecar_{int(time.time())}"
        workdir.mkdir(parents=True)
    log = workdir / "sglang.log"
    log.touch()
    total_s = a.warmup + a.seconds + a.latency_seconds + 5
    n_lines = int(a.rate * total_s) + 1000
    lines = [ln for chunk in genlog.generate(n_lines, seed=a.seed) for ln in chunk]

    # cores: sidecar on the first allowed cpu, this script on another one when there is one
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = []
    pin = []
    if len(cpus) >= 2 and shutil.which("taskset"):
        pin = ["taskset", "-c", str(cpus[0])]
        os.sched_setaffinity(0, set(cpus[1:]))

    port = free_port()
    cmd = base + ["--log-file", str(log), "--listen", f"127.0.0.1:{port}"]
    if a.positions:
        cmd += ["--positions-file", str(workdir / "positions.json")]
    if a.serve_cmd:
        cmd = [part.format(log=log, port=port) for part in a.serve_cmd.split()]
    print(f"command: {' '.join(pin + cmd)}")
    print(f"rate: {a.rate:.0f} lines/s, warm-up {a.warmup:.0f} s, steady {a.seconds:.0f} s, latency phase "
          f"{a.latency_seconds:.0f} s, scrape every {a.scrape_interval:.0f} s, "
          f"poll every {a.poll_interval * 1000:.0f} ms",
          flush=True)
    err_path = workdir / "serve.stderr"
    err_f = open(err_path, "wb")
    proc = subprocess.Popen(pin + cmd, stdin=subprocess.DEVNULL, stdout=err_f, stderr=subprocess.STDOUT,
                            env=env, cwd=REPO, start_new_session=True)
    broken: list[str] = []
    writer = poller = None
    try:
        # ready?
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                broken.append(f"serve exited with {proc.returncode} before serving /metrics")
                break
            try:
                scrape(port, 1.0)
                break
            except OSError:
                if time.monotonic() > deadline:
                    broken.append("serve did not answer /metrics within 30 s")
                    break
                time.sleep(0.1)
        if broken:
            return _finish(broken, err_path)
        rss_idle = status_kb(proc_tree(proc.pid), "VmRSS") / 1024

        writer = Writer(str(log), lines, a.rate)
        writer.start()
        scrapes: list[tuple[float, int]] = []
        next_scrape = time.monotonic()

        def tick(until: float, rss_samples: list[float] | None):
            nonlocal next_scrape
            while time.monotonic() < until:
                if proc.poll() is not None:
                    raise RuntimeError(f"serve exited with {proc.returncode} during the run")
                if time.monotonic() >= next_scrape:
                    next_scrape += a.scrape_interval
                    try:
                        body, dt = scrape(port)
                        scrapes.append((dt, len(body)))
                    except OSError as exc:
                        broken.append(f"scrape failed: {exc}")
                if rss_samples is not None:
                    rss_samples.append(status_kb(proc_tree(proc.pid), "VmRSS") / 1024)
                time.sleep(min(1.0, max(0.01, until - time.monotonic())))

        try:
            tick(time.monotonic() + a.warmup, None)
            pids = proc_tree(proc.pid)
            t0, c0, w0 = time.monotonic(), cpu_ticks(pids), writer.written
            rss_samples: list[float] = []
            tick(t0 + a.seconds, rss_samples)
            pids = proc_tree(proc.pid)
            t1, c1, w1 = time.monotonic(), cpu_ticks(pids), writer.written
            hwm = status_kb(pids, "VmHWM") / 1024
            cpu_pct = (c1 - c0) / CLK_TCK / (t1 - t0) * 100.0
            achieved = (w1 - w0) / (t1 - t0)

            poller = Poller(port, a.poll_interval)
            poller.start()
            writer.marking = True
            tick(time.monotonic() + a.latency_seconds, None)
            writer.stop.set()  # stop writing so the last marker stays the gauge's value
            writer.join(5)
            time.sleep(min(5.0, max(2.0, 10 * a.poll_interval)))  # grace for the last markers
            poller.stop.set()
            poller.join(5)
            cpu_all = cpu_ticks(proc_tree(proc.pid)) / CLK_TCK
        except RuntimeError as exc:
            broken.append(str(exc))
            return _finish(broken, err_path)

        lat, unseen = latencies(writer.markers, poller.samples)
        last_seen = max((v for _, v in poller.samples), default=None)
        last_marker = max((m for m, _ in writer.markers), default=None)
        if writer.markers and not lat:
            broken.append(f"none of {len(writer.markers)} markers ever showed in sglang_exporter_queue_requests")

        rss_mean = statistics.fmean(rss_samples) if rss_samples else 0.0
        rss_max = max(rss_samples) if rss_samples else 0.0
        rows = [
            ("CPU, steady state (% of one core)", f"{cpu_pct:.2f} %", f"<= {TARGET_CPU_PCT:g} %",
             cpu_pct <= TARGET_CPU_PCT),
            ("RSS, steady state mean / max (MB)", f"{rss_mean:.1f} / {rss_max:.1f}", f"<= {TARGET_RSS_MB:g} MB",
             rss_max <= TARGET_RSS_MB),
            ("RSS high-water VmHWM (MB)", f"{hwm:.1f}", f"<= {TARGET_RSS_MB:g} MB", hwm <= TARGET_RSS_MB),
        ]
        if lat:
            p50, p99 = pct(lat, 50), pct(lat, 99)
            rows.append(("line -> gauge latency p50 / p99 / max (s)",
                         f"{p50:.3f} / {p99:.3f} / {max(lat):.3f}", f"p99 <= {TARGET_P99_S:g} s",
                         p99 <= TARGET_P99_S))
        else:
            rows.append(("line -> gauge latency", "not measured", f"p99 <= {TARGET_P99_S:g} s", None))
        w = max(len(r[0]) for r in rows)
        print()
        print(f"| {'figure':<{w}} | value | target | verdict |")
        print(f"|{'-' * (w + 2)}|-------|--------|---------|")
        for name, val, tgt, ok in rows:
            verdict = "meets" if ok else ("n/a" if ok is None else "MISSES")
            print(f"| {name:<{w}} | {val} | {tgt} | {verdict} |")
        print()
        print(f"- lines written: {writer.written} ({achieved:.0f} lines/s achieved in the steady window, "
              f"{writer.bytes / 1e6:.1f} MB in all); RSS before any line: {rss_idle:.1f} MB")
        print(f"- markers: {len(writer.markers)} written, {len(lat)} observed, {unseen} never observed; "
              f"fast polls: {len(poller.samples)} ok, {poller.errors} failed; last marker {last_marker}, "
              f"highest value seen {last_seen:.0f}" if last_seen is not None else "")
        if scrapes:
            print(f"- regular scrapes: {len(scrapes)}, mean {statistics.fmean(s[0] for s in scrapes) * 1000:.1f} ms, "
                  f"body {scrapes[-1][1] / 1024:.1f} KiB")
        print(f"- sidecar CPU over the whole run incl. the latency phase's fast polling: {cpu_all:.2f} s")
        print("- latency is an upper bound: write() returning -> the poll response that first shows the value "
              f"(includes up to one poll interval, {a.poll_interval * 1000:.0f} ms)")
        return _finish(broken, err_path)
    finally:
        if writer:
            writer.stop.set()
            writer.join(5)
        if poller:
            poller.stop.set()
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        err_f.close()
        if not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def _finish(broken: list[str], err_path: Path) -> int:
    if broken:
        tail = ""
        try:
            tail = " | ".join(err_path.read_text("utf-8", "replace").strip().splitlines()[-5:])
        except OSError:
            pass
        for b in broken:
            print(f"BROKEN: {b}", file=sys.stderr)
        if tail:
            print(f"serve output (tail): {tail}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
