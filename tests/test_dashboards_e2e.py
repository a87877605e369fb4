"""Every dashboard query returns data from a real Prometheus.

A real Prometheus (scrape interval and time-out 2 s: on a loaded machine a scrape here took up to 0.9 s) scrapes
two /metrics endpoints on 127.0.0.1, as in production where the sidecar and the SGLang server are two targets on
one host:

- variant `static`: the sidecar's endpoint serves an exposition written here from the catalog (every metric the
  exporter exposes, counters growing with each scrape), next to a simulated SGLang /metrics;
- variant `exporter`: the real `sglang-exporter serve` reads a constructed SGLang log (see `EXPORTER_LOG`) and
  scrapes the simulated SGLang /metrics. It runs when the CLI provides `serve`.

Then every panel target of both dashboards is evaluated through `/api/v1/query`, once with every variable set
to All (`.*`) and once with a concrete selection (namespace, host, model), and must return at least one
non-NaN sample. Variable queries are checked through the label-values API.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from helpers import PROMETHEUS_RELEASES, free_port, require_tool, stop_process, wait_until

from exporter import catalog
from exporter.generate import dashboards as gen
from exporter.sidecar.run import SGLANG_SOURCE

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "e2e"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
RATE_INTERVAL = "30s"
SUBSTITUTIONS = {
    "all": {"$namespace": ".*", "$instance": ".*", "$model": ".*"},
    "selected": {"$namespace": NAMESPACE, "$instance": "127.0.0.1", "$model": MODEL},
}


def exporter_serve_available() -> bool:
    """True when the CLI exists and has a `serve` command (it is built concurrently with the dashboards)."""
    try:
        import exporter.cli  # noqa: F401
    except Exception:  # noqa: BLE001 - absent or broken: the variant cannot run
        return False
    try:
        proc = subprocess.run([sys.executable, "-m", "exporter", "serve", "--help"], cwd=ROOT,
                              capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


# ------------------------------------------------------------------------------------------- /metrics fixtures


class Exposition:
    """A /metrics text whose counters and histograms grow with each scrape (so rates are non-zero)."""

    def __init__(self, render):
        self._render = render
        self._tick = 0
        self._lock = threading.Lock()

    def text(self) -> str:
        with self._lock:
            self._tick += 1
            return self._render(self._tick)


def _labels(labels: dict) -> str:
    return "{" + ",".join(f'{name}="{value}"' for name, value in labels.items()) + "}" if labels else ""


def _histogram(name: str, labels: dict, tick: int, buckets=(0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60)) -> list:
    lines = [f"# TYPE {name} histogram"]
    count = 10 * tick
    for bucket, le in enumerate(buckets):
        cumulative = min(count, int(count * (bucket + 1) / (len(buckets) - 2)))
        lines.append(f"{name}_bucket{_labels({**labels, 'le': str(float(le))})} {float(cumulative)}")
    lines.append(f"{name}_bucket{_labels({**labels, 'le': '+Inf'})} {float(count)}")
    lines.append(f"{name}_sum{_labels(labels)} {count * 0.7}")
    lines.append(f"{name}_count{_labels(labels)} {float(count)}")
    return lines


# counters whose panels select on a label value SGLang sets: the label sets those families carry
COUNTER_LABEL_SETS = {
    "sglang:dp_attention_tokens_total": [{"kind": "scheduled", "dp_rank": "0"}, {"kind": "scheduled", "dp_rank": "1"}],
    "sglang:prefill_effective_tokens_total": [{"mode": "device_hit"}, {"mode": "host_hit"}, {"mode": "compute"}],
}


def sglang_exposition(tick: int) -> str:
    """Every SGLang family the dashboards read (each spelling of a renamed one), one TP rank."""
    base = {"engine_type": "unified", "model_name": MODEL, "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}
    lines = []
    for name, kind in sorted(gen.sglang_metrics().items()):
        if name == "sglang:http_responses_total":
            # 0.5.23's label set: no model_name or ranks; inference POSTs (some 500s) beside health checks
            lines.append(f"# TYPE {name} counter")
            for endpoint, method, status, per_tick in (("/v1/chat/completions", "POST", "200", 30),
                                                       ("/v1/chat/completions", "POST", "500", 1),
                                                       ("/health", "GET", "200", 6)):
                labels = {"endpoint": endpoint, "method": method, "status_code": status}
                lines.append(f"{name}{_labels(labels)} {float(per_tick * tick)}")
        elif kind == "histogram":
            lines += _histogram(name, base, tick)
        elif kind == "counter":
            rows = [{**base, **extra} for extra in COUNTER_LABEL_SETS.get(name, [{}])]
            lines += [f"# TYPE {name} counter",
                      *(f"{name}{_labels(row)} {float((37 + i) * tick)}" for i, row in enumerate(rows))]
        else:
            lines += [f"# TYPE {name} gauge", f"{name}{_labels(base)} 0.82"]
    return "\n".join(lines) + "\n"


LABEL_VALUES = {
    "dp": ["0", "1"], "tp": ["0"], "pp": ["0"], "phase": ["prefill", "decode"],
    "source": ["/var/log/sglang/server.log"], "reason": ["unknown_format"], "kind": ["decode_batch"],
    "format": ["0.5.11+"], "model": [MODEL], "version": ["0.1.0"], "python": ["3.11.2"], "worker": ["follow"],
    "family": ["sglang_exporter_queue_requests"], "rank": ["DP0 TP0", "DP1 TP1"],
    "flag": ["--schedule-conservativeness"], "action": ["increase"], "signals": ["retraction_storm,retractions_frequent"],
}
SCRAPE_SOURCE = "http://127.0.0.1:30000/metrics"


def exporter_exposition(tick: int) -> str:
    """Every metric of catalog.METRICS, with plausible values."""
    lines = []
    for metric in catalog.METRICS:
        ptype = "counter" if metric.type == "counter" else "gauge"
        lines.append(f"# TYPE {metric.name} {ptype}")
        if "signal" in metric.labels:
            rows = [{"signal": signal.id, **({"severity": signal.severity} if "severity" in metric.labels else {})}
                    for signal in catalog.SIGNALS]
        elif metric.name.endswith("_advice_info"):
            rows = [{"flag": "--schedule-conservativeness", "action": "increase", "current": "1.0",
                     "suggested": "1.3", "signals": "retraction_storm,retractions_frequent"}]
        else:
            rows = [{}]
            for label in metric.labels:
                values = [SCRAPE_SOURCE] if label == "source" and "scrape" in metric.name else LABEL_VALUES[label]
                if label == "source" and metric.name.endswith("_source_up"):     # log files and the scrape alike
                    values = [*LABEL_VALUES[label], SGLANG_SOURCE]
                rows = [{**row, label: label_value} for row in rows for label_value in values]
        for index, row in enumerate(rows):
            if metric.type == "counter":
                value = float(tick * (index + 3))
            elif metric.name.endswith("_signal_firing"):
                value = 1.0 if row["signal"] in ("retractions_frequent", "gpu_headroom_high") else 0.0
            elif metric.name.endswith("_gpu_headroom_bytes"):
                value = 13.5 * catalog.GIB
            elif metric.name.endswith("_token_usage_ratio"):
                value = 0.82
            else:
                value = float(index + 1)
            lines.append(f"{metric.name}{_labels(row)} {value}")
    return "\n".join(lines) + "\n"


class MetricsServer:
    """Serves an Exposition on 127.0.0.1 at /metrics, in a thread."""

    def __init__(self, exposition: Exposition):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = exposition.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


# The log the real-exporter variant feeds to `sglang-exporter serve` (SGLang 0.5.11+ formats, constructed from
# sglang-formats.md §1-§4). It makes every dashboard series exist: start-up (server_args, capacity line with
# available_gpu_mem 13.50 GB -> headroom high), decode batches at the running cap (128 = max_running_requests)
# with a long queue, token usage 0.41 and CUDA graph off (queue above range, KV cache under-used, concurrency
# capped, CUDA graph off for small batches), many retractions (frequent, storm), an OOM in prefill and one in
# decode, a watchdog timeout, and an unrecognised SGLang-prefixed line.
def exporter_log(now: datetime) -> str:
    def ts(seconds_ago: float, rank: str = " TP0") -> str:
        return "[" + (now - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%d %H:%M:%S") + rank + "]"

    lines = [
        f"{ts(300, '')} server_args={{'model_path': '{MODEL}', 'served_model_name': '{MODEL}', "
        "'tp_size': 1, 'dp_size': 1, 'mem_fraction_static': 0.88, 'max_running_requests': 128, "
        "'chunked_prefill_size': 8192, 'schedule_conservativeness': 1.0, 'cuda_graph_max_bs': 160, "
        "'disable_cuda_graph': False, 'enable_metrics': True}",
        f"{ts(290)} Load weight end. elapsed=35.21 s, type=LlamaForCausalLM, avail mem=63.12 GB, "
        "mem usage=14.99 GB.",
        f"{ts(288)} KV Cache is allocated. dtype: torch.bfloat16, #tokens: 130000, K size: 7.94 GB, "
        "V size: 7.94 GB",
        f"{ts(287)} Memory pool end. avail mem=13.95 GB",
        f"{ts(286)} max_total_num_tokens=130000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=128, context_len=131072, available_gpu_mem=13.50 GB",
        f"{ts(280, '')} The server is fired up and ready to roll!",
    ]
    for step in range(40):
        ago = 240 - step * 6
        lines.append(f"{ts(ago)} Prefill batch, #new-seq: 3, #new-token: 4012, #cached-token: 1280, "
                     "token usage: 0.41, #running-req: 125, #queue-req: 2500, #pending-token: 0, "
                     "cuda graph: False, input throughput (token/s): 15342.77")
        lines.append(f"{ts(ago - 1)} Decode batch, #running-req: 128, #token: 53300, token usage: 0.41, "
                     "cuda graph: False, gen throughput (token/s): 1834.27, #queue-req: 2500")
        lines.append(f"{ts(ago - 2)} KV cache pool is full. Retract requests. #retracted_reqs: 2, "
                     "#new_tokens_gained: 2048, #new_token_ratio: 0.9998 -> 1.0000")
    lines += [
        f"{ts(20)} Prefill out of memory. Try to lower your batch size.",
        "Try to allocate 4096 tokens.",
        "Available tokens: 3 (available_size=3 + evictable_size=0)",
        f"{ts(15)} Decode out of memory. Try to lower your batch size.",
        "Try to allocate 5 tokens.",
        "Available tokens: 3 (available_size=3 + evictable_size=0)",
        f"{ts(10)} Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)",
        # a failure (server_crashed), so the failure-cause table has a row; the batch lines the LogWriter keeps
        # appending would end it after resume_seconds, which the exporter's config below raises
        f"{ts(8, '')} Subprocess scheduler_0 (pid=4242) crashed with exit code -9. Triggering SIGQUIT for "
        "cleanup...",
        f"{ts(5)} Frobnicate batch, #widgets: 7, sprocket usage: 0.12",
        f"{ts(1)} Decode batch, #running-req: 128, #token: 53300, token usage: 0.41, cuda graph: False, "
        "gen throughput (token/s): 1834.27, #queue-req: 2500",
    ]
    return "\n".join(lines) + "\n"


class LogWriter:
    """Keeps appending SGLang lines (a decode batch and an unrecognised line) like a live server, so the
    exporter's line and event rates stay non-zero while Prometheus evaluates rates."""

    def __init__(self, path: Path, interval: float = 0.25):
        self.path, self.interval = path, interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.wait(self.interval):
            stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(f"[{stamp} TP0] Decode batch, #running-req: 128, #token: 53300, token usage: 0.41, "
                        "cuda graph: False, gen throughput (token/s): 1834.27, #queue-req: 2500\n"
                        f"[{stamp} TP0] Frobnicate batch, #widgets: 7, sprocket usage: 0.12\n")

    def close(self):
        self.stop.set()
        self.thread.join(timeout=10)


