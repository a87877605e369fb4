"""Logs written to a terminal: uvicorn colours its level names and status codes when its output is a terminal
(`docker run -t`, `tty: true` in a pod, then `docker logs` / `kubectl logs`), tqdm moves the cursor. The
control sequences are dropped from each line's text, in a plain file, a CRI file and a docker json-file, so
such a log reads as the same log without them."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.ingest.containers import ContainerDecoder
from exporter.ingest.lines import _Splitter, expand, strip_ansi

ROOT = Path(__file__).resolve().parents[1]
GREEN, RESET = "\x1b[32m", "\x1b[0m"
ACCESS = '[2026-11-27 12:00:01] INFO:     127.0.0.1:56712 - "POST /generate HTTP/1.1" 500 Internal Server Error'


def coloured(line: str) -> str:
    """uvicorn's colours on a terminal: the level name, and the status of an access line."""
    line = line.replace("] INFO:", f"] {GREEN}INFO{RESET}:", 1)
    return re.sub(r'" (\d{3} [A-Za-z ]+)$', lambda m: f'" {GREEN}{m.group(1)}{RESET}', line)


def test_strip_ansi():
    assert strip_ansi(coloured(ACCESS)) == ACCESS
    assert strip_ansi("\x1b[2K\x1b[1A100%|##########| 3/3") == "100%|##########| 3/3"    # tqdm's cursor moves
    assert strip_ansi("no escape") == "no escape"


@pytest.mark.parametrize("max_line_bytes", [1 << 20, 90], ids=["whole-chunk", "line-by-line"])
def test_the_splitter_drops_them_on_every_path(max_line_bytes):
    split = _Splitter("s", max_line_bytes)
    out: list = []
    data = (coloured(ACCESS) + "\n" + GREEN + "short" + RESET + "\n").encode()
    split.feed(data[:20], out)                      # a line finished in a later chunk
    split.feed(data[20:], out)
    texts = [ln.text for ln in expand(out)]
    assert texts[1] == "short" and "\x1b" not in "".join(texts)
    # (the limit counts the bytes as written, escapes included: a cut line keeps less of its text)
    assert texts[0] == ACCESS if max_line_bytes > len(data) else ACCESS.startswith(texts[0]) and texts[0]


def test_docker_json_file_of_a_terminal():
    line = json.dumps({"log": coloured(ACCESS) + "\n", "stream": "stdout", "time": "2026-11-27T12:00:01.5Z"})
    assert "\\u001b" in line                        # JSON escapes the control character
    rec = ContainerDecoder().feed(1, line)
    assert rec is not None and rec.text == ACCESS


def test_a_coloured_log_reads_as_the_plain_one(tmp_path):
    """The access lines' 5xx count is what the error signals read: colours must not hide it."""
    body = "\n".join([ACCESS] * 40 + ['[2026-11-27 12:00:02] INFO:     127.0.0.1:56712 - "POST /generate HTTP/1.1" '
                                      "200 OK"] * 10) + "\n"
    plain, tty = tmp_path / "plain.log", tmp_path / "tty.log"
    plain.write_text(body)
    tty.write_text("\n".join(coloured(ln) for ln in body.splitlines()) + "\n")
    reports = []
    for path in (plain, tty):
        proc = subprocess.run([sys.executable, "-m", "exporter", "analyze", str(path), "--format", "json", "-q"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        reports.append(json.loads(proc.stdout))
    assert reports[1]["lines"] == reports[0]["lines"] and reports[0]["lines"]["recognised"] == 50
