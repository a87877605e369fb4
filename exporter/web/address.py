"""Where the exporter listens: the listening socket for a host and port, an empty host meaning every
address (IPv6 and IPv4 on one socket where the machine has IPv6)."""
from __future__ import annotations

import errno
import socket


def bind(host: str, port: int, backlog: int) -> socket.socket:
    """A listening socket on (host, port). An empty host is every address: one socket for IPv6 and IPv4 where
    the machine has IPv6 (an IPv6-only cluster scrapes and probes the pod's IPv6 address; 0.0.0.0 alone would
    refuse them and the liveness probe would restart us forever), else IPv4 only (IPv6 off in the kernel)."""
    if host:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.create_server((host, port), family=family, backlog=backlog)
    if socket.has_dualstack_ipv6():
        try:
            return socket.create_server(("::", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=backlog)
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise
    return socket.create_server(("0.0.0.0", port), family=socket.AF_INET, backlog=backlog)
