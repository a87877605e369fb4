"""The listener's limits and one connection: its record (state, buffers, deadline) and the non-blocking socket
steps, each reporting what the socket waits for instead of raising, so the I/O loop only decides what is next."""
from __future__ import annotations

import ssl
from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    head_timeout: float = 5.0
    idle_timeout: float = 30.0
    write_timeout: float = 10.0
    max_head_bytes: int = 8192
    max_headers: int = 64
    max_connections: int = 1024
    max_requests_per_connection: int = 1000
    workers: int = 4
    queue_size: int = 1024
    backlog: int = 1024


READING, HANDSHAKE, BUSY, WRITING, LINGER = "reading", "handshake", "busy", "writing", "linger"
# after the last response of a connection: how long its unread input is drained before closing
LINGER_SECONDS = 2.0


class Conn:
    __slots__ = ("sock", "state", "buf", "out", "deadline", "served", "close_after", "events", "idle")

    def __init__(self, sock, state, deadline):
        self.sock = sock
        self.state = state
        self.buf = bytearray()
        self.out = memoryview(b"")
        self.deadline = deadline
        self.served = 0
        self.close_after = False
        self.events = 0          # what the selector watches for this socket (0: not registered)
        # between keep-alive requests: the idle deadline runs until the next request's first byte. A new
        # connection is not idle: its head deadline runs from accept
        self.idle = False



# What a socket step waits for when it cannot go on (or GONE: the connection is finished)
WANT_READ, WANT_WRITE, GONE = "want_read", "want_write", "gone"


def handshake(sock) -> str | None:
    """Advance a TLS handshake; None when it is done."""
    try:
        sock.do_handshake()
    except ssl.SSLWantReadError:
        return WANT_READ
    except ssl.SSLWantWriteError:
        return WANT_WRITE
    except (OSError, ValueError):    # a failed handshake (plain HTTP on the TLS port, bad client): drop it
        return GONE
    return None


def receive(sock) -> bytes | str:
    """Bytes read, or what the socket waits for (GONE also for the peer's end of stream)."""
    try:
        data = sock.recv(65536)
    except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
        return WANT_READ
    except ssl.SSLWantWriteError:
        return WANT_WRITE
    except (OSError, ValueError):
        return GONE
    return data or GONE


def send(sock, data: memoryview) -> int | str:
    """Bytes written, or what the socket waits for."""
    try:
        return sock.send(data)
    except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
        return WANT_WRITE
    except ssl.SSLWantReadError:
        return WANT_READ
    except (OSError, ValueError):
        return GONE
