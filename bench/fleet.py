"""A fleet against a real Prometheus: N fake SGLang servers (each a sidecar /metrics and SGLang's own /metrics,
replayed from expositions captured by bench/fleet_capture.py, values moving every scrape), two clusters that
share every namespace, pod and address, every rule file of ours loaded; then each rule group's evaluation time
(and the slowest rules'), each dashboard query's time through the HTTP API, and where the CPU went while measuring
(Prometheus, this process serving the targets, the rest of the machine).

    python bench/fleet.py --servers 1000 [--big-every 20] [--rules alerts] [--dashboards dashboards]
    python bench/fleet.py --servers 300 --rules /tmp/main/alerts --dashboards /tmp/main/dashboards   # before

One HTTP server on 127.0.0.1 serves every target under its own path (/<i>/sidecar, /<i>/sglang); Prometheus
scrapes them as separate targets whose `instance`, `cluster`, `namespace` and `pod` labels are set in the
scrape config. Every `--big-every`-th server is dp8 x tp8, the rest tp1. Needs a Prometheus: by default the
current release `scripts/current-prometheus` fetched, else Debian's `prometheus` on PATH (`--prometheus BIN`).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml
from go_profile import split as profile_split  # (bench/ is sys.path[0] when run as a script)

ROOT = Path(__file__).resolve().parents[1]
CAPTURES = ROOT / "bench/out/fleet"
CLUSTERS = ("eu-1", "us-1")
# the current release scripts/current-prometheus fetches (Debian testing's 3.5 today): the one docs/configuration.md
# recommends for fleets of this size, so a plain run measures it when it is there
CURRENT_PROMETHEUS = Path(os.environ.get("SGLANG_EXPORTER_CURRENT_PROMETHEUS")
                          or Path.home() / ".cache/sglang-exporter/tools/prometheus-forky") / "prometheus"
GROWING = re.compile(r"(_total|_bucket|_sum|_count)(\{|\s)")
VARIABLES = {"$namespace": ".*", "$instance": ".*", "$model": ".*", "$cluster": ".*", "$server": ".*",
             "$__rate_interval": "1m", "$__interval": "15s"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Exposition:
    """A captured exposition split into (series text, value, kind): counters grow with the scrape number,
    gauges move around their captured value, 0/1 states and info series stay."""

    def __init__(self, text: str, firing: bool):
        self.head: list[str] = []
        self.rows: list[tuple[str, float, str]] = []
        for line in text.splitlines():
            if not line or line.startswith("#"):
                self.head.append(line)
                continue
            series, _, value = line.rpartition(" ")
            v = float(value)
            if "signal_firing{" in series and not firing:
                v = 0.0
            kind = "grow" if GROWING.search(series + " ") else \
                "keep" if (v in (0.0, 1.0) or "_info" in series) else "move"
            self.rows.append((series, v, kind))

    def render(self, n: int) -> bytes:
        out = []
        for series, v, kind in self.rows:
            if kind == "grow":
                v = v * (1 + 0.05 * n)
            elif kind == "move":
                v = v * (1 + 0.1 * math.sin(n + len(series)))
            out.append(f"{series} {v!r}")
        return ("\n".join(out) + "\n").encode()


def start_targets(servers: int, big_every: int, capture_dir: Path):
    small = {k: (capture_dir / "tp1" / f"{k}.prom").read_text() for k in ("sidecar", "sglang")}
    big = {k: (capture_dir / "dp8tp8" / f"{k}.prom").read_text() for k in ("sidecar", "sglang")}
    # every 10th server has its retraction storm firing; the others judge it ok
    expositions = {}
    for i in range(servers):
        texts = big if big_every and i % big_every == big_every - 1 else small
        firing = i % 10 == 0
        for kind in ("sidecar", "sglang"):
            key = (texts is big, firing, kind)
            if key not in expositions:
                expositions[key] = Exposition(texts[kind], firing)
    layout = {i: (big_every and i % big_every == big_every - 1, i % 10 == 0) for i in range(servers)}
    scrapes = [0]
    bodies: dict[tuple[int, int], bytes] = {}
    lock = threading.Lock()

    def rendered(exp: Exposition, n: int) -> bytes:
        """One exposition's body at scrape number n, rendered once for every target that replays it (at
        1,000 servers, rendering per request kept a core busy in Python and the scrapes fell behind)."""
        key = (id(exp), n)
        with lock:
            body = bodies.get(key)
            if body is None:
                for old in [k for k in bodies if k[1] < n - 1]:
                    del bodies[old]
                body = bodies[key] = exp.render(n)
        return body

    class Handler(BaseHTTPRequestHandler):
        # keep-alive: Prometheus reuses one connection per target, so a scrape costs a request, not a new
        # connection and a new thread (with HTTP/1.0 the targets took ~a third of a core at 1,000 servers)
        protocol_version = "HTTP/1.1"

        def do_GET(self):     # noqa: N802 - http.server's name
            parts = self.path.strip("/").split("/")
            try:
                i, kind = int(parts[0]), parts[1]
                is_big, firing = layout[i]
                exp = expositions[(is_big, firing, kind)]
            except (ValueError, IndexError, KeyError):
                self.send_error(404)
                return
            scrapes[0] += 1
            body = rendered(exp, int(time.time() // 15))
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:     # Prometheus gave up on a slow scrape (the target counts as down: see "targets up")
                pass

        def log_message(self, *args):
            pass

    class Server(ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            # Prometheus stopping resets its kept-alive connections: nothing to report
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)

    httpd = Server(("127.0.0.1", free_port()), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, scrapes


def prometheus_config(servers: int, port: int, rules: list[Path]) -> dict:
    jobs = {"sglang-exporter": ("sidecar", 10060), "sglang": ("sglang", 30000)}
    scrape_configs = []
    for job, (kind, fake_port) in jobs.items():
        targets = []
        for i in range(servers):
            # two clusters running the same StatefulSet: identical namespace, pod and pod IP
            half = i % 2
            j = i // 2
            targets.append({"targets": [f"127.0.0.1:{port}"], "labels": {
                "__metrics_path__": f"/{i}/{kind}", "cluster": CLUSTERS[half], "namespace": f"llm-{j % 10}",
                "pod": f"sglang-{j}", "instance": f"10.{j // 65536}.{j // 256 % 256}.{j % 256}:{fake_port}"}})
        scrape_configs.append({"job_name": job, "scrape_interval": "15s", "scrape_timeout": "10s",
                               "static_configs": targets})
    return {"global": {"scrape_interval": "15s", "evaluation_interval": "15s"},
            "rule_files": [str(r) for r in rules], "scrape_configs": scrape_configs}


def api(base: str, path: str, params: dict, timeout: float = 10) -> tuple[dict, float]:
    """Prometheus' JSON answer and the seconds it took; an error, a refusal or no answer within `timeout`
    (5x the goal: such a query has failed it) is an answer with status "error"."""
    url = f"{base}{path}?{urllib.parse.urlencode(params, doseq=True)}"
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            body = json.loads(r.read())
    except urllib.error.HTTPError as e:     # a bad query: Prometheus says why in a JSON body
        body = json.loads(e.read() or b"{}") or {"status": "error", "error": str(e)}
    except (OSError, ValueError) as e:
        body = {"status": "error", "error": f"{type(e).__name__}: {e}"}
    return body, time.monotonic() - t0


def wait_ready(base: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("prometheus did not become ready")


def dashboard_queries(directory: Path) -> list[tuple[str, str, str, bool]]:
    """(board, panel / variable, PromQL, instant) of every dashboard JSON: panel targets (a table's are instant
    queries, as Grafana runs them) and variable queries."""
    out = []
    for path in sorted(directory.glob("*.json")):
        board = json.loads(path.read_text())
        for panel in board.get("panels", []):
            for target in panel.get("targets", []):
                out.append((board["uid"], panel["title"], target["expr"], bool(target.get("instant"))))
        for var in board.get("templating", {}).get("list", []):
            if var.get("type") == "query":
                out.append((board["uid"], f"${var['name']}", var["query"], False))
    return out


def targets_up_count(base: str) -> int:
    up, _ = api(base, "/api/v1/query", {"query": "count(up == 1)"})
    result = up.get("data", {}).get("result") or [{"value": [0, "0"]}]
    return int(float(result[0]["value"][1]))


def progress(what: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {what} (load {load()})", file=sys.stderr, flush=True)


def load() -> str:
    """The 1/5/15-minute load averages (the machine is shared: every figure carries the load it was taken at)."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_seconds(pid: int | str) -> float:
    """A process's CPU time so far (user + system, every thread) from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU time every process of the machine has used (all cores): /proc/stat's first line less idle and iowait."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:8]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def ensure_captures(directory: Path) -> None:
    """Capture the two layouts with bench/fleet_capture.py when they are not there yet (about a minute)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from fleet_capture import capture
    for name, tp, dp in (("tp1", 1, 1), ("dp8tp8", 8, 8)):
        if not all((directory / name / f"{k}.prom").exists() for k in ("sidecar", "sglang")):
            print(f"capturing {name} into {directory / name}", flush=True)
            capture(tp, dp, directory / name, per_rank=True)


