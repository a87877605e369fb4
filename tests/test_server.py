"""`sglang-exporter serve` as a real subprocess: endpoints, SIGTERM, exit codes, TLS and basic auth."""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers import free_port, signal_thread, thread_ids, wait_until

ROOT = Path(__file__).parent.parent
LOG = """\
[2025-08-11 17:17:00] server_args=ServerArgs(model_path='m', served_model_name='m', schedule_conservativeness=1.0, cuda_graph_max_bs=160)
[2025-08-11 17:17:01] max_total_num_tokens=130000, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4097, context_len=131072, available_gpu_mem=13.50 GB
[2025-08-11 17:17:02] The server is fired up and ready to roll!
[2025-08-11 17:17:03 TP0] Decode batch, #running-req: 5, #token: 100, token usage: 0.50, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0
"""


class Served:
    def __init__(self, args, env=None, scheme="http"):
        self.port = free_port()
        self.base = f"{scheme}://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "exporter", "serve", *args,
                                      "--listen", f"127.0.0.1:{self.port}"], cwd=ROOT,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env={**os.environ, **(env or {})})

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=10)


def get(url, context=None, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5, context=context) as resp:
            return resp.status, resp.headers, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


@pytest.fixture
def logfile(tmp_path):
    p = tmp_path / "sglang.log"
    p.write_text(LOG)
    return str(p)


@pytest.fixture
def served(logfile):
    s = Served(["--log-file", logfile, "--from-start"])
    s.logfile = logfile
    try:
        wait_until(lambda: get(s.base + "/readyz")[0] == 200, timeout=20, what="serve to be ready")
        yield s
    finally:
        s.stop()


