"""Golden exposition of a Sidecar over a fixed small log, family names against catalog.METRICS, the naming
rules, and `promtool check metrics` on the output. No test writes a file: regenerate the golden exposition with
`.venv/bin/python tests/golden_exposition.py`, docs/metrics.md with `sglang-exporter generate`."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from golden_exposition import GOLDEN, normalise, render
from helpers import PROMETHEUS_RELEASES, require_tool
from prometheus_client.parser import text_string_to_metric_families

from exporter.catalog import METRICS, METRICS_BY_NAME, SIGNAL_VALUE_METRICS, SIGNALS_BY_ID
from exporter.generate import metrics_doc


@pytest.fixture
def exposition(tmp_path):
    return render(tmp_path)


def test_golden_exposition(exposition):
    text = normalise(*exposition)
    assert text == GOLDEN.read_text(), \
        "exposition changed; if intended, run .venv/bin/python tests/golden_exposition.py and review the diff"


def test_golden_content_is_meaningful(exposition):
    """Independent of the golden file: the values the log implies."""
    text = exposition[0]
    fams = {f.name: f for f in text_string_to_metric_families(text)}

    def value(name, **labels):
        for fam in fams.values():
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return s.value
        return None
    assert value("sglang_exporter_retractions_total") == 1          # TP0 only
    assert value("sglang_exporter_retracted_requests_total") == 2
    assert value("sglang_exporter_oom_events_total", phase="decode") == 1
    assert value("sglang_exporter_gpu_headroom_bytes") == 13.5 * 2**30
    assert value("sglang_exporter_max_running_requests") == 4097
    assert value("sglang_exporter_signal_firing", signal="gpu_headroom_high") == 1
    assert value("sglang_exporter_signal_firing", signal="cuda_graph_off_small_batch") == 1
    assert value("sglang_exporter_signal_firing", signal="oom_decode", severity="critical") == 1
    assert value("sglang_exporter_signal_firing", signal="queue_below_range") == 1
    assert value("sglang_exporter_signal_known", signal="concurrency_capped") == 1
    assert value("sglang_exporter_queue_requests", tp="1") == 0
    assert value("sglang_exporter_log_lines_unparsed_total", reason="no_sglang_prefix") == 1
    assert value("sglang_exporter_log_lines_unparsed_total", reason="unknown_message") == 1
    # small batches under --cuda-graph-max-bs 8 ran without CUDA graph: raising it cannot help
    assert value("sglang_exporter_advice_info", flag="--cuda-graph-max-bs", action="keep",
                 current="8", suggested="") == 1
    assert value("sglang_exporter_sglang_info", model="llama-8b") == 1
    # the log's newest line (17:17:08) is placed at the sidecar's start (its clock reads 17:17:03: the whole log
    # is moved back, not pinned to now), the last batch line 2 s before it; 10 s later its age is 12 s
    assert value("sglang_exporter_last_batch_age_seconds") == 12


def test_families_match_catalog(exposition):
    text = exposition[0]
    declared = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M))
    exposed = {}
    for fam, typ in declared.items():
        # prometheus_client declares counters by their exposed name (with _total)
        exposed[fam if fam.endswith("_total") or typ != "counter" else fam + "_total"] = typ
    assert set(exposed) == {m.name for m in METRICS}
    for name, typ in exposed.items():
        spec = METRICS_BY_NAME[name]
        assert typ == ("counter" if spec.type == "counter" else "gauge"), name
    # every sample's labels are exactly the catalog's labels
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            spec = METRICS_BY_NAME[s.name]
            assert set(s.labels) == set(spec.labels), s


def test_exposition_follows_naming_rules(exposition):
    text = exposition[0]
    for name in re.findall(r"^# TYPE (\S+) ", text, flags=re.M):
        assert ":" not in name and name.startswith("sglang_exporter_") and name == name.lower()
    for m in METRICS:
        assert m.name.endswith("_total") == (m.type == "counter"), m.name


@pytest.mark.parametrize("release", PROMETHEUS_RELEASES)
def test_promtool_check_metrics(exposition, release):
    promtool = require_tool("promtool", release)
    proc = subprocess.run([promtool, "check", "metrics"], input=exposition[0], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and not proc.stdout.strip() and not proc.stderr.strip(), \
        proc.stdout + proc.stderr


def _samples(text: str, name: str) -> dict:
    """{frozenset(labels): value} of one metric's samples."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out[frozenset(s.labels.items())] = s.value
    return out


