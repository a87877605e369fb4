"""Waking the follower's loop on file changes: a watchdog (inotify) observer over a changing set of
directories. Used by `Follower.run`; without it (no inotify, watch limits) the loop only polls on its timer.
"""
from __future__ import annotations

import logging
import os
import threading
from fnmatch import fnmatchcase

log = logging.getLogger(__name__)


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
