"""docs/contributing.md, proved: a signal added as one catalog entry plus its judgement function appears in
every generated output (rules, promtool tests that pass, Alertmanager routes, runbook, docs), and the
sidecar's evaluator judges it. The toy signal is registered for one test only (monkeypatch), never in the
real catalog."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from helpers import require_tool

from exporter import catalog, generate
from exporter.catalog import Advice, AlertSpec, Signal
from exporter.catalog import native as catalog_native
from exporter.config import Config, ConfigError, build
from exporter.signals import judgement as signals

TOY = Signal(
    id="toy_queue_high",
    title="Toy queue high",
    meaning="The waiting queue of the toy signal is above its limit.",
    impact="Requests wait.",
    severity="warning",
    inputs=("decode_batch.queue_req", "sglang:num_queue_reqs"),
    formula="last queue sample above `max_queue`",
    value_unit="count",
    window_seconds=60,
    defaults={"max_queue": 7},
    profiles={},
    advice=(Advice("request-rate", "decrease", None, "Fewer requests, a shorter queue."),),
    alert=AlertSpec("SGLangToyQueueHigh", "2m", "The toy queue is high.",
                    "{{ $labels.instance }}: {{ $value }} requests queued.", page=False),
)


def toy_judge(state, p, sources, now, window):
    """The judgement function: (firing, value, detail) from the server's state and the thresholds."""
    queue = getattr(state, "toy_queue", None)
    if queue is None:
        return None, None, "no queue sample yet"
    return queue > p["max_queue"], float(queue), ("queue {} against {}", queue, p["max_queue"])


@pytest.fixture
def toy_signal(monkeypatch):
    """Register TOY as docs/contributing.md says, for this test only: the catalog entry (every module that
    holds the catalog's tables sees it), its judgement function and what /metrics can feed it."""
    added = catalog.SIGNALS + (TOY,)
    by_id = {**catalog.SIGNALS_BY_ID, TOY.id: TOY}
    old_signals, old_by_id = catalog.SIGNALS, catalog.SIGNALS_BY_ID
    for module in [m for name, m in sys.modules.items() if name.startswith("exporter") and m is not None]:
        if getattr(module, "SIGNALS", None) is old_signals:
            monkeypatch.setattr(module, "SIGNALS", added)
        if getattr(module, "SIGNALS_BY_ID", None) is old_by_id:
            monkeypatch.setattr(module, "SIGNALS_BY_ID", by_id)
    monkeypatch.setitem(signals._JUDGES, TOY.id, toy_judge)
    monkeypatch.setitem(catalog_native.SIGNAL_METRICS, TOY.id, (("queue",),))
    return TOY


def test_a_new_signal_reaches_every_generated_output(toy_signal, tmp_path):
    files = generate.render(Config())
    rules = yaml.safe_load(files["alerts/sglang-exporter.rules.yml"])
    alert = next(r for g in rules["groups"] for r in g.get("rules", []) if r.get("alert") == "SGLangToyQueueHigh")
    assert alert["for"] == "2m" and alert["labels"] == {"severity": "warning", "signal": "toy_queue_high"}
    assert alert["annotations"]["runbook_url"].endswith("/SGLangToyQueueHigh.md")      # the decorating pass
    assert "SGLangToyQueueHigh" in files["alerts/tests/sglang-exporter.signals.test.yml"]
    assert "SGLangToyQueueHigh" in files["alerts/tests/alertmanager-routes.yml"]
    runbook = files["docs/runbooks/SGLangToyQueueHigh.md"]
    assert TOY.meaning in runbook and "max_queue = 7" in runbook and "#queue-req" in runbook
    assert "[SGLangToyQueueHigh](runbooks/SGLangToyQueueHigh.md)" in files["docs/alerts.md"]
    assert "| `toy_queue_high` |" in files["docs/signal-sources.md"]
    assert "SGLangToyQueueHigh" in files["deploy/kubernetes/base/prometheusrule-sglang-exporter.yaml"]
    assert "SGLangToyQueueHigh" in files["deploy/kubernetes/components/sidecar/prometheusrule-sglang-exporter.yaml"]
    assert "SGLangToyQueueHigh" in files["deploy/helm/sglang-exporter/templates/prometheusrule-sglang-exporter.yaml"]
    # and nothing else changed shape: the real signals' files are all still there
    assert set(generate.render(Config())) == set(files)

    # the generated promtool tests of the new alert pass against the generated rules
    promtool = require_tool("promtool")
    generate.write({k: v for k, v in files.items() if k.startswith("alerts/")}, tmp_path)
    r = subprocess.run([promtool, "test", "rules", "tests/sglang-exporter.signals.test.yml"],
                       cwd=tmp_path / "alerts", capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_new_signal_is_configured_and_judged(toy_signal, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("signals:\n  toy_queue_high: {max_queue: 3}\n")
    cfg = build({}, environ={}, config_file=str(path))
    assert cfg.signal_params()["toy_queue_high"] == {"max_queue": 3}
    path.write_text("signals:\n  toy_queue_high: {max_queu: 3}\n")
    with pytest.raises(ConfigError, match=r":2: signals.toy_queue_high.max_queu: unknown parameter"):
        build({}, environ={}, config_file=str(path))

    # the sidecar's evaluator plans the toy signal with its judge and the configured thresholds
    plan = {entry[0]: entry for entry in signals.Evaluator(cfg.signal_params())._plan}
    assert plan["toy_queue_high"][3] is toy_judge and plan["toy_queue_high"][4] == {"max_queue": 3}

    class State:
        toy_queue = 5
    assert toy_judge(State(), plan["toy_queue_high"][4], None, 0.0, 60)[:2] == (True, 5.0)