def test_signal_values_one_family_per_unit(exposition):
    text = exposition[0]
    old = {dict(k)["signal"]: v for k, v in _samples(text, "sglang_exporter_signal_value").items()}
    assert old, "the fixture judges some signals"
    seen = {}
    for unit, (name, scale) in SIGNAL_VALUE_METRICS.items():
        for labels, v in _samples(text, name).items():
            sid = dict(labels)["signal"]
            assert SIGNALS_BY_ID[sid].value_unit == unit, (name, sid)
            assert v == pytest.approx(old[sid] * scale)
            seen[sid] = v
    # every judged value is in exactly one unit family; the deprecated family still carries all of them
    assert set(seen) == set(old)
    per_second = _samples(text, "sglang_exporter_signal_value_per_second")
    assert {dict(k)["signal"] for k in per_second} >= {"retractions_frequent", "retraction_storm"}
    assert per_second[frozenset({"signal": "retraction_storm"}.items())] == pytest.approx(
        old["retraction_storm"] / 60)


def test_no_empty_rank_labels(exposition):
    """A log tagged TP0/TP1 only (no DP or PP tags) still names every rank: dp and pp "0", never ""."""
    text = exposition[0]
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            for k, v in s.labels.items():
                if k in ("dp", "tp", "pp", "rank"):
                    assert v != "", s
    queue = _samples(text, "sglang_exporter_queue_requests")
    assert queue[frozenset({"dp": "0", "tp": "1", "pp": "0"}.items())] == 0


def test_rank_labels_of_untagged_and_folded_ranks():
    from exporter.web.expose import _rank_labels
    assert _rank_labels((None, None, None)) == ["0", "0", "0"]       # a single-GPU server's unprefixed log
    assert _rank_labels((None, 3, None)) == ["0", "3", "0"]
    assert _rank_labels((2, 3, 1)) == ["2", "3", "1"]
    assert _rank_labels(("other", None, None)) == ["other", "other", "other"]   # ranks past the cap


def test_deprecated_metrics_still_exported_and_replaced(exposition):
    text = exposition[0]
    declared = set(re.findall(r"^# TYPE (\S+) ", text, flags=re.M))
    deprecated = [m for m in METRICS if m.deprecated]
    assert {m.name for m in deprecated} == {"sglang_exporter_retractions_per_minute",
                                            "sglang_exporter_signal_value", "sglang_exporter_scrape_success",
                                            "sglang_exporter_advice_info"}
    current = {m.name for m in METRICS if not m.deprecated}
    for m in deprecated:
        if m.name != "sglang_exporter_scrape_success":      # the fixture has no --sglang-url
            assert m.name in declared, m.name
        assert any(c in m.replaced_by for c in current), m.name
    assert not any("per_minute" in m.name for m in METRICS if not m.deprecated)


def test_docs_mark_deprecated_metrics():
    text = metrics_doc.render(None)[metrics_doc.PATH]
    for m in METRICS:
        row = next(line for line in text.splitlines() if line.startswith(f"| `{m.name}` |"))
        assert ("**deprecated**" in row) == bool(m.deprecated), row


# ---------------------------------------------------------------------------------------------- docs/metrics.md
METRICS_DOC = Path(__file__).parent.parent / metrics_doc.PATH


def test_metrics_doc_is_generated_from_catalog():
    text = metrics_doc.render(None)[metrics_doc.PATH]
    assert METRICS_DOC.read_text() == text, "docs/metrics.md is stale: run `sglang-exporter generate`"
    for m in METRICS:
        assert f"`{m.name}`" in text


