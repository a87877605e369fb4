"""A small HTTP/1.1 listener that keeps answering while hostile or broken clients hold connections open.

Why not http.server: its ThreadingHTTPServer spawns one thread per connection, without bound, and that thread
blocks reading the request head; its listen backlog is 5. Hundreds of idle or slow (slowloris) connections
then pin hundreds of threads and the kernel drops new connections, scrapes among them. Well-kept libraries that
fix this either lack TLS (waitress) or read request heads in worker threads too (cheroot), so a slow client
still costs a thread; an ASGI stack is a lot of dependency for five GET endpoints.

The shape here: one I/O thread owns every socket. It accepts (backlog `Limits.backlog`), runs TLS handshakes
non-blocking, reads request heads under a deadline and writes responses non-blocking, all through one
selector, so an idle or slow connection costs a file descriptor and a few KiB, never a thread. Only a complete,
parsed request head goes to a fixed pool of worker threads through a bounded queue; a worker calls the handler,
which hands back a `Response` (from any thread, via `reply`) for the I/O thread to write. So threads are bounded
(1 + `Limits.workers`) whatever the clients do, and connections, time, sizes and queued work each have a limit
in `Limits`; docs/api.md ("The listener") has the table of each limit and what happens past it.
"""
from __future__ import annotations

import errno
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from queue import Full, Queue

from exporter.web.address import bind
from exporter.web.connection import (
    BUSY,
    GONE,
    HANDSHAKE,
    LINGER,
    LINGER_SECONDS,
    READING,
    WANT_READ,
    WRITING,
    Conn,
    Limits,
    handshake,
    receive,
    send,
)
from exporter.web.message import HEAD_END, Request, Response, parse_head, serialize, wants_close

log = logging.getLogger(__name__)


Handler = Callable[[Request, Callable[[Response], None]], None]


class _Pending:
    """The one-shot `reply` of a request: the first call counts, from whichever thread makes it."""
    __slots__ = ("listener", "conn", "request", "lock", "done")

    def __init__(self, listener, conn, request):
        self.listener, self.conn, self.request = listener, conn, request
        self.lock = threading.Lock()
        self.done = False

    def __call__(self, response: Response) -> None:
        with self.lock:
            if self.done:
                return
            self.done = True
        self.listener._reply(self.conn, self.request, response)


