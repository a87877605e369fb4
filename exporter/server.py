"""The HTTP face: /metrics, /api/v1/signals, /healthz, /readyz and a landing page, with optional TLS and
basic auth from a web-config file (the exporter-toolkit keys: tls_server_config, basic_auth_users)."""
from __future__ import annotations

import base64
import html
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest

from exporter import __version__
from exporter.catalog import SIGNALS_BY_ID
from exporter.config import ConfigError
from exporter.engine import SERVING_SIGNALS, verdict
from exporter.expose import SidecarCollector


def signals_document(view) -> dict:
    """The /api/v1/signals JSON (docs/api.md)."""
    snap = view.snapshot
    signals = []
    for sid, j in snap.judgements.items():
        sig = SIGNALS_BY_ID[sid]
        h = snap.history.get(sid)
        signals.append({
            "id": sid, "title": sig.title, "severity": sig.severity,
            "state": "unknown" if j.firing is None else ("firing" if j.firing else "ok"),
            "value": j.value, "unit": sig.value_unit, "detail": j.detail,
            "since": h.since if h else None,
            "advice": [a.flag for a in sig.advice],
            "runbook_url": sig.runbook_url,
            "cause": {"class": j.cause[0], "line": j.cause[1]} if j.firing and j.cause else None,
        })
    name, why = verdict((j.id for j in snap.judgements.values() if j.firing),
                        (j.id for j in snap.judgements.values() if j.firing is not None),
                        next((j.detail for sid, j in snap.judgements.items() if sid in SERVING_SIGNALS), ""))
    return {"version": view.version, "profile": view.profile, "time": snap.now, "model": view.model,
            "format_family": view.format_family, "verdict": name, "verdict_reason": why, "signals": signals,
            "advice": [r.to_json() for r in snap.advice]}


def load_web_config(path: str | None) -> dict:
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read web config: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the web config must be a mapping")
    unknown = set(data) - {"tls_server_config", "basic_auth_users"}
    if unknown:
        raise ConfigError(f"{path}: {sorted(unknown)[0]}: unknown key (known: tls_server_config, basic_auth_users)")
    tls = data.get("tls_server_config") or {}
    if tls and not (tls.get("cert_file") and tls.get("key_file")):
        raise ConfigError(f"{path}: tls_server_config: needs cert_file and key_file")
    users = data.get("basic_auth_users") or {}
    if users:
        try:
            import bcrypt  # noqa: F401 - optional dependency, only for basic auth
        except ImportError:
            raise ConfigError(f"{path}: basic_auth_users: needs the 'bcrypt' package "
                              "(pip install 'sglang-exporter[auth]')") from None
    return {"tls": tls, "users": users}


def _check_auth(header: str | None, users: dict) -> bool:
    if not users:
        return True
    if not header or not header.startswith("Basic "):
        return False
    try:
        user, _, password = base64.b64decode(header[6:]).decode("utf-8").partition(":")
    except (ValueError, UnicodeDecodeError):
        return False
    hashed = users.get(user)
    if not hashed:
        return False
    import bcrypt
    try:
        return bcrypt.checkpw(password.encode(), str(hashed).encode())
    except ValueError:   # a malformed hash in the web config never authenticates
        return False


class _Handler(BaseHTTPRequestHandler):
    server_version = f"sglang-exporter/{__version__}"
    protocol_version = "HTTP/1.1"
    timeout = 30      # a client that stalls mid-request (or mid-handshake) frees its thread

    def setup(self):
        super().setup()
        # TLS handshake here, in the request's own thread: done in accept() it would let one silent client
        # block every other scrape
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()

    def log_message(self, fmt, *args):   # quiet: access logs would flood the sidecar's own stderr
        pass

    def _send(self, code: int, body: bytes, ctype: str, extra: dict | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        app = self.server.app
        if not _check_auth(self.headers.get("Authorization"), app.users):
            self._send(401, b"unauthorized\n", "text/plain", {"WWW-Authenticate": 'Basic realm="sglang-exporter"'})
            return
        path = self.path.split("?", 1)[0]
        try:
            if path == "/metrics":
                self._send(200, generate_latest(app.registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._send(200, b"ok\n", "text/plain; charset=utf-8")
            elif path == "/readyz":
                ok = app.sidecar.ready()
                self._send(200 if ok else 503, b"ready\n" if ok else b"starting\n", "text/plain; charset=utf-8")
            elif path == "/api/v1/signals":
                body = json.dumps(signals_document(app.sidecar.view()), indent=1, default=str).encode()
                self._send(200, body, "application/json")
            elif path == "/":
                self._send(200, _landing(app.sidecar).encode(), "text/html; charset=utf-8")
            else:
                self._send(404, b"not found\n", "text/plain; charset=utf-8")
        except BrokenPipeError:
            pass


def _landing(sidecar) -> str:
    cfg = sidecar.config
    rows = "".join(f"<li><code>{html.escape(p)}</code></li>" for p in cfg.log_files) or "<li>none</li>"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>sglang-exporter</title></head><body>"
            f"<h1>sglang-exporter {__version__}</h1><p>Profile: <b>{html.escape(cfg.profile)}</b>. "
            f"SGLang /metrics: <code>{html.escape(cfg.sglang_url or 'not scraped')}</code>.</p>"
            f"<p>Log files:</p><ul>{rows}</ul><ul><li><a href='/metrics'>/metrics</a></li>"
            f"<li><a href='/api/v1/signals'>/api/v1/signals</a> (JSON)</li><li><a href='/healthz'>/healthz</a>"
            f"</li><li><a href='/readyz'>/readyz</a></li></ul></body></html>")


class App:
    def __init__(self, sidecar, web: dict):
        self.sidecar = sidecar
        self.users = web.get("users") or {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ProcessCollector(registry=None))
        self.registry.register(SidecarCollector(sidecar))


def make_server(sidecar, host: str, port: int, web: dict | None = None) -> ThreadingHTTPServer:
    web = web or {}
    server = _Server((host, port), _Handler)
    server.daemon_threads = True
    server.app = App(sidecar, web)
    tls = web.get("tls") or {}
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(tls["cert_file"], tls["key_file"])
        server.socket = ctx.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    return server


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # failed handshakes, resets and timeouts of clients are not ours to print tracebacks about
        import sys
        if not isinstance(sys.exc_info()[1], (OSError, ssl.SSLError)):
            super().handle_error(request, client_address)


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="http", daemon=True)
    t.start()
    return t
