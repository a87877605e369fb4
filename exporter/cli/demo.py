"""`sglang-exporter demo`: a simulated SGLang and the sidecar side by side, for a first look without a GPU.

The simulator writes a scenario's log lines at `speed` simulated seconds per real second and serves
/metrics; the sidecar follows that log and scrapes that endpoint exactly as it would a real server. When the
scenario is over the simulated SGLang stays up with no requests (its queue drained), as a real one left idle
would: nothing pages for a server that merely has no work. The demo's temporary folder goes when it stops.
"""
from __future__ import annotations

import dataclasses
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

from exporter.catalog import DEFAULT_PROFILE
from exporter.cli.logging_setup import configure as configure_logging
from exporter.config import DEFAULT_PORT, Config, cannot_listen, reachable_host, split_host_port, url_host
from exporter.report.text import advice_phrase
from exporter.sidecar.run import Sidecar
from exporter.simulate import Phase, Scenario
from exporter.web.server import make_server, serve_in_thread

DEMO_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"     # this machine only: the demo is for a first look, not a fleet


def _free_port(host: str) -> int:
    import socket
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def then_idle(scenario: Scenario) -> Scenario:
    """`scenario`, then its requests finish: one batch with nothing running or queued, then silence for as
    long as the demo runs. Without it the last batch line would leave a queue waiting forever, which is
    exactly what the `stalled` signal pages on."""
    drained = Phase(duration=1, queue=0, running=0, token_usage=0.0, retractions_per_minute=0.0)
    idle = Phase(duration=math.inf, silent=True)
    return dataclasses.replace(scenario, phases=[*scenario.phases, drained, idle])


def run_demo(args) -> int:
    from exporter import simulate
    try:
        scenario = simulate.load_scenario(args.scenario)
    except Exception as exc:  # noqa: BLE001 - any scenario problem is a usage error here
        print(f"sglang-exporter: error: --scenario {args.scenario}: {exc}", file=sys.stderr)
        return 2
    listen = args.listen or DEMO_LISTEN
    host, port = split_host_port(listen, "--listen")
    configure_logging("warning")         # a source going down, a worker failing: worth a line amid the status
    done = threading.Event()
    # installed before anything is created, so Ctrl-C or SIGTERM at any point still cleans up below
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    workdir = tempfile.mkdtemp(prefix="sglang-exporter-demo-")
    try:
        return _run(args, then_idle(scenario), scenario.duration, workdir, listen, done)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run(args, scenario: Scenario, story_seconds: float, workdir: str, listen: str, done: threading.Event) -> int:
    from exporter import simulate
    log_path = os.path.join(workdir, "sglang.log")
    open(log_path, "a").close()
    sim_port = _free_port("127.0.0.1")
    stop = threading.Event()
    sim = threading.Thread(target=simulate.run_simulator, name="simulator", daemon=True,
                           kwargs={"scenario": scenario, "log_path": log_path,
                                   "metrics_listen": f"127.0.0.1:{sim_port}", "speed": args.speed,
                                   "stop_event": stop})
    sim.start()
    host, port = split_host_port(listen, "--listen")
    # the scenario's own workload profile: a healthy offline job would read as queue trouble judged online
    profile = args.profile or scenario.profile or DEFAULT_PROFILE
    cfg = Config(profile=profile, log_files=(log_path,), from_start=True, sglang_url=f"http://127.0.0.1:{sim_port}",
                 listen=listen, scrape_interval=2.0, scrape_timeout=1.0, poll_interval=0.2,
                 evaluate_interval=1.0)
    sidecar = Sidecar(cfg)
    try:
        server = make_server(sidecar, host, port)
    except OSError as exc:
        stop.set()
        sim.join(5)
        # scripts/demo runs this command for people who typed no flag: name what they can type there
        prog = os.environ.get("SGLANG_EXPORTER_PROG") or "sglang-exporter demo"
        where = "--listen" if args.listen else "the demo's default address"
        print("sglang-exporter: error: " + cannot_listen(listen, where, exc, f"`{prog} --listen HOST:PORT`"),
              file=sys.stderr)
        return 1
    started = time.monotonic()
    try:
        sidecar.start()
        serve_in_thread(server)
        base = f"http://{url_host(reachable_host(host))}:{server.server_address[1]}"
        print(f"""sglang-exporter demo: scenario '{args.scenario}' at {args.speed:g}x speed
  status page          : {base}/
  runbooks             : {base}/runbooks/
  simulated SGLang log : {log_path}
  simulated /metrics   : http://127.0.0.1:{sim_port}/metrics
  our metrics          : {base}/metrics
  signals (JSON)       : {base}/api/v1/signals
Signals below change as the scenario unfolds; Ctrl-C stops.""", flush=True)
        last_line = ""
        told_over = False
        while not done.wait(2.0):
            line = _status_line(sidecar)
            if line != last_line:
                print(line, flush=True)
                last_line = line
            elapsed = time.monotonic() - started
            if not told_over and elapsed * args.speed >= story_seconds:
                told_over = True
                print(f"  scenario over after {story_seconds:g} simulated seconds: the simulated SGLang is up "
                      "with no requests now; signals settle as their windows pass. Ctrl-C stops.", flush=True)
            if args.duration is not None and elapsed >= args.duration:
                break
    finally:
        server.shutdown()
        server.server_close()
        sidecar.shutdown()           # before the simulated SGLang goes: no "down" line on the way out
        stop.set()
        sim.join(5)
    return 0


def _status_line(sidecar: Sidecar) -> str:
    view = sidecar.view()
    firing = sorted(sid for sid, j in view.snapshot.judgements.items() if j.firing)
    # every piece of advice the API lists, worded as the text report words it
    advice = "; ".join(advice_phrase(r.action, r.flag, r.current, r.suggested) for r in view.snapshot.advice)
    return (f"  firing: {', '.join(firing) or 'nothing'}"
            + (f"  |  advice: {advice}" if advice else ""))
