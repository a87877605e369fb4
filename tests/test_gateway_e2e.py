"""End to end for the gateway: the gateway simulator's /metrics (a release's real names and labels) -> a real
Prometheus with the generated gateway rules (short windows) -> a real Alertmanager (the example routing) -> a
webhook. Every worker goes unhealthy: SGLangGatewayNoHealthyWorker pages, once, and nothing pages before."""
from __future__ import annotations

import os
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


# each gateway release on the installed Prometheus, and the newest on the current one (the two axes are
# independent: a third pair would spend 30 s on nothing new)
@pytest.mark.parametrize("release,prometheus_release", [("1.9.0", "installed"), ("0.2.4", "installed"),
                                                        ("1.9.0", "current")],
                         ids=["smg-1.9.0", "sgl-router-0.2.4", "smg-1.9.0-prometheus-current"])
def test_no_healthy_worker_pages_once_through_prometheus_and_alertmanager(release, prometheus_release):
    prometheus = require_tool("prometheus", prometheus_release)
    alertmanager = require_tool("prometheus-alertmanager", prometheus_release)
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


def test_the_joined_pages_inhibit_the_engine_pages_and_the_breaker_alert():
    """One incident pages once, in a real Alertmanager with the example configuration, on the joined alerts' real
    label sets (the engine's identity, the worker, the verdict): SGLangGatewayWorkerEngineCrashed silences the
    engine's SGLangServerCrashed, SGLangGatewayWorkerEngineFailing the engine's SGLangStalled, and both the gateway's
    SGLangGatewayCircuitOpen on their worker although the gateway runs in another namespace; an unrelated engine's
    crash and another worker's breaker stay active."""
    import json
    import urllib.request
    alertmanager = require_tool("prometheus-alertmanager")
    webhook = Webhook()
    procs: list[Proc] = []
    tmp = tempfile.TemporaryDirectory(prefix="sglang-gateway-inhibit-")
    workdir = Path(tmp.name)

    def engine(i: int) -> dict:
        return {"namespace": "engines", "pod": f"engine-{i}", "instance": f"10.0.1.{i}:10060",
                "job": "sglang-exporter"}

    def worker(i: int) -> str:
        return f"http://10.0.1.{i}:30000"
    breaker = {"alertname": "SGLangGatewayCircuitOpen", "severity": "warning", "namespace": NAMESPACE, "pod": POD,
               "instance": "10.0.0.11:29000", "job": gen.GATEWAY_JOB}
    alerts = [
        {"alertname": "SGLangGatewayWorkerEngineCrashed", "severity": "critical", **engine(1), "worker": worker(1)},
        {"alertname": "SGLangServerCrashed", "severity": "critical", "cause_class": "nccl", **engine(1)},
        {**breaker, "worker": worker(1)},
        {"alertname": "SGLangGatewayWorkerEngineFailing", "severity": "critical", **engine(3), "worker": worker(3),
         "engine_signal": "stalled"},
        {"alertname": "SGLangStalled", "severity": "critical", **engine(3)},
        {**breaker, "worker": worker(3)},
        {"alertname": "SGLangServerCrashed", "severity": "critical", **engine(2)},
        {**breaker, "worker": worker(4)},
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
            return {(a["labels"]["alertname"], a["labels"].get("worker") or a["labels"]["pod"]):
                    bool(a["status"]["inhibitedBy"]) for a in got}
        want = {("SGLangGatewayWorkerEngineCrashed", worker(1)): False, ("SGLangServerCrashed", "engine-1"): True,
                ("SGLangGatewayCircuitOpen", worker(1)): True,
                ("SGLangGatewayWorkerEngineFailing", worker(3)): False, ("SGLangStalled", "engine-3"): True,
                ("SGLangGatewayCircuitOpen", worker(3)): True,
                ("SGLangServerCrashed", "engine-2"): False, ("SGLangGatewayCircuitOpen", worker(4)): False}
        assert wait_until(lambda: states() == want and states(), timeout=20, interval=0.2,
                          what="inhibitions") == want
    finally:
        for p in procs:
            p.stop()
        webhook.close()
        tmp.cleanup()


def test_an_engine_crash_behind_an_open_breaker_pages_once_with_both_facts():
    """The whole chain: the SGLang simulator's log (a healthy minute, then its scheduler crashes) -> a real sidecar
    -> a real Prometheus with our three rule files, also scraping a simulated gateway whose breaker opens for that
    engine's worker -> a real Alertmanager with the example routing (its timings as generated) -> exactly one page
    for the incident, SGLangGatewayWorkerEngineCrashed, stating both facts; the engine's crash page and the breaker
    ticket are held back by the inhibitions."""
    import json
    import sys
    from datetime import datetime, timedelta

    from e2e_harness import ROOT

    from exporter.generate import rules as engine_rules
    from exporter.simulate import CRASH_CAUSE, Simulator, load_scenario
    prometheus, alertmanager = require_tool("prometheus"), require_tool("prometheus-alertmanager")
    config = Config(alerts=AlertSettings(short_windows=True))
    settings = RuleSettings(config)
    scenario = load_scenario("server_crash")
    crash_at = next(e.at for p in scenario.phases for e in p.events if e.kind == "crash")
    engine = Simulator(scenario, start=datetime.now().replace(microsecond=0) - timedelta(seconds=crash_at - 1))
    webhook = Webhook()
    procs: list[Proc] = []
    servers = []
    tmp = tempfile.TemporaryDirectory(prefix="sglang-gateway-joined-")
    workdir = Path(tmp.name)
    try:
        log = workdir / "engine.log"
        engine.write_log(log, duration=crash_at - 1)            # the healthy minute, up to just before the crash
        engine_server = serve_metrics(engine)
        servers.append(engine_server)
        engine_url = f"http://127.0.0.1:{engine_server.server_address[1]}"
        # the gateway routes to the engine's address, as its discovery would (the pod IP is 127.0.0.1 here)
        gateway = GatewaySimulator("1.9.0", workers=2, urls=(engine_url,))
        gateway.advance(60)
        gateway_server = serve_metrics(gateway)       # type: ignore[arg-type]  # anything with metrics_text()
        servers.append(gateway_server)

        sidecar_cfg = workdir / "exporter.yml"
        sidecar_cfg.write_text(yaml.safe_dump({"profile": "online", "scrape_interval": 2, "scrape_timeout": 1,
                                               "poll_interval": 0.2, "evaluate_interval": 1}))
        sidecar_port = free_port()
        sidecar = f"127.0.0.1:{sidecar_port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_EXPORTER_")}
        procs.append(Proc("exporter", [sys.executable, "-m", "exporter", "serve", "--log-file", str(log),
                                       "--from-start", "--sglang-url", engine_url, "--listen", sidecar,
                                       "--config", str(sidecar_cfg)], workdir, cwd=ROOT, env=env))
        wait_until(lambda: procs[0].alive() and http_get(f"http://{sidecar}/readyz", 1).startswith(b"ready"),
                   timeout=60, interval=0.1, what=f"the sidecar ready\n{procs[0].tail()}")

        # the example Alertmanager configuration with only the receivers' URLs changed: its own group_wait lets
        # the joined alert and the engine's crash alert meet before the first page
        am_cfg = yaml.safe_load(AM_EXAMPLE.read_text())
        for receiver in am_cfg["receivers"]:
            for hook in receiver.get("webhook_configs", []):
                hook["url"] = f"{webhook.base}/{receiver['name']}"
        (workdir / "alertmanager.yml").write_text(yaml.safe_dump(am_cfg))
        am_url = _listen("alertmanager", lambda port: [
            alertmanager, f"--config.file={workdir / 'alertmanager.yml'}", f"--storage.path={workdir / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="], workdir, procs)
        rule_files = []
        for path, text in {**engine_rules.render(config),
                           f"alerts/{gen.RULES}": yaml.safe_dump(gen.rule_file(settings), sort_keys=False)}.items():
            if path.endswith(".rules.yml"):
                rule_files.append(workdir / Path(path).name)
                rule_files[-1].write_text(text)
        assert {p.name for p in rule_files} == {"sglang-exporter.rules.yml", "sglang-native.rules.yml", gen.RULES}
        prom_cfg = workdir / "prometheus.yml"
        prom_cfg.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am_url.split("//")[1]]}]}]},
            "scrape_configs": [
                {"job_name": "sglang-exporter", "static_configs": [{"targets": [sidecar],
                                                                    "labels": {"namespace": NAMESPACE, "pod": "engine-0"}}]},
                {"job_name": gen.GATEWAY_JOB, "static_configs": [{
                    "targets": [f"127.0.0.1:{gateway_server.server_address[1]}"],
                    "labels": {"namespace": NAMESPACE, "pod": POD}}]}]}, sort_keys=False))
        prom_url = _listen("prometheus", lambda port: [
            prometheus, f"--config.file={prom_cfg}", f"--storage.tsdb.path={workdir / 'prom-data'}",
            f"--web.listen-address=127.0.0.1:{port}", "--rules.alert.resend-delay=1s"], workdir, procs)

        def query(q: str) -> list:
            return get_json(f"{prom_url}/api/v1/query?query={urllib.parse.quote(q)}")["data"]["result"]
        # both sides seen healthy first: the sidecar judged the crash signal (not firing), the worker healthy
        wait_until(lambda: query('sglang_exporter_signal_firing{signal="server_crashed"} == 0')
                   and query("min(smg_worker_health) == 1"), timeout=30, interval=0.2, what="both sides healthy")
        assert not [a for path, _, a in webhook.alerts() if path == "page"
                    and a["labels"]["alertname"] != "SGLangAlertingWatchdog"]

        # the incident: the engine's scheduler dies (the scenario's crash lines) and the gateway's breaker opens
        with open(log, "a", encoding="utf-8") as f:
            f.writelines(line + "\n" for line in engine.lines_until(crash_at + 1))
        gateway.open_breaker(0)
        gateway.advance(10)

        def pages():
            return [(n, a) for path, n, a in webhook.alerts() if path == "page" and a["status"] == "firing"]
        wait_until(pages, timeout=60, interval=0.2, what=f"a page\n{procs[0].tail()}")
        # the engine's own crash alert and the breaker's alert fire in Prometheus, and Alertmanager holds both back
        for name in ("SGLangServerCrashed", "SGLangGatewayCircuitOpen"):
            def inhibited(name=name):
                got = get_json(f"{am_url}/api/v2/alerts?active=true&inhibited=true&silenced=true&unprocessed=true")
                return [a for a in got if a["labels"]["alertname"] == name and a["status"]["inhibitedBy"]]
            wait_until(inhibited, timeout=60, interval=0.2, what=f"{name} firing and inhibited")
        paged = pages()
        assert len({json.dumps(n, sort_keys=True) for n, _ in paged}) == 1, paged      # one notification ...
        assert [a["labels"]["alertname"] for _, a in paged] == ["SGLangGatewayWorkerEngineCrashed"]   # one alert
        a = paged[0][1]
        assert a["labels"]["worker"] == engine_url and a["labels"]["pod"] == "engine-0"
        assert "cause" not in a["labels"] and "cause_class" not in a["labels"]
        description = a["annotations"]["description"]
        assert f"Worker {engine_url}: circuit open in the gateway" in description            # the gateway's fact
        assert "its engine engine-0 (e2e) reports a crash" in description                     # the engine's fact
        assert "Cause: nccl: " + CRASH_CAUSE[:40] in description, description                 # and its cause
        assert not [x for path, _, x in webhook.alerts() if path == "ticket"
                    and x["labels"]["alertname"] == "SGLangGatewayCircuitOpen"]
    finally:
        for p in procs:
            p.stop()
        for server in servers:
            server.shutdown()
            server.server_close()
        webhook.close()
        tmp.cleanup()
