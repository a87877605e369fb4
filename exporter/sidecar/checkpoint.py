"""The sidecar's durable state: where each log was read up to, and the counters those lines produced.

Both are written together, atomically (write a temporary file, fsync, rename, fsync the directory), from one
instant at which every line handed out up to the positions has been counted. A sidecar killed at any point
and restarted from the file therefore resumes at the positions with the counters they belong to: every line
counted exactly once, with no counter going back. A file that is missing, corrupt, of another format or of a
newer version is a warning and a fresh start, never a crash; so is a file written for other logs (another
sidecar's): its counters are not ours to continue.

One sidecar per positions file: `claim` takes an exclusive lock (fcntl.flock) on a lock file beside it,
`<positions file>.lock`, for the process's life, and writes the holder (pid, host, since when) into it. The
positions file itself cannot carry the lock: every save replaces it by a rename, and a lock on the replaced
file would guard nothing. The kernel drops the lock when the holder dies, even by SIGKILL.
"""
from __future__ import annotations

import fcntl
import fnmatch
import json
import logging
import os
import socket
import tempfile
import time
from dataclasses import dataclass, field

from exporter.config import ConfigError
from exporter.ingest.positions import PositionsError, validate_positions

log = logging.getLogger(__name__)

FORMAT = "sglang-exporter-positions"
VERSION = 1
MAX_BYTES = 4 << 20          # a positions file is a few KiB; anything larger is not ours


class CheckpointError(ValueError):
    """The positions file exists but cannot be used; the message says why."""


@dataclass
class Checkpoint:
    positions: dict = field(default_factory=dict)     # the Follower's positions() (per path)
    counters: dict = field(default_factory=dict)      # ServerState.counters()
    written: float = 0.0                              # wall-clock time of writing (for the operator)
    logs: list | None = None                          # the --log-file patterns it was written for (None: a file
                                                      # from before they were recorded)

    def to_bytes(self) -> bytes:
        validate_positions(self.positions)        # never write what we would refuse to read
        doc = {"format": FORMAT, "version": VERSION, "written": self.written,
               "positions": self.positions, "counters": self.counters}
        if self.logs is not None:
            doc["logs"] = self.logs
        return (json.dumps(doc, sort_keys=True, indent=1) + "\n").encode()


def parse(data: bytes, where: str) -> Checkpoint:
    """A Checkpoint from the file's bytes; CheckpointError naming `where` when it is not one of ours."""
    if len(data) > MAX_BYTES:
        raise CheckpointError(f"{where}: {len(data)} bytes, larger than a positions file can be")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{where}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CheckpointError(f"{where}: not an sglang-exporter positions file (format key missing or wrong)")
    if doc.get("version") != VERSION:
        raise CheckpointError(f"{where}: version {doc.get('version')!r}; this exporter reads version {VERSION}")
    positions, counters = doc.get("positions"), doc.get("counters")
    if not isinstance(positions, dict) or not isinstance(counters, dict):
        raise CheckpointError(f"{where}: positions and counters must be mappings")
    try:
        validate_positions(positions)
    except PositionsError as exc:
        raise CheckpointError(f"{where}: {exc}") from None
    written, logs = doc.get("written"), doc.get("logs")
    if logs is not None and not (isinstance(logs, list) and all(isinstance(x, str) for x in logs)):
        raise CheckpointError(f"{where}: logs must be a list of paths")
    return Checkpoint(positions, counters, float(written) if isinstance(written, (int, float)) else 0.0, logs)


def written_for(cp: Checkpoint, log_files) -> str | None:
    """Why `cp` was not written for a sidecar following `log_files` (its --log-file patterns); None when it
    was. A file that names its logs must name the same ones; an older file must hold positions only of files
    the patterns match. Either way the counters describe those logs and no others."""
    ours = sorted(set(log_files))
    if cp.logs is not None:
        return None if sorted(set(cp.logs)) == ours else f"written for the logs {', '.join(cp.logs) or 'none'}"
    foreign = [p for p in cp.positions if not any(p == pat or fnmatch.fnmatchcase(p, pat) for pat in ours)]
    return f"written for the logs {', '.join(sorted(foreign))}" if foreign else None


def _temp_prefix(path: str) -> str:
    return f".{os.path.basename(path)}.tmp-"


def remove_leftovers(path: str) -> int:
    """Delete temporary files a save of `path` left behind when the process was killed mid-write (called at
    start, before any save of ours is in flight); returns how many went."""
    directory, prefix = os.path.dirname(os.path.abspath(path)), _temp_prefix(path)
    removed = 0
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    except OSError:
        return 0
    for name in names:
        try:
            os.unlink(os.path.join(directory, name))
            removed += 1
        except OSError:
            pass
    return removed


class PositionsInUse(ConfigError):
    """Another live process holds the positions file's lock; the message names it (exit 2 from `serve`)."""


def lock_path(path: str) -> str:
    return path + ".lock"


def claim(path: str) -> int | None:
    """Take positions file `path` for this process: an exclusive, non-blocking flock on its lock file, held
    until the returned descriptor is closed (`release`) or the process ends. Raises PositionsInUse naming the
    holder when another process has it; None (after a warning) when the lock file cannot be made, the same
    directory problem that keeps the positions from being saved (warned at the first save)."""
    where = lock_path(path)
    try:
        fd = os.open(where, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        log.warning("positions file %s: cannot create its lock file %s (%s); running without the lock",
                    path, where, exc.strerror or exc)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _holder(fd)
        os.close(fd)
        if isinstance(exc, BlockingIOError):
            raise PositionsInUse(f"positions file {path}: in use by another sidecar ({holder}; lock "
                                 f"{where}); give each sidecar its own --positions-file") from None
        log.warning("positions file %s: cannot lock %s (%s); running without the lock", path, where,
                    exc.strerror or exc)
        return None
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    me = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since}).encode() + b"\n"
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, me, 0)
    except OSError:
        pass                      # the lock holds without the note; a second sidecar names no holder
    return fd


def release(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)          # closing the last descriptor drops the flock
        except OSError:
            pass


def _holder(fd: int) -> str:
    """Who holds the lock, as its holder wrote it: "pid 12, host h, since 2026-01-01T00:00:00Z"."""
    try:
        doc = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
        return f"pid {int(doc['pid'])}, host {doc['host']}, since {doc['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"


def load(path: str) -> Checkpoint | None:
    """The checkpoint at `path`; None (after one warning) when there is none or it cannot be used. Temporary
    files of a save cut short by a kill are removed first."""
    remove_leftovers(path)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("positions file %s: cannot read (%s); starting fresh", path, exc.strerror or exc)
        return None
    try:
        return parse(data, path)
    except CheckpointError as exc:
        log.warning("%s; starting fresh", exc)
        return None


def save(path: str, cp: Checkpoint) -> None:
    """Replace the file at `path` by `cp` atomically: a reader (or a crash) sees the old or the new file whole."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(cp.to_bytes())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)          # the rename itself survives a power cut
    except OSError:
        pass
    finally:
        os.close(dfd)
