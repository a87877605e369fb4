"""What the status page at / costs: the time to build it with a full hour of samples, its size, and the memory
of the last-hour ring the sidecar keeps for it (exporter/web/recent.py).

    python bench/status_page.py [--builds 50]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import tracemalloc
from datetime import datetime

from exporter.config import Config
from exporter.sidecar.run import Sidecar
from exporter.simulate import Simulator, load_scenario
from exporter.web.recent import Recent
from exporter.web.server import make_server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--builds", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "sglang.log")
        Simulator(load_scenario("retraction_storm"), start=datetime.now(), seed=1).write_log(log)
        clock = [time.time()]
        sc = Sidecar(Config(log_files=(log,), from_start=True), clock=lambda: clock[0])
        sc.prepare()
        for _ in range(1000):              # 5000 s of evaluations every 5 s (the default): a full hour kept
            clock[0] += 5
            sc.evaluate_once()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        ring = Recent()
        for i in range(5000):              # the ring at its bound (1200 samples)
            ring.record(sc.engine.state, 1e9 + 3 * i)
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
        tracemalloc.stop()
        server = make_server(sc, "127.0.0.1", 0)
        try:
            times = []
            for _ in range(args.builds):
                t0 = time.perf_counter()
                page = server.app.status_page()
                times.append(time.perf_counter() - t0)
        finally:
            server.server_close()
    print(f"samples charted: {len(sc.recent_samples())}; ring at its bound: {len(ring.ring)} samples, "
          f"{grown / 1024:.0f} KiB")
    print(f"status page: median {statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms "
          f"over {args.builds} builds; {len(page):,} bytes")


if __name__ == "__main__":
    main()
