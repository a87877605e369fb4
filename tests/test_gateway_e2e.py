"""End to end for the gateway: the gateway simulator's /metrics (a release's real names and labels) -> a real
Prometheus with the generated gateway rules (short windows) -> a real Alertmanager (the example routing) -> a
webhook. Every worker goes unhealthy: SGLangGatewayNoHealthyWorker pages, once, and nothing pages before."""
from __future__ import annotations

import tempfile
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml
from e2e_harness import AM_EXAMPLE, Proc, Webhook, alertmanager_config, get_json, http_get
from helpers import free_port, require_tool, wait_until

from exporter.config import AlertSettings, Config
from exporter.generate import gateway as gen
from exporter.generate.settings import RuleSettings
from exporter.simulate.gateway import GatewaySimulator
from exporter.simulate.run import serve_metrics

pytestmark = pytest.mark.real
NAMESPACE, POD = "e2e", "gateway-0"
ALERT = "SGLangGatewayNoHealthyWorker"


def _listen(name: str, argv, workdir: Path, procs: list) -> str:
    port = free_port()
    p = Proc(name, argv(port), workdir)
    procs.append(p)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: p.alive() and http_get(f"{url}/-/ready", 1) is not None, timeout=30, interval=0.1,
               what=f"{name} ready\n{p.tail()}")
    return url


@pytest.mark.parametrize("release", ["1.9.0", "0.2.4"], ids=["smg-1.9.0", "sgl-router-0.2.4"])
def test_no_healthy_worker_pages_once_through_prometheus_and_alertmanager(release):
    prometheus, alertmanager = require_tool("prometheus"), require_tool("prometheus-alertmanager")
    settings = RuleSettings(Config(alerts=AlertSettings(short_windows=True)))
    sim = GatewaySimulator(release, workers=2)
    sim.advance(60)
    sim_server = serve_metrics(sim)      # type: ignore[arg-type]  # serves anything with metrics_text()
    webhook = Webhook()
    procs: list[Proc] = []
    tmp = tempfile.TemporaryDirectory(prefix="sglang-gateway-e2e-")
    workdir = Path(tmp.name)
    try:
        am_cfg = workdir / "alertmanager.yml"
        am_cfg.write_text(yaml.safe_dump(alertmanager_config(yaml.safe_load(AM_EXAMPLE.read_text()), webhook.base)))
        am_url = _listen("alertmanager", lambda port: [
            alertmanager, f"--config.file={am_cfg}", f"--storage.path={workdir / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="], workdir, procs)
        rules = workdir / gen.RULES
        rules.write_text(yaml.safe_dump(gen.rule_file(settings), sort_keys=False))
        prom_cfg = workdir / "prometheus.yml"
        prom_cfg.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am_url.split("//")[1]]}]}]},
            "scrape_configs": [{"job_name": gen.GATEWAY_JOB, "static_configs": [{
                "targets": [f"127.0.0.1:{sim_server.server_address[1]}"],
                "labels": {"namespace": NAMESPACE, "pod": POD}}]}]}, sort_keys=False))
        prom_url = _listen("prometheus", lambda port: [
            prometheus, f"--config.file={prom_cfg}", f"--storage.tsdb.path={workdir / 'prom-data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--rules.alert.resend-delay=1s"], workdir, procs)

        def healthy_scraped():
            query = urllib.parse.quote("min(smg_worker_health or sgl_router_worker_health)")
            result = get_json(f"{prom_url}/api/v1/query?query={query}")
            return result["data"]["result"] and result["data"]["result"][0]["value"][1] == "1"
        wait_until(healthy_scraped, timeout=30, interval=0.2, what="healthy workers scraped")
        # quiet while the workers are healthy: longer than the shortened `for:` after a scrape of them
        quiet_until = time.monotonic() + 12
        wait_until(lambda: time.monotonic() > quiet_until, timeout=15, interval=0.5, what="quiet period")
        assert not [a for a in get_json(f"{prom_url}/api/v1/alerts")["data"]["alerts"]
                    if a["labels"]["alertname"] == ALERT]

        for i in range(len(sim.workers)):
            sim.set_healthy(i, False)
        sim.advance(10)

        def paged():
            return [a for path, _, a in webhook.alerts()
                    if path == "page" and a["labels"]["alertname"] == ALERT and a["status"] == "firing"]
        alerts = wait_until(paged, timeout=60, interval=0.5, what=f"{ALERT} at the page receiver")
        a = alerts[0]
        assert a["labels"]["namespace"] == NAMESPACE and a["labels"]["pod"] == POD
        assert a["labels"]["severity"] == "critical"
        assert "no worker behind the gateway passes its health check" in a["annotations"]["description"]
        assert a["annotations"]["runbook_url"].endswith(f"/{ALERT}.md")
        # once: one alert for the gateway, whatever the number of workers behind it
        assert {tuple(sorted(x["labels"].items())) for x in alerts} == {tuple(sorted(a["labels"].items()))}
        assert not [x for path, _, x in webhook.alerts() if path == "ticket"
                    and x["labels"]["alertname"].startswith("SGLangGateway")]
    finally:
        for p in procs:
            p.stop()
        sim_server.shutdown()
        sim_server.server_close()
        webhook.close()
        tmp.cleanup()


