"""The HTTP face: /metrics, /api/v1/signals, /healthz, /readyz, the status page at / and the runbooks under
/runbooks/ (HTML, and the markdown for tooling), with optional TLS and basic auth from a web-config file (the
exporter-toolkit keys: tls_server_config, basic_auth_users)."""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import queue
import re
import ssl
import threading
import time

import yaml
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest

from exporter.catalog import RUNBOOK_BASE, SIGNALS_BY_ID, runbook_url
from exporter.config import ConfigError
from exporter.engine import SERVING_SIGNALS, verdict
from exporter.web import markdown as markdown_html
from exporter.web import status_page
from exporter.web.expose import SidecarCollector
from exporter.web.listener import Limits, Listener, Request, Response

log = logging.getLogger(__name__)


def signals_document(view, runbook_base: str = RUNBOOK_BASE) -> dict:
    """The /api/v1/signals JSON (docs/api.md); `runbook_url`s under `runbook_base`, as the alert rules link."""
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
            "runbook_url": runbook_url(sig.alert.name, runbook_base) if sig.alert else "",
            "runbook": f"{RUNBOOKS}{sig.alert.name}.md" if sig.alert else None,   # served by this sidecar
            "cause": {"class": j.cause[0], "line": j.cause[1]} if j.firing and j.cause else None,
        })
    name, why = verdict((j.id for j in snap.judgements.values() if j.firing),
                        (j.id for j in snap.judgements.values() if j.firing is not None),
                        next((j.detail for sid, j in snap.judgements.items() if sid in SERVING_SIGNALS), ""),
                        (j.id for j in snap.judgements.values() if j.firing is None))
    return {"version": view.version, "profile": view.profile, "time": snap.now, "model": view.model,
            "format_family": view.format_family, "verdict": name, "verdict_reason": why, "signals": signals,
            "advice": [r.to_json() for r in snap.advice], "server": view.server,
            "sources": [st.to_json(name) for name, st in sorted(view.sources.items())]}


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
    if not isinstance(users, dict):
        raise ConfigError(f"{path}: basic_auth_users: must map user names to bcrypt hashes")
    for user, hashed in users.items():
        if ":" in str(user) or not _BCRYPT.fullmatch(str(hashed)):
            raise ConfigError(f"{path}: basic_auth_users: {user}: " + ("a user name cannot contain ':'"
                              if ":" in str(user) else "not a bcrypt hash (make one with: htpasswd -nBC 12 USER)"))
    if users:
        try:
            import bcrypt  # noqa: F401 - optional dependency, only for basic auth
        except ImportError:
            raise ConfigError(f"{path}: basic_auth_users: needs the 'bcrypt' package "
                              "(pip install 'sglang-exporter[auth]')") from None
    return {"tls": tls, "users": users}


class BasicAuth:
    """Basic auth against bcrypt hashes, built so that neither the hashing cost nor its timing is a weakness.

    - A verified (user, password) is remembered for `ttl` seconds as an HMAC under a per-process random key:
      Prometheus scrapes every few seconds with the same credentials, and bcrypt's ~0.2 s per check would
      otherwise be paid on each one. Only successes are remembered, one per user, and a wrong password never
      replaces a good entry (else a stream of wrong passwords would push every scrape back onto bcrypt).
    - An unknown user name is checked against a dummy hash of the configured cost, so it takes as long as a
      wrong password for a real user: the answer time does not tell which user names exist.
    - bcrypt runs on `verifiers` threads fed by a queue of `queue_size`; a request that finds the queue full is
      answered 503 at once. A stream of failing attempts thus costs at most `verifiers` CPUs and never holds an
      HTTP worker, so a scrape with remembered credentials is answered as fast as without auth.
    """

    OK, DENIED, BUSY = "ok", "denied", "busy"

    def __init__(self, users: dict, ttl: float = 60.0, verifiers: int = 2, queue_size: int = 32,
                 clock=time.monotonic):
        import bcrypt
        self._bcrypt = bcrypt
        self._users = {str(u): str(h).encode() for u, h in users.items()}
        self._key = os.urandom(32)
        self._ttl = ttl
        self._clock = clock
        self._remembered: dict[str, tuple[bytes, float]] = {}
        cost = max(_bcrypt_cost(h) for h in self._users.values())
        self._dummy = bcrypt.hashpw(os.urandom(16), bcrypt.gensalt(rounds=cost))
        self._jobs: queue.Queue = queue.Queue(maxsize=queue_size)
        self._threads = [threading.Thread(target=self._verify_loop, name=f"http-auth-{i}", daemon=True)
                         for i in range(verifiers)]
        for t in self._threads:
            t.start()

    def close(self) -> None:
        """Stop the verifier threads (after the listener stopped: nothing queues attempts any more)."""
        while not self._jobs.empty():        # their connections are closed: nobody waits for the verdicts
            self._jobs.get_nowait()
        for _ in self._threads:
            self._jobs.put(None)
        for t in self._threads:
            t.join(5)

    def check(self, header: str | None, then) -> None:
        """Call `then(OK | DENIED | BUSY)` once, now (remembered, malformed or busy) or from a verifier thread."""
        parsed = _parse_basic(header)
        if parsed is None:
            then(self.DENIED)
            return
        user, password = parsed
        mac = hmac.new(self._key, f"{user}:{password}".encode(), hashlib.sha256).digest()
        hit = self._remembered.get(user)
        if hit is not None and hit[1] > self._clock() and hmac.compare_digest(hit[0], mac):
            then(self.OK)
            return
        try:
            self._jobs.put_nowait((user, password, mac, then))
        except queue.Full:
            then(self.BUSY)

    def _verify_loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            user, password, mac, then = job
            hashed = self._users.get(user)
            try:
                ok = self._bcrypt.checkpw(password.encode(), hashed or self._dummy) and hashed is not None
            except ValueError:
                ok = False
            if ok:
                self._remembered[user] = (mac, self._clock() + self._ttl)
            then(self.OK if ok else self.DENIED)


