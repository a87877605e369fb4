"""The status page at / and its parts: the charts' time axis, the last-hour ring, the runbooks' markdown as HTML.
A sidecar in this process reads a simulated log on an injected clock; the page is fetched over real HTTP."""
from __future__ import annotations

import re
import time
import urllib.request
from datetime import datetime
from html.parser import HTMLParser

import pytest

from exporter.config import Config
from exporter.sidecar.run import Sidecar
from exporter.simulate import Simulator, load_scenario
from exporter.state import ServerState
from exporter.web.markdown import inline, to_html
from exporter.web.recent import RECENT_SAMPLES, Recent
from exporter.web.server import make_server, serve_in_thread
from exporter.web.svg_chart import CHAR_PX, line_chart, time_ticks

# ---------------------------------------------------------------- the time axis


@pytest.mark.parametrize("span, looks_like", [
    (1.5, r"\d\d:\d\d:\d\d"),            # a second and a half
    (60, r"\d\d:\d\d:\d\d"),             # the 60 s crash log: every tick used to read 11-26 17:31
    (600, r"\d\d:\d\d"),
    (3600, r"\d\d:\d\d"),
    (3 * 86400, r"\d\d-\d\d( \d\d:\d\d)?"),
    (15 * 86400, r"\d\d-\d\d"),
    (200 * 86400, r"\d{4}-\d\d-\d\d|\d\d-\d\d"),
])
@pytest.mark.parametrize("width", [300, 900])
def test_time_ticks_say_something_at_every_span_and_fit(span, looks_like, width):
    t0 = datetime(2026, 11, 26, 17, 31, 7).timestamp() + 0.25
    ticks = time_ticks(t0, t0 + span, width)
    labels = [label for _, label in ticks]
    assert len(labels) >= (1 if span < 2 else 2), labels
    assert len(set(labels)) == len(labels), labels                  # no two ticks read the same
    assert all(re.fullmatch(looks_like, label) for label in labels), labels
    assert all(t0 <= t <= t0 + span for t, _ in ticks)
    widest = max(len(label) for label in labels) * CHAR_PX
    gaps = [(b - a) / span * width for (a, _), (b, _) in zip(ticks, ticks[1:])]
    assert all(gap >= widest for gap in gaps), (labels, gaps)      # labels never touch


def test_a_chart_without_points_says_so_and_one_with_points_draws_them():
    empty = line_chart("queue", "Waiting queue", "requests", [], [("queue", [], "#000")], (0.0, 3600.0))
    assert 'data-points="0"' in empty and "nothing to draw yet" in empty
    t = [1000.0 + 5 * i for i in range(50)]
    full = line_chart("queue", "Waiting queue", "requests", t, [("queue", [i % 7 for i in range(50)], "#000")],
                      (t[0], t[-1]), hlines=[(100, "healthy ≥ 100", "#0a0")])
    assert 'data-points="50"' in full and "<polyline" in full and "nothing to draw" not in full
    assert "healthy ≥ 100" in full


@pytest.mark.parametrize("span", [0.4, 1.2, 1.7, 2.5, 10, 30, 60, 61, 600, 3599, 3600])
@pytest.mark.parametrize("offset", [0.0, 0.3, 0.9])
def test_no_time_label_is_cut_off_at_the_chart_edges_and_every_span_has_a_scale(span, offset):
    """A tick exactly at either end (a sidecar up for a round minute) once drew half its label outside; a span of
    a second or two (the crash demo on a loaded CI machine) once kept a single label, which gives no scale."""
    t1 = 1_764_000_000.0 + offset
    t0 = t1 - span
    svg = line_chart("q", "Q", "r", [t0, t1], [("q", [1, 2], "#000")], (t0, t1), width=400)
    labels = re.findall(r'class="tick-x" x="([\d.]+)" y="[\d.]+" text-anchor="(\w+)"[^>]*>([^<]*)<', svg)
    assert len(labels) >= 2, svg
    assert len({text for _, _, text in labels}) == len(labels), labels
    extents = []
    for x, anchor, text in labels:
        wide = len(text) * CHAR_PX
        start = {"start": float(x), "middle": float(x) - wide / 2, "end": float(x) - wide}[anchor]
        assert start >= 0 and start + wide <= 400, (x, anchor, text)
        extents.append((start, start + wide))
    extents.sort()
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(extents, extents[1:])), extents


# ---------------------------------------------------------------- the ring


def test_the_last_hour_ring_is_bounded_and_spaced():
    params = Config().signal_params()
    state = ServerState(params)
    recent = Recent()
    for i in range(20_000):                  # five and a half hours of one evaluation a second
        recent.record(state, 1000.0 + i, params)
    assert len(recent.ring) == RECENT_SAMPLES
    now = 1000.0 + 19_999
    samples = recent.samples(now)
    assert samples[0][0] >= now - 3600 and samples[-1][0] == pytest.approx(now, abs=3)
    assert all(b[0] - a[0] >= recent.spacing for a, b in zip(samples, samples[1:]))


# ---------------------------------------------------------------- markdown


