"""The live runtime (`serve`): joins and replays the logs, then supervised threads feed the engine.

- `run`: `Sidecar`, its follower, scraper, evaluator and positions threads, and the `View` the faces read;
- `startup`: the start-up join and replay of the logs before following;
- `readback`: SGLang's latest start-up in a log, and the log's clock mapped to real time;
- `checkpoint`: the positions file, written atomically, with its lock;
- `source_health`: each source's up/down with its reason.
"""
from exporter.sidecar.run import (
    FOLLOW_STUCK_SECONDS,
    LOG_POLL_BUDGET,
    NOT_YET,
    SGLANG_SOURCE,
    WORKER_RESTART_DELAY,
    WORKERS,
    Sidecar,
    View,
)

__all__ = ["FOLLOW_STUCK_SECONDS", "LOG_POLL_BUDGET", "NOT_YET", "SGLANG_SOURCE", "WORKERS",
           "WORKER_RESTART_DELAY", "Sidecar", "View"]
