"""analyze --format html: the report of simulated scenarios, checked in a real headless Chromium."""
from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from helpers import IN_CI, require_tool

from exporter.catalog import RUNBOOK_BASE
from exporter.report.html import decimate

ARTIFACTS = Path(__file__).parent / "artifacts"


def scenario_log(tmp_path: Path, name: str) -> Path:
    from exporter.simulate import Simulator, load_scenario
    path = tmp_path / f"{name}.log"
    Simulator(load_scenario(name), start=datetime(2025, 8, 11, 17, 0, 0), seed=1).write_log(path)
    return path


def analyze(path: Path, fmt: str, out: Path | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "exporter", "analyze", str(path), "--format", fmt, "-q"]
    if out is not None:
        cmd += ["-o", str(out)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_decimate_keeps_the_extremes_of_every_bucket():
    rng = random.Random(7)
    t = list(range(100_000))
    y = [rng.random() for _ in t]
    y[12_345] = 1000.0          # a lone queue spike
    y[77_777] = -50.0           # and a dip
    tt, yy = decimate(t, y, buckets=500)
    assert len(tt) <= 1000
    assert 1000.0 in yy and -50.0 in yy
    assert tt == sorted(tt)


def test_decimate_passes_small_series_through_and_drops_gaps():
    assert decimate([1, 2, 3], [5, None, 7]) == ([1, 3], [5, 7])


@pytest.mark.parametrize("scenario, signal, flag, action", [
    ("retraction_storm", "retraction_storm", "--schedule-conservativeness", "increase"),
    ("oom_decode", "oom_decode", "--max-running-requests", "decrease"),
    ("too_conservative", "kv_cache_underused", "--schedule-conservativeness", "decrease"),
])
def test_report_of_a_scenario_shows_its_signal_and_advice(tmp_path, scenario, signal, flag, action):
    log = scenario_log(tmp_path, scenario)
    data = json.loads(analyze(log, "json").stdout)
    fired = {s["id"]: s for s in data["signals"] if s["fired"]}
    assert signal in fired and fired[signal]["intervals"]
    assert any(a["flag"] == flag and a["action"] == action for a in data["advice"]), data["advice"]

    out = tmp_path / "report.html"
    res = analyze(log, "html", out)
    assert res.returncode == 0, res.stderr
    page = out.read_text()
    assert f"<code>{flag}</code>" in page
    assert page.count('<figure class="chart"') >= 5
    # nothing is loaded from the network: the only URLs are the fired signals' runbook links
    runbooks = re.findall(r"<a href='(https://[^']+)'", page)
    assert f"{RUNBOOK_BASE}/SGLang" in " ".join(runbooks)
    rest = re.sub(r"<a href='https://[^']+'", "", page).replace("http://www.w3.org", "")
    assert "http://" not in rest and "https://" not in rest
    assert len(page) < 2_000_000


def test_healthy_report_says_so(tmp_path):
    log = scenario_log(tmp_path, "healthy_offline")
    out = tmp_path / "report.html"
    assert analyze(log, "html", out).returncode == 0
    page = out.read_text()
    assert "Verdict: HEALTHY" in page and "No advice." in page


def test_report_renders_in_headless_chromium_without_errors_or_network(tmp_path):
    chromium = require_tool("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if IN_CI:
            pytest.fail("playwright is not installed (pip install -e '.[test]')")
        pytest.skip("playwright is not installed")
    log = scenario_log(tmp_path, "retraction_storm")
    out = tmp_path / "report.html"
    assert analyze(log, "html", out).returncode == 0
    console, requests, failures = [], [], []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            page.on("request", lambda r: requests.append(r.url))
            page.on("requestfailed", lambda r: failures.append(r.url))
            page.goto(out.as_uri())
            charts = page.locator("figure.chart svg")
            assert charts.count() >= 5
            for i in range(charts.count()):
                box = charts.nth(i).bounding_box()
                assert box and box["width"] > 400 and box["height"] > 100
            assert page.locator("#verdict").is_visible()
            assert "PROBLEMS" in page.locator("#verdict").inner_text()
            advice = page.locator("#advice table")
            assert advice.is_visible() and "--schedule-conservativeness" in advice.inner_text()
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "report-retraction_storm.png"), full_page=True)
        finally:
            browser.close()
    assert console == []
    assert requests == [out.as_uri()] and failures == []


