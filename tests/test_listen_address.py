"""The listen address: `:PORT` (the default) is every address, IPv6 and IPv4 on one socket where the machine has
IPv6, IPv4 alone where the kernel has it off; a host given is bound as given.

An IPv6-only cluster probes and scrapes the pod's IPv6 address: a sidecar on 0.0.0.0 alone refuses both, and
its liveness probe restarts it forever. The wildcard binds are checked on `socket.create_server`'s arguments
(network tests stay on 127.0.0.1); the one real bind is on loopback.
"""
from __future__ import annotations

import errno
import socket

import pytest

from exporter.config import DEFAULT_PORT, Config, ConfigError, cannot_listen, split_host_port, url_host
from exporter.web import address as address_mod


def test_the_default_is_every_address():
    assert Config().listen == f":{DEFAULT_PORT}"
    assert split_host_port(f":{DEFAULT_PORT}", "listen") == ("", DEFAULT_PORT)
    assert split_host_port("0.0.0.0:1", "listen") == ("0.0.0.0", 1)
    assert split_host_port("[::1]:2", "listen") == ("::1", 2)
    with pytest.raises(ConfigError, match=r"e\.g\. :10060, every address"):
        split_host_port("10060", "--listen")


@pytest.mark.parametrize(("host", "shown"), [("::", "[::]"), ("::1", "[::1]"), ("0.0.0.0", "0.0.0.0"), ("", "")])
def test_url_host_brackets_ipv6(host, shown):
    assert url_host(host) == shown


class Binds:
    """socket.create_server, recorded: each call's address, family and dual-stack flag; `fail` maps an address
    to the errno its bind fails with."""

    def __init__(self, fail: dict | None = None):
        self.calls: list[tuple] = []
        self.fail = fail or {}

    def __call__(self, address, *, family, backlog, dualstack_ipv6=False):
        self.calls.append((address, family, dualstack_ipv6))
        if address[0] in self.fail:
            raise OSError(self.fail[address[0]], "refused by the test")
        return "a socket"


@pytest.mark.parametrize(("dual", "fail", "calls"), [
    (True, {}, [(("::", 80), socket.AF_INET6, True)]),
    # IPv6 there but unusable (disable_ipv6): IPv4 alone
    (True, {"::": errno.EADDRNOTAVAIL}, [(("::", 80), socket.AF_INET6, True), (("0.0.0.0", 80), socket.AF_INET, False)]),
    (False, {}, [(("0.0.0.0", 80), socket.AF_INET, False)]),                  # no IPv6 in the kernel
])
def test_every_address_is_one_socket_for_ipv6_and_ipv4_where_there_is_ipv6(monkeypatch, dual, fail, calls):
    binds = Binds(fail)
    monkeypatch.setattr(address_mod.socket, "create_server", binds)
    monkeypatch.setattr(address_mod.socket, "has_dualstack_ipv6", lambda: dual)
    assert address_mod.bind("", 80, 16) == "a socket"
    assert binds.calls == calls


@pytest.mark.parametrize("err", [errno.EADDRINUSE, errno.EACCES])
def test_a_taken_or_privileged_port_is_the_error_not_a_fallback(monkeypatch, err):
    binds = Binds({"::": err})
    monkeypatch.setattr(address_mod.socket, "create_server", binds)
    monkeypatch.setattr(address_mod.socket, "has_dualstack_ipv6", lambda: True)
    with pytest.raises(OSError) as info:
        address_mod.bind("", 80, 16)
    assert info.value.errno == err and len(binds.calls) == 1
    assert "every address" not in cannot_listen(":80", "--listen", info.value, "--listen")


@pytest.mark.parametrize(("host", "family"), [("0.0.0.0", socket.AF_INET), ("::", socket.AF_INET6),
                                              ("127.0.0.1", socket.AF_INET)])
def test_a_host_given_is_bound_as_given(monkeypatch, host, family):
    binds = Binds()
    monkeypatch.setattr(address_mod.socket, "create_server", binds)
    address_mod.bind(host, 80, 16)
    assert binds.calls == [((host, 80), family, False)]


def test_an_address_not_of_this_machine_names_every_address_as_the_way_out():
    exc = OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
    msg = cannot_listen("10.255.255.1:10060", "--listen", exc, "--listen HOST:PORT")
    assert "use :10060 (every address) or 127.0.0.1 (this machine only)" in msg


def test_a_host_given_is_really_listened_on():
    sock = address_mod.bind("127.0.0.1", 0, 16)
    try:
        with socket.create_connection(sock.getsockname(), timeout=5):
            pass                                    # accepted into the backlog: it listens
    finally:
        sock.close()
