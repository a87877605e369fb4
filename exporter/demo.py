"""`sglang-exporter demo`: a simulated SGLang and the sidecar side by side, for a first look without a GPU.

The simulator writes a scenario's log lines at `speed` simulated seconds per real second and serves
/metrics; the sidecar follows that log and scrapes that endpoint exactly as it would a real server.
"""
from __future__ import annotations

import os
import signal
import sys
import tempfile
import threading

from exporter.config import Config, split_host_port
from exporter.server import make_server, serve_in_thread
from exporter.sidecar import Sidecar


def _free_port(host: str) -> int:
    import socket
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def run_demo(args) -> int:
    from exporter import simulate
    try:
        simulate.load_scenario(args.scenario)
    except Exception as exc:  # noqa: BLE001 - any scenario problem is a usage error here
        print(f"sglang-exporter: error: --scenario {args.scenario}: {exc}", file=sys.stderr)
        return 2
    host, port = split_host_port(args.listen, "--listen")
    workdir = tempfile.mkdtemp(prefix="sglang-exporter-demo-")
    log_path = os.path.join(workdir, "sglang.log")
    open(log_path, "a").close()
    sim_port = _free_port("127.0.0.1")
    stop = threading.Event()
    sim = threading.Thread(target=simulate.run_simulator, name="simulator", daemon=True,
                           kwargs={"scenario": args.scenario, "log_path": log_path,
                                   "metrics_listen": f"127.0.0.1:{sim_port}", "speed": args.speed,
                                   "stop_event": stop})
    sim.start()
    cfg = Config(log_files=(log_path,), from_start=True, sglang_url=f"http://127.0.0.1:{sim_port}",
                 listen=args.listen, scrape_interval=2.0, scrape_timeout=1.0, poll_interval=0.2,
                 evaluate_interval=1.0)
    sidecar = Sidecar(cfg)
    try:
        server = make_server(sidecar, host, port)
    except OSError as exc:
        stop.set()
        print(f"sglang-exporter: error: --listen {args.listen}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    sidecar.start()
    serve_in_thread(server)
    base = f"http://{host}:{server.server_address[1]}"
    print(f"""sglang-exporter demo: scenario '{args.scenario}' at {args.speed:g}x speed
  simulated SGLang log : {log_path}
  simulated /metrics   : http://127.0.0.1:{sim_port}/metrics
  our metrics          : {base}/metrics
  signals (JSON)       : {base}/api/v1/signals
Signals below change as the scenario unfolds; Ctrl-C stops.""", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    waited = 0.0
    last_line = ""
    while not done.wait(2.0):
        waited += 2.0
        line = _status_line(sidecar)
        if line != last_line:
            print(line, flush=True)
            last_line = line
        if args.duration is not None and waited >= args.duration:
            break
    stop.set()
    server.shutdown()
    server.server_close()
    sidecar.shutdown()
    sim.join(5)
    return 0


def _status_line(sidecar: Sidecar) -> str:
    view = sidecar.view()
    firing = sorted(sid for sid, j in view.snapshot.judgements.items() if j.firing)
    advice = "; ".join(f"{r.action} {r.flag}" + (f" to {r.suggested}" if r.suggested is not None else "")
                       for r in view.snapshot.advice[:3])
    return (f"  firing: {', '.join(firing) or 'nothing'}"
            + (f"  |  advice: {advice}" if advice else ""))
