"""The local stacks in deploy/local: the Docker-less script end to end (real Prometheus + Alertmanager from
the Debian packages, the simulator, the exporter), and static checks of the compose file and the Grafana
provisioning it mounts (no Docker engine and no Grafana needed)."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from helpers import IN_CI, PROMETHEUS_RELEASES, free_port, require_tool, wait_until

ROOT = Path(__file__).resolve().parents[1]
LOCAL = ROOT / "deploy" / "local"
SCRIPT = LOCAL / "run-local-stack.sh"


# ---------------------------------------------------------------- static checks


def compose():
    return yaml.safe_load((LOCAL / "compose.yaml").read_text())


def test_compose_mounts_exist():
    services = compose()["services"]
    assert {"simulator", "exporter", "prometheus", "alertmanager", "grafana"} <= set(services)
    checked = 0
    for name, svc in services.items():
        for vol in svc.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("."):
                path = (LOCAL / src).resolve()
                if not path.exists() and src.startswith("../../alerts") and not IN_CI:
                    pytest.skip(f"{src} not generated yet")
                assert path.exists(), f"{name}: mount source {src} does not exist"
                checked += 1
    assert checked >= 6
    for name, svc in services.items():
        assert svc.get("network_mode") == "host", name
    sim = services["simulator"]
    assert sim["command"][:1] == ["simulate"] and "/logs/sglang.log" in sim["command"]
    assert "--metrics-listen" in sim["command"]
    exp = services["exporter"]
    assert exp["read_only"] is True and "logs:/logs:ro" in exp["volumes"]
    assert any(c.endswith(":ro") for c in services["prometheus"]["volumes"])


def test_compose_prometheus_config_matches_stack():
    prom = yaml.safe_load((LOCAL / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in prom["scrape_configs"]}
    assert jobs["sglang-exporter"] == ["127.0.0.1:10060"]
    assert jobs["sglang"] == ["127.0.0.1:30000"]
    assert prom["rule_files"] == ["/etc/prometheus/rules/*.rules.yml"]
    mounts = compose()["services"]["prometheus"]["volumes"]
    assert "../../alerts:/etc/prometheus/rules:ro" in mounts
    assert prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9093"]


@pytest.mark.parametrize("release", PROMETHEUS_RELEASES)
def test_prometheus_config_is_valid(tmp_path, release):
    promtool = require_tool("promtool", release)
    text = (LOCAL / "prometheus.yml").read_text().replace("/etc/prometheus/rules/", str(tmp_path) + "/")
    f = tmp_path / "prometheus.yml"
    f.write_text(text)
    r = subprocess.run([promtool, "check", "config", str(f)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_grafana_provisioning_references_existing_paths():
    prov = ROOT / "dashboards" / "provisioning"
    if not prov.exists() and not IN_CI:
        pytest.skip("dashboards/provisioning not generated yet")
    ds = yaml.safe_load((prov / "datasources.yaml").read_text())
    assert ds["apiVersion"] == 1 and ds["datasources"][0]["type"] == "prometheus"
    assert ds["datasources"][0]["url"] == "http://127.0.0.1:9090"  # the compose Prometheus (host network)
    dash = yaml.safe_load((prov / "dashboards.yaml").read_text())
    path = dash["providers"][0]["options"]["path"]
    mounts = dict(v.rsplit(":", 2)[:2] if v.endswith(":ro") else v.split(":", 1)
                  for v in compose()["services"]["grafana"]["volumes"])
    host_dir = next((LOCAL / src).resolve() for src, dst in mounts.items() if dst == path)
    assert list(host_dir.glob("*.json")), f"no dashboards in {host_dir} (mounted at {path})"
    for f in host_dir.glob("*.json"):
        json.loads(f.read_text())
    targets = set(mounts.values())
    assert "/etc/grafana/provisioning/datasources/datasources.yaml" in targets
    assert "/etc/grafana/provisioning/dashboards/dashboards.yaml" in targets


# ---------------------------------------------------------------- the Docker-less stack, end to end


def _cli_has(command: str) -> bool:
    r = subprocess.run([sys.executable, "-m", "exporter", command, "--help"], capture_output=True, cwd=ROOT,
                       timeout=60)
    return r.returncode == 0


def _get(url: str):
    with urllib.request.urlopen(url, timeout=2) as resp:
        return json.loads(resp.read())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie waiting to be reaped by its (gone) parent is not running
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@pytest.mark.real
def test_local_stack_end_to_end(tmp_path):
    require_tool("prometheus")
    require_tool("prometheus-alertmanager")
    for cmd in ("serve", "simulate"):
        if not _cli_has(cmd):
            msg = f"`sglang-exporter {cmd}` is not available yet"
            if IN_CI:
                pytest.fail(msg)
            pytest.skip(msg)
    if not (ROOT / "alerts" / "sglang-exporter.rules.yml").exists() and not IN_CI:
        pytest.skip("alerts/ rules not generated yet")
    if sys.prefix == sys.base_prefix:
        msg = "run the tests in the project's virtualenv (scripts/test): the script installs into it"
        pytest.fail(msg) if IN_CI else pytest.skip(msg)
    ports = {k: str(free_port()) for k in ("PROM_PORT", "AM_PORT", "EXPORTER_PORT", "SGLANG_PORT")}
    state = tmp_path / "stack"
    # a newcomer's machine: the python3 first on PATH lacks the project's dependencies. The script must run
    # everything in the project's virtualenv (here: the one running these tests, already set up)
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python3").write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'prometheus_client'\" >&2\n"
                                  "exit 1\n")
    (stub / "python3").chmod(0o755)
    env = {**os.environ, **ports, "LOCAL_STACK_DIR": str(state), "NO_GRAFANA": "1", "TMPDIR": str(tmp_path),
           "PATH": f"{stub}:{os.environ['PATH']}", "VENV_DIR": sys.prefix}
    env.pop("EXPORTER", None)
    out = open(tmp_path / "stack.out", "wb")
    proc = subprocess.Popen(["bash", str(SCRIPT), "start"], env=env, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    prom = f"http://127.0.0.1:{ports['PROM_PORT']}"
    pids: dict[str, int] = {}
    try:
        def services_started():
            assert proc.poll() is None, (tmp_path / "stack.out").read_text()
            for f in (state / "pids").glob("*"):
                pids[f.name] = int(f.read_text())
            return {"simulator", "exporter", "prometheus", "alertmanager"} <= set(pids)

        wait_until(services_started, timeout=60, what="the stack's processes")

        def target_up():
            assert proc.poll() is None, (tmp_path / "stack.out").read_text()
            targets = _get(prom + "/api/v1/targets")["data"]["activeTargets"]
            health = {t["labels"]["job"]: t["health"] for t in targets}
            return health.get("sglang-exporter") == "up" and health.get("sglang") == "up"

        wait_until(target_up, timeout=90, interval=0.25, what="Prometheus to scrape the exporter and SGLang")
        exporter_cmd = Path(f"/proc/{pids['exporter']}/cmdline").read_bytes().split(b"\0")
        assert Path(exporter_cmd[0].decode()).parent == Path(sys.prefix) / "bin", exporter_cmd

        def rules_loaded():
            groups = _get(prom + "/api/v1/rules")["data"]["groups"]
            return groups and all(g["rules"] for g in groups)

        wait_until(rules_loaded, timeout=60, interval=0.25, what="our rules to be loaded")
        am = _get(f"http://127.0.0.1:{ports['AM_PORT']}/api/v2/status")
        assert am["cluster"]["status"] in ("disabled", "ready")
        text = (tmp_path / "stack.out").read_text()
        assert f"http://127.0.0.1:{ports['PROM_PORT']}" in text  # URLs printed
        # every Prometheus page printed answers (Debian's 2.42 serves them only under /classic/)
        pages = re.search(r"\(targets: (\S+), rules: (\S+), alerts: (\S+)\)", text)
        assert pages, text
        for page in pages.groups():
            with urllib.request.urlopen(prom + page, timeout=5) as r:
                assert r.status == 200, page
    finally:
        stop = subprocess.run(["bash", str(SCRIPT), "stop"], env=env, capture_output=True, text=True,
                              timeout=60)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        out.close()
        # our own safety net: never leave a process behind, even when the assertions below fail
        leftovers = {n: p for n, p in pids.items() if _alive(p)}
        for p in leftovers.values():
            os.kill(p, signal.SIGKILL)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert proc.returncode is not None
    assert not leftovers, f"processes left running after stop: {leftovers}"
    try:  # nothing left in the script's process group either
        os.killpg(proc.pid, 0)
        remaining = True
    except ProcessLookupError:
        remaining = False
    assert not remaining, "a process of the stack's process group is still running"


@pytest.mark.real
def test_local_stack_ctrl_c(tmp_path):
    """Ctrl-C in the terminal (SIGINT to the foreground process group) stops everything."""
    require_tool("prometheus")
    require_tool("prometheus-alertmanager")
    state = tmp_path / "stack"
    ports = {k: str(free_port()) for k in ("PROM_PORT", "AM_PORT", "EXPORTER_PORT", "SGLANG_PORT")}
    log = tmp_path / "sglang.log"
    log.write_text("")
    # a "real SGLang" that is not there: only Prometheus, Alertmanager and the exporter are started
    env = {**os.environ, **ports, "LOCAL_STACK_DIR": str(state), "NO_GRAFANA": "1", "TMPDIR": str(tmp_path),
           "SGLANG_URL": f"http://127.0.0.1:{ports['SGLANG_PORT']}", "LOG_FILE": str(log),
           "EXPORTER": f"{sys.executable} -m exporter", "PYTHONPATH": str(ROOT)}
    if not _cli_has("serve"):
        pytest.fail("`sglang-exporter serve` is missing") if IN_CI else pytest.skip("serve not available yet")
    proc = subprocess.Popen(["bash", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    pids: dict[str, int] = {}
    try:
        def up():
            assert proc.poll() is None
            for f in (state / "pids").glob("*"):
                pids[f.name] = int(f.read_text())
            _get(f"http://127.0.0.1:{ports['PROM_PORT']}/api/v1/status/buildinfo")
            return {"exporter", "prometheus", "alertmanager"} <= set(pids)

        wait_until(up, timeout=60, interval=0.1, what="the stack")
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        assert proc.wait(timeout=60) == 130
        wait_until(lambda: not any(_alive(p) for p in pids.values()), timeout=30, what="all processes gone")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for p in pids.values():
            if _alive(p):
                os.kill(p, signal.SIGKILL)
    assert "simulator" not in pids
