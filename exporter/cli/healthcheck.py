"""`sglang-exporter healthcheck`: probe the running `serve`'s /healthz at the address it was told to listen on.

A container's HEALTHCHECK command starts beside the server with the image's environment but without the
container's arguments, so `--listen` given as an argument (or `--config FILE` whose `listen:` moved the port)
is invisible to it. The serve process's command line is in /proc for anyone in its PID namespace: this reads
it, parses it with serve's own parser and resolves the configuration with serve's own function
(flags > environment > config file > defaults). The environment is this process's own: a HEALTHCHECK runs with
the container's environment, the same one serve started with.

Exit 0: /healthz answered 200. Exit 1: anything else, with the reason on stdout (docker and podman keep the
last lines of a health check's output).
"""
from __future__ import annotations

import os
import ssl
import urllib.error
import urllib.request
from pathlib import Path

from exporter.config import ConfigError, reachable_host, url_host

PROC = Path("/proc")
HEALTHY, UNHEALTHY = 0, 1


def serve_argv(cmdline: list[str]) -> list[str] | None:
    """The CLI arguments of a `serve` command line (`.../sglang-exporter serve ...` or
    `python -m exporter serve ...`), or None when it is not one."""
    for i, word in enumerate(cmdline):
        if os.path.basename(word) == "sglang-exporter":
            rest = cmdline[i + 1:]
            break
        if word == "-m" and cmdline[i + 1:i + 2] == ["exporter"]:
            rest = cmdline[i + 2:]
            break
    else:
        return None
    return rest if rest[:1] == ["serve"] else None


def read_cmdline(pid: int) -> list[str]:
    raw = (PROC / str(pid) / "cmdline").read_bytes()
    return [w.decode("utf-8", "surrogateescape") for w in raw.split(b"\0")[:-1]]


def find_serve(pid: int | None) -> tuple[int, list[str]]:
    """(pid, serve's CLI arguments): `pid` if given, else PID 1 when it is serve (the image's entrypoint), else
    the lowest-numbered serve process (under an init such as `--init`'s)."""
    if pid is not None:
        candidates = [pid]
    else:
        candidates = sorted(int(p.name) for p in PROC.iterdir() if p.name.isdigit())
    for candidate in candidates:
        try:
            argv = serve_argv(read_cmdline(candidate))
        except OSError:  # gone meanwhile, or not readable
            continue
        if argv is not None:
            return candidate, argv
    where = f"process {pid}" if pid is not None else "any process"
    raise LookupError(f"no `sglang-exporter serve` in {where} visible in {PROC}")


def probe_url(listen: tuple[str, int], tls: bool) -> str:
    """The /healthz URL of a server listening on `listen`: a wildcard address is probed on loopback."""
    host, port = listen
    return f"{'https' if tls else 'http'}://{url_host(reachable_host(host))}:{port}/healthz"


def run(pid: int | None, timeout: float) -> int:
    from exporter.cli.arguments import build_parser, serve_config
    from exporter.web.server import load_web_config
    try:
        found, argv = find_serve(pid)
        cfg = serve_config(build_parser("serve").parse_args(argv))
        tls = bool(load_web_config(cfg.web_config).get("tls"))
    except (LookupError, ConfigError) as exc:
        print(f"unhealthy: {exc}")
        return UNHEALTHY
    except SystemExit:  # argparse rejected them (and said why on stderr); serve itself would have exited
        print(f"unhealthy: the arguments of serve (pid {found}) do not parse")
        return UNHEALTHY
    url = probe_url(cfg.listen_host_port, tls)
    # our own server on loopback: its certificate names the service, not 127.0.0.1
    context = None
    if tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as reply:
            status = reply.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (OSError, ValueError) as exc:
        print(f"unhealthy: {url} (serve pid {found}): {exc}")
        return UNHEALTHY
    if status != 200:
        print(f"unhealthy: {url} (serve pid {found}) answered {status}")
        return UNHEALTHY
    return HEALTHY
