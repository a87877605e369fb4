"""Running a `Follower`: its poll loop, woken on file changes by a watchdog (inotify) observer over a changing
set of directories; without one (no inotify, watch limits) the loop only polls on its timer.
"""
from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable
from fnmatch import fnmatchcase

log = logging.getLogger(__name__)

_MAGIC = re.compile(r"[*?[]")


def _make_observer():
    from watchdog.observers import Observer

    return Observer()


_IGNORED_EVENTS = frozenset(("opened", "closed_no_write"))


def _structural_events() -> list:
    from watchdog.events import (
        DirCreatedEvent,
        DirDeletedEvent,
        DirMovedEvent,
        FileCreatedEvent,
        FileDeletedEvent,
        FileMovedEvent,
    )
    return [FileCreatedEvent, FileDeletedEvent, FileMovedEvent, DirCreatedEvent, DirDeletedEvent, DirMovedEvent]


class Watcher:
    """watchdog observer over a changing set of directories; sets ``wake`` on relevant changes."""

    def __init__(self, wake: threading.Event, appends: bool = True) -> None:
        self.wake = wake
        self.appends = appends      # False: structural changes only (create, move, delete), no per-write events
        self.watches: dict[tuple[str, bool], object] = {}
        self.patterns: tuple[str, ...] = ()
        self.names: frozenset[str] = frozenset()
        self.observer = None
        self.mode = "poll"
        try:
            from watchdog.events import FileSystemEventHandler

            watcher = self

            class _Handler(FileSystemEventHandler):
                def on_any_event(self, event) -> None:
                    watcher._event(event)

            self.handler = _Handler()
            self.observer = _make_observer()
            self.observer.start()
            self.mode = "inotify"
        except Exception as exc:  # noqa: BLE001 - any failure here means: poll
            log.warning("file change notification unavailable (%s); polling instead", exc)
            self.observer = None

    def _event(self, event) -> None:
        if event.event_type in _IGNORED_EVENTS:
            return
        for p in (event.src_path, getattr(event, "dest_path", "")):
            if not p:
                continue
            if isinstance(p, bytes):
                p = os.fsdecode(p)
            if p in self.names or any(fnmatchcase(p, pat) for pat in self.patterns):
                self.wake.set()
                return

    def update(self, dirs: dict[str, bool], patterns: tuple[str, ...], names: frozenset[str]) -> None:
        self.patterns, self.names = patterns, names
        if self.observer is None:
            return
        wanted = set(dirs.items())
        for key in list(self.watches):
            if key not in wanted:
                try:
                    self.observer.unschedule(self.watches.pop(key))
                except Exception as exc:  # noqa: BLE001 - the directory may be gone already
                    log.debug("unwatch %s: %s", key[0], exc)
        for key in wanted:
            if key in self.watches:
                continue
            try:
                self.watches[key] = self.observer.schedule(self.handler, key[0], recursive=key[1],
                                                           event_filter=None if self.appends else _structural_events())
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            except Exception as exc:  # noqa: BLE001 - inotify limits: fall back to polling
                log.warning("cannot watch %s (%s); polling instead", key[0], exc)
                self.stop()
                self.mode = "poll"
                return

    def stop(self) -> None:
        obs, self.observer = self.observer, None
        if obs is not None:
            try:
                obs.stop()
                obs.join(timeout=5)
            except Exception as exc:  # noqa: BLE001 - stopping is best effort
                log.debug("stopping the file observer: %s", exc)


def run_loop(follower, on_lines: Callable[[list], None], stop: threading.Event, poll_interval: float,
             min_interval: float, wake_on_append: bool, blocks: bool) -> None:
    """`Follower.run` (its docstring says what it does)."""
    wake = threading.Event()
    watcher = follower._watcher = Watcher(wake, appends=wake_on_append)
    follower.mode = watcher.mode
    refresh_watches = True
    had_lines = False
    try:
        while not stop.is_set() and not follower.closed:
            polled_at = time.monotonic()
            lines = follower.poll_blocks() if blocks else follower.poll()
            if lines or had_lines:
                # one empty call when the logs go quiet: the consumer emits what it holds (a traceback
                # is often the last thing a crashing server prints; nothing follows to complete it)
                try:
                    on_lines(lines)
                except Exception:
                    log.exception("log line consumer failed")
            had_lines = bool(lines)
            if follower.backlog:
                continue
            if refresh_watches:      # directories only change on rotation or new files: the timer catches them
                watcher.update(watch_dirs(follower), *_interesting(follower))
                follower.mode = watcher.mode
            deadline = polled_at + poll_interval
            woken = False
            while not stop.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                if wake.wait(min(remaining, 0.5)):
                    woken = True
                    break
            wake.clear()
            refresh_watches = not woken
            if woken:
                stop.wait(max(0.0, polled_at + min_interval - time.monotonic()))
    finally:
        watcher.stop()
        follower._watcher = None


def watch_dirs(follower) -> dict[str, bool]:
    """Directories whose changes should wake the loop, each with whether to watch it recursively."""
    dirs: dict[str, bool] = {}
    for pat in follower.patterns:
        d = os.path.dirname(os.path.abspath(pat))
        recursive = False
        while _MAGIC.search(d):
            d = os.path.dirname(d)
            recursive = True
        if os.path.isdir(d):
            dirs[d] = dirs.get(d, False) or recursive
    for t in follower.tails.values():
        if t.cur is not None:
            real = os.path.dirname(os.path.realpath(t.path))
            if real not in dirs and os.path.isdir(real):
                dirs[real] = False
    return dirs

def _interesting(follower) -> tuple[tuple[str, ...], frozenset[str]]:
    names = set()
    for t in follower.tails.values():
        names.add(os.path.abspath(t.path))
        if t.cur is not None:
            names.add(os.path.realpath(t.path))
    return tuple(os.path.abspath(p) for p in follower.patterns), frozenset(names)
