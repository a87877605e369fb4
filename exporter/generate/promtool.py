"""alerts/tests/*.test.yml: the generated promtool unit tests of every alert and recording rule."""
from __future__ import annotations

from exporter.config import Config
from exporter.generate.promql import fmt_duration
from exporter.generate.promtool_common import interval
from exporter.generate.promtool_exporter import meta_tests, recording_tests_exporter, signal_test
from exporter.generate.promtool_fleet import latency_recording_tests, server_recording_tests
from exporter.generate.promtool_identity import identity_tests
from exporter.generate.promtool_native import native_tests, recording_tests_native
from exporter.generate.promtool_slo import test_file as slo_test_file
from exporter.generate.rules import EXPORTER_RULES, HEADER, NATIVE_RULES, all_alerts, dump
from exporter.generate.settings import RuleSettings
from exporter.generate.slo import SLO_RULES

RUN = "# Run: promtool test rules alerts/tests/*.test.yml\n"


def test_files(settings: RuleSettings) -> dict[str, dict]:
    """alerts/ relative path -> promtool test document."""
    step = fmt_duration(interval(settings))
    alerts = all_alerts(settings)
    by_kind = {kind: [a for a in alerts if a.kind == kind] for kind in ("signal", "meta", "native")}
    files = {
        "tests/sglang-exporter.signals.test.yml": {
            "rule_files": [f"../{EXPORTER_RULES}"], "evaluation_interval": step,
            "tests": [signal_test(settings, a) for a in by_kind["signal"]]},
        "tests/sglang-exporter.meta.test.yml": {
            "rule_files": [f"../{EXPORTER_RULES}"], "evaluation_interval": step,
            "tests": [t for a in by_kind["meta"] for t in meta_tests(settings, a)]},
        "tests/sglang-exporter.recording.test.yml": {
            "rule_files": [f"../{EXPORTER_RULES}"], "evaluation_interval": step,
            "tests": [recording_tests_exporter(settings), server_recording_tests(settings)]},
        "tests/sglang-native.test.yml": {
            "rule_files": [f"../{NATIVE_RULES}"], "evaluation_interval": step,
            "tests": [t for a in by_kind["native"] for t in native_tests(settings, a)]
            + [recording_tests_native(settings), latency_recording_tests(settings)]},
        # both files loaded, real label sets, two clusters sharing names
        "tests/sglang-identity.test.yml": {
            "rule_files": [f"../{EXPORTER_RULES}", f"../{NATIVE_RULES}"], "evaluation_interval": step,
            "tests": identity_tests(settings, alerts)},
    }
    slo = slo_test_file(settings)      # only with objectives in `slo:`
    if slo is not None:
        files["tests/sglang-slo.test.yml"] = {"rule_files": [f"../{SLO_RULES}"], **slo}
    return files


def render(config: Config) -> dict[str, str]:
    return {f"alerts/{name}": HEADER + RUN + dump(obj) for name, obj in test_files(RuleSettings(config)).items()}
