"""What a person sees, in a real browser (Debian's chromium, driven by Playwright): the status page of live
sidecars (the demo in a retraction storm, a crash, healthy; a sidecar fed by SGLang's /metrics only) and the
analyze HTML reports. Checks what a person would read (the verdict, the advice rows, charts that are not empty,
labels that do not overlap, a printout without a blank page) and saves screenshots.

Screenshots go to tests/artifacts/; with UPDATE_SCREENSHOTS=1 to docs/screenshots/, which the docs show.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
import zlib
from datetime import datetime
from pathlib import Path

import pytest
from helpers import IN_CI, free_port, require_tool, wait_until

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / ("docs/screenshots" if os.environ.get("UPDATE_SCREENSHOTS") == "1" else "tests/artifacts")
# the docs' screenshots wait for a fuller half minute of charts; the test needs a few points
MIN_POINTS = 10 if os.environ.get("UPDATE_SCREENSHOTS") == "1" else 4
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    chromium = require_tool("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if IN_CI:
            pytest.fail("playwright is not installed (pip install -e '.[test]')")
        pytest.skip("playwright is not installed")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


# ---------------------------------------------------------------- live sidecars

class Process:
    """A subprocess of ours, stopped (TERM, then KILL) when the test ends; its output in a file."""

    def __init__(self, tmp_path: Path, name: str, args: list[str], env: dict | None = None):
        self.out_path = tmp_path / f"{name}.out"
        self.out = open(self.out_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([sys.executable, "-m", "exporter", *args], cwd=ROOT, stdout=self.out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env={**os.environ, "TMPDIR": str(tmp_path), **(env or {})})

    def alive(self) -> bool:
        assert self.proc.poll() is None, self.out_path.read_text()
        return True

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.out.close()


def demo(tmp_path: Path, scenario: str, speed: float) -> tuple[Process, str]:
    port = free_port()
    p = Process(tmp_path, f"demo-{scenario}", ["demo", "--listen", f"127.0.0.1:{port}", "--speed", f"{speed:g}",
                                               "--duration", "150", "--scenario", scenario])
    return p, f"http://127.0.0.1:{port}/"


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def settled(base: str, proc: Process, want) -> dict:
    """The API document once `want(doc)` holds and every chart of the page has points to draw."""
    def ready():
        proc.alive()
        doc = json.loads(fetch(base + "api/v1/signals"))
        if not want(doc):
            return None
        points = [int(n) for n in re.findall(r'data-points="(\d+)"', fetch(base))]
        return doc if len(points) == 3 and min(points) >= MIN_POINTS else None
    return wait_until(ready, timeout=90, interval=0.5, what="the sidecar to reach the scenario's state")


OVERLAPS = """() => {
  const hit = (a, b) => a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5
                        && b.top < a.bottom - 0.5;
  const out = [];
  for (const svg of document.querySelectorAll(SELECTOR)) {
    const frame = svg.getBoundingClientRect();
    for (const group of GROUPS) {
      const els = [...svg.querySelectorAll(group)];
      const boxes = els.map(e => e.getBoundingClientRect());
      boxes.forEach((a, i) => {
        if (a.left < frame.left - 1 || a.right > frame.right + 1) out.push(`${group} "${els[i].textContent}" outside`);
        boxes.slice(i + 1).forEach((b, j) => {
          if (hit(a, b)) out.push(`${group}: "${els[i].textContent}" overlaps "${els[i + 1 + j].textContent}"`);
        });
      });
    }
  }
  return out;
}"""


def overlaps(page, selector: str, groups: list[str]) -> list[str]:
    script = OVERLAPS.replace("SELECTOR", json.dumps(selector)).replace("GROUPS", json.dumps(groups))
    return page.evaluate(script)


def shoot(page, name: str, height: int | None = None) -> None:
    """A screenshot, kept small: a page of text and lines fits a 256-colour palette."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    clip = None if height is None else {"x": 0, "y": 0, "width": page.viewport_size["width"], "height": height}
    page.screenshot(path=str(path), full_page=True, clip=clip)
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE)
    small.save(path, optimize=True)


