"""The live sidecar: follows log files and scrapes SGLang in background threads, feeding one Engine.

Start-up (`prepare`) happens before the HTTP listener opens: every log is joined at a fixed point and what
came before it that matters (the latest SGLang start-up, or what was written while the sidecar was down) is
replayed on the log's own clock, so history lands where it happened and never raises a page. After that,
time is arrival time from an injectable clock. Everything the faces show is taken as a consistent `View`
under one lock, so a scrape of our /metrics never sees half an update. Read positions and counters are
saved to a positions file (checkpoint.py) so a restarted sidecar resumes where it stopped.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from exporter import __version__, checkpoint, readback
from exporter.catalog import SIGNALS_BY_ID
from exporter.config import Config
from exporter.engine import Engine, Snapshot
from exporter.ingest.follower import Follower
from exporter.ingest.lines import read_range
from exporter.ingest.pipeline import Sources as LogSources
from exporter.ingest.positions import FINGERPRINT_BYTES
from exporter.ingest.rotation import newest_mtime
from exporter.scrape import metrics_url, scrape

log = logging.getLogger(__name__)

SGLANG_SOURCE = "sglang_metrics"
WORKER_RESTART_DELAY = 1.0     # seconds before a worker loop that failed runs again
WORKERS = ("follow", "scrape", "evaluate", "positions")
FOLLOW_STUCK_SECONDS = 60.0    # a follower that finished no poll for this long is stuck (it polls every 0.25 s)
NOT_YET = "not scraped yet"
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


class Sidecar:
    def __init__(self, config: Config, clock=time.time):
        self.config = config
        self.clock = clock
        self.lock = threading.Lock()
        self.engine = Engine(config, log_fed=bool(config.log_files))
        self.log_sources = LogSources()
        self.follower: Follower | None = None
        self.last_scrape: dict | None = {
            "success": False, "duration": 0.0, "error": NOT_YET, "up": False, "stale": False,
            "stuck": False, "last_success_age": None, "rejected": Counter(), "internal_errors": 0,
        } if config.sglang_url else None
        self._scrape_ok_t: float | None = None    # clock time of the last good scrape
        self._scrape_done_t = clock()             # ... of the last scrape that finished, good or not
        self._scrape_logged_up: bool | None = None    # None until a scrape finished: nothing to log before
        self.scrape_tried = not config.sglang_url
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.started = False
        self.prepared = False
        # every worker's count is exported from 0, so a rate over it is defined before the first error
        self.worker_errors: dict[str, int] = dict.fromkeys(WORKERS, 0)
        self.heartbeat: dict[str, float] = {}      # worker -> monotonic time of its last completed iteration
        self._next_save = 0.0
        self._saved = None                        # the last Checkpoint written (or loaded)
        self._history_t: float | None = None      # the time given to the last replayed line

    # ------------------------------------------------------------------ start-up
    def prepare(self) -> None:
        """Join every log at a fixed point and replay its history; call before serving HTTP.

        After this returns, nothing written to a log can be taken for old content and skipped: a line is
        either history (replayed here, on the log's clock) or read by the follower later."""
        if not self.config.log_files:
            self.prepared = True
            return
        cfg = self.config
        saved = checkpoint.load(cfg.positions_file) if cfg.positions_file else None
        self._history_t = None
        start_at: dict = {}
        counted: list = []           # (path, ranges, clock offset): replayed after the saved counters are restored
        for path in _existing(cfg.log_files):
            end = readback.complete_end(path)
            if end is None:
                continue
            size, dev, ino = end
            pos = (saved.positions.get(path) if saved else None)
            if pos is not None and _same_file(pos, dev, ino):
                # resuming: the lines before our position were counted (their counts are in the file); replay
                # the start-up before it only for its facts and windows, then count from the position on
                offset = min(int(pos.get("offset", 0)), size)
                ranges = readback.history(path, offset, cfg.readback_bytes, cfg.max_line_bytes)
                clock = readback.clock_offset(path, size, self.clock()) if ranges else None
                for file, first, last in ranges:
                    self._replay(file, first, last, clock)
                continue
            if pos is not None:
                continue                  # rotated or truncated while we were down: the follower sorts it out
            if cfg.from_end:
                ranges = []
            elif cfg.from_start:
                ranges = [(path, 0, size)]
            else:
                ranges = readback.history(path, size, cfg.readback_bytes, cfg.max_line_bytes)
                if not ranges:
                    log.info("log %s: no SGLang start-up in its last %d bytes and the file is larger; joining "
                             "at the end (start-up facts unknown until SGLang prints them)", path,
                             cfg.readback_bytes)
            if ranges:
                counted.append((path, ranges, readback.clock_offset(path, size, self.clock())))
            start_at[path] = position_at(path, size, dev, ino)
        if saved is not None:
            # the facts-only replays above counted lines the saved counters already hold: those win
            with self.lock:
                self.engine.state.restore_counters(saved.counters)
        replayed: dict[str, int] = {}
        for path, ranges, offset in counted:
            for file, first, last in ranges:
                replayed[path] = replayed.get(path, 0) + self._replay(file, first, last, offset)
        positions = dict(saved.positions) if saved else {}
        positions.update(start_at)
        # every file that exists now has a position: the follower's own from-start rule only concerns files
        # that appear later (always read whole)
        # a backlog (a burst appended at once) is read LOG_POLL_BUDGET bytes per file per poll, the next poll
        # right away: what one poll reads is held as text until parsed, so this bounds memory (bench/README.md)
        self.follower = Follower(list(cfg.log_files), max_line_bytes=cfg.max_line_bytes, positions=positions,
                                 poll_budget=LOG_POLL_BUDGET, read_chunk=LOG_READ_CHUNK)
        self.follower.join()
        for path, n in replayed.items():          # lines read is lines read, whoever read them
            if path in self.follower.stats:
                self.follower.stats[path].lines_read += n
        # what was written while we were down (resumed sources) is history too: read it now, on its clock
        offsets: dict = {}
        while True:
            for block in self.follower.poll_blocks():
                if block.source not in offsets:
                    end = readback.complete_end(block.source)
                    offsets[block.source] = (readback.clock_offset(block.source, end[0], self.clock())
                                             if end else None)
                self._ingest_history(self.log_sources.feed_blocks([block]), offsets[block.source])
            if not self.follower.backlog:
                break
        with self.lock:
            self.engine.evaluate(self.clock())
        self.save_positions(force=True)
        self.prepared = True

    def _replay(self, path: str, start: int, end: int, offset: float | None) -> int:
        """Lines [start, end) of a log, through its parser, into the engine on the log's clock (`offset`
        seconds from it to real time; None: the log has no timestamps); returns how many."""
        feed = self.log_sources.feed_blocks
        lines = 0
        for block in read_range(path, start, end, self.config.max_line_bytes):
            lines += len(block.texts)
            self._ingest_history(feed([block]), offset)
        self._ingest_history(self.log_sources.flush(), offset)
        return lines

    def _ingest_history(self, items, offset) -> None:
        """Items stamped at their log time moved to real time by `offset` (never later than now, never
        before the previous item); items of a log without timestamps are placed out of every window."""
        now = self.clock()
        undated = now - HISTORY_UNDATED_AGE
        engine = self.engine
        last = self._history_t
        first_t = None
        with self.lock:
            for item in items:
                row = item.__class__ is tuple
                ts = item[2] if row else item.ts
                if ts is not None and isinstance(offset, (int, float)):
                    t = min(ts + offset, now)
                    if last is not None and t < last:
                        t = last
                    last = t
                else:
                    t = last if last is not None else undated
                if first_t is None:
                    first_t = t
                if row:
                    engine.ingest_row(item, t)
                else:
                    engine.ingest(item, t)
            if first_t is not None:
                # observation began where the history does: a rate over a short watch is taken over the span the
                # history covers, not over the instant it was read in
                seen = engine.state.observed_from
                engine.state.observed_from = first_t if seen is None else min(seen, first_t)
        self._history_t = last

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
            cp = checkpoint.Checkpoint(self.follower.positions(), self.engine.state.counters(), self.clock())
        if self._saved is not None and (cp.positions, cp.counters) == (self._saved.positions, self._saved.counters):
            return
        try:
            checkpoint.save(path, cp)
            self._saved = cp
        except OSError as exc:
            self._count_error("positions")
            log.warning("positions file %s: cannot write (%s)", path, exc.strerror or exc)
        except ValueError as exc:     # positions we would refuse to read back: a fault of ours, not the disk's
            self._count_error("positions")
            log.error("positions file %s: not written, the positions are invalid (%s)", path, exc)

    def _update_log_up(self) -> None:
        if self.follower is not None:
            alive = not self._follow_stuck()
            self.engine.set_sources(log_up=alive and any(s.up for s in self.follower.stats.values()))

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
        if up != self._scrape_logged_up and (self._scrape_logged_up is not None or last["error"] != NOT_YET):
            self._scrape_logged_up = up
            if up:
                log.info("SGLang's /metrics at %s is up", cfg.sglang_url)
            else:
                why = "scraper stuck: no scrape finished for %.0f s" % (now - self._scrape_done_t) if stuck \
                    else last["error"] if not last["success"] else "no good scrape for %.0f s" % (age or 0)
                log.warning("SGLang's /metrics at %s is down: %s", cfg.sglang_url, why)

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
                    self.last_scrape["internal_errors"] += 1
                self._count_error("scrape")
            self.heartbeat["scrape"] = time.monotonic()
            self.stop.wait(self.config.scrape_interval)

    def _evaluate_loop(self) -> None:
        # keeps signal history (since / intervals) moving even when nobody scrapes us
        while not self.stop.wait(self.config.evaluate_interval):
            with self.lock:
                now = self.clock()
                self._update_metrics_up(now)
                self.engine.evaluate(now)
            self.heartbeat["evaluate"] = time.monotonic()

    def shutdown(self, timeout: float = 5.0) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout)
        if self.follower is not None:
            if not any(t.name == "follow" and t.is_alive() for t in self.threads):
                self.save_positions(force=True)
            self.follower.close()

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
            self._update_log_up()
            self._update_metrics_up(now)
            snap = self.engine.evaluate(now)
            st = self.engine.state
            window = SIGNALS_BY_ID["retractions_frequent"].window_seconds
            logs = {}
            if self.follower is not None:
                stuck = self._follow_stuck()
                for path, s in self.follower.stats.items():
                    logs[path] = {"lines_read": s.lines_read, "rotations": s.rotations,
                                  "truncations": s.truncations, "lines_cut": s.lines_cut,
                                  "up": s.up and not stuck,
                                  "stale": s.stale, "rotated_unread": s.rotated_unread}
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
                scrape=self._scrape_view(),
                profile=self.config.profile,
                ready=self.ready(),
                worker_errors=dict(self.worker_errors),
                server=st.facts(),
            )

    def _scrape_view(self) -> dict | None:
        if self.last_scrape is None:
            return None
        return {**self.last_scrape, "rejected": dict(self.last_scrape["rejected"])}

    def _format_family(self) -> str:
        for sp in self.log_sources.by_source.values():
            if sp.parser.format_family:
                return sp.parser.format_family
        return ""

    def ready(self) -> bool:
        """Ready once every log is joined at its position (or known missing) with its history replayed, and
        SGLang's /metrics was tried once. Nothing about traffic: a quiet SGLang must never make us unready.

        A down SGLang must not make us unready either: a ServiceMonitor would then stop scraping us, and the
        "SGLang is down" signal would vanish with it."""
        return self.prepared and self.scrape_tried


