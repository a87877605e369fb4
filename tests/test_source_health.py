"""The exporter's own log: one line per change of a source's up state with its reason, JSON output."""
from __future__ import annotations

import io
import json
import logging

import pytest

from exporter.cli.logging_setup import configure
from exporter.sidecar.source_health import SourceHealth, log_source_problem


def test_one_line_per_change_and_the_last_error_is_kept(caplog):
    h = SourceHealth()
    with caplog.at_level(logging.INFO, logger="exporter.sidecar.source_health"):
        h.observe("m", "metrics", "SGLang's /metrics", False, "refused: connection refused", 10.0)
        h.observe("m", "metrics", "SGLang's /metrics", False, "timeout: no complete reply within 5 s", 25.0)
        h.observe("m", "metrics", "SGLang's /metrics", True, "", 40.0)
        h.observe("m", "metrics", "SGLang's /metrics", True, "", 55.0)
    assert [r.getMessage() for r in caplog.records] == [
        "SGLang's /metrics is down: refused: connection refused", "SGLang's /metrics is up"]
    assert caplog.records[0].levelname == "WARNING" and caplog.records[0].reason == "refused: connection refused"
    st = h.snapshot()["m"]
    assert (st.up, st.reason, st.since) == (True, "", 40.0)
    # the reason of the latest failure, at the time it was last seen, survives the recovery
    assert (st.last_error, st.last_error_time) == ("timeout: no complete reply within 5 s", 25.0)
    assert st.to_json("m") == {"source": "m", "kind": "metrics", "up": True, "reason": None, "since": 40.0,
                               "last_error": "timeout: no complete reply within 5 s", "last_error_time": 25.0}


def test_a_stale_log_is_an_error_but_not_down(caplog):
    h = SourceHealth()
    with caplog.at_level(logging.INFO, logger="exporter.sidecar.source_health"):
        h.observe("/l", "log", "log source /l", True, "", 1.0)
        h.observe("/l", "log", "log source /l", True, "stale: still written", 2.0)
    assert [r.getMessage() for r in caplog.records] == ["log source /l is up"]
    assert h.sources["/l"].last_error_time == 2.0 and h.sources["/l"].reason == ""


def test_log_source_problems(tmp_path):
    f = tmp_path / "a.log"
    assert log_source_problem(str(f), False, False, 0, None, None) == "missing: no such file"
    assert log_source_problem(str(f), False, False, 2, None, None).startswith("rotated: ")
    f.write_text("")
    assert log_source_problem(str(f), False, False, 0, "not a regular file", None) == "error: not a regular file"
    assert log_source_problem(str(f), True, True, 0, None, None).startswith("stale: ")
    assert log_source_problem(str(f), True, False, 0, None, None) == ""
    assert log_source_problem(str(f), True, False, 0, None, 75.0).startswith("stuck: ")


def test_json_lines_carry_the_fields_and_the_traceback():
    out = io.StringIO()
    handler = configure("debug", "json", stream=out)
    try:
        log = logging.getLogger("exporter.test")
        log.warning("source %s is down: %s", "x", "http 500\nsecond line", extra={"source": "x", "reason": "http 500"})
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log.exception("failed")
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(logging.WARNING)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2                      # a newline in a message or a traceback stays in its record
    first, second = (json.loads(line) for line in lines)
    assert first["level"] == "warning" and first["logger"] == "exporter.test"
    assert first["source"] == "x" and first["reason"] == "http 500" and first["message"].endswith("second line")
    assert "RuntimeError: boom" in second["exception"] and second["level"] == "error"


def test_configure_twice_prints_once():
    out = io.StringIO()
    configure("info", "text", stream=out)
    handler = configure("info", "text", stream=out)
    try:
        logging.getLogger("exporter.test").info("hello")
    finally:
        logging.getLogger().removeHandler(handler)
        logging.getLogger().setLevel(logging.WARNING)
    assert out.getvalue().count("hello") == 1


def test_unknown_level_or_format_is_refused():
    with pytest.raises(ValueError, match="chatty"):
        configure("chatty")
    with pytest.raises(ValueError, match="xml"):
        configure("info", "xml")
