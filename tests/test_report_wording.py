"""The report's and the demo's words (issue 33, "Wording"): each phrase a user found wrong, with the exact text
that replaces it."""
from __future__ import annotations

from datetime import datetime

from exporter.cli.demo import _status_line
from exporter.config import Config
from exporter.report.analyze import analyze
from exporter.report.text import advice_phrase, render_text
from exporter.sidecar.run import Sidecar
from exporter.simulate import Simulator, load_scenario
from exporter.web.server import signals_document

WHEN = datetime(2025, 8, 11, 17, 0, 0)


def scenario_report(tmp_path, name: str, **cfg) -> dict:
    log = tmp_path / f"{name}.log"
    Simulator(load_scenario(name), start=WHEN).write_log(log)
    return analyze([str(log)], Config(**cfg), progress=False)


def test_problems_verdict_names_what_fired(tmp_path):
    text = render_text(scenario_report(tmp_path, "retraction_storm"))
    assert text.splitlines()[0] == "Verdict: PROBLEMS: retraction_storm, retractions_frequent fired"
    assert "problems found" not in text


def test_one_gpu_one_rank(tmp_path):
    text = render_text(scenario_report(tmp_path, "cuda_graph_off"))
    assert "; layout tp=1; 1 rank printed start-up lines" in text and "1 ranks" not in text
    assert "  free GPU memory after start-up: 6.50 GiB\n" in text and "least first" not in text


def test_several_gpus_least_first(tmp_path):
    text = render_text(scenario_report(tmp_path, "retraction_storm"))
    assert "2 ranks printed start-up lines" in text
    assert "  free GPU memory after start-up, least first: TP0 6.50 GiB, TP1 6.50 GiB\n" in text


def test_an_empty_log_claims_no_running_server(tmp_path):
    log = tmp_path / "empty.log"
    log.write_text("")
    text = render_text(analyze([str(log)], Config(), progress=False))
    assert text.splitlines()[0] == ("Verdict: INSUFFICIENT DATA: too little to judge health: no SGLang log "
                                    "record recognised")
    assert "Server:" not in text and "joined a running server" not in text


def test_a_log_joined_after_start_up_says_so_in_its_own_words(tmp_path):
    log = tmp_path / "late.log"
    log.write_text("".join(
        f"[2025-08-11 17:00:{s:02d} TP0] Decode batch, #running-req: 5, #token: 900, token usage: 0.10, "
        f"cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0\n" for s in range(0, 60, 5)))
    text = render_text(analyze([str(log)], Config(), progress=False))
    assert "start-up not in the log (it begins after SGLang started)" in text


def test_advice_words():
    assert advice_phrase("check", "--disable-cuda-graph", True, False) == "remove --disable-cuda-graph (now set)"
    assert advice_phrase("check", "--enable-metrics", False, True) == "add --enable-metrics (now not set)"
    assert advice_phrase("check", "--mem-fraction-static", 0.88, None) == "check --mem-fraction-static (now 0.88)"
    assert advice_phrase("check", "--mem-fraction-static", 0.88, 0.85) == \
        "check --mem-fraction-static (now 0.88; try 0.85)"
    assert advice_phrase("increase", "--schedule-conservativeness", 0.3, 1.3) == \
        "increase --schedule-conservativeness (now 0.3) to 1.3"
    assert advice_phrase("hold", "request-rate", None, None) == "hold request-rate"


def test_records_are_not_called_events_beside_the_event_counts(tmp_path):
    rep = scenario_report(tmp_path, "retraction_storm")
    assert "events" not in rep and rep["schema"] == "sglang-exporter/analyze/v2"
    # two TP ranks print each retraction: two records, one retraction
    assert rep["records"]["retraction"] == 2 * rep["counts"]["retractions"]["count"] > 0


def test_the_demo_console_lists_every_piece_of_advice_the_api_lists(tmp_path):
    log = tmp_path / "sglang.log"
    log.write_text("")
    clock = [1_754_931_600.0]
    sc = Sidecar(Config(log_files=(str(log),)), clock=lambda: clock[0])
    try:
        sc.poll_logs_once()
        sim = Simulator(load_scenario("retraction_storm"), start=WHEN)
        for t in range(0, 240, 5):                # the storm as the demo shows it: lines arriving live
            with open(log, "a", encoding="utf-8") as fh:
                fh.writelines(line + "\n" for line in sim.lines_until(t))
            clock[0] += 5
            sc.poll_logs_once()
        view = sc.view()
        api = signals_document(view)["advice"]
        line = _status_line(sc)
    finally:
        sc.shutdown()
    assert len(api) >= 3, api
    shown = line.split("  |  advice: ", 1)[1].split("; ")
    assert len(shown) == len(api), (line, api)
    assert all(a["flag"] in line for a in api), line
