"""Conformance: log files and /metrics expositions produced by SGLang releases' own logging and metrics code
(tests/conformance/run.py made them from the wheels; see its docstring for how close to each release's code it
runs) for single GPU, TP, DP, DP attention, PP and PD layouts. The parser, `analyze`, the scraper and a
metrics-only sidecar must read every one of them.

The chosen values the runner fed in are known here: at step s (0, 1, 2) a printing rank of DP rank d logs
`#running-req: 32+s`, `#queue-req: 120+10s+7d`, `token usage` 0.45/0.46/0.46; its collector gets running 34,
queue 140+7d, usage 0.46, and 3 retracted requests (4 on the older retraction gauge).
"""
from __future__ import annotations

import http.server
import re
import threading
from pathlib import Path

import pytest

from exporter import releases
from exporter.config import Config
from exporter.ingest.pipeline import SourceParser, iter_file_events
from exporter.ingest.scrape import parse_exposition
from exporter.report.analyze import analyze
from exporter.sidecar.run import Sidecar

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LOGS = sorted(FIXTURES.glob("*/*.log"))
PROMS = sorted(FIXTURES.glob("*/*.prom"))
LAYOUTS = ("single", "tp", "dp", "dp_attention", "pp", "pd_prefill", "pd_decode")


def _id(path: Path) -> str:
    return f"{path.parent.name}-{path.stem}"


def _dp_ranks(layout: str) -> int:
    return 2 if layout in ("dp", "dp_attention") else 1


def test_fixtures_cover_eight_releases_in_four_layouts_each():
    by_release: dict[str, set] = {}
    for p in LOGS:
        by_release.setdefault(p.parent.name, set()).add(p.stem)
    full = [v for v, layouts in by_release.items() if len(layouts) >= 4]
    assert len(full) >= 8, by_release
    keys = sorted(releases.version_key(v) for v in full)
    assert keys[0][:2] == (0, 3) and releases.version_key(releases.newest()) in keys
    assert all(set(LAYOUTS) <= layouts for layouts in by_release.values())


@pytest.mark.parametrize("path", LOGS, ids=_id)
def test_parser_reads_every_line(path):
    stats = SourceParser(str(path))
    events = list(iter_file_events(str(path), stats=stats))
    text = path.read_text().splitlines()
    assert stats.parser.unparsed == {} and stats.parser.recognised == len(text), stats.parser.unparsed
    kinds = {e.kind for e in events}
    layout = path.stem
    expected = {"memory_config", "server_ready"}
    if layout != "pd_decode":
        expected.add("prefill_batch")
    if layout != "pd_prefill":
        expected |= {"decode_batch", "retraction"}
    assert expected <= kinds, kinds

    decode = [e for e in events if e.kind == "decode_batch"]
    if decode:
        assert {e.fields["running_req"] for e in decode} == {32, 33, 34}
        assert {e.fields["token_usage"] for e in decode} == {0.45, 0.46}
        queues = {e.fields["queue_req"] for e in decode}
        assert queues == {120 + 10 * s + 7 * d for s in range(3) for d in range(_dp_ranks(layout))}
    retractions = [e for e in events if e.kind == "retraction"]
    assert all(e.fields["retracted_reqs"] == 3 for e in retractions)


@pytest.mark.parametrize("path", LOGS, ids=_id)
def test_ranks_come_from_the_release_prefix(path):
    events = [e for e in iter_file_events(str(path)) if e.kind in ("prefill_batch", "decode_batch")]
    version, layout = path.parent.name, path.stem
    dps = {e.rank["dp"] for e in events}
    # SGLang 0.3.0-0.3.3 print no DP tag from the scheduler (the DP controller's workers tagged themselves)
    if layout in ("dp", "dp_attention") and releases.version_key(version) >= (0, 3, 4):
        assert dps == {0, 1}
    if layout == "pp" and releases.version_key(version) >= (0, 4, 7):
        assert {e.rank["pp"] for e in events} == {0, 1}
    if layout == "single" and releases.version_key(version) >= (0, 4, 7):
        assert {e.rank["tp"] for e in events} == {None}      # single-GPU 0.4.7+: no rank tag at all


@pytest.mark.parametrize("path", [p for p in LOGS if p.stem in ("single", "dp", "pd_decode")], ids=_id)
def test_analyze_reports_on_every_release(path):
    report = analyze([str(path)], Config(), progress=False)
    assert report["lines"]["read"] == report["lines"]["recognised"] > 0
    assert report["startup"]["memory_config"]["max_total_num_tokens"] == 200000
    assert report["records"].get("decode_batch", 0) == (0 if path.stem == "pd_prefill" else 3 * _dp_ranks(path.stem))
    assert report["verdict"] in ("healthy", "problems")


def _retraction_family(version: str) -> str | None:
    fams = {f.short for f in releases.metric_families(version).values()}
    if "num_retracted_requests" in fams or "num_retracted_requests_total" in fams:
        return "counter"
    return "gauge" if "total_retracted_reqs" in fams else None


@pytest.mark.parametrize("path", PROMS, ids=_id)
def test_scraper_reads_the_release_exposition(path):
    res = parse_exposition(path.read_text())
    version, layout = path.parent.name, path.stem
    assert res.success and res.model == "conformance/model"
    printing = {k: v for k, v in res.ranks.items() if v.get("queue") is not None}
    assert printing, res.ranks
    for (dp, _tp, _pp), vals in printing.items():
        assert vals["running"] == 34 and vals["usage"] == 0.46
        assert vals["queue"] == 140 + 7 * (dp or 0)
    if layout in ("dp", "dp_attention"):
        assert {dp for dp, _, _ in printing} == {0, 1}
    ranks = len(res.ranks)
    kind = _retraction_family(version)
    if kind == "counter":
        assert res.counters["retracted_requests"] == 3 * ranks
    elif kind == "gauge":
        assert res.counters["retracted_requests"] == 4 * ranks


def test_every_release_with_a_collector_has_an_exposition():
    for log in LOGS:
        has_collector = bool(releases.metric_families(log.parent.name))
        assert log.with_suffix(".prom").exists() == has_collector, log


class _Metrics(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self):       # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *a):
        pass


@pytest.mark.parametrize("path", [p for p in PROMS if p.stem in ("single", "dp_attention")], ids=_id)
def test_metrics_only_sidecar_serves_the_release_values(path):
    handler = type("Handler", (_Metrics,), {"body": path.read_bytes()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        sidecar = Sidecar(Config(sglang_url=url, scrape_timeout=5.0), clock=lambda: 1_764_062_300.0)
        sidecar.scrape_once()
        assert sidecar.last_scrape["success"], sidecar.last_scrape
        view = sidecar.view()
        # view.ranks: rank -> (queue, running, usage, throughput, cuda_graph)
        printing = [v for v in view.ranks.values() if v[0] is not None]
        assert sorted(v[0] for v in printing) == [140 + 7 * d for d in range(_dp_ranks(path.stem))]
        assert {(v[1], v[2]) for v in printing} == {(34, 0.46)}
        assert view.model == "conformance/model"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_fixture_lines_carry_the_release_date_format():
    for log in LOGS:
        first = log.read_text().splitlines()[0]
        old = releases.version_key(log.parent.name) < (0, 3, 4)
        assert re.match(r"\[[0-9]{2}:[0-9]{2}:[0-9]{2}[ \]]" if old else r"\[2025-11-25 ", first), (log, first)