def test_markdown_subset_escapes_everything_and_links_only_safely():
    assert inline("**Increase `--x` to `1.3`.** a <b> & [`y`](Y.md)") == (
        '<b>Increase <code>--x</code> to <code>1.3</code>.</b> a &lt;b&gt; &amp; '
        '<a href="Y.html"><code>y</code></a>')
    assert "<a" not in inline("[x](javascript:alert(1))")
    assert inline("[w](https://e.com/a.md)") == '<a href="https://e.com/a.md">w</a>'
    html = to_html("<!-- note -->\n# T <i>\n\n1. a\n\n```sh\nx <y> | z\n```\n\n2. b\n\n"
                   "| a | b |\n|---|---|\n| `p|q` | [Q](Q.md) |\n\n- one\n- two\n")
    assert "note" not in html and "<h1>T &lt;i&gt;</h1>" in html
    assert '<pre><code class="language-sh">x &lt;y&gt; | z</code></pre>' in html
    assert '<ol start="2"><li>b</li></ol>' in html
    assert '<td><code>p|q</code></td><td><a href="Q.html">Q</a></td>' in html
    assert "<ul><li>one</li><li>two</li></ul>" in html


# ---------------------------------------------------------------- the page, over HTTP


class Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs.append(dict(attrs)["href"])


def _live(tmp_path, scenario: str, profile: str = "offline", evaluations: int = 60):
    """A sidecar that read `scenario`'s log, then evaluated `evaluations` times 5 s apart on its clock."""
    log = tmp_path / f"{scenario}.log"
    start = datetime.now().replace(microsecond=0)
    sim = Simulator(load_scenario(scenario), start=start, seed=1)
    sim.write_log(log)
    clock = [time.time()]
    sc = Sidecar(Config(log_files=(str(log),), from_start=True, profile=profile), clock=lambda: clock[0])
    sc.prepare()
    for _ in range(evaluations):
        clock[0] += 5
        sc.evaluate_once()
    server = make_server(sc, "127.0.0.1", 0)
    serve_in_thread(server)
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def _get(url: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.headers["Content-Type"], r.read().decode()


def _stop(server) -> None:
    server.shutdown()
    server.server_close()


def test_storm_page_reads_verdict_advice_charts_and_every_link_answers(tmp_path):
    server, base = _live(tmp_path, "retraction_storm")
    try:
        status, ctype, page = _get(base)
        assert status == 200 and ctype == "text/html; charset=utf-8"
        assert "<meta http-equiv='refresh'" in page and "<script" not in page
        verdict = re.search(r"<section id='verdict'.*?</section>", page, re.S).group()
        assert "<h2>Problems</h2>" in verdict and "retractions_frequent" in verdict
        advice = re.search(r"<section id='advice'.*?</section>", page, re.S).group()
        assert "<code>--schedule-conservativeness</code></td><td>increase</td>" in advice
        points = [int(n) for n in re.findall(r'data-points="(\d+)"', page)]
        assert len(points) == 3 and all(n >= 2 for n in points), points
        assert "<section id='sources'>" in page and "<b>restarts 0</b>" in page and "<td>TP0</td>" in page
        links = Links()
        links.feed(page)
        assert "runbooks/SGLangRetractionsFrequent.html" in links.hrefs
        for href in set(links.hrefs):
            assert not href.startswith(("/", "http")), href          # relative: a proxy's path prefix holds
            status, ctype, body = _get(base + href)
            assert status == 200, href
    finally:
        _stop(server)


def test_crash_page_says_failed_with_the_cause_and_the_runbook(tmp_path):
    server, base = _live(tmp_path, "server_crash", profile="online", evaluations=3)
    try:
        page = _get(base)[2]
        assert "<h2>SGLang failed</h2>" in page and "NCCL error" in page
        advice = re.search(r"<section id='advice'.*?</section>", page, re.S).group()
        assert "server_crashed" in advice and "runbooks/SGLangServerCrashed.html" in advice
        assert "no flag to change" in advice
    finally:
        _stop(server)


def test_a_page_before_any_data_says_so(tmp_path):
    log = tmp_path / "empty.log"
    log.write_text("")
    sc = Sidecar(Config(log_files=(str(log),)))
    sc.prepare()
    server = make_server(sc, "127.0.0.1", 0)
    serve_in_thread(server)
    try:
        page = _get(f"http://127.0.0.1:{server.server_address[1]}/")[2]
        assert "<h2>Not enough data to judge yet</h2>" in page
        assert page.count("nothing to draw yet") == 3 and "No rank has reported yet." in page
    finally:
        _stop(server)


def test_everything_the_logs_control_is_escaped():
    """A model name, a cause line, a detail or a log path are text from outside: never markup on the page."""
    from exporter.web import status_page
    evil = "<script>alert(1)</script>"
    doc = {"version": "x", "profile": "offline", "time": 0.0, "model": evil, "format_family": evil,
           "verdict": "failed", "verdict_reason": evil,
           "signals": [{"id": "server_crashed", "title": evil, "severity": "critical", "state": "firing",
                        "value": 1, "unit": "count", "detail": evil, "since": 0.0, "advice": [],
                        "runbook_url": "", "runbook": "/runbooks/SGLangServerCrashed.md",
                        "cause": {"class": evil, "line": evil}}],
           "advice": [{"flag": evil, "action": evil, "current": evil, "suggested": evil, "signals": [evil],
                       "severity": "critical", "reason": evil, "spellings": [evil]}],
           "server": {"restarts": 1, "restart_evidence": [{"t": 0.0, "time": evil, "evidence": evil}],
                      "gpu_headroom": [{"rank": evil, "bytes": 2**30}], "release": None, "layout": {}},
           "sources": [{"source": evil, "kind": "log", "up": False, "reason": evil, "since": 0.0,
                        "last_error": evil, "last_error_time": 0.0}]}
    page = status_page.render(doc, [(0.0, 1, 0.5, 0.0), (5.0, 2, 0.6, 1.0)], {}, {(0, None, None): (1, 2, 0.5,
                                                                                                 9.0, True)}, 10.0)
    assert "<script" not in page and page.count("&lt;script&gt;") >= 12
