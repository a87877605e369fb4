"""The live sidecar: follows log files and scrapes SGLang in background threads, feeding one Engine.

Start-up (`prepare`, in startup.py) happens before the HTTP listener opens: every log is joined at a fixed
point and what came before it that matters (the latest SGLang start-up, or what was written while the sidecar
was down) is replayed on the log's own clock, so history lands where it happened and never raises a page.
After that, time is arrival time from an injectable clock (by default one that no step of the system clock
moves, steady_clock.py). Everything the faces show is taken as a consistent `View` under one lock, so a scrape
of our /metrics never sees half an update. Read positions and counters are saved to a positions file
(checkpoint.py) so a restarted sidecar resumes where it stopped.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from exporter import __version__
from exporter.config import Config
from exporter.engine import Engine, Snapshot
from exporter.ingest.follower import Follower
from exporter.ingest.pipeline import Sources as LogSources
from exporter.ingest.scrape import metrics_url, scrape
from exporter.sidecar import checkpoint, startup
from exporter.sidecar.source_health import SourceHealth, SourceStatus, log_source_problem
from exporter.sidecar.startup import LOG_POLL_BUDGET  # noqa: F401 - re-exported (tests/test_memory.py)
from exporter.sidecar.steady_clock import SteadyClock
from exporter.signals.judgement import retractions_per_minute
from exporter.web.recent import Recent

log = logging.getLogger(__name__)

SGLANG_SOURCE = "sglang_metrics"
WORKER_RESTART_DELAY = 1.0     # seconds before a worker loop that failed runs again
WORKERS = ("follow", "scrape", "evaluate", "positions")
FOLLOW_STUCK_SECONDS = 60.0    # a follower that finished no poll for this long is stuck (it polls every 0.25 s)
NOT_YET = "not scraped yet"


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
    log_sources: dict                 # path -> {lines_read, rotations, truncations, lines_cut, up, stale, ...}
    unparsed: dict
    events_total: dict
    scrape: dict | None               # SGLang's /metrics, None if not configured: {success, duration, error} of
                                      # the last scrape; up, stale, stuck, last_success_age (seconds or None);
                                      # rejected {reason: samples dropped}; internal_errors (see Sidecar)
    version: str = __version__
    profile: str = ""
    ready: bool = False
    worker_errors: dict = field(default_factory=dict)   # worker name -> unexpected errors caught
    extra: dict = field(default_factory=dict)
    server: dict = field(default_factory=dict)          # ServerState.facts(): release, layout, restarts, GPUs
    sources: dict[str, SourceStatus] = field(default_factory=dict)   # source -> up, reason, last error


class Sidecar:
    def __init__(self, config: Config, clock: Callable[[], float] | None = None):
        self.config = config
        # arrival time, immune to steps of the system clock (steady_clock.py); tests inject their own
        self.clock = clock if clock is not None else SteadyClock()
        self._steady = self.clock if isinstance(self.clock, SteadyClock) else None
        self.lock = threading.Lock()
        self.engine = Engine(config, log_fed=bool(config.log_files))
        self.log_sources = LogSources()
        self.follower: Follower | None = None
        self.last_scrape: dict | None = {
            "success": False, "duration": 0.0, "error": NOT_YET, "up": False, "stale": False,
            "stuck": False, "last_success_age": None, "rejected": Counter(), "internal_errors": 0,
        } if config.sglang_url else None
        self._scrape_ok_t: float | None = None    # clock time of the last good scrape
        self._scrape_done_t = self.clock()        # ... of the last scrape that finished, good or not
        self.health = SourceHealth()              # every source's up/down with its reason; logs the changes
        self.recent = Recent()                    # the status page's last hour, sampled at evaluation time
        self.scrape_tried = not config.sglang_url
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.started = False
        self.prepared = False
        # every worker's count is exported from 0, so a rate over it is defined before the first error
        self.worker_errors: dict[str, int] = dict.fromkeys(WORKERS, 0)
        self.heartbeat: dict[str, float] = {}      # worker -> monotonic time of its last completed iteration
        self._next_save = 0.0
        self._saved: checkpoint.Checkpoint | None = None   # the last Checkpoint written (or loaded)
        self._save_problem: str | None = None    # why the last save failed (warned once per change of it)
        self.positions_lock: int | None = None   # the positions file's lock (checkpoint.claim), held until shutdown
        self._claimed = False

    def claim_positions(self) -> None:
        """Take the positions file for this sidecar (checkpoint.claim); raises checkpoint.PositionsInUse,
        naming the holder, when another sidecar has it. `serve` calls it before binding its port."""
        if self.config.positions_file and not self._claimed:
            self.positions_lock = checkpoint.claim(self.config.positions_file)
            self._claimed = True

    # ------------------------------------------------------------------ start-up
    def prepare(self) -> None:
        """Join every log at a fixed point and replay its history; call before serving HTTP (startup.py).
        After this returns, nothing written to a log can be taken for old content and skipped: a line is
        either history (replayed here, on the log's clock) or read by the follower later."""
        self.claim_positions()
        if self.config.log_files:
            startup.join_and_replay(self)
            with self.lock:                # a missing log is said now, in the sidecar's log, not at the first scrape
                self._update_log_up(self.clock())
        self.prepared = True

    # ------------------------------------------------------------------ feeding
    def on_lines(self, blocks) -> None:
        """Follower output (`Block`s of lines); an empty list means the logs are idle."""
        items = self.log_sources.feed_blocks(blocks)
        if not blocks:
            items += self.log_sources.flush()     # idle: emit pending multi-line records now
        now = self.clock()
        with self.lock:
            self.engine.ingest_items(items, now)
            self.engine.state.format_family = self._format_family()   # it narrows the release (flags.py)
            self._update_log_up(now)
        self.save_positions()

    def save_positions(self, force: bool = False) -> None:
        """Write the positions file when it is due (every positions_interval seconds) or `force`d.

        Called from the follower's thread after the lines it handed out were ingested, so the positions and
        the counters in the file describe the same instant."""
        path = self.config.positions_file
        if not path or self.follower is None:
            return
        now = time.monotonic()
        if not force and now < self._next_save:
            return
        self._next_save = now + self.config.positions_interval
        with self.lock:
            cp = checkpoint.Checkpoint(self.follower.positions(), self.engine.state.counters(), self.clock(),
                                       list(self.config.log_files))
        if self._saved is not None and (cp.positions, cp.counters) == (self._saved.positions, self._saved.counters):
            return
        try:
            checkpoint.save(path, cp)
            self._saved = cp
        except OSError as exc:
            self._count_error("positions")
            self._save_failed(logging.WARNING, f"cannot write ({exc.strerror or exc})")
        except ValueError as exc:     # positions we would refuse to read back: a fault of ours, not the disk's
            self._count_error("positions")
            self._save_failed(logging.ERROR, f"not written, the positions are invalid ({exc})")
        else:
            if self._save_problem is not None:
                log.info("positions file %s: written again", path)
                self._save_problem = None

    def _save_failed(self, level: int, problem: str) -> None:
        """A failed save is logged once per change of its reason, not at every attempt (one every
        positions_interval: ~17,000 identical lines a day); each one is counted in worker_errors."""
        if problem != self._save_problem:
            log.log(level, "positions file %s: %s; logged again only when this changes", self.config.positions_file,
                    problem)
            self._save_problem = problem

    def _update_log_up(self, now: float) -> None:
        f = self.follower
        if f is not None:
            stuck = self._follow_stuck()
            # a copy: the follow thread adds and drops paths (a glob's new match, a let-go copy) as it polls,
            # outside our lock, and a dict must not change size while it is iterated
            stats = dict(f.stats)
            self.engine.set_sources(log_up=not stuck and any(s.up for s in stats.values()))
            stuck_for = time.monotonic() - f.last_poll if stuck and f.last_poll is not None else None
            for path, s in stats.items():
                problem = log_source_problem(path, s.up, s.stale, s.rotations, s.last_error, stuck_for)
                self.health.observe(path, "log", f"log source {path}", s.up and not stuck, problem, now)
            self.health.forget("log", stats)

    def _follow_stuck(self) -> bool:
        """The follow thread runs but has not finished a poll for far longer than its interval: its sources read
        as down, not frozen up, and /healthz fails."""
        f = self.follower
        if not self.started or f is None or f.last_poll is None:
            return False
        return time.monotonic() - f.last_poll > max(FOLLOW_STUCK_SECONDS, 40 * self.config.poll_interval)

    def poll_logs_once(self) -> None:
        """One follower pass (tests and the demo call this instead of running threads)."""
        if not self.prepared:
            self.prepare()
        if self.follower is not None:
            self.on_lines(self.follower.poll_blocks())

    def scrape_once(self) -> None:
        """One scrape of SGLang's /metrics into the engine. Never raises: a failure is recorded with its reason
        (scrape() already turns whatever the peer does into one; a fault of ours folding the result in is
        counted as an internal error)."""
        if not self.config.sglang_url:
            return
        res = scrape(metrics_url(self.config.sglang_url), self.config.scrape_timeout,
                     self.config.scrape_max_bytes)
        now = self.clock()
        with self.lock:
            last = self.last_scrape
            assert last is not None                  # kept whenever sglang_url is set
            last["rejected"].update(res.rejected)
            if res.success:
                try:
                    self.engine.ingest_scrape(res, now)
                except Exception as exc:  # noqa: BLE001 - a bug of ours must not stop scraping
                    log.exception("folding in a scrape of SGLang's /metrics failed")
                    last["internal_errors"] += 1
                    self._count_error("scrape")
                    res.success, res.error = False, f"internal: {type(exc).__name__}: {exc}"[:200]
                else:
                    self._scrape_ok_t = now
            last.update(success=res.success, duration=res.duration, error=res.error)
            self._scrape_done_t = now
            self._update_metrics_up(now)
        self.scrape_tried = True

    def _update_metrics_up(self, now: float) -> None:
        """Judge SGLang's /metrics from the age of its last good scrape, not from the last result alone: up
        while the last scrape succeeded, less than `stale_after` ago, and some scrape finished within 2 x
        (interval + timeout) (a stuck scraper reads as down, not as frozen-up). Past `stale_after` what only
        /metrics told us is dropped from state. Logs one line per change of up, with the reason."""
        last = self.last_scrape
        if last is None:
            return
        cfg = self.config
        age = None if self._scrape_ok_t is None else max(0.0, now - self._scrape_ok_t)
        stale = age is not None and age > cfg.stale_after
        stuck = now - self._scrape_done_t > 2 * (cfg.scrape_interval + cfg.scrape_timeout)
        up = last["success"] and age is not None and not stale and not stuck
        if stale and not last["stale"]:
            self.engine.state.forget_scrape()
        last.update(up=up, stale=stale, stuck=stuck, last_success_age=age)
        self.engine.set_sources(metrics_up=up)
        if last["error"] == NOT_YET and not stuck:
            return                                # nothing to judge before the first scrape finished
        why = "" if up else "stuck: no scrape finished for %.0f s" % (now - self._scrape_done_t) if stuck \
            else last["error"] if not last["success"] else "stale: no good scrape for %.0f s" % (age or 0)
        self.health.observe(SGLANG_SOURCE, "metrics", f"SGLang's /metrics at {cfg.sglang_url}", up, why, now)

    # ------------------------------------------------------------------ threads
    def start(self) -> None:
        if not self.prepared:
            self.prepare()
        if self.follower is not None:
            # appends are picked up by the poll timer; inotify wakes us for rotations (see Follower.run)
            follower = self.follower
            self._spawn("follow", lambda: follower.run(self.on_lines, self.stop, self.config.poll_interval,
                                                       wake_on_append=False, blocks=True))
        if self.config.sglang_url:
            self._spawn("scrape", self._scrape_loop)
        self._spawn("evaluate", self._evaluate_loop)
        self.started = True

    def _spawn(self, name: str, loop: Callable[[], None]) -> None:
        t = threading.Thread(target=self._supervised, args=(name, loop), name=name, daemon=True)
        self.heartbeat[name] = time.monotonic()
        self.threads.append(t)
        t.start()

    def _supervised(self, name: str, loop: Callable[[], None]) -> None:
        """Run a worker loop until stop; whatever escapes it is logged, counted, and the loop runs again."""
        while not self.stop.is_set():
            try:
                loop()
                return
            except Exception:
                self._count_error(name)
                log.exception("worker %s failed; restarting it in %.0f s", name, WORKER_RESTART_DELAY)
                self.stop.wait(WORKER_RESTART_DELAY)

    def _count_error(self, worker: str) -> None:
        self.worker_errors[worker] = self.worker_errors.get(worker, 0) + 1

    def _scrape_loop(self) -> None:
        while not self.stop.is_set():
            try:
                self.scrape_once()
            except Exception:  # noqa: BLE001 - the loop outlives any fault; `stuck` shows if it keeps failing
                log.exception("scrape loop: unexpected error")
                with self.lock:
                    assert self.last_scrape is not None      # this loop runs only with sglang_url set
                    self.last_scrape["internal_errors"] += 1
                self._count_error("scrape")
            self.heartbeat["scrape"] = time.monotonic()
            self.stop.wait(self.config.scrape_interval)

    def _evaluate_loop(self) -> None:
        # keeps signal history (since / intervals) moving even when nobody scrapes us
        while not self.stop.wait(self.config.evaluate_interval):
            self.evaluate_once()
            self.heartbeat["evaluate"] = time.monotonic()

    def evaluate_once(self) -> None:
        """One evaluation at the clock's now, and its sample of the status page's last hour."""
        with self.lock:
            now = self.clock()
            self._update_metrics_up(now)
            self.engine.evaluate(now)
            self.recent.record(self.engine.state, now, self.engine.params)
        if self._steady is not None:
            self._steady.tell_step()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stops the workers within `timeout` seconds in all (one deadline, not one per thread, so a stop
        stays inside a pod's termination grace however many workers are slow), then saves positions."""
        self.stop.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if self.follower is not None:
            if not any(t.name == "follow" and t.is_alive() for t in self.threads):
                self.save_positions(force=True)
            self.follower.close()
        checkpoint.release(self.positions_lock)
        self.positions_lock = None

    def healthy(self) -> tuple[bool, str]:
        """Whether every worker runs: False and one word saying which (`<worker>_stopped`, `follow_stuck`,
        `evaluate_stuck`) when a thread is gone or stuck, so /healthz fails and Kubernetes restarts the container."""
        if not self.started:
            return True, "ok"
        for t in self.threads:
            if not t.is_alive() and not self.stop.is_set():
                return False, f"{t.name}_stopped"
        if self._follow_stuck():
            return False, "follow_stuck"
        beat = self.heartbeat.get("evaluate")
        limit = max(60.0, 10 * self.config.evaluate_interval)
        if beat is not None and time.monotonic() - beat > limit:
            return False, "evaluate_stuck"
        return True, "ok"

    # ------------------------------------------------------------------ reading
    def view(self) -> View:
        now = self.clock()
        with self.lock:
            self._update_log_up(now)
            self._update_metrics_up(now)
            snap = self.engine.evaluate(now)
            st = self.engine.state
            logs = {}
            if self.follower is not None:
                stuck = self._follow_stuck()
                for path, s in dict(self.follower.stats).items():     # (a copy: see _update_log_up)
                    logs[path] = {"lines_read": s.lines_read, "rotations": s.rotations,
                                  "truncations": s.truncations, "lines_cut": s.lines_cut,
                                  "up": s.up and not stuck,
                                  "stale": s.stale, "rotated_unread": s.rotated_unread}
            return View(
                snapshot=snap,
                ranks={k: (v.queue, v.running, v.usage, v.throughput, v.cuda_graph) for k, v in st.ranks.items()},
                max_running_requests=st.memory_config.get("max_running_requests"),
                headroom_bytes=st.headroom_bytes,
                retractions_per_minute=retractions_per_minute(st, now, self.engine.params),
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
                scrape=self._scrape_view(),
                profile=self.config.profile,
                ready=self.ready(),
                worker_errors=dict(self.worker_errors),
                server=st.facts(),
                sources=self.health.snapshot(),
            )

    def recent_samples(self) -> list[tuple]:
        """The status page's charts: a copy of the last hour's samples (recent.py), taken under the lock."""
        with self.lock:
            return self.recent.samples(self.clock())

    def _scrape_view(self) -> dict | None:
        if self.last_scrape is None:
            return None
        return {**self.last_scrape, "rejected": dict(self.last_scrape["rejected"])}

    def _format_family(self) -> str:
        for sp in dict(self.log_sources.by_source).values():    # (a copy: the follow thread adds sources)
            if sp.parser.format_family:
                return sp.parser.format_family
        return ""

    def sources_down(self) -> list[str]:
        """One line per source that is down, with why (a missing log, SGLang's /metrics refused), for
        /readyz's body: readiness itself does not depend on them (see `ready`)."""
        with self.lock:
            return [f"{st.label} is down: {st.reason}" for _, st in sorted(self.health.sources.items())
                    if st.up is False]

    def ready(self) -> bool:
        """Ready once every log is joined at its position (or known missing) with its history replayed, and
        SGLang's /metrics was tried once. Nothing about traffic: a quiet SGLang must never make us unready.

        A down SGLang must not make us unready either: a ServiceMonitor would then stop scraping us, and the
        "SGLang is down" signal would vanish with it. The same holds for a missing log file (SGLang has not
        written it yet, or the path is wrong): the sidecar still serves what it knows and says what is missing,
        in its log at start-up, in /readyz's body (`sources_down`) and in the API's `sources`."""
        return self.prepared and self.scrape_tried