def test_the_joined_page_inhibits_the_engine_crash_and_the_breaker_alert():
    """One incident pages once: SGLangGatewayWorkerEngineCrashed silences the engine's SGLangServerCrashed (same
    engine instance) and the gateway's SGLangGatewayCircuitOpen (same worker), in a real Alertmanager with the
    example configuration; an unrelated engine's crash stays active."""
    import json
    import urllib.request
    alertmanager = require_tool("prometheus-alertmanager")
    webhook = Webhook()
    procs: list[Proc] = []
    tmp = tempfile.TemporaryDirectory(prefix="sglang-gateway-inhibit-")
    workdir = Path(tmp.name)
    worker, engine = "http://10.0.1.1:30000", {"namespace": NAMESPACE, "instance": "10.0.1.1:10060", "pod": "engine-1"}
    alerts = [
        {"alertname": "SGLangGatewayWorkerEngineCrashed", "severity": "critical", **engine, "worker": worker,
         "gateway": POD, "cause_class": "cuda_oom"},
        {"alertname": "SGLangServerCrashed", "severity": "critical", **engine},
        {"alertname": "SGLangGatewayCircuitOpen", "severity": "warning", "namespace": NAMESPACE, "pod": POD,
         "instance": "10.0.0.11:29000", "worker": worker},
        {"alertname": "SGLangServerCrashed", "severity": "critical", **engine, "instance": "10.0.1.2:10060",
         "pod": "engine-2"},
    ]
    try:
        am_cfg = workdir / "alertmanager.yml"
        am_cfg.write_text(yaml.safe_dump(alertmanager_config(yaml.safe_load(AM_EXAMPLE.read_text()), webhook.base)))
        am_url = _listen("alertmanager", lambda port: [
            alertmanager, f"--config.file={am_cfg}", f"--storage.path={workdir / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="], workdir, procs)
        body = json.dumps([{"labels": a} for a in alerts]).encode()
        req = urllib.request.Request(f"{am_url}/api/v2/alerts", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            assert r.status == 200

        def states():
            got = get_json(f"{am_url}/api/v2/alerts?active=true&inhibited=true&silenced=true&unprocessed=true")
            if len(got) < len(alerts):
                return None
            return {(a["labels"]["alertname"], a["labels"]["instance"]): bool(a["status"]["inhibitedBy"])
                    for a in got}
        want = {("SGLangGatewayWorkerEngineCrashed", "10.0.1.1:10060"): False,
                ("SGLangServerCrashed", "10.0.1.1:10060"): True,
                ("SGLangGatewayCircuitOpen", "10.0.0.11:29000"): True,
                ("SGLangServerCrashed", "10.0.1.2:10060"): False}
        assert wait_until(lambda: states() == want and states(), timeout=20, interval=0.2,
                          what="inhibitions") == want
    finally:
        for p in procs:
            p.stop()
        webhook.close()
        tmp.cleanup()
