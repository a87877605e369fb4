"""Running a simulation: serve its /metrics over HTTP, write its log as simulated time passes, and the
`sglang-exporter simulate` command line."""
from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from exporter.simulate.engine import Simulator
from exporter.simulate.scenario import FAMILIES, Scenario, ScenarioError, list_scenarios, load_scenario

if TYPE_CHECKING:
    from http.server import ThreadingHTTPServer

DESCRIPTION = "An SGLang stand-in driven by scenario data files (exporter/scenarios/*.yaml)."


def serve_metrics(sim: Simulator, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """Serve sim.metrics_text() at /metrics in a daemon thread; call .shutdown() and .server_close()."""
    # imported here: the command line imports this module for its arguments, and http.server is a third of
    # every command's start-up
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            body = sim.metrics_text().encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass      # the scraper gave up (its timeout on a loaded machine): its loss, not an error here

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="simulate-metrics", daemon=True).start()
    return server


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--metrics-listen: expected HOST:PORT, got {text!r}")
    return (host.strip("[]") or "0.0.0.0"), int(port)


# ====================================================================== live mode
def run_simulator(scenario, log_path, metrics_listen=None, speed: float = 1.0, duration: float | None = None,
                  stop_event: threading.Event | None = None, instant: bool = False, seed: int = 0,
                  fmt: str | None = None, start: datetime | None = None) -> int:
    """Write the scenario's log to log_path ("-" = stdout) as simulated time passes at `speed`x real time.

    instant=True writes everything at once (timestamps still in simulated time) and, when metrics_listen is
    set, keeps serving the final state until stop_event is set. Returns 0.
    """
    if not isinstance(scenario, Scenario):
        scenario = load_scenario(scenario)
    if speed <= 0:
        raise ValueError("speed must be > 0")
    stop_event = stop_event or threading.Event()
    sim = Simulator(scenario, start=start or datetime.now().replace(microsecond=0), seed=seed, fmt=fmt)
    end = scenario.duration if duration is None else duration
    server = None
    if metrics_listen:
        host, port = parse_listen(metrics_listen) if isinstance(metrics_listen, str) else metrics_listen
        server = serve_metrics(sim, host, port)
    out = sys.stdout if str(log_path) == "-" else open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - closed in finally
    try:
        if instant:
            lines = sim.lines_until(end)
            out.writelines(line + "\n" for line in lines)
            out.flush()
            if server is not None:
                while not stop_event.wait(1.0):   # timed, so Ctrl-C is seen (see cmd_serve)
                    pass
            return 0
        t0 = time.monotonic()
        while not stop_event.is_set():
            elapsed = min(end, (time.monotonic() - t0) * speed)
            lines = sim.lines_until(elapsed)
            if lines:
                out.write("".join(line + "\n" for line in lines))
                out.flush()
            if elapsed >= end:
                break
            next_second = math.floor(elapsed) + 1
            stop_event.wait(max(0.0, (min(next_second, end) - elapsed) / speed))
        return 0
    finally:
        if out is not sys.stdout:
            out.close()
        if server is not None:
            server.shutdown()
            server.server_close()


# ====================================================================== CLI glue
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scenario", metavar="NAME", help="bundled scenario name or path to a YAML file")
    parser.add_argument("--list", action="store_true", help="list the bundled scenarios and exit")
    parser.add_argument("--log-file", metavar="PATH", default="-", help="log file to append to (default stdout)")
    parser.add_argument("--metrics-listen", metavar="HOST:PORT", help="serve the simulated /metrics here")
    parser.add_argument("--speed", type=float, default=1.0, metavar="X",
                        help="simulated seconds per wall-clock second (default 1)")
    parser.add_argument("--duration", type=float, metavar="SIM_SECONDS",
                        help="simulated seconds to run, SIM_SECONDS / X wall-clock seconds at --speed X "
                             "(default: the scenario's length)")
    parser.add_argument("--instant", action="store_true",
                        help="write the whole log at once (then keep serving /metrics if --metrics-listen)")
    parser.add_argument("--format", metavar="VERSION", choices=FAMILIES,
                        help=f"log format family, overrides the scenario's ({', '.join(FAMILIES)})")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")


def main(args=None) -> int:
    if args is None or isinstance(args, list):
        parser = argparse.ArgumentParser(prog="sglang-exporter simulate", description=DESCRIPTION, allow_abbrev=False)
        add_arguments(parser)
        try:
            args = parser.parse_args(args)
        except SystemExit as exc:
            return int(exc.code or 0)
    if getattr(args, "list", False):
        for name in list_scenarios():
            try:
                desc = load_scenario(name).description.split("\n")[0]
            except ScenarioError as exc:
                desc = f"(invalid: {exc})"
            print(f"{name:22s} {desc}")
        return 0
    if not args.scenario:
        print("sglang-exporter simulate: error: --scenario NAME is required (see --list)", file=sys.stderr)
        return 2
    if args.speed is not None and args.speed <= 0:
        print("sglang-exporter simulate: error: --speed must be > 0", file=sys.stderr)
        return 2
    if args.duration is not None and args.duration <= 0:
        print("sglang-exporter simulate: error: --duration must be > 0", file=sys.stderr)
        return 2
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"sglang-exporter simulate: error: --scenario {args.scenario}: {exc} (simulate --list names the "
              "bundled ones)", file=sys.stderr)
        return 2
    listen = None
    if args.metrics_listen:
        try:
            listen = parse_listen(args.metrics_listen)
        except ValueError as exc:
            print(f"sglang-exporter simulate: error: {exc}", file=sys.stderr)
            return 2
    if args.log_file != "-":
        parent = Path(args.log_file).resolve().parent
        if not parent.is_dir():
            print(f"sglang-exporter simulate: error: --log-file {args.log_file}: the directory {parent} does not "
                  f"exist; create it (mkdir -p {parent}) or name another file", file=sys.stderr)
            return 2
    try:
        return run_simulator(scenario, args.log_file, metrics_listen=listen, speed=args.speed,
                             duration=args.duration, instant=args.instant, seed=args.seed, fmt=args.format)
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"sglang-exporter simulate: error: {exc}", file=sys.stderr)
        return 1