def read_status_page(browser, base: str, name: str) -> dict:
    """Open the status page as a person would and read it: the verdict, the advice table, the charts."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    console, foreign = [], []
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
    page.on("request", lambda r: None if r.url.startswith(base) else foreign.append(r.url))
    try:
        page.goto(base)
        seen = {
            "verdict": page.locator("#verdict h2").inner_text(),
            "verdict_text": page.locator("#verdict").inner_text(),
            "advice_rows": [[c.strip() for c in r.split("\t")] for r in
                            page.locator("#advice table tr").all_inner_texts()[1:]],
            "advice_text": page.locator("#advice").inner_text(),
            "runbook_links": page.locator("#advice a").evaluate_all("els => els.map(e => e.getAttribute('href'))"),
        }
        charts = page.locator("svg.chart")
        assert charts.count() == 3
        for i in range(charts.count()):
            chart = charts.nth(i)
            box = chart.bounding_box()
            assert box and box["width"] >= 300 and box["height"] >= 120
            assert int(chart.get_attribute("data-points")) >= 2, chart.get_attribute("data-chart")
            assert chart.locator("polyline").count() >= 1
            assert chart.locator("text.tick-x").count() >= 2
        # the three charts side by side at this width, none over another
        boxes = [charts.nth(i).bounding_box() for i in range(3)]
        assert len({round(b["y"]) for b in boxes}) == 1, boxes
        assert overlaps(page, "svg.chart", [".tick-x", ".tick-y", ".legend"]) == []
        shoot(page, f"status-{name}")
        # the fired signals' runbooks open, with their mitigation
        for href in seen["runbook_links"][:2]:
            page.goto(base + href)
            assert page.locator("h2", has_text="Mitigation").count() == 1, href
    finally:
        page.close()
    assert console == [] and foreign == []
    return seen


def test_status_page_in_a_retraction_storm(browser, tmp_path):
    proc, base = demo(tmp_path, "retraction_storm", speed=30)
    try:
        settled(base, proc, lambda d: any(s["id"] == "retraction_storm" and s["state"] == "firing"
                                          for s in d["signals"]))
        seen = read_status_page(browser, base, "storm")
    finally:
        proc.stop()
    assert seen["verdict"] == "Problems" and "retraction_storm" in seen["verdict_text"]
    flags = {row[0]: row for row in seen["advice_rows"]}
    assert flags["--schedule-conservativeness"][1:4] == ["increase", "0.3", "1.3"]
    assert "retraction_storm" in flags["--schedule-conservativeness"][5]
    assert "runbooks/SGLangRetractionStorm.html" in seen["runbook_links"]


def test_status_page_after_a_crash(browser, tmp_path):
    proc, base = demo(tmp_path, "server_crash", speed=6)       # a minute of serving first: 10 s of charts
    try:
        settled(base, proc, lambda d: d["verdict"] == "failed")
        seen = read_status_page(browser, base, "crash")
    finally:
        proc.stop()
    assert seen["verdict"] == "SGLang failed"
    assert "Cause (nccl): RuntimeError: NCCL error" in seen["verdict_text"]
    # the demo's offline profile also sees the emptied queue: the advice then holds the request rate because of
    # the crash; either way the crash's runbook is one click away
    assert "server_crashed" in seen["advice_text"]
    assert "runbooks/SGLangServerCrashed.html" in seen["runbook_links"]


def test_status_page_of_a_healthy_server(browser, tmp_path):
    proc, base = demo(tmp_path, "healthy_offline", speed=30)
    try:
        settled(base, proc, lambda d: d["verdict"] == "healthy")
        seen = read_status_page(browser, base, "healthy")
    finally:
        proc.stop()
    assert seen["verdict"] == "Healthy" and "none fired" in seen["verdict_text"]
    assert seen["advice_rows"] == [] and "Nothing to change." in seen["advice_text"]


def test_status_page_fed_by_sglang_metrics_only(browser, tmp_path):
    sim_port, port = free_port(), free_port()
    sim = Process(tmp_path, "simulator", ["simulate", "--scenario", "healthy_online", "--speed", "10", "--duration",
                                          "3000", "--metrics-listen", f"127.0.0.1:{sim_port}",
                                          "--log-file", str(tmp_path / "unread.log")])
    sidecar = Process(tmp_path, "serve", ["serve", "--sglang-url", f"http://127.0.0.1:{sim_port}", "--listen",
                                          f"127.0.0.1:{port}", "--profile", "online"],
                      # a scrape timeout that holds on a loaded machine: one timed-out scrape marks the source
                      # down and the verdict "insufficient data" until the next one
                      env={"SGLANG_EXPORTER_EVALUATE_INTERVAL": "1", "SGLANG_EXPORTER_SCRAPE_INTERVAL": "2",
                           "SGLANG_EXPORTER_SCRAPE_TIMEOUT": "1.5"})
    base = f"http://127.0.0.1:{port}/"
    try:
        wait_until(lambda: sim.alive() and fetch(f"http://127.0.0.1:{sim_port}/metrics"), timeout=30,
                   what="the simulated SGLang's /metrics")
        settled(base, sidecar, lambda d: d["verdict"] == "healthy")
        seen = read_status_page(browser, base, "metrics-only")
    finally:
        sidecar.stop()
        sim.stop()
    assert seen["verdict"] == "Healthy"
    # a metrics-only view of this release cannot see every paging signal: the verdict says which
    assert "cannot be judged here" in seen["verdict_text"]


# ---------------------------------------------------------------- the analyze reports

def report(tmp_path: Path, scenario: str, profile: str) -> Path:
    from exporter.simulate import Simulator, load_scenario
    log = tmp_path / f"{scenario}.log"
    Simulator(load_scenario(scenario), start=datetime(2026, 11, 26, 17, 31, 0), seed=1).write_log(log)
    out = tmp_path / f"{scenario}.html"
    res = subprocess.run([sys.executable, "-m", "exporter", "analyze", str(log), "--format", "html", "-q",
                          "--profile", profile, "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return out


def pdf_text_per_page(pdf: bytes) -> list[int]:
    """How many text-showing operators each page of a PDF has (chromium's PDFs: plain objects, Flate streams)."""
    objects = {int(m.group(1)): m.group(2) for m in re.finditer(rb"(\d+) 0 obj(.*?)endobj", pdf, re.S)}
    counts = []
    for body in objects.values():
        if not re.search(rb"/Type\s*/Page(?!s)", body):
            continue
        refs = re.search(rb"/Contents\s*(\[[^\]]*\]|\d+ 0 R)", body)
        n = 0
        for ref in re.findall(rb"(\d+) 0 R", refs.group(1) if refs else b""):
            head, _, data = objects[int(ref)].partition(b"stream")
            data = data.lstrip(b"\r\n").rsplit(b"endstream", 1)[0]
            if b"FlateDecode" in head:
                data = zlib.decompressobj().decompress(data)
            n += len(re.findall(rb"T[jJ]\b", data))
        counts.append(n)
    return counts


@pytest.mark.parametrize("scenario, profile, verdict, advice", [
    ("retraction_storm", "offline", "PROBLEMS", "--schedule-conservativeness"),
    ("server_crash", "online", "FAILED", "server_crashed (Server crashed): no flag to change; follow its runbook"),
])
def test_report_reads_well_and_prints_without_a_blank_page(browser, tmp_path, scenario, profile, verdict, advice):
    out = report(tmp_path, scenario, profile)
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(out.as_uri())
        assert verdict in page.locator("#verdict h2").inner_text()
        text = page.locator("#advice").inner_text()
        assert advice in text and "No advice." not in text
        assert page.locator("#signals tr.fired a").count() >= 1          # a fired signal links its runbook
        charts = page.locator("figure.chart svg")
        assert charts.count() >= 5
        for i in range(charts.count()):
            labels = charts.nth(i).locator("g[id^='xtick_'] text").all_text_contents()
            assert len(labels) >= 2 and len(set(labels)) == len(labels), labels   # an axis that says something
        assert overlaps(page, "figure.chart svg", ["g[id^='xtick_'] text"]) == []
        shoot(page, f"report-{scenario}", height=2600)       # the verdict, the advice, the signals, charts
        pages = pdf_text_per_page(page.pdf(format="A4"))
    finally:
        page.close()
    assert requests == [out.as_uri()]
    assert len(pages) >= 2 and all(n > 0 for n in pages), pages
