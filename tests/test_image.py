"""The container image, built from the Dockerfile unchanged (buildah, docker format) on a stand-in base, and run
with podman the ways users and clusters run it (tests/image_harness.py has the mechanics):

- alone: /metrics answers over HTTP on 127.0.0.1, as uid 65532, from a read-only root; the HEALTHCHECK passes;
- the HEALTHCHECK follows the listen address wherever it is set (flag, environment, config file);
- the exporter container of every rendered manifest (tests/deploy_render.py) starts from the image with its own
  args, env, config files, volumes, security context and memory limit, serves, and stops cleanly;
- a whole pod under `podman kube play` (test_pod_*), SGLang replaced by the simulator behind the real hand-off.

The base image is cached between runs; the first run on a fresh machine spends a few minutes in mmdebstrap.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from deploy_render import ExporterRun, exporter_runs, pod_spec_of, renderings, runs_exporter
from helpers import IN_CI, free_port, wait_until
from image_harness import TOOLS, Engine, base_tarball, run

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "localhost/sglang-exporter:test"
BASE = "localhost/sglang-exporter-test-base:bookworm"
REVISION = "0123456789abcdef0123456789abcdef01234567"
UID = 65532

pytestmark = [pytest.mark.real, pytest.mark.image]
RENDERED = renderings()  # once per session: the parameters and the tests read the same documents


def _need_tools() -> None:
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        msg = (f"{', '.join(missing)} not installed (apt-get install buildah podman runc catatonit mmdebstrap uidmap; "
               "scripts/test installs them)")
        pytest.fail(msg) if IN_CI else pytest.skip(msg)
    if os.geteuid() != 0 and not Path("/etc/subuid").exists():
        msg = "rootless podman needs /etc/subuid and /etc/subgid entries (or run the image tests as root)"
        pytest.fail(msg) if IN_CI else pytest.skip(msg)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    _need_tools()
    eng = Engine(tmp_path_factory.mktemp("containers"))
    yield eng
    eng.cleanup()


@pytest.fixture(scope="module")
def image(engine) -> str:
    started = time.monotonic()
    engine.import_base(base_tarball(print), BASE)
    imported = time.monotonic()
    engine.build(ROOT, IMAGE, {"PYTHON_IMAGE": BASE, "REVISION": REVISION})
    print(f"\nimage: base imported in {imported - started:.1f}s, built in {time.monotonic() - imported:.1f}s")
    return IMAGE


def _inspect(engine: Engine, name: str) -> dict:
    return json.loads(engine.podman("inspect", name).stdout)[0]


def _healthy(engine: Engine, name: str) -> bool:
    state = _inspect(engine, name)["State"]
    if state["Status"] != "running":  # pytest.fail: not an Exception, so wait_until stops polling at once
        pytest.fail(f"{name} is {state['Status']} (exit {state['ExitCode']}):\n"
                    + engine.podman("logs", name, check=False).stderr[-2000:])
    return engine.podman("healthcheck", "run", name, check=False, timeout=30).returncode == 0


def _run(engine: Engine, name: str, *options: str, args: list[str]) -> str:
    # --health-interval disable: no systemd timer (there is no systemd here); `podman healthcheck run` still runs
    # the image's HEALTHCHECK on demand
    engine.podman("run", "--detach", "--name", name, "--health-interval", "disable", *options, IMAGE, *args)
    return name


# ---------------------------------------------------------------- the image itself


def test_image_metadata_and_contents(engine, image):
    cfg = json.loads(engine.podman("image", "inspect", image).stdout)[0]
    labels = cfg["Config"]["Labels"]
    assert labels["org.opencontainers.image.base.name"] == BASE
    assert labels["org.opencontainers.image.revision"] == REVISION
    assert labels["org.opencontainers.image.version"] == "0.1.0"
    assert cfg["Config"]["Entrypoint"] == ["sglang-exporter"] and cfg["Config"]["Cmd"] == ["serve"]
    assert cfg["Config"]["User"] == f"{UID}:{UID}"
    assert cfg["Healthcheck"]["Test"] == ["CMD", "sglang-exporter", "healthcheck"]
    # no installer in the runtime environment: neither importable nor on disk in the venv
    probe = ("import importlib.util as u, pathlib, sys; "
             "print([m for m in ('pip', 'setuptools', 'pkg_resources', '_distutils_hack') if u.find_spec(m)]); "
             "print(sorted(p.name for p in pathlib.Path(sys.prefix, 'bin').iterdir()))")
    out = engine.podman("run", "--rm", "--health-interval", "disable", "--entrypoint", "python", image, "-c",
                        probe).stdout.splitlines()
    assert out[0] == "[]", out
    assert not [b for b in json.loads(out[1].replace("'", '"')) if b.startswith(("pip", "easy_install"))], out
    layers = engine.podman("history", "--format", "{{.Size}}\t{{.CreatedBy}}", image).stdout
    print("\n" + layers)


def test_serves_metrics_as_uid_65532_from_a_read_only_root(engine, image, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    run([sys.executable, "-m", "exporter", "simulate", "--scenario", "queue_overloaded", "--instant",
         "--duration", "120", "--log-file", str(logs / "sglang.log")])
    port = free_port()
    name = _run(engine, "standalone", "--network", "host", "--read-only", "--volume", f"{logs}:/logs:ro",
                args=["serve", "--log-file", "/logs/sglang.log", "--from-start", "--listen", f"127.0.0.1:{port}"])

    def metrics() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            return reply.read().decode()
    text = wait_until(metrics, timeout=60, interval=0.2, what="the container's /metrics")
    assert 'sglang_exporter_source_up{' in text
    # the simulated log's decode batch lines (queue 2500-5000) reached the gauges
    assert any(line.startswith("sglang_exporter_queue_requests{") and not line.endswith(" 0.0")
               for line in text.splitlines()), text[:2000]
    pid = _inspect(engine, name)["State"]["Pid"]
    uids = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("Uid:"))
    assert uids.split()[1:] == [str(UID)] * 4, uids
    write = engine.podman("exec", name, "python", "-c", "open('/opt/sglang-exporter/x', 'w')", check=False)
    assert write.returncode != 0 and "Read-only file system" in write.stderr, write.stderr
    assert wait_until(lambda: _healthy(engine, name), timeout=60, interval=0.5, what="HEALTHCHECK")


@pytest.mark.parametrize("where", ["flag", "environment", "config"])
def test_healthcheck_follows_the_listen_address(engine, image, tmp_path, where):
    """A listen address moved off the default by a flag, an environment variable or the config file: the
    HEALTHCHECK passes, and the default port, where the old check looked, has nothing."""
    listen = "127.0.0.1:10123"
    options, args = ["--network", "none", "--read-only"], ["serve", "--sglang-url", "http://127.0.0.1:30000"]
    if where == "flag":
        args += ["--listen", listen]
    elif where == "environment":
        options += ["--env", f"SGLANG_EXPORTER_LISTEN={listen}"]
    else:
        (tmp_path / "config.yaml").write_text(f"listen: {listen}\n")
        tmp_path.chmod(0o755)  # readable by the container's uid
        options += ["--volume", f"{tmp_path}:/etc/sglang-exporter:ro"]
        args += ["--config", "/etc/sglang-exporter/config.yaml"]
    name = _run(engine, f"listen-{where}", *options, args=args)
    assert wait_until(lambda: _healthy(engine, name), timeout=60, interval=0.5, what="HEALTHCHECK")
    default = engine.podman("exec", name, "python", "-c", "import urllib.request as u; "
                            "u.urlopen('http://127.0.0.1:10060/healthz', timeout=2)", check=False)
    assert default.returncode != 0 and "Connection refused" in default.stderr
    engine.podman("rm", "--force", "--time", "0", name)


# ---------------------------------------------------------------- every rendered manifest


def _manifest_runs() -> list[tuple[str, ExporterRun]]:
    return [(f"{name}:{run.workload}", run) for name, docs in RENDERED for run in exporter_runs(docs)]


def _security_options(container: dict, pod: dict) -> list[str]:
    """podman options for a container's securityContext (over the pod's)."""
    sc = {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}
    known = {"runAsNonRoot", "runAsUser", "runAsGroup", "readOnlyRootFilesystem", "allowPrivilegeEscalation",
             "privileged", "capabilities", "seccompProfile", "fsGroup", "supplementalGroups"}
    assert set(sc) <= known, f"the test does not apply {set(sc) - known}"
    user = sc.get("runAsUser")
    if sc.get("runAsNonRoot"):
        assert user, "runAsNonRoot without runAsUser: the image's USER decides"
    options = []
    if user is not None:
        options += ["--user", f"{user}:{sc.get('runAsGroup', user)}"]
    for group in ([sc["fsGroup"]] if "fsGroup" in sc else []) + list(sc.get("supplementalGroups", [])):
        options += ["--group-add", str(group)]
    if sc.get("readOnlyRootFilesystem"):
        options.append("--read-only")
    if sc.get("allowPrivilegeEscalation") is False:
        options += ["--security-opt", "no-new-privileges"]
    assert not sc.get("privileged")
    for cap in (sc.get("capabilities") or {}).get("drop", []):
        options += ["--cap-drop", cap]
    assert (sc.get("seccompProfile") or {"type": "RuntimeDefault"})["type"] == "RuntimeDefault"
    return options


@pytest.mark.parametrize("label, exporter", _manifest_runs(), ids=[label for label, _ in _manifest_runs()])
def test_every_rendered_exporter_container_starts_from_the_image(engine, image, tmp_path, label, exporter):
    """Started as its manifest says (args, env, the ConfigMap's files at their mountPaths, emptyDirs, the security
    context, the memory limit): healthy, serving, still running with no restart; SIGTERM stops it with exit 0
    after it saved its positions on the state volume."""
    pod = exporter.pod
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    options = ["--network", "none", *_security_options(exporter.container, pod)]
    for key, value in exporter.env.items():
        options += ["--env", f"{key}={value}"]
    limit = (exporter.container.get("resources") or {}).get("limits", {}).get("memory")
    if limit:
        options += ["--memory", limit.replace("Mi", "m").replace("Gi", "g")]
    empty_dirs = {}
    for mount in exporter.container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        ro = ":ro" if mount.get("readOnly") else ""
        if "emptyDir" in volume:
            host = tmp_path / "volumes" / mount["name"]
            host.mkdir(parents=True)
            host.chmod(0o777)  # as the kubelet makes an emptyDir
            empty_dirs[mount["mountPath"]] = host
            options += ["--volume", f"{host}:{mount['mountPath']}{ro}"]
        elif "configMap" not in volume:
            pytest.fail(f"{label}: volume {mount['name']}: the test mounts only emptyDir and configMap volumes")
    for path, content in exporter.files.items():
        host = tmp_path / "files" / path.lstrip("/")
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_text(content)
        options += ["--volume", f"{host}:{path}:ro"]
    if exporter.container.get("command"):
        options += ["--entrypoint", json.dumps(exporter.container["command"])]
    name = _run(engine, "manifest-" + label.replace(":", "-").replace("/", "-").lower(), *options,
                args=exporter.container.get("args", []))
    assert wait_until(lambda: _healthy(engine, name), timeout=60, interval=0.5, what=f"{label} healthy")
    state = _inspect(engine, name)
    assert state["State"]["Status"] == "running" and state["RestartCount"] == 0
    metrics = engine.podman("exec", name, "python", "-c", "import sys, urllib.request as u; "
                            "sys.stdout.write(u.urlopen('http://127.0.0.1:10060/metrics', timeout=5).read().decode())")
    assert "sglang_exporter_source_up{" in metrics.stdout
    engine.podman("stop", "--time", "20", name, timeout=60)
    assert _inspect(engine, name)["State"]["ExitCode"] == 0, engine.podman("logs", name).stderr[-2000:]
    config = yaml.safe_load(next(c for p, c in exporter.files.items() if p.endswith("config.yaml")))
    positions = config.get("positions_file")
    if positions:
        volume_dir = next(d for m, d in empty_dirs.items() if positions.startswith(m.rstrip("/") + "/"))
        assert (volume_dir / Path(positions).name).exists(), "positions not saved on the state volume"
    engine.podman("rm", name)


# ---------------------------------------------------------------- a whole pod under podman kube play


SIMULATOR = ["/opt/sglang-exporter/bin/sglang-exporter", "simulate", "--scenario", "retraction_storm", "--speed", "10",
             "--metrics-listen", "127.0.0.1:30000"]


def _handoff_pods() -> list[tuple[str, list[dict]]]:
    """Renderings with a pod where SGLang runs behind the hand-off and the exporter beside it."""
    return [(name, docs) for name, docs in RENDERED
            if any(_sidecar_and_handoff(d) for d in docs)]


def _sidecar_and_handoff(workload: dict) -> bool:
    spec = pod_spec_of(workload) or {}
    return bool(_wrapped(workload)) and any(map(runs_exporter, spec.get("initContainers", []) + spec.get(
        "containers", [])))


def _wrapped(workload: dict) -> dict | None:
    """The container of `workload` whose command runs SGLang behind handoff.py."""
    return next((c for c in (pod_spec_of(workload) or {}).get("containers", [])
                 if any(str(a).endswith("/handoff.py") for a in c.get("command", []))), None)


def podman_copy(docs: list[dict], image: str) -> list[dict]:
    """The test's copy of a rendering for podman 4.3's `kube play`, changed only where podman cannot follow
    (docs/deploy.md "What the pod test cannot cover"):
    - the native sidecar (an initContainer with restartPolicy: Always) becomes a regular container, listed
      first: podman runs init containers to completion and refuses probes on them;
    - no probes (podman turns them into systemd-timer health checks; there is no systemd here);
    - no ports (podman publishes every containerPort on the host; the pod has only a loopback network);
    - SGLang's command after `--` becomes the simulator, from the exporter image (by its absolute path: podman
      4.3 drops the image's PATH when a manifest sets env); its GPU resources go, and the hand-off ConfigMap
      moves to /opt/sglang-handoff (at /opt/sglang-exporter it would hide that image's venv);
    - only the workload and its ConfigMaps (kube play knows no Service, PodMonitor or PrometheusRule)."""
    workload = next(d for d in docs if d.get("kind") in ("Deployment", "StatefulSet") and _sidecar_and_handoff(d))
    copy = json.loads(json.dumps(workload))
    spec = pod_spec_of(copy)
    sidecars = [c for c in spec.get("initContainers", []) if c.get("restartPolicy") == "Always"]
    spec["initContainers"] = [c for c in spec.get("initContainers", []) if c not in sidecars]
    if not spec["initContainers"]:
        del spec["initContainers"]
    for c in sidecars:
        del c["restartPolicy"]
    spec["containers"] = sidecars + spec["containers"]
    sglang = _wrapped(copy)
    for c in spec["containers"]:
        for key in ("livenessProbe", "readinessProbe", "startupProbe", "ports"):
            c.pop(key, None)
        if runs_exporter(c):
            c["image"] = image
    # the hand-off ConfigMap would hide the exporter image's venv at /opt/sglang-exporter: mounted beside it
    handoff_mount = next(m for m in sglang["volumeMounts"] if m["name"] == "handoff")
    moved = "/opt/sglang-handoff"
    command = [a.replace(handoff_mount["mountPath"], moved) for a in sglang["command"]]
    handoff_mount["mountPath"] = moved
    sglang["command"] = command[:command.index("--") + 1] + SIMULATOR
    sglang.pop("args", None)
    sglang.pop("resources", None)
    sglang["image"] = image
    used = {v["configMap"]["name"] for v in spec.get("volumes", []) if "configMap" in v}
    return [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] in used] + [copy]


@pytest.mark.parametrize("name, docs", _handoff_pods(), ids=[name for name, _ in _handoff_pods()])
def test_pod_exporter_serves_the_simulators_log_through_the_handoff(engine, image, tmp_path, name, docs):
    """`podman kube play` of the rendered pod: the simulator writes SGLang's log lines to stdout/stderr, the real
    handoff.py (from its ConfigMap) copies them to the shared emptyDir, the exporter (its ConfigMap, security
    context, state volume) reads them and scrapes the simulator's /metrics; its gauges show the storm."""
    play = tmp_path / "pod.yaml"
    play.write_text(yaml.safe_dump_all(podman_copy(docs, image), sort_keys=False))
    engine.podman("kube", "play", "--network", "none", str(play), timeout=180)
    try:
        containers = json.loads(engine.podman("ps", "--all", "--format", "json").stdout)
        by_role = {}
        for c in containers:
            for role in ("sglang-exporter", "sglang"):
                if c["Names"][0].endswith("-" + role) and role not in by_role:
                    by_role[role] = c["Names"][0]
        exporter, sglang = by_role["sglang-exporter"], by_role["sglang"]
        fetch = ("import sys, urllib.request as u; "
                 "sys.stdout.write(u.urlopen('http://127.0.0.1:10060/metrics', timeout=5).read().decode())")

        def storm_seen() -> str | None:
            state = _inspect(engine, exporter)["State"]
            if state["Status"] != "running":
                pytest.fail(f"{exporter} is {state['Status']}:\n" + engine.podman("logs", exporter).stderr[-2000:])
            text = engine.podman("exec", exporter, "python", "-c", fetch, check=False).stdout
            values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                      for line in text.splitlines() if line and not line.startswith("#")}
            ok = (values.get('sglang_exporter_source_up{source="/logs/sglang.log"}') == 1
                  and values.get('sglang_exporter_source_up{source="sglang_metrics"}') == 1
                  and values.get("sglang_exporter_retractions_total", 0) > 0)
            return text if ok else None
        wait_until(storm_seen, timeout=120, interval=1, what="the exporter to read the simulated storm")
        # kubectl logs keeps working: the hand-off copies SGLang's output through
        assert "Retract requests" in engine.podman("logs", sglang).stderr + engine.podman("logs", sglang).stdout
        # the security context was applied to the exporter, which never restarted (the crash loop of an
        # entrypoint that clashed with the manifest's args would show here, under restartPolicy Always)
        info = _inspect(engine, exporter)
        assert info["RestartCount"] == 0, engine.podman("logs", exporter).stderr[-2000:]
        assert info["HostConfig"]["ReadonlyRootfs"] is True
        assert not info["EffectiveCaps"], info["EffectiveCaps"]
        uids = next(x for x in Path(f"/proc/{info['State']['Pid']}/status").read_text().splitlines()
                    if x.startswith("Uid:"))
        assert uids.split()[1:] == [str(UID)] * 4
        # SIGTERM: a clean stop that leaves the positions file on the exporter-state volume
        engine.podman("stop", "--time", "20", exporter, timeout=60)
        info = _inspect(engine, exporter)
        assert info["State"]["ExitCode"] == 0, engine.podman("logs", exporter).stderr[-2000:]
        state_dir = next(m["Source"] for m in info["Mounts"] if m["Destination"] == "/var/lib/sglang-exporter")
        assert (Path(state_dir) / "positions.json").is_file()
    finally:
        engine.podman("kube", "down", str(play), check=False, timeout=120)