def _parse_basic(header: str | None) -> tuple[str, str] | None:
    if not header or header[:6].lower() != "basic ":
        return None
    try:
        user, colon, password = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8").partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return (user, password) if colon else None


_BCRYPT = re.compile(r"\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}")


def _bcrypt_cost(hashed: bytes) -> int:
    m = _BCRYPT.fullmatch(hashed.decode("ascii", "replace"))
    return int(m.group(1)) if m else 10


_PROBES = ("/healthz", "/readyz")
_ROUTES = ("/metrics", "/api/v1/signals", "/")
RUNBOOKS = "/runbooks/"      # + <AlertName>.md: the runbooks, rendered for this sidecar's own thresholds
_TEXT = "text/plain; charset=utf-8"
_HTML = "text/html; charset=utf-8"


class App:
    """What each path answers. Probe paths never need credentials: the kubelet sends none, and with auth on
    they say only ok / not ok. Everything else needs them when basic_auth_users is set; an unknown path then
    answers 401 too, so it does not reveal which paths exist."""

    def __init__(self, sidecar, web: dict):
        self.sidecar = sidecar
        users = web.get("users") or {}
        self.auth = BasicAuth(users) if users else None
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ProcessCollector(registry=None))
        self.registry.register(SidecarCollector(sidecar))
        self._runbooks: dict[str, str] | None = None

    def runbook(self, name: str) -> tuple[bytes, str] | None:
        """A runbook by its name under /runbooks/: `X.md` the markdown (for tooling), `X.html` the page for
        people, `` (the folder) or `index.html` the list, `index.md` the list as markdown. Rendered once from the
        catalog and this sidecar's configuration, so its thresholds are the ones in force here."""
        if self._runbooks is None:
            from exporter.generate import runbooks  # generation code: loaded on the first runbook asked for
            pages = runbooks.render(self.sidecar.config)
            self._runbooks = {path.rsplit("/", 1)[-1]: text for path, text in pages.items()}
            self._runbooks["index.md"] = self._runbooks["README.md"]     # the list, under both names
        if name.endswith(".md") and name in self._runbooks:
            return self._runbooks[name].encode(), "text/markdown; charset=utf-8"
        stem = "index" if name == "" else name.removesuffix(".html") if name.endswith(".html") else None
        text = self._runbooks.get(f"{stem}.md") if stem else None
        if text is None:
            return None
        nav = ("<a href='../'>status</a> · <a href='./'>all runbooks</a>" if stem != "index"
               else "<a href='../'>status</a>")
        nav += f" · <a href='{stem}.md'>markdown</a>"
        return markdown_html.page(f"{stem} – sglang-exporter runbooks", text, nav).encode(), _HTML

    def handle(self, request: Request, reply) -> None:
        if request.path in _PROBES:
            reply(_only_get(request) or self._probe(request.path))
        elif self.auth is None:
            reply(self._safe_route(request))
        else:
            def then(verdict: str) -> None:
                if verdict == BasicAuth.OK:
                    reply(self._safe_route(request))
                elif verdict == BasicAuth.BUSY:
                    reply(Response(503, b"busy\n", headers={"Retry-After": "1"}))
                else:
                    reply(Response(401, b"unauthorized\n",
                                   headers={"WWW-Authenticate": 'Basic realm="sglang-exporter", charset="UTF-8"'}))
            self.auth.check(request.headers.get("authorization"), then)

    def _probe(self, path: str) -> Response:
        if path == "/readyz":
            ok = self.sidecar.ready()
            body = "ready\n" if ok else "starting\n"
            # the sources that are down, with why, for the person who curls it; probes need no credentials,
            # so under basic auth the body names nothing (as /healthz's)
            down = getattr(self.sidecar, "sources_down", None)
            if down is not None and self.auth is None:
                body += "".join(f"{line}\n" for line in down())
            return Response(200 if ok else 503, body.encode())
        healthy = getattr(self.sidecar, "healthy", None)     # older Sidecars have no self-check: healthy
        ok, reason = healthy() if healthy is not None else (True, "")
        if ok:
            return Response(200, b"ok\n")
        if self.auth is not None:
            return Response(503, b"not ok\n")
        m = re.match(r"[A-Za-z0-9_.-]{0,40}", str(reason))
        word = (m.group() if m else "") or "unhealthy"
        return Response(503, f"{word}\n".encode())

    def _safe_route(self, request: Request) -> Response:
        try:
            return self._route(request)
        except Exception:  # noqa: BLE001 - a broken page answers 500; it must not cost a worker or verifier
            log.exception("answering %s %s failed", request.method, request.path)
            return Response(500, b"internal error\n", close=True)

    def _route(self, request: Request) -> Response:
        path = request.path
        runbook = path.startswith(RUNBOOKS)
        if path not in _ROUTES and not runbook:
            return Response(404, b"not found\n")
        refused = _only_get(request)
        if refused is not None:
            return refused
        if runbook:
            page = self.runbook(path[len(RUNBOOKS):])
            if page is None:
                return Response(404, b"not found\n")
            return Response(200, page[0], page[1])
        if path == "/metrics":
            return Response(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)
        if path == "/api/v1/signals":
            document = signals_document(self.sidecar.view(), self.sidecar.config.alerts.runbook_base_url)
            body = json.dumps(document, indent=1, default=str).encode()
            return Response(200, body, "application/json")
        return Response(200, self.status_page().encode(), _HTML)

    def status_page(self) -> str:
        """The page at / (status_page.py), built from the same document the API serves."""
        sidecar = self.sidecar
        view = sidecar.view()
        doc = signals_document(view, sidecar.config.alerts.runbook_base_url)
        return status_page.render(doc, sidecar.recent_samples(), sidecar.engine.params, view.ranks,
                                  view.snapshot.now)


