"""End-to-end harness: simulated SGLang servers -> one `sglang-exporter serve` each -> a real Prometheus
(rules generated from the catalog with short windows) -> a real Alertmanager (the example routing) -> a
webhook receiver. One shared stack for every scenario; see docs/e2e.md.

Per scenario (`Case`):
- the simulator writes the scenario's whole log at once (timestamps end "now"), then keeps appending the
  scenario's last phase in real time (one simulated second per second; a silent last phase appends
  nothing), as a live server keeps printing. Without that tail every healthy log would go quiet: the
  exporter would (rightly) judge a server with a queue and no batch line for 60 s as stalled, and
  Prometheus would (rightly) raise SGLangLogStale;
- the simulator serves its /metrics on a free 127.0.0.1 port;
- one exporter subprocess follows the log `--from-start` and scrapes that /metrics.

Every exporter is a Prometheus target of job `sglang-exporter` (the generated rules' default selector) with
its own `instance` (its address) and the target labels `namespace=e2e`, `pod=<case name>` (the identity
labels the rules join, group and inhibit on). Every simulator's own /metrics is a target of job `sglang`
with the same `namespace` and `pod` (another `instance`), as a PodMonitor scrapes a pod's two endpoints: both
rule files are loaded, and the native rules must stand down where the sidecar is scraped.

What each case must raise is derived, not listed: the signal ids come from the scenario table of
docs/simulate.md, the alert name, severity and texts from exporter/catalog/, the receiver from the
routing contract (critical -> page, else ticket), and inhibitions from the inhibit rules of
alerts/alertmanager.yml.
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml
from helpers import free_port, require_tool, stop_process, wait_until

from exporter import catalog
from exporter.config import AlertSettings, Config
from exporter.generate import alertmanager
from exporter.generate import rules as gen
from exporter.generate.gotemplate import expand_label_blocks
from exporter.generate.promql import fmt_duration, parse_duration
from exporter.generate.settings import RuleSettings
from exporter.simulate import CRASH_CAUSE, Simulator, load_scenario, parse_scenario, serve_metrics
from exporter.state.failures import classify_cause

ROOT = Path(__file__).resolve().parents[1]
AM_EXAMPLE = ROOT / "alerts" / alertmanager.ALERTMANAGER
SIMULATE_DOC = ROOT / "docs" / "simulate.md"
JOB = "sglang-exporter"          # AlertSettings().exporter_selector is job="sglang-exporter"
SGLANG_JOB = "sglang"            # AlertSettings().sglang_selector is job="sglang"
OTHER_CLUSTER = "e2e-other"      # a second cluster's target: the twin of this healthy case's exporter
TWIN_OF = "healthy_offline"
NAMESPACE = "e2e"
RECEIVERS = ("page", "ticket", "deadmansswitch")
STALL_SECONDS = 3                # stalled cases: a short stall threshold (wall time)

# Alertmanager timings of the example, shortened (the only change besides the receiver URLs)
TIMING_KEYS = ("group_wait", "group_interval", "repeat_interval")


# ------------------------------------------------------------------------------------ expectations

def documented_signals() -> dict[str, set[str]]:
    """Scenario -> signal ids it fires, from the table in docs/simulate.md ("none ..." -> nothing)."""
    out: dict[str, set[str]] = {}
    in_table = False
    for line in SIMULATE_DOC.read_text().splitlines():
        if line.startswith("| scenario |"):
            in_table = True
            continue
        if in_table:
            if not line.startswith("|"):
                break
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) < 3 or set(cells[0]) <= {"-"}:
                continue
            name = cells[0].strip("`")
            fired = cells[2]
            ids = set() if fired.lower().startswith("none") else \
                {x for x in re.findall(r"`([a-z_]+)`", fired) if x in catalog.SIGNALS_BY_ID}
            out[name] = ids
    return out


@dataclass
class Case:
    name: str                          # pod label; the bundled scenario name unless `scenario_data` is set
    signals: set                       # signal ids that must fire
    profile: str = "offline"
    overrides: dict = field(default_factory=dict)     # config `signals:` overrides
    scenario_data: dict | None = None  # a derived scenario (parse_scenario input) instead of a bundled one
    metrics_only: bool = False         # the exporter gets no log: SGLang's /metrics is its only source

    def scenario(self):
        if self.scenario_data is not None:
            return parse_scenario(self.scenario_data, self.name, f"{self.name}.yaml")
        return load_scenario(self.name)


def stalled_with_tuning_data() -> dict:
    """`stalled`, whose healthy first minute is replaced by too_conservative's load: a hung server that
    also has tuning advice (kv_cache_underused), which the stall must inhibit. Without the watchdog line,
    so only the silence itself (no batch line for `stall_seconds` with a queue) can show the stall."""
    stalled = yaml.safe_load((ROOT / "exporter" / "scenarios" / "stalled.yaml").read_text())
    conservative = yaml.safe_load((ROOT / "exporter" / "scenarios" / "too_conservative.yaml").read_text())
    first = {**conservative["phases"][0], "duration": stalled["phases"][0]["duration"]}
    return {"description": "stalled after a minute of too_conservative load",
            "layout": stalled.get("layout", {}), "server_args": conservative.get("server_args", {}),
            "phases": [first] + [{k: v for k, v in p.items() if k != "events"} for p in stalled["phases"][1:]]}


def cases() -> list[Case]:
    doc = documented_signals()
    # healthy_online is healthy under the online profile only (docs/simulate.md says so)
    profiles = {"healthy_online": "online", "server_crash": "online"}
    out = []
    for name in sorted(doc):
        c = Case(name, set(doc[name]), profile=profiles.get(name, "offline"))
        if "stalled" in c.signals:
            c.overrides = {"stalled": {"stall_seconds": STALL_SECONDS}}
        out.append(c)
    out.append(Case("stalled_tuning", doc["stalled"] | doc["too_conservative"],
                    overrides={"stalled": {"stall_seconds": STALL_SECONDS}},
                    scenario_data=stalled_with_tuning_data()))
    # many teams give the sidecar no log, only --enable-metrics: the storm must page from /metrics alone
    storm = yaml.safe_load((ROOT / "exporter" / "scenarios" / "retraction_storm.yaml").read_text())
    out.append(Case("retraction_storm_metrics_only", doc["retraction_storm"], scenario_data=storm,
                    metrics_only=True))
    return out


def receiver_for(labels: dict) -> str:
    """The routing contract of docs/alerts.md, stated independently of the config."""
    if labels["alertname"] == gen.WATCHDOG:
        return "deadmansswitch"
    return "page" if labels["severity"] == "critical" else "ticket"


@dataclass
class Expected:
    labels: dict                       # every label of the alert
    summary: str
    description_re: re.Pattern
    runbook_url: str
    inhibited_by: str | None = None    # alertname of the inhibiting alert (same instance)

    @property
    def name(self) -> str:
        return self.labels["alertname"]

    @property
    def receiver(self) -> str:
        return receiver_for(self.labels)


def template_regex(tmpl: str, labels: dict) -> re.Pattern:
    """A Go template of the rules as a regex: $labels.X are the alert's values (`with $labels.X` blocks
    resolved), other actions `.+?`."""
    tmpl = expand_label_blocks(tmpl, labels)
    parts, pos = [], 0
    for m in re.finditer(r"{{\s*(.*?)\s*}}", tmpl):
        parts.append(re.escape(tmpl[pos:m.start()]))
        expr = m.group(1)
        parts.append(re.escape(labels.get(expr[len("$labels."):], "")) if expr.startswith("$labels.")
                     else ".+?")
        pos = m.end()
    parts.append(re.escape(tmpl[pos:]))
    return re.compile("".join(parts), re.DOTALL)


def _matches(matcher: str, labels: dict) -> bool:
    m = re.fullmatch(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!=|!~|=)\s*"(.*)"\s*', matcher)
    assert m, f"unsupported matcher {matcher!r}"
    name, op, val = m.groups()
    have = labels.get(name, "")
    return {"=": have == val, "!=": have != val, "=~": re.fullmatch(val, have) is not None,
            "!~": re.fullmatch(val, have) is None}[op]


def inhibitor(target: dict, others: list[dict], rules: list[dict]) -> str | None:
    """Alertname of an alert in `others` that inhibits `target` under `rules` (Alertmanager semantics)."""
    for rule in rules:
        if not all(_matches(m, target) for m in rule.get("target_matchers", [])):
            continue
        for src in others:
            if src is target or not all(_matches(m, src) for m in rule.get("source_matchers", [])):
                continue
            if all(src.get(k, "") == target.get(k, "") for k in rule.get("equal", [])):
                return src["alertname"]
    return None


def rule_description(alertname: str, params: RuleSettings) -> str:
    """The description template as the rules carry it (the catalog's, with the server named by identity)."""
    return next(a.description for a in gen.all_alerts(params) if a.name == alertname)


def expected_alerts(case: Case, instance: str, params: RuleSettings, silent_tail: bool) -> dict[str, Expected]:
    """Alertname -> what must reach Alertmanager for this case's instance."""
    target = {"job": JOB, "instance": instance, "namespace": NAMESPACE, "pod": case.name}
    specs = []
    for sid in sorted(case.signals):
        s = catalog.SIGNALS_BY_ID[sid]
        assert s.alert, f"{sid} has no alert in the catalog"
        labels = {"alertname": s.alert.name, **target, "severity": s.severity, "signal": sid}
        if s.family:
            labels["family"] = s.family
        if s.failure:       # the cause's class joined into the alert (only the crash event fails a scenario)
            labels.update(cause_class=classify_cause(CRASH_CAUSE))
        specs.append((labels, s.alert.summary, rule_description(s.alert.name, params)))
    if silent_tail:
        # the log goes quiet for good: the meta alert watching the log hand-off fires (with the file)
        m = next(m for m in catalog.META_ALERTS if m.alert.name == "SGLangLogStale")
        labels = {"alertname": m.alert.name, **target, "severity": m.severity, "source": "@LOG@"}
        specs.append((labels, m.alert.summary, rule_description(m.alert.name, params)))
    rules = yaml.safe_load(AM_EXAMPLE.read_text())["inhibit_rules"]
    all_labels = [lab for lab, _, _ in specs]
    out = {}
    for labels, summary, desc in specs:
        out[labels["alertname"]] = Expected(
            labels, summary, template_regex(desc, labels), params.runbook_url(labels["alertname"]),
            inhibitor(labels, all_labels, rules))
    return out


# ------------------------------------------------------------------------------------ configs

def _seconds(d: str) -> float:
    return parse_duration(d)


def shorten(d: str) -> str:
    """An Alertmanager timing divided by 6 (30s -> 5s, 10s -> 2s, 5m -> 50s, 12h -> 2h; 0s stays 0s)."""
    s = _seconds(d)
    return fmt_duration(math.ceil(s / 6)) if s else "0s"


def alertmanager_config(example: dict, webhook_base: str) -> dict:
    """The example config with ONLY the receiver URLs (-> webhook_base/<receiver>) and timings changed."""
    cfg = json.loads(json.dumps(example))

    def walk(route):
        for k in TIMING_KEYS:
            if k in route:
                route[k] = shorten(route[k])
        for child in route.get("routes", []):
            walk(child)
    walk(cfg["route"])
    for rcv in cfg["receivers"]:
        for wh in rcv.get("webhook_configs", []):
            wh["url"] = f"{webhook_base}/{rcv['name']}"
    return cfg


def routing_tree(cfg: dict) -> dict:
    """What must not change: the route tree without timings, the inhibitions, receivers without URLs."""
    cfg = json.loads(json.dumps(cfg))

    def walk(route):
        for k in TIMING_KEYS:
            route.pop(k, None)
        for child in route.get("routes", []):
            walk(child)
    walk(cfg["route"])
    for rcv in cfg["receivers"]:
        for wh in rcv.get("webhook_configs", []):
            wh.pop("url", None)
    return {"route": cfg["route"], "inhibit_rules": cfg["inhibit_rules"], "receivers": cfg["receivers"],
            "global": cfg.get("global")}


# ------------------------------------------------------------------------------------ processes

def http_get(url: str, timeout: float = 3.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read()


def get_json(url: str, timeout: float = 3.0):
    return json.loads(http_get(url, timeout))


class Webhook:
    """Records Alertmanager notifications: [(receiver path, payload, monotonic time)]."""

    def __init__(self):
        self.received: list = []
        self.lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with hook.lock:
                    hook.received.append((self.path.strip("/"), json.loads(body), time.monotonic()))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="webhook", daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def alerts(self) -> list[tuple[str, dict, dict]]:
        """(receiver path, notification, alert) for every alert of every notification so far."""
        with self.lock:
            return [(path, n, a) for path, n, _ in self.received for a in n.get("alerts", [])]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Proc:
    """A subprocess with its output in a file; terminated and waited for in stop()."""

    def __init__(self, name: str, argv: list[str], logdir: Path, **kw):
        self.name = name
        self.log_path = logdir / f"{name}.out"
        self.log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     **kw)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def terminate(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 10.0) -> int | None:
        stop_process(self.proc, timeout)
        self.log.close()
        return self.proc.returncode


@dataclass
class Running:
    case: Case
    sim: Simulator
    log: Path
    lines_written: int
    sim_server: object
    port: int
    proc: Proc | None = None
    signals_before_prometheus: dict = field(default_factory=dict)   # id -> state, once stable

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sim_instance(self) -> str:
        """The simulator's /metrics: SGLang's own target of the same pod."""
        return f"127.0.0.1:{self.sim_server.server_address[1]}"


class Stack:
    """The shared stack. start() brings everything up; close() stops everything (idempotent)."""

    def __init__(self, cases_: list[Case], workdir: Path | None = None, release: str = "installed"):
        self.cases = cases_
        self.release = release          # which Prometheus and Alertmanager (helpers.PROMETHEUS_RELEASES)
        self._tmp = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="sglang-e2e-")
            workdir = Path(self._tmp.name)
        self.dir = workdir
        self.params = RuleSettings(Config(alerts=AlertSettings(short_windows=True)))
        self.running: dict[str, Running] = {}
        self.procs: list[Proc] = []
        self.stop_event = threading.Event()
        self.trickle_thread: threading.Thread | None = None
        self.webhook: Webhook | None = None
        self.prom_url = self.am_url = ""
        self.prom_ready_at = None
        self.expected: dict[str, dict[str, Expected]] = {}
        self.am_config: dict = {}
        self.timings: dict[str, float] = {}
        self.settled = False
        self.settle_error = ""

    # --------------------------------------------------------------------------- bring-up
    def start(self):
        t0 = time.monotonic()
        self.prometheus_bin = require_tool("prometheus", self.release)
        self.alertmanager_bin = require_tool("prometheus-alertmanager", self.release)
        self._start_sims()
        self._start_exporters()
        self.timings["exporters_ready"] = time.monotonic() - t0
        self.webhook = Webhook()
        self._start_alertmanager()
        self._start_prometheus()
        self.timings["prometheus_ready"] = time.monotonic() - t0

    def _start_sims(self):
        now = datetime.now().replace(microsecond=0)
        for i, case in enumerate(self.cases):
            sc = case.scenario()
            sim = Simulator(sc, start=now - timedelta(seconds=sc.duration), seed=i)
            log = self.dir / f"{case.name}.log"
            n = sim.write_log(log)
            server = serve_metrics(sim, "127.0.0.1", 0)
            self.running[case.name] = Running(case, sim, log, n, server, 0)
        self.trickle_t0 = time.monotonic()
        self.trickle_thread = threading.Thread(target=self._trickle, name="trickle", daemon=True)
        self.trickle_thread.start()

    def _trickle(self):
        """Keep every log going: the scenario's last phase continues in real time."""
        while not self.stop_event.wait(0.5):
            elapsed = time.monotonic() - self.trickle_t0
            for r in self.running.values():
                lines = r.sim.lines_until(r.sim.duration + elapsed)
                if lines:
                    with open(r.log, "a", encoding="utf-8") as f:
                        f.write("".join(line + "\n" for line in lines))

    def _spawn_exporter(self, r: Running, env: dict, attempt: int):
        r.port = free_port()
        cfg = {"profile": r.case.profile, "scrape_interval": 2, "scrape_timeout": 1, "poll_interval": 0.2,
               "evaluate_interval": 1}
        if r.case.overrides:
            cfg["signals"] = r.case.overrides
        cfg_path = self.dir / f"{r.case.name}.exporter.yml"
        cfg_path.write_text(yaml.safe_dump(cfg))
        sim_url = f"http://127.0.0.1:{r.sim_server.server_address[1]}"
        log_args = [] if r.case.metrics_only else ["--log-file", str(r.log), "--from-start"]
        r.proc = Proc(f"exporter-{r.case.name}" + (f"-{attempt}" if attempt else ""),
                      [sys.executable, "-m", "exporter", "serve", *log_args,
                       "--sglang-url", sim_url, "--listen", r.instance, "--config", str(cfg_path)],
                      self.dir, cwd=ROOT, env=env)
        self.procs.append(r.proc)

    def _start_exporters(self):
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        env = {k: v for k, v in env.items() if not k.startswith("SGLANG_EXPORTER_")}
        for r in self.running.values():      # ports picked after every simulator is bound
            self._spawn_exporter(r, env, 0)
        for r in self.running.values():
            for attempt in range(1, 4):
                def ready(r=r):
                    if not r.proc.alive():
                        return "exited"
                    return http_get(f"http://{r.instance}/readyz", 1).startswith(b"ready") and "ready"
                state = wait_until(ready, timeout=60, interval=0.1, what=f"{r.proc.name} ready\n{r.proc.tail()}")
                if state == "ready":
                    break
                r.proc.stop()
                self.procs.remove(r.proc)
                # a free port taken between free_port() and the exporter's bind (other tests run too)
                if "Address already in use" not in r.proc.tail() or attempt == 3:
                    raise AssertionError(f"{r.proc.name} exited {r.proc.proc.returncode}:\n{r.proc.tail()}")
                self._spawn_exporter(r, env, attempt)
        for r in self.running.values():      # instances are final now
            silent_tail = r.sim.phase_at(r.sim.duration).silent and not r.case.metrics_only
            self.expected[r.case.name] = exp = expected_alerts(r.case, r.instance, self.params, silent_tail)
            for e in exp.values():
                if e.labels.get("source") == "@LOG@":
                    e.labels["source"] = str(r.log)
                    e.description_re = re.compile(
                        e.description_re.pattern.replace("@LOG@", re.escape(str(r.log))), re.DOTALL)
        # every exporter has read its whole instant log and judged it (signals stable) before Prometheus
        # starts: then nothing below depends on which of the two came first
        for r in self.running.values():
            def caught_up(r=r):
                doc = get_json(f"http://{r.instance}/api/v1/signals")
                states = {s["id"]: s["state"] for s in doc["signals"]}
                read = _metric_sum(http_get(f"http://{r.instance}/metrics").decode(),
                                   f"{catalog.NS}_log_lines_read_total")
                want_firing = {sid for sid in r.case.signals if sid in states}
                if read < r.lines_written and not r.case.metrics_only:
                    return None
                firing = {k for k, v in states.items() if v == "firing"}
                r.signals_before_prometheus = states
                return firing >= want_firing
            try:
                wait_until(caught_up, timeout=30, interval=0.2, what=f"{r.proc.name} judged its log")
            except AssertionError:
                pass   # reported by test_exporter_signals, with the exporter's own view

    def _start_alertmanager(self):
        example = yaml.safe_load(AM_EXAMPLE.read_text())
        self.am_config = alertmanager_config(example, self.webhook.base)
        path = self.dir / "alertmanager.yml"
        path.write_text(yaml.safe_dump(self.am_config, sort_keys=False))
        self.am, self.am_url = self._start_listener(
            "alertmanager", lambda port: [self.alertmanager_bin, f"--config.file={path}",
                                          f"--storage.path={self.dir / 'am-data'}",
                                          f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=",
                                          "--log.level=info"])

    def _start_listener(self, name: str, argv) -> tuple[Proc, str]:
        """Start a server on a free port and wait for /-/ready; a port taken meanwhile: try another."""
        for attempt in range(3):
            port = free_port()
            p = Proc(name + (f"-{attempt}" if attempt else ""), argv(port), self.dir)
            self.procs.append(p)
            url = f"http://127.0.0.1:{port}"

            def ready(p=p, url=url):
                if not p.alive():
                    return "exited"
                return http_get(f"{url}/-/ready", 1) is not None and "ready"
            if wait_until(ready, timeout=30, interval=0.1, what=f"{name} ready") == "ready":
                return p, url
            p.stop()
            self.procs.remove(p)
            if "address already in use" not in p.tail().lower():
                break
        raise AssertionError(f"{name} exited {p.proc.returncode}:\n{p.tail()}")

    def _start_prometheus(self):
        rules_dir = self.dir / "rules"
        for rel, text in gen.render(self.params.config).items():     # alerts/<rule file>
            (rules_dir / rel.removeprefix("alerts/")).parent.mkdir(parents=True, exist_ok=True)
            (rules_dir / rel.removeprefix("alerts/")).write_text(text)
        self.rule_files = [rules_dir / gen.EXPORTER_RULES, rules_dir / gen.NATIVE_RULES]
        # a second cluster: the twin of a healthy pod (same namespace, pod and address), found through a
        # file that vanish_cluster() empties, as a cluster whose service discovery goes away
        twin = self.running[TWIN_OF]
        self.twin_targets = self.dir / "other-cluster.json"
        self.twin_targets.write_text(json.dumps([{"targets": [twin.instance], "labels": {
            "cluster": OTHER_CLUSTER, "namespace": NAMESPACE, "pod": TWIN_OF}}]))
        cfg = {
            # a scrape that fails marks every series of its target stale, which ends its alerts: a 2 s
            # timeout keeps a loaded machine from resolving and re-firing them
            "global": {"scrape_interval": "2s", "scrape_timeout": "2s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in self.rule_files],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [self.am_url.split("//")[1]]}]}]},
            "scrape_configs": [{
                "job_name": JOB,
                "static_configs": [{"targets": [r.instance], "labels": {"namespace": NAMESPACE, "pod": name}}
                                   for name, r in self.running.items()],
                "file_sd_configs": [{"files": [str(self.twin_targets)]}],
            }, {  # the same pods' SGLang /metrics: the native rules see every storm the sidecars see
                "job_name": SGLANG_JOB,
                # the simulators also serve the sidecars (a 1 s timeout): Prometheus asks less often
                "scrape_interval": "10s", "scrape_timeout": "5s",
                "static_configs": [{"targets": [r.sim_instance], "labels": {"namespace": NAMESPACE, "pod": name}}
                                   for name, r in self.running.items()],
            }],
        }
        path = self.dir / "prometheus.yml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        self.prom, self.prom_url = self._start_listener(
            "prometheus", lambda port: [self.prometheus_bin, f"--config.file={path}",
                                        f"--storage.tsdb.path={self.dir / 'prom-data'}",
                                        f"--web.listen-address=127.0.0.1:{port}", "--log.level=info",
                                        # the notifier finds Alertmanager only after the first evaluations:
                                        # resend soon, so an alert that fired before (the watchdog) is not
                                        # held back for the default 1 min
                                        "--rules.alert.resend-delay=10s"])
        self.prom_ready_at = time.monotonic()

    def vanish_cluster(self):
        """The second cluster's service discovery finds nothing any more: its only sidecar target goes."""
        self.twin_targets.write_text("[]")

    # --------------------------------------------------------------------------- observation
    def prom_alerts(self) -> list[dict]:
        return get_json(f"{self.prom_url}/api/v1/alerts")["data"]["alerts"]

    def am_alerts(self) -> list[dict]:
        q = "active=true&silenced=true&inhibited=true&unprocessed=true"
        return get_json(f"{self.am_url}/api/v2/alerts?{q}")

    def notified(self) -> set[tuple[str, str, str]]:
        """(receiver path, instance or '', alertname) of every firing alert notified so far."""
        return {(path, a["labels"].get("instance", ""), a["labels"]["alertname"])
                for path, _, a in self.webhook.alerts() if a.get("status") == "firing"}

    def want_notified(self) -> set[tuple[str, str, str]]:
        out = {("deadmansswitch", "", gen.WATCHDOG)}
        for name, exp in self.expected.items():
            inst = self.running[name].instance
            out |= {(e.receiver, inst, e.name) for e in exp.values() if not e.inhibited_by}
        return out

    def want_inhibited(self) -> set[tuple[str, str]]:
        return {(self.running[n].instance, e.name) for n, exp in self.expected.items() for e in exp.values()
                if e.inhibited_by}

    def _inhibited_now(self) -> set[tuple[str, str]]:
        return {(a["labels"].get("instance", ""), a["labels"]["alertname"]) for a in self.am_alerts()
                if a["status"].get("inhibitedBy")}

    def settle(self, timeout: float = 90.0, quiet: float = 30.0):
        """Wait (deadline `timeout`) until every expected notification arrived and every expected inhibition
        holds, and Prometheus has run at least `quiet` seconds (anything unexpected would have fired by
        then: every input was in the exporters before Prometheus started, and `for:` is 10 s)."""
        want, want_inh = self.want_notified(), self.want_inhibited()

        def done():
            if time.monotonic() - self.prom_ready_at < quiet:
                return False
            return want <= self.notified() and want_inh <= self._inhibited_now()
        try:
            wait_until(done, timeout=timeout, interval=0.5, what="expected notifications and inhibitions")
            self.settled = True
        except AssertionError as exc:
            self.settle_error = str(exc)
        self.timings["settled"] = time.monotonic() - self.prom_ready_at

    # --------------------------------------------------------------------------- teardown
    def close(self):
        self.stop_event.set()
        if self.trickle_thread is not None:
            self.trickle_thread.join(5)
        errors = []
        for p in self.procs:           # SIGTERM to all first, then wait for each (kill after 10 s)
            p.terminate()
        for p in reversed(self.procs):
            try:
                p.stop()
            except Exception as exc:  # noqa: BLE001 - stop the rest regardless
                errors.append(f"{p.name}: {exc!r}")
        self.procs = []
        for r in self.running.values():
            r.sim_server.shutdown()
            r.sim_server.server_close()
        if self.webhook is not None:
            self.webhook.close()
            self.webhook = None
        if self._tmp is not None and not os.environ.get("SGLANG_E2E_KEEP"):
            self._tmp.cleanup()
            self._tmp = None
        if errors:
            raise RuntimeError("; ".join(errors))


def _metric_sum(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total
