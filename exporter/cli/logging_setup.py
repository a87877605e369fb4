"""Sets up the exporter's own log: stdlib `logging` to stderr, as text or as one JSON object per line."""
from __future__ import annotations

import json
import logging
import sys
import time
from typing import TextIO

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")
# what a record carries beyond the standard attributes: passed with `extra=` and kept as JSON keys
FIELDS = ("source", "reason", "state")
_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: time (RFC 3339, UTC), level, logger, message, the FIELDS a
    record was given, and the traceback as `exception` (JSON escapes its newlines: a log pipeline keeps it
    in the one record)."""

    def format(self, record: logging.LogRecord) -> str:
        t = time.gmtime(record.created)
        doc = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", t) + f".{int(record.msecs):03d}Z",
               "level": record.levelname.lower(), "logger": record.name, "message": record.getMessage()}
        for key in FIELDS:
            value = record.__dict__.get(key)
            if value is not None:
                doc[key] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False, default=str)


def configure(level: str = "info", fmt: str = "text", stream: TextIO | None = None) -> logging.Handler:
    """Send every record at `level` or above to `stream` (stderr) in `fmt`; returns the handler.

    Called once by a command that runs for long (serve, demo). Replaces a handler set by an earlier call, so
    calling it twice does not print every line twice."""
    if level not in LEVELS:
        raise ValueError(f"unknown log level {level!r} (known: {', '.join(LEVELS)})")
    if fmt not in FORMATS:
        raise ValueError(f"unknown log format {fmt!r} (known: {', '.join(FORMATS)})")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(_TEXT))
    handler.set_name("sglang-exporter")
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == "sglang-exporter"]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
