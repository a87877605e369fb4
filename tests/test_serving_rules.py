"""The serving signals' native rules, run by the real promtool on each release's own exposition: every series of
the families a rule reads, with the labels that release's collector gave it (plus the scrape's target labels),
over scrapes whose values script a fault or stay healthy. A rule that joins or aggregates on labels the real
series do not carry stays silent on the fault and fails here (a bare `{}` series would hide it)."""
from __future__ import annotations

import subprocess

import pytest
import yaml

from exporter.config import Config
from exporter.generate.rules import NATIVE_RULES, dump, rule_files
from exporter.generate.settings import RuleSettings
from tests import serving_faults as sf
from tests.helpers import require_tool

TARGET = {"namespace": "sglang", "pod": "sglang-0", "instance": "10.0.0.1:30000", "job": "sglang"}
STEPS = 40          # one-minute scrapes: every window (<= 10m) and `for:` (<= 15m) fits
CAP = 140           # the conformance expositions' queue per scheduler


def _series(texts: list[str], families: tuple[str, ...]) -> list[dict]:
    """promtool input series of every sample of `families` in the scrapes, in order (labels as exposed)."""
    values: dict[tuple, list] = {}
    for i, text in enumerate(texts):
        for name, labels, value in sf.samples(text):
            if name in families:
                key = (name, tuple(sorted({**labels, **TARGET}.items())))
                values.setdefault(key, [None] * len(texts))[i] = value
    out = []
    for (name, labels), vals in values.items():
        inner = ", ".join(f'{k}="{v}"' for k, v in labels)
        out.append({"series": f"{name}{{{inner}}}",
                    "values": " ".join("_" if v is None else repr(v) for v in vals)})
    assert out, families
    return out


def _run(tmp_path, alert: str, texts: list[str], families: tuple[str, ...], fires: bool) -> None:
    promtool = require_tool("promtool")
    config = Config(signals={"admission_blocked": {"max_queued_requests": CAP}})
    rules = tmp_path / "native.rules.yml"
    rules.write_text(dump(rule_files(RuleSettings(config))[NATIVE_RULES]))
    expected = [{"labels": f'{{instance="{TARGET["instance"]}", model_name="conformance/model"}}', "value": 1}]
    test = {"rule_files": [rules.name], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": _series(texts, families),
                       "promql_expr_test": [{
                           "expr": f'count by (instance, model_name) (ALERTS{{alertname="{alert}", '
                                   f'alertstate="firing"}})',
                           "eval_time": f"{STEPS - 1}m", "exp_samples": expected if fires else []}]}]}
    path = tmp_path / "case.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    done = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


IDLE = ("sglang:scheduler_idle_seconds_total", "sglang:num_queue_reqs")


@pytest.mark.parametrize("release,layout", [(r, None) for r in sf.with_releases("scheduler_idle_seconds_total")]
                         + [("0.5.23", "dp_attention")])
@pytest.mark.parametrize("stuck", [True, False])
def test_native_idle_scheduler_rule_on_the_release_exposition(tmp_path, release, layout, stuck):
    text = sf.exposition(release, layout)
    texts = [sf.edit(text, IDLE[0], lambda labels, old, i=i: old + (60.0 * i if stuck else 0.0))
             for i in range(STEPS)]
    _run(tmp_path, "SGLangNativeSchedulerIdleWithQueue", texts, IDLE, stuck)


@pytest.mark.parametrize("release", sf.with_releases("num_transfer_failed_reqs_total")[::5] + ["0.5.23"])
@pytest.mark.parametrize("failing", [True, False])
def test_native_pd_failure_rule_on_the_release_exposition(tmp_path, release, failing):
    text = sf.exposition(release)
    texts = [sf.add_family(text, release, "num_transfer_failed_reqs_total", "counter",
                           [({}, (3.0 * i) if failing else 2.0)]) for i in range(STEPS)]
    _run(tmp_path, "SGLangNativePDTransferFailures", texts, ("sglang:num_transfer_failed_reqs_total",), failing)


HICACHE = ("sglang:hicache_dropped_tokens_total", "sglang:hicache_backup_tokens_total")


@pytest.mark.parametrize("release", sf.with_releases("hicache_dropped_tokens_total"))
@pytest.mark.parametrize("dropping", [True, False])
def test_native_hicache_rule_on_the_release_exposition(tmp_path, release, dropping):
    text = sf.exposition(release)

    def at(i):
        out = sf.add_family(text, release, "hicache_backup_tokens_total", "counter", [({"pool": "kv"}, 800.0 * i)])
        return sf.add_family(out, release, "hicache_dropped_tokens_total", "counter",
                             [({"reason": "evicted", "pool": "kv"}, (200.0 if dropping else 2.0) * i)])
    _run(tmp_path, "SGLangNativeHiCacheTokensDropped", [at(i) for i in range(STEPS)], HICACHE, dropping)


DP = ("sglang:dp_attention_token_imbalance_ratio_bucket", "sglang:dp_attention_token_imbalance_ratio_count")


@pytest.mark.parametrize("release,layout", [("0.5.22", None), ("0.5.23", None), ("0.5.23", "dp_attention")])
@pytest.mark.parametrize("skewed", [True, False])
def test_native_dp_imbalance_rule_on_the_release_exposition(tmp_path, release, layout, skewed):
    text = sf.exposition(release, layout)
    ratio = 2.0 if skewed else 1.0       # every step's ratio at most this bucket bound

    def at(i):
        out = sf.edit(text, DP[0], lambda labels, old: 50.0 * i if float(labels["le"]) >= ratio else 0.0)
        return sf.edit(out, DP[1], lambda labels, old: 50.0 * i)
    _run(tmp_path, "SGLangNativeDPAttentionImbalance", [at(i) for i in range(STEPS)], DP, skewed)


@pytest.mark.parametrize("release", ["0.4.10.post2", "0.5.9", "0.5.23"])
@pytest.mark.parametrize("pinned", [True, False])
def test_native_admission_rule_with_a_configured_cap_on_the_release_exposition(tmp_path, release, pinned):
    text = sf.exposition(release)           # 140 queued per scheduler: at the cap of 140
    texts = [text if pinned else sf.edit(text, "sglang:num_queue_reqs", lambda labels, old: old / 2)] * STEPS
    _run(tmp_path, "SGLangNativeAdmissionBlocked", texts, ("sglang:num_queue_reqs",), pinned)