def _report(tmp_path, scenario: str, profile: str = "offline") -> dict:
    from exporter.config import Config
    from exporter.report.analyze import analyze as replay
    return replay([str(scenario_log(tmp_path, scenario))], Config(profile=profile), progress=False, series=True)


@pytest.mark.parametrize("scenario", ["retraction_storm", "restart"])
def test_restart_lines_are_drawn_only_where_a_restart_was_counted(tmp_path, scenario):
    """The first start-up's ready line is no restart: the header's `restarts N` and the lines drawn agree."""
    report = _report(tmp_path, scenario)
    drawn = [m for m in report["series"]["markers"] if m["kind"] == "restart"]
    assert len(drawn) == report["restarts"] == (1 if scenario == "restart" else 0)
    assert [m["t"] for m in drawn] == [e["t"] for e in report["server"]["restart_evidence"]]


def test_crash_report_names_the_runbook_where_no_flag_helps(tmp_path):
    from exporter.report.html import render_html
    from exporter.report.text import render_text
    report = _report(tmp_path, "server_crash", profile="online")
    crash = next(s for s in report["signals"] if s["id"] == "server_crashed")
    assert crash["fired"] and crash["runbook_url"] == f"{RUNBOOK_BASE}/SGLangServerCrashed.md"
    text = render_text(report)
    assert "No flag to change for server_crashed; follow the runbook:" in text
    assert f"  server_crashed: {RUNBOOK_BASE}/SGLangServerCrashed.md" in text
    assert "Advice: none" not in text
    page = render_html(report)
    assert "No advice." not in page
    assert f"no flag to change; follow its <a href='{RUNBOOK_BASE}/SGLangServerCrashed.md'>runbook</a>" in page
    # the 60 s log's time axis: every tick its own second, none of them the same
    for svg in re.findall(r"<figure class=\"chart\".*?</figure>", page, re.S):
        labels = re.findall(r"<g id=\"xtick_\d+\">.*?<text[^>]*>([^<]*)</text>", svg, re.S)
        assert len(labels) >= 3 and len(set(labels)) == len(labels), labels
        assert all(re.fullmatch(r"17:0[01]:\d\d", label) for label in labels), labels


def test_a_report_of_a_log_without_timestamps_draws_no_time_axis(tmp_path):
    from exporter.config import Config
    from exporter.report.analyze import analyze as replay
    from exporter.report.html import render_html
    log = scenario_log(tmp_path, "healthy_offline")
    untimed = tmp_path / "untimed.log"
    untimed.write_text(re.sub(r"(?m)^\[[^\]]*\] ", "", log.read_text()))
    page = render_html(replay([str(untimed)], Config(), progress=False, series=True))
    assert '<figure class="chart"' not in page and "nothing to plot" in page


def test_without_matplotlib_the_html_report_says_how_to_get_it_before_reading(tmp_path):
    """matplotlib is an optional extra: without it `--format html` used to replay the whole log and then die in
    a traceback at the first chart. It now says what to install before the replay, and writes no report."""
    log = scenario_log(tmp_path, "healthy_offline")
    out = tmp_path / "report.html"
    code = ("import sys; sys.modules['matplotlib'] = None\n"     # what `import matplotlib` meets when not installed
            "from exporter.cli import main\n"
            f"sys.exit(main(['analyze', {str(log)!r}, '--format', 'html', '-o', {str(out)!r}]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "pip install 'sglang-exporter[html]'" in r.stderr
    assert not out.exists()