def _only_get(request: Request) -> Response | None:
    if request.method in ("GET", "HEAD"):
        return None
    return Response(405, b"method not allowed\n", headers={"Allow": "GET, HEAD"})


def make_server(sidecar, host: str, port: int, web: dict | None = None, limits: Limits | None = None) -> Listener:
    """The exporter's listener on (host, port); run it with `serve_in_thread`, stop it with shutdown() and
    server_close(). TLS handshakes run inside the listener's I/O loop, non-blocking, under the head deadline."""
    web = web or {}
    app = App(sidecar, web)
    tls = web.get("tls") or {}
    ctx = None
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(tls["cert_file"], tls["key_file"])
    _raise_fd_limit()
    server = Listener((host, port), app.handle, limits=limits, ssl_context=ctx,
                      on_close=app.auth.close if app.auth is not None else None)
    server.app = app  # type: ignore[attr-defined]  # for tests and tools that reach the App
    return server


def _raise_fd_limit(want: int = 4096) -> None:
    """Lift the soft open-files limit toward the hard one (as Go programs such as Prometheus do): with the
    common soft limit of 1024, a few hundred idle connections would exhaust descriptors before the listener's
    own connection limit applies."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ImportError, ValueError, OSError):
        pass


def serve_in_thread(server: Listener) -> threading.Thread:
    t = threading.Thread(target=server.serve_forever, name="http", daemon=True)
    t.start()
    return t
