"""A big /metrics page costs bounded memory, and scrape_timeout covers its parsing: the page is parsed as it
arrives, a long family in parts, and the deadline is checked between reads. Real HTTP on 127.0.0.1; the
memory is measured in a subprocess (resource.getrusage: its own peak RSS)."""
from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from exporter.ingest.scrape import scrape

ROOT = Path(__file__).resolve().parent.parent
MB = 1 << 20
sys.path.insert(0, str(ROOT / "bench"))
# one histogram family with many label sets (the shape that cost most: ~11 bytes of RSS per byte of page when
# it was parsed whole); the same page bench/memory_bench.py measures
from memory_bench import metrics_page as histogram_page  # noqa: E402


class Page(http.server.BaseHTTPRequestHandler):
    body = b""
    pause = 0.0          # seconds between 64 KiB pieces (a slow upstream)

    def do_GET(self):    # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        try:
            for i in range(0, len(self.body), 1 << 16):
                self.wfile.write(self.body[i:i + (1 << 16)])
                if self.pause:
                    time.sleep(self.pause)     # pacing the upstream, not waiting for a condition
        except ConnectionError:
            pass    # the scraper hung up (its deadline or byte limit, what these tests provoke): no traceback

    def log_message(self, *args):
        pass


@pytest.fixture
def upstream():
    handler = type("H", (Page,), {})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield handler, f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    finally:
        srv.shutdown()
        srv.server_close()


MEASURE = """
import json, resource, sys
from exporter.ingest.scrape import scrape
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
res = scrape(sys.argv[1], 300.0, 16 << 20)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"ok": res.success, "error": res.error, "base_kb": base, "peak_kb": peak,
                  "histograms": len(res.histograms)}))
"""


def test_a_big_page_is_parsed_in_bounded_memory(upstream):
    """A 4 MB page raises the scraper's peak RSS by a few MB (it was ~45 MB: text, then every sample of the
    family as Python objects). bench/memory_bench.py --cases page-16 gives the 16 MB figure."""
    handler, url = upstream
    handler.body = histogram_page(4 * MB)
    out = subprocess.run([sys.executable, "-c", MEASURE, url], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["ok"] and r["histograms"] == 1, r
    grown = (r["peak_kb"] - r["base_kb"]) / 1024
    assert grown < 12, f"peak RSS grew {grown:.1f} MB for a 4 MB page"


def test_the_scrape_timeout_covers_parsing(upstream):
    """The page arrives at once and its parse takes a while (measured first, as this machine parses it): with
    a third of that as the timeout, the scrape ends at the timeout, not after the parse (it was 6.2 s for a
    4 s timeout). The timeout follows the machine's speed, so the parse always outlasts it."""
    handler, url = upstream
    handler.body = histogram_page(8 * MB)
    start = time.monotonic()
    whole = scrape(url, 300.0, 16 << 20)
    took = time.monotonic() - start
    assert whole.success, whole.error
    timeout = took / 3
    start = time.monotonic()
    res = scrape(url, timeout, 16 << 20)
    elapsed = time.monotonic() - start
    assert not res.success and res.error.startswith("timeout"), res.error
    assert elapsed < timeout + 1.5, (elapsed, took)      # one 64 KiB piece's parse past the deadline at most


def _same(a, b) -> bool:
    keep = ("success", "ranks", "counters", "counter_series", "histograms", "model", "families", "rejected",
            "present", "seen")
    return all(getattr(a, k) == getattr(b, k) for k in keep)


def test_families_cut_into_parts_fold_to_the_same_result(monkeypatch):
    """Every release's exposition (tests/conformance), with bad samples in a counter and a histogram too, gives
    the same result whole and cut into parts of 1 sample: the parts add up, a bad sample in any part still
    drops its counter or histogram."""
    from exporter.ingest import scrape as scrape_module
    pages = sorted((ROOT / "tests" / "conformance" / "expositions").rglob("*.prom"))
    assert pages
    texts = [p.read_text() for p in pages]
    bad = texts[-1]
    lines = bad.splitlines(keepends=True)
    for marker in ("_bucket{", "_total{"):           # the last bucket of a histogram, the last counter sample
        i = max(i for i, ln in enumerate(lines) if ln.startswith("sglang:") and marker in ln)
        lines[i] = lines[i].rsplit(" ", 1)[0] + " NaN\n"
    bad = "".join(lines)
    assert bad != texts[-1]
    texts.append(bad)
    whole = [scrape_module.parse_exposition(t) for t in texts]
    monkeypatch.setattr(scrape_module, "FAMILY_PART", 1)
    for text, expected in zip(texts, whole):
        assert _same(scrape_module.parse_exposition(text), expected)
    assert whole[-1].rejected and whole[-1].rejected != whole[-2].rejected


def test_what_one_scrape_keeps_is_bounded_whatever_the_page():
    """Rank label sets, series of a counter and bucket bounds of a histogram past their bounds are rejected as
    too_many_series (a counter or histogram past its bound is dropped whole), so a page of many distinct
    series costs no more than a page of a few."""
    from exporter.ingest import scrape as s
    ranks = "".join(f'sglang:num_running_reqs{{tp_rank="{i}"}} 1\n' for i in range(s.MAX_SCRAPE_RANKS + 44))
    counter = "".join(f'sglang:num_requests_total{{client="c{i}"}} 1\n' for i in range(s.MAX_COUNTER_SERIES + 1))
    buckets = "".join(f'sglang:time_to_first_token_seconds_bucket{{le="{i}.5"}} {i}\n'
                      for i in range(s.MAX_BUCKETS + 1))
    res = s.parse_exposition("# TYPE sglang:num_running_reqs gauge\n" + ranks +
                             "# TYPE sglang:num_requests_total counter\n" + counter +
                             "# TYPE sglang:time_to_first_token_seconds histogram\n" + buckets)
    assert len(res.ranks) == s.MAX_SCRAPE_RANKS
    few = s.parse_exposition("# TYPE sglang:num_requests_total counter\n" + "".join(counter.splitlines(True)[:10]))
    assert few.counters["requests"] == 10                   # the same counter with few series is read
    assert "requests" not in res.counters and res.histograms == {}
    assert res.rejected["too_many_series"] == 44 + s.MAX_COUNTER_SERIES + 1 + s.MAX_BUCKETS + 1