def test_per_rank_series_off_keeps_one_series_per_server(tmp_path):
    """`per_rank_series: false`: each per-rank batch gauge is one series (dp/tp/pp "all") holding what the
    dashboards fold the ranks into (sum over DP ranks of the largest TP rank, the fullest KV pool), and the
    per-rank headroom is left out; everything else is as with the switch on."""
    from golden_exposition import LOG, Clock, T
    from prometheus_client import CollectorRegistry, generate_latest

    from exporter.config import Config
    from exporter.sidecar.run import Sidecar
    from exporter.web.expose import SidecarCollector
    texts = {}
    for per_rank in (True, False):
        log = tmp_path / f"sglang-{per_rank}.log"
        log.write_text(LOG)
        clock = Clock(T)
        sc = Sidecar(Config(profile="offline", log_files=(str(log),), from_start=True, per_rank_series=per_rank),
                     clock=clock)
        sc.poll_logs_once()
        clock.t += 1
        sc.poll_logs_once()
        reg = CollectorRegistry(auto_describe=False)
        reg.register(SidecarCollector(sc))
        texts[per_rank] = generate_latest(reg).decode()
        sc.shutdown()
    on, off = texts[True], texts[False]
    for name, fold in (("sglang_exporter_queue_requests", "sum"), ("sglang_exporter_token_usage_ratio", "max")):
        ranks = _samples(on, name)
        assert len(ranks) >= 2, name                    # the golden log has several ranks
        per_dp: dict = {}
        for labels, v in ranks.items():
            dp = dict(labels)["dp"]
            per_dp[dp] = max(per_dp.get(dp, v), v)
        expected = sum(per_dp.values()) if fold == "sum" else max(ranks.values())
        assert _samples(off, name) == {frozenset({"dp": "all", "tp": "all", "pp": "all"}.items()): expected}
    assert _samples(on, "sglang_exporter_rank_gpu_headroom_bytes")
    assert not _samples(off, "sglang_exporter_rank_gpu_headroom_bytes")
    assert _samples(off, "sglang_exporter_signal_firing") == _samples(on, "sglang_exporter_signal_firing")


def test_cause_label_keeps_one_series_per_kind_of_failure():
    from exporter.web.expose import cause_label
    a = cause_label("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has 79.15 GiB")
    b = cause_label("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.50 GiB. GPU 3 has 1.06 GiB")
    assert a == b == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate N GiB. GPU N has N GiB"
    assert cause_label("RuntimeError at 0x7f3a2c " + "x" * 300) .startswith("RuntimeError at N x")
    assert len(cause_label("E" * 300)) == 120


def test_advice_values_are_samples_of_one_series_per_flag(tmp_path):
    """A suggestion that moves changes a sample, not the set of series: advice_action_info carries flag, action
    and signals only, the values are gauges labelled by flag (a boolean flag 1/0, a name no sample); the
    deprecated advice_info, values as labels, mints a new series for the same change."""
    import dataclasses

    from golden_exposition import LOG, Clock, T

    from exporter.config import Config
    from exporter.sidecar.run import Sidecar
    from exporter.web.expose import families
    log = tmp_path / "sglang.log"
    log.write_text(LOG)
    sc = Sidecar(Config(profile="offline", log_files=(str(log),), from_start=True), clock=Clock(T))
    sc.poll_logs_once()
    view = sc.view()
    sc.shutdown()
    advice = view.snapshot.advice
    assert any(isinstance(r.suggested, float) for r in advice)

    def series(v) -> dict:
        return {(f.name, frozenset(s.labels.items())): s.value for f in families(v) if "advice" in f.name
                for s in f.samples}

    def moved(r):
        return dataclasses.replace(r, suggested=r.suggested * 2) if isinstance(r.suggested, float) else r
    before = series(view)
    after = series(dataclasses.replace(view, snapshot=dataclasses.replace(
        view.snapshot, advice=[moved(r) for r in advice])))
    for name in ("sglang_exporter_advice_action_info", "sglang_exporter_advice_current_value",
                 "sglang_exporter_advice_suggested_value"):
        assert {k for k in before if k[0] == name} == {k for k in after if k[0] == name}, name
    assert before != after                                  # the moved suggestion is a new sample value
    old = "sglang_exporter_advice_info"
    assert {k for k in before if k[0] == old} != {k for k in after if k[0] == old}

    from exporter.web.expose import _number
    assert (_number(True), _number(False), _number(8), _number("flashinfer"), _number(None),
            _number(float("nan"))) == (1.0, 0.0, 8.0, None, None, None)