class Listener:
    """Serves `handler` on (host, port); `serve_forever` runs the I/O loop, `shutdown` + `server_close` stop it.

    The method names match socketserver's, so callers stop it the way they stopped http.server."""

    def __init__(self, address: tuple, handler: Handler, limits: Limits | None = None,
                 ssl_context: ssl.SSLContext | None = None, clock=time.monotonic,
                 on_close: Callable[[], None] | None = None):
        self.limits = limits or Limits()
        self.handler = handler
        self.ssl_context = ssl_context
        self.clock = clock
        self.on_close = on_close     # stops what the handler started (server_close calls it last)
        host, port = address
        self.socket = bind(host, port, self.limits.backlog)
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._conns: dict[int, Conn] = {}          # fd -> connection
        self._waiting: dict[int, None] = {}         # fds awaiting a request head, oldest first (eviction order)
        self._done: deque[tuple[Conn, bytes, bool]] = deque()   # (conn, bytes, close) handed back by workers
        self._jobs: Queue = Queue(maxsize=self.limits.queue_size)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._closed = False
        self._accept_paused_until: float | None = None
        self._next_sweep: float | None = None
        self._workers = [threading.Thread(target=self._work, name=f"http-worker-{i}", daemon=True)
                         for i in range(self.limits.workers)]
        for t in self._workers:
            t.start()

    # ------------------------------------------------------------------ lifecycle
    def serve_forever(self, poll_interval: float | None = None) -> None:
        """Run the I/O loop until `shutdown`. (`poll_interval` is accepted for socketserver's signature only:
        shutdown wakes the loop through a socket pair, nothing polls.)"""
        self._stop.clear()
        self._stopped.clear()
        sel = self._selector
        sel.register(self.socket, selectors.EVENT_READ, None)
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        try:
            while not self._stop.is_set():
                timeout = None
                if self._next_sweep is not None:
                    timeout = max(0.0, self._next_sweep - self.clock())
                for key, _ in sel.select(timeout):
                    if key.fileobj is self.socket:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._drain_wake()
                    else:
                        conn = self._conns.get(key.fd)
                        if conn is not None:
                            try:
                                self._step(conn)
                            except Exception:  # noqa: BLE001 - a bug met by one connection must not stop the loop
                                log.exception("HTTP connection failed; closing it")
                                self._close(conn)
                self._take_replies()
                if self._next_sweep is not None and self.clock() >= self._next_sweep:
                    self._sweep()
        finally:
            for obj in (self.socket, self._wake_r):
                try:
                    sel.unregister(obj)
                except (KeyError, ValueError):
                    pass
            self._stopped.set()

    def shutdown(self) -> None:
        self._stop.set()
        self._wake()
        self._stopped.wait(10)

    def server_close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._wake()
        self._stopped.wait(10)
        for conn in list(self._conns.values()):
            self._close(conn)
        while not self._jobs.empty():       # their connections are closed: room for the workers' stop marks
            self._jobs.get_nowait()
        for _ in self._workers:
            self._jobs.put(None)
        for t in self._workers:
            t.join(5)
        self.socket.close()
        self._wake_r.close()
        self._wake_w.close()
        self._selector.close()
        if self.on_close is not None:
            self.on_close()

    def connection_count(self) -> int:
        return len(self._conns)

    # ------------------------------------------------------------------ I/O thread
    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):   # full: a wake-up is already pending; closed: nothing to wake
            pass

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _deadline(self, when: float) -> float:
        if self._next_sweep is None or when < self._next_sweep:
            self._next_sweep = when
        return when

    def _watch(self, conn: Conn, events: int) -> None:
        if events == conn.events:
            return
        if conn.events and events:
            self._selector.modify(conn.sock, events)
        elif events:
            self._selector.register(conn.sock, events)
        else:
            self._selector.unregister(conn.sock)
        conn.events = events

    def _accept(self) -> None:
        now = self.clock()
        for _ in range(64):      # a batch, then back to the loop: a connect flood must not starve the rest
            try:
                sock, _ = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    if self._evict():
                        continue
                    # nothing to close and no descriptor to accept with: stop watching the listening socket
                    # for a moment (it would stay readable and spin the loop), the backlog keeps the rest
                    self._selector.unregister(self.socket)
                    self._accept_paused_until = self._deadline(now + 0.1)
                return
            if len(self._conns) >= self.limits.max_connections and not self._evict():
                sock.close()
                continue
            sock.setblocking(False)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            state = READING
            if self.ssl_context is not None:
                try:
                    sock = self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                except (OSError, ValueError):
                    sock.close()
                    continue
                state = HANDSHAKE
            conn = Conn(sock, state, self._deadline(now + self.limits.head_timeout))
            self._conns[sock.fileno()] = conn
            self._waiting[sock.fileno()] = None
            self._watch(conn, selectors.EVENT_READ)

    def _evict(self) -> bool:
        """Make room: close the connection that has waited longest without ever completing a request (or one
        being closed anyway); only when there is none, the longest-idle keep-alive connection. A scraper that
        keeps its connection alive has proven itself; a flood of new connections has not. False: nothing to
        close (every connection has a request in progress)."""
        for fd in self._waiting:
            conn = self._conns[fd]
            if conn.served == 0 or conn.state == LINGER:
                self._close(conn)
                return True
        for fd in self._waiting:
            self._close(self._conns[fd])
            return True
        return False

    def _close(self, conn: Conn) -> None:
        fd = conn.sock.fileno()
        if fd < 0:
            return
        self._watch(conn, 0)
        self._conns.pop(fd, None)
        self._waiting.pop(fd, None)
        try:
            conn.sock.close()      # no TLS close_notify: it could block on a client that stopped reading
        except OSError:
            pass

    def _sweep(self) -> None:
        now = self.clock()
        nearest = None
        if self._accept_paused_until is not None:
            if now >= self._accept_paused_until:
                self._accept_paused_until = None
                self._selector.register(self.socket, selectors.EVENT_READ, None)
            else:
                nearest = self._accept_paused_until
        for conn in list(self._conns.values()):
            if conn.state == BUSY:
                continue        # the handler owns it; bounded by the worker queue, not by a clock
            if now >= conn.deadline:
                self._close(conn)
            elif nearest is None or conn.deadline < nearest:
                nearest = conn.deadline
        # deadlines closer than 50 ms apart share a sweep: a sweep walks every connection
        self._next_sweep = None if nearest is None else max(nearest, now + 0.05)

    def _step(self, conn: Conn) -> None:
        if conn.state == HANDSHAKE:
            self._handshake(conn)
        elif conn.state == READING:
            self._read(conn)
        elif conn.state == WRITING:
            self._write(conn)
        elif conn.state == LINGER:
            self._drain(conn)

    def _handshake(self, conn: Conn) -> None:
        waits = handshake(conn.sock)
        if waits is not None:
            self._wait(conn, waits)
            return
        conn.state = READING
        self._watch(conn, selectors.EVENT_READ)
        self._read(conn)       # the handshake's last flight may have carried the request too

    def _wait(self, conn: Conn, waits: str) -> None:
        """Watch the socket for what a step waits for, or close the connection when it is GONE."""
        if waits == GONE:
            self._close(conn)
        else:
            self._watch(conn, selectors.EVENT_READ if waits == WANT_READ else selectors.EVENT_WRITE)

    def _read(self, conn: Conn) -> None:
        while True:
            data = receive(conn.sock)
            if isinstance(data, str):
                self._wait(conn, data)
                if data == GONE:
                    return
                break
            if conn.idle:
                # a keep-alive connection's next request has begun: its head now has head_timeout to arrive
                conn.idle = False
                conn.deadline = self._deadline(self.clock() + self.limits.head_timeout)
            conn.buf += data
            # TLS may hold decrypted bytes the selector will not report again: read on while it has some
            if len(conn.buf) > self.limits.max_head_bytes or HEAD_END.search(conn.buf) \
                    or not isinstance(conn.sock, ssl.SSLSocket) or not conn.sock.pending():
                break
        self._parse(conn)

    def _parse(self, conn: Conn) -> None:
        # RFC 9112 2.2: ignore blank lines before a request line (a bytearray equals the bytes it holds)
        while conn.buf[:1] in (b"\r", b"\n"):  # type: ignore[comparison-overlap]
            del conn.buf[:1]
        limit = self.limits.max_head_bytes
        m = HEAD_END.search(conn.buf)
        if (m.end() if m else len(conn.buf)) > limit:
            line_too_long = b"\n" not in conn.buf[:limit]
            self._fail(conn, HTTPStatus.REQUEST_URI_TOO_LONG if line_too_long
                       else HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE)
            return
        if m is None:
            return
        head = bytes(conn.buf[:m.start()])
        del conn.buf[:m.end()]
        request, error = parse_head(head, self.limits.max_headers)
        if error is not None or request is None:
            self._fail(conn, error or HTTPStatus.BAD_REQUEST)
            return
        conn.served += 1
        conn.close_after = wants_close(request) or conn.served >= self.limits.max_requests_per_connection
        conn.state = BUSY
        self._waiting.pop(conn.sock.fileno(), None)
        self._watch(conn, 0)
        try:
            self._jobs.put_nowait((conn, request))
        except Full:
            busy = Response(HTTPStatus.SERVICE_UNAVAILABLE, b"busy\n", headers={"Retry-After": "1"})
            self._start_write(conn, serialize(request, busy, True), True)

    def _fail(self, conn: Conn, status: int) -> None:
        """Answer a request the I/O thread refuses by itself, then close."""
        conn.state = BUSY
        self._waiting.pop(conn.sock.fileno(), None)
        body = f"{HTTPStatus(status).phrase.lower()}\n".encode()
        self._start_write(conn, serialize(None, Response(status, body), True), True)

    def _take_replies(self) -> None:
        while self._done:
            conn, data, close = self._done.popleft()
            if self._conns.get(conn.sock.fileno()) is conn:
                self._start_write(conn, data, close)

    def _start_write(self, conn: Conn, data: bytes, close: bool) -> None:
        conn.state = WRITING
        conn.close_after = conn.close_after or close
        conn.out = memoryview(data)
        conn.deadline = self._deadline(self.clock() + self.limits.write_timeout)
        self._write(conn)

    def _write(self, conn: Conn) -> None:
        while conn.out:
            n = send(conn.sock, conn.out)
            if isinstance(n, str):
                self._wait(conn, n)
                return
            conn.out = conn.out[n:]
            conn.deadline = self._deadline(self.clock() + self.limits.write_timeout)
        if conn.close_after:
            self._linger(conn)
            return
        conn.state = READING
        conn.idle = True
        conn.deadline = self._deadline(self.clock() + self.limits.idle_timeout)
        self._waiting[conn.sock.fileno()] = None
        self._watch(conn, selectors.EVENT_READ)
        if conn.buf:            # a pipelined request already arrived
            conn.idle = False
            conn.deadline = self._deadline(self.clock() + self.limits.head_timeout)
            self._parse(conn)

    def _linger(self, conn: Conn) -> None:
        """Close after the last response, but first drain what the client still sends (a body we refused, the
        rest of an oversized head): closing with unread input makes the kernel reset the connection, and the
        reset can destroy the response before the client reads it. Bounded by LINGER_SECONDS."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except (OSError, ValueError):
            self._close(conn)
            return
        conn.state = LINGER
        conn.buf.clear()
        conn.deadline = self._deadline(self.clock() + LINGER_SECONDS)
        self._waiting[conn.sock.fileno()] = None
        self._watch(conn, selectors.EVENT_READ)

    def _drain(self, conn: Conn) -> None:
        if receive(conn.sock) == GONE:      # read and dropped until the peer is done (or LINGER_SECONDS)
            self._close(conn)

    # ------------------------------------------------------------------ workers
    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            conn, request = job
            reply = _Pending(self, conn, request)
            try:
                self.handler(request, reply)
            except Exception:  # noqa: BLE001 - one broken request must not take a worker with it
                log.exception("HTTP handler failed")
                reply(Response(HTTPStatus.INTERNAL_SERVER_ERROR, b"internal error\n", close=True))

    def _reply(self, conn: Conn, request: Request, response: Response) -> None:
        close = response.close or conn.close_after
        self._done.append((conn, serialize(request, response, close), close))
        self._wake()
