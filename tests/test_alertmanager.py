"""The example Alertmanager configuration: valid for amtool, every alert reaches its receiver, and a real
Alertmanager inhibits a stalled instance's tuning alerts (and a storm's "frequent" sibling) but no others."""
from __future__ import annotations

import json
import subprocess
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from helpers import PROMETHEUS_RELEASES, free_port, require_tool, stop_process, wait_until

from exporter.generate import alertmanager, rules

REPO = Path(__file__).resolve().parents[1]
AM_CONFIG = REPO / "alerts" / alertmanager.ALERTMANAGER
CASES = yaml.safe_load((REPO / "alerts" / alertmanager.ROUTES_CASES).read_text())["cases"]


def rule_alerts():
    out = []
    for f in (rules.EXPORTER_RULES, rules.NATIVE_RULES):
        for g in yaml.safe_load((REPO / "alerts" / f).read_text())["groups"]:
            out += [r for r in g["rules"] if "alert" in r]
    return out


def expected_receiver(labels: dict) -> str:
    # the routing contract, stated independently of the generator
    if labels["alertname"] == "SGLangAlertingWatchdog":
        return "deadmansswitch"
    return "page" if labels["severity"] == "critical" else "ticket"


@pytest.mark.parametrize("release", PROMETHEUS_RELEASES)
def test_check_config(release):
    amtool = require_tool("amtool", release)
    r = subprocess.run([amtool, "check-config", str(AM_CONFIG)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_route_cases_cover_every_alert():
    by_name = {c["labels"]["alertname"]: c for c in CASES}
    for r in rule_alerts():
        c = by_name.get(r["alert"])
        assert c, f"no routing case for {r['alert']}"
        assert c["labels"]["severity"] == r["labels"]["severity"]
        assert c["receiver"] == expected_receiver(c["labels"])
    assert {c["receiver"] for c in CASES} == {"page", "ticket", "deadmansswitch"}
    # what the design brief pages on
    pages = {c["labels"]["alertname"] for c in CASES if c["receiver"] == "page"}
    assert {"SGLangRetractionStorm", "SGLangPrefillOOM", "SGLangDecodeOOM", "SGLangStalled"} <= pages
    # a crash, an OOM at start-up and a start-up that never became ready page too
    assert {"SGLangServerCrashed", "SGLangStartupOOM", "SGLangStartupStalled"} <= pages
    assert "SGLangRetractionsFrequent" not in pages


@pytest.mark.parametrize("release", PROMETHEUS_RELEASES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c["labels"]["alertname"])
def test_amtool_routes(case, release):
    amtool = require_tool("amtool", release)
    labels = [f"{k}={v}" for k, v in case["labels"].items()]
    r = subprocess.run([amtool, "config", "routes", "test", f"--config.file={AM_CONFIG}",
                        f"--verify.receivers={case['receiver']}", *labels],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{case}: {r.stdout}{r.stderr}"
    assert r.stdout.strip() == case["receiver"]


# ---------------------------------------------------------------------------- a real Alertmanager

class _Hook(BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.received.append((self.path, json.loads(body)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *a):
        pass


@pytest.fixture
def webhook():
    handler = type("Hook", (_Hook,), {"received": []})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", handler.received
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture(params=PROMETHEUS_RELEASES)
def alertmanager(tmp_path, webhook, request):
    binary = require_tool("prometheus-alertmanager", request.param)
    url, received = webhook
    cfg = yaml.safe_load(AM_CONFIG.read_text())
    for rcv in cfg["receivers"]:                       # the example's placeholders -> our local webhook
        for wh in rcv.get("webhook_configs", []):
            wh["url"] = f"{url}/{rcv['name']}"
    for route in [cfg["route"], *cfg["route"]["routes"]]:     # timings only: the tree stays the example's
        route["group_wait"] = route["group_interval"] = "1s"
    (tmp_path / "am.yml").write_text(yaml.safe_dump(cfg))
    port = free_port()
    log = open(tmp_path / "am.log", "w")
    proc = subprocess.Popen([binary, f"--config.file={tmp_path / 'am.yml'}",
                             f"--storage.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--cluster.listen-address=", "--log.level=debug"],
                            stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: urllib.request.urlopen(f"{base}/-/ready", timeout=1).status == 200, timeout=20,
                   what="alertmanager ready")
        yield base, received, tmp_path / "am.log"
    finally:
        stop_process(proc, timeout=10)
        log.close()


def _post(base, alerts):
    req = urllib.request.Request(f"{base}/api/v2/alerts", data=json.dumps(alerts).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    assert urllib.request.urlopen(req, timeout=5).status == 200


def _get(base):
    q = "active=true&silenced=false&inhibited=true&unprocessed=true"
    with urllib.request.urlopen(f"{base}/api/v2/alerts?{q}", timeout=5) as r:
        return json.loads(r.read())


def _alert(name, severity, instance=None, cluster="eu-1", **labels):
    """An alert as the rules make it: a server's target labels as Prometheus Operator sets them (the pod is
    named after the address's last octet; the sidecar's port is 10060, SGLang's own 30000)."""
    lab = {"alertname": name, "severity": severity, **labels}
    if instance:
        host, port = instance.split(":")
        lab.update({"cluster": cluster, "namespace": "sglang", "pod": f"sglang-{host.rsplit('.', 1)[1]}",
                    "instance": instance, "job": "sglang-exporter" if port == "10060" else "sglang"})
    return {"labels": lab, "annotations": {"summary": f"{name}."}}


def _key(a):
    return (a["labels"]["alertname"], a["labels"].get("instance"))


STALLED, HEALTHY, STORMING = "10.0.0.1:10060", "10.0.0.2:10060", "10.0.0.3:10060"
CRASHED, OOMED = "10.0.0.4:10060", "10.0.0.5:10060"


def test_inhibitions_in_a_real_alertmanager(alertmanager):
    base, received, _ = alertmanager
    sources = [
        _alert("SGLangStalled", "critical", STALLED, signal="stalled"),
        _alert("SGLangRetractionStorm", "critical", STORMING, signal="retraction_storm", family="retractions"),
        # an exporter target vanished entirely: absent() carries no instance or namespace
        _alert("SGLangExporterDown", "critical"),
        _alert("SGLangStartupOOM", "critical", OOMED, signal="startup_oom"),
    ]
    _post(base, sources)
    wait_until(lambda: {_key(a) for a in _get(base)} >= {_key(s) for s in sources}, timeout=10,
               what="source alerts stored")
    targets = [
        _alert("SGLangKVCacheUnderused", "warning", STALLED, signal="kv_cache_underused"),
        _alert("SGLangQueueBelowRange", "info", STALLED, signal="queue_below_range"),
        _alert("SGLangRetractionStorm", "critical", STALLED, signal="retraction_storm",   # criticals stay
               family="retractions"),
        _alert("SGLangKVCacheUnderused", "warning", HEALTHY, signal="kv_cache_underused"),
        _alert("SGLangRetractionsFrequent", "warning", STORMING, signal="retractions_frequent",
               family="retractions"),
        _alert("SGLangRetractionsFrequent", "warning", HEALTHY, signal="retractions_frequent",
               family="retractions"),
        _alert("SGLangQueueAboveRange", "warning", STORMING, signal="queue_above_range"),  # not the family
        _alert("SGLangAlertingWatchdog", "info"),
        _alert("SGLangServerCrashed", "critical", OOMED, signal="server_crashed"),    # the OOM page says it
        _alert("SGLangServerCrashed", "critical", CRASHED, signal="server_crashed"),
        _alert("SGLangQueueBelowRange", "info", CRASHED, signal="queue_below_range"),  # advice of a dead server
        _alert("SGLangStalled", "critical", CRASHED, signal="stalled"),         # its queue stopped: the crash
    ]
    _post(base, targets)
    expect_inhibited = {
        ("SGLangServerCrashed", OOMED): "SGLangStartupOOM",
        # two sources match here (the crash, and the stall it caused, itself inhibited): Alertmanager names the
        # first one its source cache gives, in map order, so either is right
        ("SGLangQueueBelowRange", CRASHED): ("SGLangServerCrashed", "SGLangStalled"),
        ("SGLangStalled", CRASHED): "SGLangServerCrashed",
        ("SGLangKVCacheUnderused", STALLED): "SGLangStalled",
        ("SGLangQueueBelowRange", STALLED): "SGLangStalled",
        ("SGLangRetractionsFrequent", STORMING): "SGLangRetractionStorm",
    }

    def settled():
        got = {_key(a): a for a in _get(base)}
        if not {_key(t) for t in targets} <= set(got):
            return None
        for k, a in got.items():
            if (a["status"]["state"] == "suppressed") != (k in expect_inhibited):
                return None
        return got

    got = wait_until(settled, timeout=15, what="inhibition state of every alert")
    source_fp = {_key(a): a["fingerprint"] for a in got.values()}
    for k, by in expect_inhibited.items():
        st = got[k]["status"]
        assert st["state"] == "suppressed" and st["silencedBy"] == []
        allowed = {source_fp[(name, k[1])] for name in ((by,) if isinstance(by, str) else by)}
        assert st["inhibitedBy"] and set(st["inhibitedBy"]) <= allowed, (k, st)
    for k, a in got.items():
        if k not in expect_inhibited:
            assert a["status"]["state"] == "active" and a["status"]["inhibitedBy"] == [], (k, a["status"])

    # notifications: pages and tickets arrive at their receivers; inhibited alerts never do
    def delivered():
        out = {}
        for path, body in list(received):
            for a in body["alerts"]:
                out.setdefault((a["labels"]["alertname"], a["labels"].get("instance")), set()).add(path)
        return out

    expect_delivered = {
        ("SGLangStalled", STALLED): "/page", ("SGLangRetractionStorm", STORMING): "/page",
        ("SGLangRetractionStorm", STALLED): "/page", ("SGLangExporterDown", None): "/page",
        ("SGLangKVCacheUnderused", HEALTHY): "/ticket", ("SGLangRetractionsFrequent", HEALTHY): "/ticket",
        ("SGLangQueueAboveRange", STORMING): "/ticket", ("SGLangAlertingWatchdog", None): "/deadmansswitch",
        ("SGLangServerCrashed", CRASHED): "/page", ("SGLangStartupOOM", OOMED): "/page",
    }
    d = wait_until(lambda: (lambda x: x if set(expect_delivered) <= set(x) else None)(delivered()), timeout=20,
                   what="webhook deliveries")
    for k, path in expect_delivered.items():
        assert d[k] == {path}, (k, d[k])
    for k in expect_inhibited:
        assert k not in d, f"inhibited alert {k} was delivered"


# ---------------------------------------------------------------------------- one incident, one notification

def _flushes_with(log: Path, alertname: str) -> int:
    """How often Alertmanager flushed an aggregation group holding `alertname` (its debug log). A group's
    flushes run one after another, each through the whole notification pipeline: once a second flush
    with an alert is logged, whatever the first could send has been sent."""
    return sum(1 for line in log.read_text().splitlines() if "msg=flushing" in line and alertname in line)


def _pages(received, **group):
    return [body for path, body in list(received)
            if path == "/page" and all(body["groupLabels"].get(k) == v for k, v in group.items())]


def test_one_failure_one_notification_naming_the_cause(alertmanager):
    """A decode OOM takes the scheduler down: SGLangDecodeOOM, then SGLangServerCrashed, then SGLangStalled
    on one pod, with its tuning warning, while the same pod name in another cluster has a native storm
    (SGLang's own /metrics, port 30000). Each incident pages exactly once: the OOM (the cause) for the first,
    the storm for the second; the crash and the stall it caused never notify."""
    base, received, log = alertmanager
    oom_pod = "10.0.0.7:10060"
    twin_native = "10.0.0.7:30000"           # the same pod name and address in cluster us-1
    _post(base, [
        _alert("SGLangDecodeOOM", "critical", oom_pod, signal="oom_decode"),
        _alert("SGLangKVPressure", "warning", oom_pod, signal="kv_pressure"),
        _alert("SGLangNativeRetractionStorm", "critical", twin_native, cluster="us-1", signal="retraction_storm",
               family="retractions", model_name="m"),
    ])
    identity = {"namespace": "sglang", "pod": "sglang-7"}
    wait_until(lambda: _pages(received, cluster="eu-1", **identity) and _pages(received, cluster="us-1",
                                                                                 **identity),
               timeout=20, what="the first page of each incident")
    # the effects arrive later (each from its own evaluation), as they do from Prometheus
    _post(base, [_alert("SGLangServerCrashed", "critical", oom_pod, signal="server_crashed"),
                 _alert("SGLangStalled", "critical", oom_pod, signal="stalled")])
    before = _flushes_with(log, "SGLangStalled")
    wait_until(lambda: _flushes_with(log, "SGLangStalled") >= before + 2, timeout=20,
               what="two flushes of the OOM pod's group after the crash and the stall joined it")

    pages = _pages(received, cluster="eu-1", **identity)
    assert len(pages) == 1, [[a["labels"]["alertname"] for a in p["alerts"]] for p in pages]
    assert [a["labels"]["alertname"] for a in pages[0]["alerts"]] == ["SGLangDecodeOOM"]
    assert pages[0]["groupLabels"] == {"cluster": "eu-1", **identity}
    twin = _pages(received, cluster="us-1", **identity)
    assert len(twin) == 1 and [a["labels"]["alertname"] for a in twin[0]["alerts"]] == \
        ["SGLangNativeRetractionStorm"]
    # the pod's tuning warning waits behind its page: no ticket for it
    assert not [b for path, b in list(received) if path == "/ticket"
                and b["groupLabels"].get("pod") == "sglang-7"]
    state = {(a["labels"]["alertname"], a["labels"]["cluster"]): a["status"] for a in _get(base)
             if a["labels"].get("pod") == "sglang-7"}
    oom_fp = next(a["fingerprint"] for a in _get(base) if a["labels"]["alertname"] == "SGLangDecodeOOM")
    assert state[("SGLangServerCrashed", "eu-1")]["inhibitedBy"] == [oom_fp]
    # the stall and the warning have several sources (the OOM, the crash, the stall): any one is right
    assert state[("SGLangStalled", "eu-1")]["state"] == state[("SGLangKVPressure", "eu-1")]["state"] == "suppressed"
    assert state[("SGLangNativeRetractionStorm", "us-1")]["state"] == "active"