def latency_alternatives() -> dict[str, list[tuple[str, str]]]:
    """Ways to record one SGLang latency histogram's quantiles, each as the queries its rule group would run
    in one evaluation: (what it writes, PromQL). The first is what alerts/ does; the others are measured
    beside it, as instant queries against the same Prometheus and data."""
    from exporter.catalog.native import native_metric_names
    from exporter.generate import records
    from exporter.generate.promql import by, sel
    from exporter.generate.settings import RuleSettings
    settings = RuleSettings()
    w = settings.window(settings.rate_window)
    group = by(settings.join_labels + settings.native_keep_labels)
    model = by(records.model_labels(settings))
    out: dict[str, list[tuple[str, str]]] = {}
    for value in records.RECORDED_HISTOGRAMS:
        name = native_metric_names(value)[0]
        raw = f"rate({name}_bucket{sel(settings.sglang_selector)}[{w}])"
        record = records.bucket_record(settings, name)
        per_server = f"sum by (le, {group}) ({raw})"
        per_model = f"histogram_quantile(0.99, sum by (le, {model}) ({raw}))"
        for quantiles in ((0.5, 0.9, 0.99), (0.99,)):      # what alerts/ records; p99 alone (tried, reverted)
            names = "/".join(f"p{round(q * 100)}" for q in quantiles)
            out[f"{value}: bucket rates recorded, then {names} + model p99 from the record"] = [
                ("bucket rates", per_server),
                *((f"p{round(q * 100)}", f"histogram_quantile({q}, {record})") for q in quantiles),
                ("model p99", f"histogram_quantile(0.99, sum by (le, {model}) ({record}))")]
        out[f"{value}: p50/p90/p99 per server and model p99, each from the raw buckets"] = [
            *((f"p{round(q * 100)}", f"histogram_quantile({q}, {per_server})") for q in (0.5, 0.9, 0.99)),
            ("model p99", per_model)]
        out[f"{value}: p99 per server and model p99 from the raw buckets"] = [
            ("p99", f"histogram_quantile(0.99, {per_server})"), ("model p99", per_model)]
    return out