HISTORY_UNDATED_AGE = 86400.0     # replayed lines without any timestamp land this far back: outside every window


def _existing(patterns) -> list[str]:
    """The files the patterns name now (globs expanded), in a stable order."""
    import glob
    out: list[str] = []
    for pat in patterns:
        paths = sorted(glob.glob(pat, recursive=True)) if any(c in pat for c in "*?[") else [pat]
        out += [p for p in paths if p not in out and os.path.isfile(p)]
    return out


def _same_file(pos: dict, dev: int, ino: int) -> bool:
    return pos.get("dev") == dev and pos.get("ino") == ino


def position_at(path: str, offset: int, dev: int, ino: int) -> dict:
    """A follower position (ingest/positions.py) that starts reading `path`, the file dev/ino, at byte
    `offset`, just after a newline: the end of the history replayed from it."""
    fp, lineno, empty = b"", 0, False
    try:
        with open(path, "rb") as fh:
            st = os.fstat(fh.fileno())
            if (st.st_dev, st.st_ino) == (dev, ino):     # else rotated since: nothing known of its head
                fp = fh.read(min(FINGERPRINT_BYTES, offset))
                lineno = _count_lines(fh, offset)
                empty = st.st_size == 0
    except OSError:
        pass
    pos = {"dev": dev, "ino": ino, "offset": offset, "lineno": lineno, "skip": False, "fp": fp.hex(),
           "fp_len": len(fp), "name": os.path.realpath(path), "draining": []}
    if empty:
        # no head to recognise a copytruncate copy by, should the file be filled and copied before it is read
        pos["copy_after_ns"] = newest_mtime(os.path.realpath(path))
    return pos


def _count_lines(fh, end: int) -> int:
    """Newlines before byte `end` (so the lines read after it keep their numbers in the file); 0 past 1 GiB,
    where counting would cost the start-up more than line numbers are worth to a sidecar."""
    if end > 1 << 30:
        return 0
    fh.seek(0)
    n = 0
    while end > 0:
        block = fh.read(min(1 << 22, end))
        if not block:
            break
        n += block.count(b"\n")
        end -= len(block)
    return n
