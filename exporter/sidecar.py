"""The live sidecar: follows log files and scrapes SGLang in background threads, feeding one Engine.

Time is arrival time from an injectable clock. Everything the faces show is taken as a consistent `View`
under one lock, so a scrape of our /metrics never sees half an update.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from exporter import __version__
from exporter.catalog import SIGNALS_BY_ID
from exporter.config import Config
from exporter.engine import Engine, Snapshot
from exporter.ingest.follower import Follower
from exporter.ingest.pipeline import Sources as LogSources
from exporter.scrape import metrics_url, scrape

SGLANG_SOURCE = "sglang_metrics"
LOG_POLL_BUDGET = 1 << 20     # bytes per file per poll
LOG_READ_CHUNK = 1 << 16      # bytes per read()


@dataclass
class View:
    """Everything the faces need, copied at one instant."""
    snapshot: Snapshot
    ranks: dict
    max_running_requests: float | None
    headroom_bytes: float | None
    retractions_per_minute: float
    retractions_total: int
    retracted_requests_total: int
    oom_total: dict
    watchdog_total: int
    restarts: int
    last_batch_age: float | None
    format_family: str
    model: str
    log_sources: dict                 # path -> {lines_read, rotations, truncations, lines_cut, up}
    unparsed: dict
    events_total: dict
    scrape: dict | None               # {success, duration, error} of SGLang's /metrics, None if not configured
    version: str = __version__
    profile: str = ""
    ready: bool = False
    extra: dict = field(default_factory=dict)


class Sidecar:
    def __init__(self, config: Config, clock=time.time):
        self.config = config
        self.clock = clock
        self.lock = threading.Lock()
        self.engine = Engine(config, log_fed=bool(config.log_files))
        self.log_sources = LogSources()
        # a backlog (a burst appended at once) is read LOG_POLL_BUDGET bytes per file per poll, the next poll
        # right away: what one poll reads is held as text until parsed, so this bounds memory (bench/README.md)
        self.follower = Follower(list(config.log_files), from_start=config.from_start,
                                 max_line_bytes=config.max_line_bytes, poll_budget=LOG_POLL_BUDGET,
                                 read_chunk=LOG_READ_CHUNK) if config.log_files else None
        self.last_scrape: dict | None = {"success": False, "duration": 0.0, "error": "not scraped yet"} \
            if config.sglang_url else None
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.started = False
        self.caught_up = self.follower is None   # first pass over the logs ingested

    # ------------------------------------------------------------------ feeding
    def on_lines(self, blocks) -> None:
        """Follower output (`Block`s of lines); an empty list means the logs are idle."""
        items = self.log_sources.feed_blocks(blocks)
        if not blocks:
            items += self.log_sources.flush()     # idle: emit pending multi-line records now
        now = self.clock()
        with self.lock:
            self.engine.ingest_items(items, now)
            self._update_log_up()
            self.caught_up = True

    def _update_log_up(self) -> None:
        if self.follower is not None:
            self.engine.set_sources(log_up=any(s.up for s in self.follower.stats.values()))

    def poll_logs_once(self) -> None:
        """One follower pass (tests and the demo call this instead of running threads)."""
        if self.follower is not None:
            self.on_lines(self.follower.poll_blocks())

    def scrape_once(self) -> None:
        if not self.config.sglang_url:
            return
        res = scrape(metrics_url(self.config.sglang_url), self.config.scrape_timeout,
                     self.config.scrape_max_bytes)
        now = self.clock()
        with self.lock:
            self.last_scrape = {"success": res.success, "duration": res.duration, "error": res.error}
            self.engine.set_sources(metrics_up=res.success)
            if res.success:
                self.engine.ingest_scrape(res, now)

    # ------------------------------------------------------------------ threads
    def start(self) -> None:
        if self.follower is not None:
            # appends are picked up by the poll timer; inotify wakes us for rotations (see Follower.run)
            t = threading.Thread(target=self.follower.run, name="follow", daemon=True,
                                 args=(self.on_lines, self.stop, self.config.poll_interval),
                                 kwargs={"wake_on_append": False, "blocks": True})
            self.threads.append(t)
        if self.config.sglang_url:
            self.threads.append(threading.Thread(target=self._scrape_loop, name="scrape", daemon=True))
        self.threads.append(threading.Thread(target=self._evaluate_loop, name="evaluate", daemon=True))
        for t in self.threads:
            t.start()
        self.started = True

    def _scrape_loop(self) -> None:
        while not self.stop.is_set():
            self.scrape_once()
            self.stop.wait(self.config.scrape_interval)

    def _evaluate_loop(self) -> None:
        # keeps signal history (since / intervals) moving even when nobody scrapes us
        while not self.stop.wait(self.config.evaluate_interval):
            with self.lock:
                self.engine.evaluate(self.clock())

    def shutdown(self, timeout: float = 5.0) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout)
        if self.follower is not None:
            self.follower.close()

    # ------------------------------------------------------------------ reading
    def view(self) -> View:
        now = self.clock()
        with self.lock:
            self._update_log_up()
            snap = self.engine.evaluate(now)
            st = self.engine.state
            window = SIGNALS_BY_ID["retractions_frequent"].window_seconds
            logs = {}
            if self.follower is not None:
                for path, s in self.follower.stats.items():
                    logs[path] = {"lines_read": s.lines_read, "rotations": s.rotations,
                                  "truncations": s.truncations, "lines_cut": s.lines_cut, "up": s.up}
            return View(
                snapshot=snap,
                ranks={k: (v.queue, v.running, v.usage, v.throughput, v.cuda_graph) for k, v in st.ranks.items()},
                max_running_requests=st.memory_config.get("max_running_requests"),
                headroom_bytes=st.headroom_bytes,
                retractions_per_minute=st.retractions_per_minute(now, window),
                retractions_total=st.retractions_total,
                retracted_requests_total=st.retracted_requests_total,
                oom_total=dict(st.oom_total),
                watchdog_total=st.watchdog_total,
                restarts=st.restarts,
                last_batch_age=None if st.last_batch_t is None else max(0.0, now - st.last_batch_t),
                format_family=self._format_family(),
                model=st.model,
                log_sources=logs,
                unparsed=dict(self.log_sources.unparsed()),
                events_total=dict(st.events_total),
                scrape=dict(self.last_scrape) if self.last_scrape is not None else None,
                profile=self.config.profile,
                ready=self.ready(),
            )

    def _format_family(self) -> str:
        for sp in self.log_sources.by_source.values():
            if sp.parser.format_family:
                return sp.parser.format_family
        return ""

    def ready(self) -> bool:
        """Ready once the threads run and the first pass over the logs is in.

        A down SGLang must not make us unready: a ServiceMonitor
        would then stop scraping us, and the "SGLang is down" signal would vanish with it."""
        return self.started and self.caught_up
