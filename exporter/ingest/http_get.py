"""A bounded HTTP GET of SGLang's /metrics: connect, status line, headers and body all within one deadline, even
from a peer that sends a byte at a time, and at most a byte budget of body, handed on line by line as it
arrives; whatever goes wrong ends as a reason that starts with its category ("refused", "unreachable",
"timeout", "http 500", "protocol", "too large", "internal"). scrape.py parses and folds what it hands on.
"""
from __future__ import annotations

import http.client
import io
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

MAX_REASON = 200       # characters of a failure reason (it may quote what the peer sent)

# what an HTTP status most often means from SGLang's port, after the status in a failed GET's reason
HTTP_HINTS = {404: ": no /metrics there (SGLang serves it only when started with --enable-metrics; or --sglang-url "
                   "names another port or path)"}


class Failed(Exception):
    """A failed GET whose reason is already written (its category first)."""


class _DeadlineReader(io.RawIOBase):
    """The reading side of a socket where every read waits only for what is left of the scrape's time, so a
    peer that dribbles its status line, headers or body a byte at a time cannot hold a scrape past it."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock, self.deadline = sock, deadline
        self.raw = sock.makefile("rb", buffering=0)   # holds the socket open until the response is done

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int | None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("scrape deadline passed")
        self.sock.settimeout(left)
        return self.raw.readinto(buf)

    def close(self) -> None:
        self.raw.close()
        super().close()


class _DeadlineSocket:
    """What http.client.HTTPResponse reads from (it only calls makefile)."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock, self.deadline = sock, deadline

    def makefile(self, mode: str = "rb", *args, **kwargs):
        return io.BufferedReader(_DeadlineReader(self.sock, self.deadline))


def get_lines(url: str, deadline: float, timeout: float, max_bytes: int,
              consume: Callable[[Iterator[str]], None]) -> None:
    """GET `url` and hand a 2xx reply's body, line by line as it arrives (never held whole), to `consume`, all
    of it before `deadline` (`timeout`: the seconds that deadline allows, for the reasons); raises on anything
    else, with a reason `reason` turns into words."""
    try:
        u = urlsplit(url)
        host, port = u.hostname or "", u.port
    except ValueError as exc:
        raise Failed(f"unreachable: bad URL: {exc}") from None
    conn: http.client.HTTPConnection
    if u.scheme == "https":
        conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(host, port, timeout=timeout)
    # a factory where http.client expects the class: the response reads through the deadline
    conn.response_class = lambda sock, *a, **kw: http.client.HTTPResponse(  # type: ignore[assignment]
        _DeadlineSocket(sock, deadline), *a, **kw)  # type: ignore[arg-type]
    try:
        conn.connect()
        conn.sock.settimeout(max(deadline - time.monotonic(), 0.001))
        conn.request("GET", (u.path or "/") + (f"?{u.query}" if u.query else ""),
                     headers={"Accept": "text/plain;version=0.0.4"})
        resp = conn.getresponse()
        if not 200 <= resp.status < 300:
            raise Failed(f"http {resp.status}" + HTTP_HINTS.get(resp.status, ""))
        length = resp.getheader("Content-Length")
        if length and length.isascii() and length.isdigit() and int(length) > max_bytes:
            raise Failed(f"too large: Content-Length {int(length)} over {max_bytes} bytes")
        consume(_body_lines(resp, deadline, timeout, max_bytes))
    finally:
        conn.close()


def _body_lines(resp: http.client.HTTPResponse, deadline: float, timeout: float, max_bytes: int) -> Iterator[str]:
    """The body's lines as they arrive, at most `max_bytes` in all. The deadline is checked before every read,
    so it covers the parsing and folding done between reads as well as the peer's pace."""
    buf = bytearray()
    size = 0
    while True:
        if time.monotonic() > deadline:
            raise Failed(f"timeout: the page was not read and parsed within {timeout:g} s")
        chunk = resp.read1(_READ)
        if not chunk:
            break
        size += len(chunk)
        if size > max_bytes:
            raise Failed(f"too large: body over {max_bytes} bytes")
        buf += chunk
        end = buf.rfind(b"\n") + 1
        if end:
            lines = bytes(buf[:end - 1]).decode("utf-8", errors="replace").split("\n")
            del buf[:end]
            for line in lines:
                yield line + "\n"
    if resp.length:       # http.client ends a body cut short by the peer quietly
        raise http.client.IncompleteRead(b"", resp.length)
    if buf:
        yield buf.decode("utf-8", errors="replace")


_READ = 1 << 16        # bytes per read of a /metrics body


def printable(text: str) -> str:
    """A peer's words made safe for one log line."""
    return "".join(c if c.isprintable() else "?" for c in text)


def reason(exc: BaseException, timeout: float) -> str:
    """A failure's reason: a stable category, then what the peer did."""
    if isinstance(exc, Failed):
        text = str(exc)
    elif isinstance(exc, TimeoutError):          # socket.timeout too
        text = f"timeout: no complete reply within {timeout:g} s"
    elif isinstance(exc, ConnectionRefusedError):
        text = "refused: connection refused"
    elif isinstance(exc, http.client.RemoteDisconnected):    # before OSError: it is a ConnectionResetError too
        text = "protocol: closed without a reply"
    elif isinstance(exc, http.client.IncompleteRead):
        text = "protocol: body cut short or broken chunked encoding"
    elif isinstance(exc, http.client.LineTooLong):
        text = f"protocol: {exc}"
    elif isinstance(exc, http.client.BadStatusLine):
        text = f"protocol: not an HTTP reply: {exc.line!r}"  # type: ignore[attr-defined]  # (not in typeshed)
    elif isinstance(exc, http.client.HTTPException):
        text = f"protocol: {type(exc).__name__}: {exc}"
    elif isinstance(exc, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
        text = "protocol: connection reset"
    elif isinstance(exc, ssl.SSLError):
        text = f"protocol: TLS: {exc.reason or exc}"
    elif isinstance(exc, socket.gaierror):
        text = f"unreachable: cannot resolve host: {exc.strerror or exc}"
    elif isinstance(exc, OSError):
        text = f"unreachable: {exc.strerror or exc}"
    else:
        text = f"internal: {type(exc).__name__}: {exc}"
    return printable(text)[:MAX_REASON]
