"""The sidecar's durable state: where each log was read up to, and the counters those lines produced.

Both are written together, atomically (write a temporary file, fsync, rename, fsync the directory), from one
instant at which every line handed out up to the positions has been counted. A sidecar killed at any point
and restarted from the file therefore resumes at the positions with the counters they belong to: every line
counted exactly once, with no counter going back. A file that is missing, corrupt, of another format or of a
newer version is a warning and a fresh start, never a crash.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field

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

    def to_bytes(self) -> bytes:
        validate_positions(self.positions)        # never write what we would refuse to read
        doc = {"format": FORMAT, "version": VERSION, "written": self.written,
               "positions": self.positions, "counters": self.counters}
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
    written = doc.get("written")
    return Checkpoint(positions, counters, float(written) if isinstance(written, (int, float)) else 0.0)


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