def instant(base: str, expr: str, at: float | None = None) -> tuple[float, int, int]:
    """(seconds, samples read, series returned) of one instant query (at time `at`, else now). The samples
    Prometheus counts (`stats=all`) measure a query's work whatever the machine's load; the seconds do not,
    so this waits longer than a dashboard would (-1 samples: no answer even then)."""
    params = {"query": expr, "stats": "all", **({"time": at} if at else {})}
    body, took = api(base, "/api/v1/query", params, timeout=120)
    data = body.get("data") or {}
    samples = (data.get("stats") or {}).get("samples", {}).get("totalQueryableSamples", -1)
    return took, samples, len(data.get("result") or [])


def rule_samples(base: str, rule_files: list[Path]) -> dict[str, int]:
    """Each rule group's samples read per evaluation: its rules' expressions as instant queries."""
    out = {}
    for path in rule_files:
        for group in (yaml.safe_load(path.read_text()) or {}).get("groups", []):
            out[group["name"]] = sum(instant(base, rule["expr"])[1] for rule in group["rules"])
    return out


def time_alternatives(base: str) -> list[tuple[str, float, int, int]]:
    """(alternative, seconds and samples read per evaluation (its queries summed), series written) of every
    latency alternative."""
    rows = []
    for label, queries in latency_alternatives().items():
        took, samples, written = 0.0, 0, 0
        for _what, expr in queries:
            t, n, series = instant(base, expr)
            took, samples, written = took + t, samples + n, written + series
        rows.append((label, took, samples, written))
    return rows


