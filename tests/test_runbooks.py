"""Runbook pages: one per alert, fresh, with Meaning / Impact / Diagnosis / Mitigation carrying the catalog's
PromQL, log lines and tuning flags."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter import catalog
from exporter.config import Config
from exporter.generate import gateway, runbooks
from exporter.generate.rules import all_alerts
from exporter.generate.settings import RuleSettings

REPO = Path(__file__).resolve().parents[1]
RUNBOOKS = REPO / "docs" / "runbooks"
ALERTS = all_alerts(RuleSettings())
SECTIONS = ["## Meaning", "## Impact", "## Diagnosis", "## Mitigation"]


def test_runbooks_fresh():
    # the gateway's runbooks are rendered with its rules (exporter/generate/gateway.py)
    every = {**runbooks.render(Config()), **{p: t for p, t in gateway.render(Config()).items()
                                             if p.startswith("docs/runbooks/")}}
    rendered = {path.removeprefix("docs/runbooks/"): text for path, text in every.items()}
    committed = {p.name for p in RUNBOOKS.glob("*.md")}
    assert committed == set(rendered), f"extra/missing: {committed ^ set(rendered)}"
    stale = [n for n, text in rendered.items() if (RUNBOOKS / n).read_text() != text]
    assert not stale, f"stale runbooks (run `sglang-exporter generate`): {stale}"


@pytest.mark.parametrize("alert", ALERTS, ids=lambda a: a.name)
def test_runbook_structure(alert):
    text = (RUNBOOKS / f"{alert.name}.md").read_text()
    assert text.startswith(f"# {alert.name}\n")
    pos = [text.index(s) for s in SECTIONS]
    assert pos == sorted(pos), "sections out of order"
    diagnosis = text[pos[2]:pos[3]]
    assert "```promql" in diagnosis
    assert alert.runbook_url.endswith(f"/{alert.name}.md")
    if alert.kind != "meta":
        sig = catalog.SIGNALS_BY_ID[alert.signal]
        assert sig.meaning in text and sig.impact in text
        mitigation = text[pos[3]:]
        for adv in sig.advice:
            assert f"`{adv.flag}`" in mitigation, f"{alert.name}: advice flag {adv.flag} missing"
            if adv.suggested not in (None, False) and adv.action != "check":
                assert f"`{adv.suggested}`" in mitigation, f"{alert.name}: suggested {adv.suggested} missing"
        if sig.guide:
            assert sig.guide in mitigation
        log_inputs = [i for i in sig.inputs if not i.startswith("sglang:")]
        if log_inputs:
            assert "grep -E" in diagnosis, f"{alert.name}: no log lines to grep for"
            for i in log_inputs:
                pats = runbooks.LOG_PATTERNS.get(i) or runbooks.LOG_PATTERNS.get(i.split(".")[0])
                assert pats, f"no log pattern for input {i}"
                assert all(f"`{p}`" in diagnosis for p, _ in pats)
        if alert.kind == "signal":
            assert f'signal="{sig.id}"' in diagnosis
        native_inputs = [i for i in sig.inputs if i.startswith("sglang:")]
        for m in native_inputs:
            assert m in diagnosis
    else:
        assert alert.expr.strip().splitlines()[0] in text


def test_index_lists_every_alert():
    index = (RUNBOOKS / "README.md").read_text()
    for a in ALERTS:
        assert f"[{a.name}]({a.name}.md)" in index
    for link in re.findall(r"\]\(([^)#]+\.md)\)", index):
        assert (RUNBOOKS / link).is_file()


def test_log_patterns_match_sample_lines():
    """The grep patterns find the lines SGLang prints (samples built from the reference's format strings)."""
    samples = {
        "decode_batch": "[2025-08-11 17:17:03 TP0] Decode batch. #running-req: 233, #token: 370959, token usage: "
                        "0.82, cuda graph: False, gen throughput (token/s): 4594.01, #queue-req: 317",
        "retraction": "[2025-08-11 17:17:03 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
                      "#new_token_ratio: 0.9998 -> 1.0000",
        "memory_config": "[2025-08-11 17:17:03 TP0] max_total_num_tokens=665690, chunked_prefill_size=8192, "
                         "max_prefill_tokens=16384, max_running_requests=4096, context_len=65536, "
                         "available_gpu_mem=13.50 GB",
        "oom": "[2025-08-11 17:17:03 TP0] Prefill out of memory. Try to lower your batch size.",
        "watchdog_timeout": "[2025-08-11 17:17:03 TP0] Scheduler watchdog timeout "
                            "(self.watchdog_timeout=300, self.soft=False)",
    }
    for key, pats in runbooks.LOG_PATTERNS.items():
        kind = key.split(".")[0]
        if kind not in samples:
            continue
        assert any(re.search(p, samples[kind]) for p, _ in pats), (key, pats)
    assert re.search(runbooks.LOG_PATTERNS["decode_batch.cuda_graph"][0][0], samples["decode_batch"])
    assert re.search(runbooks.LOG_PATTERNS["decode_batch.queue_req"][0][0], samples["decode_batch"])


def test_runbook_promql_parses():
    promql_parser = pytest.importorskip("promql_parser")
    for page in RUNBOOKS.glob("*.md"):
        text = page.read_text()
        for block in re.findall(r"```promql\n(.*?)```", text, re.S):
            # alert expressions are multi-line; the diagnosis blocks are one query per line
            try:
                promql_parser.parse(block)
                continue
            except Exception:  # noqa: BLE001
                pass
            for line in block.splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    promql_parser.parse(line)