# ------------------------------------------------------------------------------------------------- Prometheus


def _get(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.status, resp.read()


class BadQuery(Exception):
    pass


def rule_files(workdir: Path) -> list[str]:
    """Every rule file of ours the dashboards read records of: the committed sidecar and native rules, and the
    objectives' rules generated from the example objectives (none are committed: no objective is a default)."""
    from exporter.config import Config
    from exporter.generate import slo
    objectives = workdir / "sglang-slo.rules.yml"
    objectives.write_text(slo.render(Config(slo=slo.example_objectives()))[f"alerts/{slo.SLO_RULES}"])
    return [str(_every_second(ROOT / "alerts" / "sglang-exporter.rules.yml", workdir)),
            str(_every_second(ROOT / "alerts" / "sglang-native.rules.yml", workdir)), str(objectives)]


def _every_second(path: Path, workdir: Path) -> Path:
    """A copy of a committed rule file whose groups all run at the global 1 s evaluation interval.

    The windowed recording groups run every minute (their `interval:`) at an offset Prometheus hashes from the
    group's name, so their first evaluation can come before a second scrape exists for `rate()` and the next one
    a minute later: past this test's deadline. What is checked here is that every panel reads a series the rules
    record, not the groups' cadence (which promtool and test_alerts check)."""
    rules = yaml.safe_load(path.read_text())
    for group in rules["groups"]:
        group.pop("interval", None)
    copy = workdir / path.name
    copy.write_text(yaml.safe_dump(rules, sort_keys=False))
    return copy


class Prometheus:
    def __init__(self, binary: str, workdir: Path, targets: list):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "1s"},
            "rule_files": rule_files(workdir),
            "scrape_configs": [{"job_name": job, "static_configs": [
                {"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": NAMESPACE}}]}
                for job, port in targets],
        }
        (workdir / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.log = open(workdir / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={workdir / 'prometheus.yml'}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: self.proc.poll() is None and _get(self.url + "/-/ready")[0] == 200,
                       timeout=60, what="Prometheus ready")
            wait_until(self._targets_up, timeout=60, what="all scrape targets up")
        except BaseException:
            self.close()
            raise

    def _targets_up(self) -> bool:
        data = json.loads(_get(self.url + "/api/v1/targets")[1])["data"]["activeTargets"]
        return len(data) > 0 and all(target["health"] == "up" for target in data)

    def query(self, expr: str) -> list:
        try:
            _status, body = _get(self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
        except urllib.error.HTTPError as exc:  # 400/422: the query itself is wrong, retrying cannot help
            raise BadQuery(f"{exc.code} {exc.read().decode(errors='replace')} for {expr}") from None
        payload = json.loads(body)
        assert payload["status"] == "success", payload
        data = payload["data"]
        if data["resultType"] == "scalar":
            return [{"value": data["result"]}]
        return data["result"]

    def label_values(self, label: str, match: str) -> list:
        q = urllib.parse.urlencode({"match[]": match})
        return json.loads(_get(f"{self.url}/api/v1/label/{label}/values?{q}")[1])["data"]

    def close(self):
        stop_process(self.proc)
        self.log.close()


# ------------------------------------------------------------------------------------------------------ stack


@pytest.fixture(scope="module", params=PROMETHEUS_RELEASES)
def release(request):
    """Which Prometheus answers the boards' queries: the installed one (2.42 on Debian 12) or the
    3.x clusters run today."""
    return request.param


@pytest.fixture(scope="module", params=[
    "static",
    pytest.param("exporter", marks=pytest.mark.skipif(not exporter_serve_available(),
                                                      reason="exporter.cli has no `serve` command yet")),
])
def stack(request, tmp_path_factory, release):
    binary = require_tool("prometheus", release)
    work = tmp_path_factory.mktemp(f"dash-{request.param}-{release}")
    closers = []
    try:
        sglang = MetricsServer(Exposition(sglang_exposition))
        closers.append(sglang.close)
        if request.param == "static":
            side = MetricsServer(Exposition(exporter_exposition))
            closers.append(side.close)
            side_port = side.port
        else:
            log = work / "sglang.log"
            log.write_text(exporter_log(datetime.now()))
            side_port = free_port()
            out = open(work / "exporter.log", "wb")
            closers.append(out.close)
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            config = work / "exporter.yaml"
            config.write_text("signals:\n  server_crashed:\n    resume_seconds: 86400\n")
            proc = subprocess.Popen(
                # a second log that is not there: a failing source, so its last-error time exists too
                [sys.executable, "-m", "exporter", "serve", "--config", str(config),
                 "--log-file", str(log), "--from-start",
                 "--log-file", str(work / "not-written-yet.log"),
                 "--listen", f"127.0.0.1:{side_port}", "--sglang-url", f"http://127.0.0.1:{sglang.port}"],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
            closers.append(lambda: stop_process(proc))
            writer = LogWriter(log)
            closers.append(writer.close)
            wait_until(lambda: proc.poll() is None
                       and _get(f"http://127.0.0.1:{side_port}/metrics")[0] == 200,
                       timeout=60, what="sglang-exporter serving /metrics")
        prom = Prometheus(binary, work, [("sglang-exporter", side_port), ("sglang", sglang.port)])
        closers.append(prom.close)
        yield prom
    finally:
        for close in reversed(closers):
            close()


def panel_targets():
    for uid in gen.UIDS:
        for panel in gen.build_dashboard(uid)["panels"]:
            for target in panel.get("targets", []):
                yield f"{uid} / {panel['title']} / {target['refId']}", target["expr"]


def substitute(expr: str, values: dict) -> str:
    expr = expr.replace("$__rate_interval", RATE_INTERVAL)
    for variable in sorted(values, key=len, reverse=True):
        expr = expr.replace(variable, values[variable])
    assert "$" not in expr, expr
    return expr


def _has_data(result: list) -> bool:
    for series in result:
        value = series.get("value")
        if value is not None and not math.isnan(float(value[1])):
            return True
    return False


@pytest.mark.parametrize("selection", sorted(SUBSTITUTIONS))
def test_every_panel_target_returns_data(stack, selection):
    queries = {name: substitute(expr, SUBSTITUTIONS[selection]) for name, expr in panel_targets()}
    assert len(queries) > 50
    empty = dict(queries)
    bad = {}

    def refresh() -> bool:
        for name in list(empty):
            try:
                ok = _has_data(stack.query(empty[name]))
            except BadQuery as exc:  # a wrong query: stop polling and report it
                bad[name] = str(exc)
                return True
            if ok:
                del empty[name]
        return not empty

    try:
        wait_until(refresh, timeout=60, interval=0.5, what="every panel target to return data")
    except AssertionError:
        detail = "\n".join(f"- {name}: {expr}" for name, expr in sorted(empty.items()))
        pytest.fail(f"{len(empty)} of {len(queries)} panel targets return no data ({selection}):\n{detail}")
    assert not bad, bad


def test_variables_have_values(stack):
    for uid in gen.UIDS:
        for variable in gen.build_dashboard(uid)["templating"]["list"]:
            if variable["type"] != "query":
                continue
            match = re.fullmatch(r"label_values\((.*), (\w+)\)", variable["query"])
            selector = substitute(match.group(1), SUBSTITUTIONS["all"])
            label = match.group(2)
            values = wait_until(lambda label=label, sel=selector: stack.label_values(label, sel),
                                timeout=30,
                                what=f"values of ${variable['name']}")
            if variable["regex"]:
                host_pattern = re.compile(variable["regex"].strip("/"))
                values = sorted({host_pattern.fullmatch(host).group(1) for host in values})
            expected = {"namespace": NAMESPACE, "model": MODEL, "instance": "127.0.0.1"}[variable["name"]]
            assert values == [expected], (uid, variable["name"], values)