def run_query(base: str, expr: str, instant: bool, now: float) -> tuple[float, str]:
    for var, value in VARIABLES.items():
        expr = expr.replace(var, value)
    m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", expr, re.S)
    if m:       # Grafana: the label's values over the series the selector matches
        body, took = api(base, f"/api/v1/label/{m.group(2)}/values",
                         {"match[]": m.group(1), "start": now - 3600, "end": now})
    elif instant:
        body, took = api(base, "/api/v1/query", {"query": expr, "time": now})
    else:
        body, took = api(base, "/api/v1/query_range", {"query": expr, "start": now - 600, "end": now, "step": 15})
    return took, body.get("status", "?") + ("" if body.get("status") == "success" else f": {body.get('error')}")


def take_profile(base: str, seconds: int, out: dict) -> None:
    """Prometheus' CPU profile over the next `seconds` (its /debug/pprof), split by go_profile.PATHS into `out`."""
    out["window"] = seconds
    try:
        with urllib.request.urlopen(f"{base}/debug/pprof/profile?seconds={seconds}", timeout=seconds + 30) as r:
            out["raw"] = r.read()
            out["split"] = profile_split(out["raw"])
    except (OSError, ValueError) as exc:      # the figures stand without it
        out["error"] = str(exc)


def cpu_split(start: tuple, end: tuple) -> dict[str, float]:
    """CPU-seconds and shares of the machine's capacity over a window, from two (Prometheus, this process,
    machine busy, monotonic) readings."""
    prometheus, bench, busy, window = (b - a for a, b in zip(start, end))
    capacity = window * (os.cpu_count() or 1)
    other = max(busy - prometheus - bench, 0.0)
    return {"window": window, "capacity": capacity, "prometheus": prometheus, "bench": bench, "other": other,
            "prometheus_share": prometheus / capacity, "bench_share": bench / capacity,
            "other_share": other / capacity, "idle_share": max(capacity - busy, 0.0) / capacity}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", type=int, default=1000)
    ap.add_argument("--big-every", type=int, default=20, help="every Nth server is dp8 x tp8 (0: none)")
    ap.add_argument("--rules", type=Path, default=ROOT / "alerts", help="directory of *.rules.yml to load")
    ap.add_argument("--dashboards", type=Path, default=ROOT / "dashboards")
    ap.add_argument("--captures", type=Path, default=CAPTURES, help="bench/fleet_capture.py output (tp1, dp8tp8)")
    ap.add_argument("--warmup", type=float, default=320,
                    help="seconds before measuring (the rules' 5m rate windows fill: a query reads what it will)")
    ap.add_argument("--measure", type=float, default=240,
                    help="seconds of rule evaluations to take the median and max over (the 1m groups: 4)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--hold", type=float, default=0, help="seconds to keep Prometheus up after measuring")
    ap.add_argument("--latency-alternatives", action="store_true",
                    help="also time other ways to record the latency quantiles, side by side")
    ap.add_argument("--prometheus", default=str(CURRENT_PROMETHEUS) if CURRENT_PROMETHEUS.exists() else "prometheus",
                    help="the Prometheus binary (a path, or a name on PATH): compare releases on the same rules "
                         "(default: the one scripts/current-prometheus fetched, else prometheus on PATH)")
    ap.add_argument("--group-limit", type=float, default=1.0, help="goal: every rule group's median evaluation")
    ap.add_argument("--query-limit", type=float, default=2.0, help="goal: every dashboard query")
    args = ap.parse_args()
    # `kill` (a --hold cut short): unwind, so Prometheus and its temporary data go with the bench
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    prometheus = shutil.which(args.prometheus)
    if not prometheus:
        raise SystemExit(f"--prometheus {args.prometheus}: not found (Debian's: apt-get install prometheus)")
    version = subprocess.run([prometheus, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    progress(version)
    ensure_captures(args.captures)
    loads = {"start": load()}
    started = time.monotonic()
    httpd, scrapes = start_targets(args.servers, args.big_every, args.captures)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    rules = sorted(args.rules.glob("*.rules.yml"))
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(prometheus_config(args.servers, httpd.server_address[1], rules)))
        proc = subprocess.Popen([prometheus, f"--config.file={cfg}", f"--storage.tsdb.path={tmp}/data",
                                 f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                stdout=subprocess.DEVNULL, stderr=open(Path(tmp) / "prometheus.log", "w"))
        try:
            wait_ready(base, time.monotonic() + 60)
            progress(f"{2 * args.servers} targets, {len(rules)} rule files; warming up {args.warmup:.0f} s")
            time.sleep(args.warmup)
            up_now = targets_up_count(base)
            if up_now < 0.95 * 2 * args.servers:
                # Prometheus cannot keep up with the scrapes on this machine: its figures would measure the load
                print(f"FAIL  only {up_now} of {2 * args.servers} targets up after the warm-up (load {load()}, "
                      f"{os.cpu_count()} CPUs): this machine cannot run {args.servers} servers; try fewer "
                      "(--servers) or a quieter machine")
                return 1
            progress(f"measuring rule groups for {args.measure:.0f} s")
            loads["measuring"] = load()
            # keyed by the evaluation's timestamp: each evaluation counted once however often it is polled (the
            # 1m groups would count each of theirs four times)
            durations: dict[str, dict[str, float]] = {}
            rule_times: dict[tuple[str, str], dict[str, float]] = {}
            # where the CPU goes while measuring: Prometheus, the bench's own target server (this process), the rest
            cpu_start = (cpu_seconds(proc.pid), cpu_seconds("self"), machine_busy_seconds(), time.monotonic())
            scrapes_before = scrapes[0]
            # Prometheus' own CPU profile over the same window: where its CPU goes (rules, scrapes, GC)
            profiled: dict = {}
            profiler = threading.Thread(target=take_profile, args=(base, max(10, int(args.measure) - 10), profiled),
                                        daemon=True)
            profiler.start()
            end = time.monotonic() + args.measure
            errors: dict[str, str] = {}
            while time.monotonic() < end:
                # each group's last evaluation time (prometheus_rule_group_last_duration_seconds) and health
                body, _ = api(base, "/api/v1/rules", {})
                for group in body.get("data", {}).get("groups", []):
                    at = group.get("lastEvaluation", "")
                    durations.setdefault(group["name"], {})[at] = float(group["evaluationTime"])
                    for rule in group["rules"]:
                        key = (group["name"], rule["name"])
                        rule_times.setdefault(key, {})[at] = float(rule.get("evaluationTime", 0))
                        if rule.get("health") == "err":
                            errors[rule["name"]] = rule.get("lastError", "")
                time.sleep(15)
            groups_seen = {group: list(evaluations.values()) for group, evaluations in durations.items()}
            rules_seen = {key: list(evaluations.values()) for key, evaluations in rule_times.items()}
            cpu_end = (cpu_seconds(proc.pid), cpu_seconds("self"), machine_busy_seconds(), time.monotonic())
            profiler.join(timeout=60)
            scrapes_measured = scrapes[0] - scrapes_before
            with urllib.request.urlopen(f"{base}/metrics", timeout=30) as r:
                own = r.read().decode()
            head = int(float(re.search(r"^prometheus_tsdb_head_series (\S+)", own, re.M).group(1)))
            targets_up = targets_up_count(base)
            now = time.time()
            progress("running every dashboard query")
            queries = [(board, title, *run_query(base, expr, instant, now))
                       for board, title, expr, instant in dashboard_queries(args.dashboards)]
            loads["queries"] = load()
            if args.latency_alternatives:
                progress("timing the latency recording alternatives")
            alternatives = time_alternatives(base) if args.latency_alternatives else []
            progress("counting the samples each rule group reads")
            samples = rule_samples(base, rules)
            if args.hold:       # to try queries against the same data by hand (the figures print afterwards)
                progress(f"Prometheus stays at {base} for {args.hold:.0f} s")
                time.sleep(args.hold)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            httpd.shutdown()
    failed = len(errors)
    print(f"servers {args.servers} (every {args.big_every}th dp8 x tp8), two clusters sharing names; "
          f"head series {head}; targets up {targets_up} of {2 * args.servers}; rules failing {failed}; "
          f"target scrapes served {scrapes[0]}")
    print(f"load average (1/5/15 min) at start {loads['start']}, measuring {loads['measuring']}, "
          f"after the queries {loads['queries']}; {os.cpu_count()} CPUs; {time.monotonic() - started:.0f} s in all")
    for name, error in errors.items():
        print(f"  {name}: {error[:200]}")
    cpu = cpu_split(cpu_start, cpu_end)
    print(f"CPU while measuring ({cpu['window']:.0f} s, {os.cpu_count()} CPUs = {cpu['capacity']:.0f} CPU-s): "
          f"Prometheus {cpu['prometheus']:.0f} s ({cpu['prometheus_share']:.0%}), the bench's target server "
          f"{cpu['bench']:.0f} s ({cpu['bench_share']:.0%}), everything else {cpu['other']:.0f} s "
          f"({cpu['other_share']:.0%}), idle {cpu['idle_share']:.0%}; {scrapes_measured} scrapes served, "
          f"{1000 * cpu['bench'] / max(scrapes_measured, 1):.2f} ms of the bench's CPU each")
    if "split" in profiled:
        inside = profiled["split"]
        print(f"Prometheus' CPU profile ({inside['seconds']:.1f} CPU-s sampled over {profiled['window']} s; "
              "bench/go_profile.py): " + "; ".join(f"{label.strip()} {seconds / max(inside['seconds'], 1e-9):.0%}"
                                                  for label, seconds in inside["paths"].items()))
    else:
        print(f"Prometheus' CPU profile: not taken ({profiled.get('error', 'no answer')})")
    medians = {group: statistics.median(values) for group, values in groups_seen.items()}
    print(f"\n{'rule group':40} {'median s':>9} {'max s':>8} {'evaluations':>12} {'samples read':>13}")
    for group, values in sorted(groups_seen.items()):
        print(f"{group:40} {medians[group]:9.3f} {max(values):8.3f} {len(values):12d} {samples.get(group, -1):13d}")
    print(f"\n{'slowest rules (max over the window)':72} {'median s':>9} {'max s':>8}")
    for (group, rule), values in sorted(rules_seen.items(), key=lambda kv: -max(kv[1]))[:12]:
        print(f"{(group + ' / ' + rule)[:72]:72} {statistics.median(values):9.3f} {max(values):8.3f}")
    print(f"\n{'board':18} {'panel / variable (15 slowest)':48} {'s':>7}  status")
    ranked = sorted(queries, key=lambda q: -q[2])
    for board, title, took, status in ranked[:15]:
        print(f"{board:18} {title[:48]:48} {took:7.3f}  {status}")
    bad = [q for q in queries if not q[3].startswith("success")]
    print(f"{len(queries)} dashboard queries, {len(bad)} failed; slowest {ranked[0][2]:.3f} s")
    for board, title, _, status in bad:
        print(f"  {board} {title}: {status[:200]}")
    if alternatives:
        print(f"\n{'latency recording alternative (one histogram)':80} {'s/eval':>7} {'samples':>9} {'written':>8}")
        for label, took, read, written in alternatives:
            print(f"{label:80} {took:7.3f} {read:9d} {written:8d}")
    slow_groups = [g for g, m in medians.items() if m >= args.group_limit]
    slow_queries = [q for q in queries if q[2] >= args.query_limit]
    verdict = {
        f"every rule group's median evaluation < {args.group_limit:g} s": not slow_groups,
        f"every dashboard query < {args.query_limit:g} s": not slow_queries,
        "0 failing rules, 0 failing queries": not failed and not bad,
        "every target scraped": targets_up == 2 * args.servers,
    }
    print()
    for goal, met in verdict.items():
        print(f"{'PASS' if met else 'FAIL'}  {goal}")
    print(f"{'PASS' if all(verdict.values()) else 'FAIL'}  at {args.servers} servers on {version} "
          f"(load {loads['measuring']})")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        if profiled.get("raw"):     # for `python bench/go_profile.py` (the heaviest functions)
            args.json.with_suffix(".pprof.gz").write_bytes(profiled["raw"])
        args.json.write_text(json.dumps({"servers": args.servers, "prometheus": version, "head_series": head,
                                         "failures": failed, "targets_up": targets_up, "load": loads,
                                         "groups": groups_seen, "samples": samples, "queries": queries, "cpu": cpu,
                                         "profile": profiled.get("split"),
                                         "rules": {f"{g} / {r}": v for (g, r), v in rules_seen.items()},
                                         "alternatives": alternatives,
                                         "verdict": verdict}, indent=1))
    return 0 if all(verdict.values()) else 1

if __name__ == "__main__":
    sys.exit(main())