def test_endpoints(served):
    status, headers, body = get(served.base + "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert "sglang_exporter_build_info" in body and "process_cpu_seconds_total" in body
    # the log was read from the start
    wait_until(lambda: 'sglang_exporter_signal_firing{severity="info",signal="gpu_headroom_high"} 1.0'
               in get(served.base + "/metrics")[2], timeout=20, what="headroom signal from the log")

    assert get(served.base + "/healthz")[:1] == (200,)
    assert get(served.base + "/readyz")[2] == "ready\n"

    status, headers, body = get(served.base + "/api/v1/signals")
    assert status == 200 and headers["Content-Type"] == "application/json"
    doc = json.loads(body)
    assert set(doc) == {"version", "profile", "time", "model", "format_family", "verdict", "verdict_reason",
                        "signals", "advice", "server", "sources"}
    assert [(s["source"], s["kind"], s["up"], s["reason"]) for s in doc["sources"]] == [
        (served.logfile, "log", True, None)]
    assert doc["profile"] == "online" and doc["model"] == "m"
    by_id = {s["id"]: s for s in doc["signals"]}
    assert set(by_id["gpu_headroom_high"]) == {"id", "title", "severity", "state", "value", "unit", "detail",
                                               "since", "advice", "runbook_url", "runbook", "cause"}
    assert by_id["gpu_headroom_high"]["state"] == "firing"
    assert by_id["gpu_headroom_high"]["unit"] == "bytes"
    assert by_id["gpu_headroom_high"]["advice"] == ["--mem-fraction-static"]
    assert "queue_below_range" not in by_id                  # inactive online: absent
    assert all(s["state"] in ("firing", "ok", "unknown") for s in doc["signals"])
    adv = {a["flag"]: a for a in doc["advice"]}
    assert adv["--mem-fraction-static"]["action"] == "increase"
    assert set(adv["--mem-fraction-static"]) == {"flag", "action", "current", "suggested", "signals", "severity",
                                                 "reason", "spellings"}

    status, headers, body = get(served.base + "/")
    assert status == 200 and "text/html" in headers["Content-Type"] and "api/v1/signals" in body
    assert get(served.base + "/nope")[0] == 404


def test_runbooks_are_served_with_the_thresholds_in_force(tmp_path, logfile):
    """Each alert's runbook is a page of the sidecar itself, rendered for its own configuration: a storm line
    moved to 25 per minute in the config reads 25 in the page, not the catalog's 10."""
    config = tmp_path / "exporter.yml"
    config.write_text("signals:\n  retraction_storm:\n    per_minute: 25\n"
                      "alerts:\n  runbook_base_url: https://wiki.example.com/sglang/\n")
    s = Served(["--log-file", logfile, "--config", str(config)])
    try:
        wait_until(lambda: get(s.base + "/readyz")[0] == 200, timeout=20, what="serve to be ready")
        doc = json.loads(get(s.base + "/api/v1/signals")[2])
        storm = next(x for x in doc["signals"] if x["id"] == "retraction_storm")
        assert storm["runbook"] == "/runbooks/SGLangRetractionStorm.md"
        assert storm["runbook_url"] == "https://wiki.example.com/sglang/SGLangRetractionStorm.md"
        status, headers, body = get(s.base + storm["runbook"])
        assert status == 200 and headers["Content-Type"] == "text/markdown; charset=utf-8"
        assert "## Mitigation" in body and "per_minute = 25" in body and "per_minute = 10" not in body
        status, _, index = get(s.base + "/runbooks/index.md")
        assert status == 200 and "(SGLangRetractionStorm.md)" in index
        # for people: the list and each page as HTML, with the same thresholds
        status, headers, listing = get(s.base + "/runbooks/")
        assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
        assert '<a href="SGLangRetractionStorm.html">SGLangRetractionStorm</a>' in listing
        status, headers, page = get(s.base + "/runbooks/SGLangRetractionStorm.html")
        assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
        assert "<h2>Mitigation</h2>" in page and "per_minute = 25" in page and "<script" not in page
        for missing in ("/runbooks/SGLangNoSuchAlert.md", "/runbooks/SGLangNoSuchAlert.html", "/runbooks/../metrics",
                        "/runbooks/index"):
            assert get(s.base + missing)[0] == 404, missing
    finally:
        s.stop()


def test_sigterm_exits_zero(served):
    served.proc.send_signal(signal.SIGTERM)
    # the stop's own bounds: the listener's I/O loop (10 s) and the workers (5 s in all), well inside a pod's
    # default 30 s termination grace
    assert served.proc.wait(timeout=20) == 0


def test_api_doc_lists_every_key(served):
    doc = (ROOT / "docs" / "api.md").read_text()
    body = json.loads(get(served.base + "/api/v1/signals")[2])
    keys = (set(body) | set(body["signals"][0]) | set(body["advice"][0] if body["advice"] else {})
            | set(body["server"]) | set(body["server"]["layout"]) | set(body["sources"][0]))
    for key in keys:
        assert f"`{key}`" in doc, key


@pytest.mark.parametrize("args,needle", [
    (["--bogus"], "--bogus"),
    (["--profile", "batchy"], "--profile"),
    (["--listen-port", "1"], "--listen-port"),
])
def test_bad_flags_exit_2(args, needle):
    proc = subprocess.run([sys.executable, "-m", "exporter", "serve", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 2 and needle in proc.stderr


def test_bad_values_exit_2(tmp_path, logfile):
    def run(*args, env=None):
        return subprocess.run([sys.executable, "-m", "exporter", "serve", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=30, env={**os.environ, **(env or {})})
    proc = run("--log-file", logfile, "--listen", "nowhere")
    assert proc.returncode == 2 and "--listen" in proc.stderr
    proc = run("--log-file", logfile, "--scrape-timeout", "20", "--sglang-url", "http://127.0.0.1:1")
    assert proc.returncode == 2 and "--scrape-timeout" in proc.stderr
    cfg = tmp_path / "c.yaml"
    cfg.write_text("profile: online\nlisten_addr: x\n")
    proc = run("--config", str(cfg), "--log-file", logfile)
    assert proc.returncode == 2 and f"{cfg}:2: listen_addr" in proc.stderr
    proc = run("--log-file", logfile, env={"SGLANG_EXPORTER_SCRAPE_INTERVAL": "soon"})
    assert proc.returncode == 2 and "SGLANG_EXPORTER_SCRAPE_INTERVAL" in proc.stderr
    proc = run()
    assert proc.returncode == 2 and "--log-file" in proc.stderr
    webcfg = tmp_path / "web.yaml"
    webcfg.write_text("tls_server_config: {cert_file: a}\n")
    proc = run("--log-file", logfile, "--web-config", str(webcfg))
    assert proc.returncode == 2 and "key_file" in proc.stderr
    for users, needle in (("{prom: plaintext}", "prom: not a bcrypt hash"), ("[prom]", "must map"),
                          ("{'a:b': '$2b$04$" + "a" * 53 + "'}", "a:b: a user name cannot contain ':'")):
        webcfg.write_text(f"basic_auth_users: {users}\n")
        proc = run("--log-file", logfile, "--web-config", str(webcfg))
        assert proc.returncode == 2 and f"{webcfg}: basic_auth_users: {needle}" in proc.stderr, proc.stderr


def test_port_in_use_is_runtime_failure(served, logfile):
    proc = subprocess.run([sys.executable, "-m", "exporter", "serve", "--log-file", logfile, "--listen",
                           f"127.0.0.1:{served.port}"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and "--listen" in proc.stderr


# ---------------------------------------------------------------------------------------------- TLS / auth
@pytest.fixture
def cert(tmp_path):
    openssl = shutil.which("openssl")
    if not openssl:
        pytest.skip("openssl not installed")
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                    str(crt)], check=True, capture_output=True, timeout=60)
    return str(crt), str(key)


def _serve_web(tmp_path, logfile, web_yaml):
    web = tmp_path / "web.yaml"
    web.write_text(web_yaml)
    return Served(["--log-file", logfile, "--from-start", "--web-config", str(web)], scheme="https" if "tls" in web_yaml
                  else "http")


def test_tls(tmp_path, logfile, cert):
    crt, key = cert
    s = _serve_web(tmp_path, logfile, f"tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n")
    try:
        ctx = ssl.create_default_context(cafile=crt)
        wait_until(lambda: get(s.base + "/healthz", context=ctx)[0] == 200, timeout=20, what="TLS server")
        assert "sglang_exporter_build_info" in get(s.base + "/metrics", context=ctx)[2]
        with pytest.raises(OSError):     # plain HTTP on the TLS port does not get metrics
            urllib.request.urlopen(f"http://127.0.0.1:{s.port}/metrics", timeout=5).read()
        # a client that connects and never starts the handshake must not block other clients
        with socket.create_connection(("127.0.0.1", s.port), timeout=5):
            assert get(s.base + "/healthz", context=ctx)[0] == 200
    finally:
        s.stop()


def test_basic_auth(tmp_path, logfile, cert):
    bcrypt = pytest.importorskip("bcrypt")
    crt, key = cert
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    s = _serve_web(tmp_path, logfile, f"tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n"
                                      f"basic_auth_users:\n  prom: '{hashed}'\n")
    try:
        ctx = ssl.create_default_context(cafile=crt)

        def auth(user, pw):
            return {"Authorization": "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()}
        # kubelet probes send no credentials
        wait_until(lambda: get(s.base + "/readyz", context=ctx)[::2] == (200, "ready\n"), timeout=20,
                   what="auth server to be ready")
        assert get(s.base + "/healthz", context=ctx)[::2] == (200, "ok\n")
        status, headers, _ = get(s.base + "/metrics", context=ctx)
        assert status == 401 and "Basic" in headers["WWW-Authenticate"]
        assert get(s.base + "/metrics", context=ctx, headers=auth("prom", "wrong"))[0] == 401
        assert get(s.base + "/metrics", context=ctx, headers=auth("eve", "s3cret"))[0] == 401
        assert get(s.base + "/metrics", context=ctx, headers=auth("prom", "s3cret"))[0] == 200
        # the status page and the runbooks behind the same TLS and credentials (no script: nothing to adapt)
        assert get(s.base + "/", context=ctx)[0] == 401
        status, headers, page = get(s.base + "/", context=ctx, headers=auth("prom", "s3cret"))
        assert status == 200 and "text/html" in headers["Content-Type"] and "id='verdict'" in page
        assert get(s.base + "/runbooks/", context=ctx)[0] == 401
        assert get(s.base + "/runbooks/", context=ctx, headers=auth("prom", "s3cret"))[0] == 200
    finally:
        s.stop()


def test_web_config_takes_htpasswd_hashes(tmp_path):
    bcrypt = pytest.importorskip("bcrypt")
    from exporter.web.server import load_web_config
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    web = tmp_path / "web.yaml"
    web.write_text(f"basic_auth_users:\n  a: '{hashed}'\n  b: '{hashed.replace('$2b$', '$2y$', 1)}'\n")
    assert set(load_web_config(str(web))["users"]) == {"a", "b"}


# ---------------------------------------------------------------- the exporter's own log


def _stop_and_read(s: Served) -> str:
    s.proc.send_signal(signal.SIGTERM)
    _, err = s.proc.communicate(timeout=15)
    return err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_taken_by_any_thread_stops_serve_with_positions_saved(tmp_path, logfile, sig):
    """The kernel hands a process's SIGTERM to whichever thread it likes; CPython runs the handler only in the
    main thread. Sent to each worker thread in turn (tgkill), the stop is still seen: exit 0 within seconds,
    positions saved, never a hang until Kubernetes' SIGKILL."""
    positions = tmp_path / "positions.json"
    s = Served(["--log-file", logfile, "--positions-file", str(positions)])
    try:
        wait_until(lambda: get(s.base + "/readyz")[0] == 200, timeout=20, what="serve to be ready")
        workers = thread_ids(s.proc.pid)[1:]
        assert len(workers) >= 3, workers          # http, its workers, follow, evaluate
        signal_thread(s.proc.pid, workers[-1], sig)
        assert s.proc.wait(timeout=10) == 0
        assert positions.is_file()
    finally:
        s.stop()


def test_a_refused_scrape_is_logged_served_and_timestamped_with_its_reason(tmp_path):
    """SGLang's port refuses: one JSON log line says so with the reason, /api/v1/signals has the same reason
    and /metrics the time the failure was last seen; a log file that is not there is named missing."""
    refused = f"http://127.0.0.1:{free_port()}"      # nothing listens there
    missing = str(tmp_path / "not-yet.log")
    s = Served(["--log-file", missing, "--sglang-url", refused, "--scrape-interval", "0.2",
                "--scrape-timeout", "0.1", "--log-format", "json"])
    try:
        wait_until(lambda: get(s.base + "/readyz")[0] == 200, timeout=20, what="serve to be ready")

        def sources():
            doc = json.loads(get(s.base + "/api/v1/signals")[2])
            return {e["source"]: e for e in doc["sources"]}
        by_name = wait_until(lambda: len(src := sources()) == 2 and src, timeout=20, what="both sources judged")
        scrape = by_name["sglang_metrics"]
        assert scrape["kind"] == "metrics" and scrape["up"] is False
        assert scrape["reason"] == "refused: connection refused" == scrape["last_error"]
        assert scrape["last_error_time"] is not None
        assert by_name[missing]["reason"] == "missing: no such file" and by_name[missing]["kind"] == "log"
        body = get(s.base + "/metrics")[2]
        assert 'sglang_exporter_source_last_error_timestamp_seconds{source="sglang_metrics"}' in body
    finally:
        err = _stop_and_read(s) if s.proc.poll() is None else s.proc.communicate(timeout=10)[1]
    records = [json.loads(line) for line in err.splitlines() if line.strip()]   # every line is one JSON object
    down = [r for r in records if r.get("state") == "down"]
    assert {(r["source"], r["reason"], r["level"]) for r in down} == {
        ("sglang_metrics", "refused: connection refused", "warning"), (missing, "missing: no such file", "warning")}
    assert len(down) == 2, down                      # one line per change, not one per failed scrape
    line = next(r for r in down if r["source"] == "sglang_metrics")
    assert line["message"] == f"SGLang's /metrics at {refused} is down: refused: connection refused"
    assert line["logger"] == "exporter.sidecar.source_health" and line["time"].endswith("Z")


def test_a_source_coming_back_is_logged_once(tmp_path):
    """Missing, then created: a down line, then an up line, each once; --log-level warning keeps the up line
    (info) out."""
    path = tmp_path / "late.log"
    for level, want_up in (("info", True), ("warning", False)):
        path.unlink(missing_ok=True)
        s = Served(["--log-file", str(path), "--log-level", level])
        try:
            wait_until(lambda s=s: get(s.base + "/readyz")[0] == 200, timeout=20, what="serve to be ready")
            if want_up:
                # ready (readiness is the exporter's own state), and the body says what is missing
                assert get(s.base + "/readyz")[2] == f"ready\nlog source {path} is down: missing: no such file\n"

            def log_state(s=s):
                doc = json.loads(get(s.base + "/api/v1/signals")[2])
                return doc["sources"] and doc["sources"][0]["up"]
            assert not log_state()
            path.write_text(LOG)
            wait_until(log_state, timeout=20, what="the log source to come up")
        finally:
            err = _stop_and_read(s)
        ours = [line for line in err.splitlines() if "log source " in line]
        assert sum(line.endswith(f"log source {path} is down: missing: no such file") for line in ours) == 1, err
        assert sum(line.endswith(f"log source {path} is up") for line in ours) == (1 if want_up else 0), err
        assert ("serving http://" in err) is want_up          # the start-up line is info too
        # said at start, before the port answers, not at the first scrape
        down_at = err.index(f"log source {path} is down")
        assert not want_up or down_at < err.index("serving http://"), err


def test_bad_log_level_from_the_environment_exits_2(logfile):
    proc = subprocess.run([sys.executable, "-m", "exporter", "serve", "--log-file", logfile], cwd=ROOT,
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "SGLANG_EXPORTER_LOG_LEVEL": "chatty"})
    assert proc.returncode == 2 and "SGLANG_EXPORTER_LOG_LEVEL" in proc.stderr
