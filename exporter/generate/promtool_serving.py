"""Generated promtool tests of the serving signals' native rules (rules_serving). Input series carry the label set
SGLang 0.5.23's scheduler collector gives them (engine_type, model_name, moe_ep_rank, pp_rank, tp_rank, and
dp_rank under DP attention) plus each family's own labels (kind, pool, reason), so a join that would not match
real series fails here too; every test has servers that must stay quiet."""
from __future__ import annotations

from exporter.generate.promql import fmt_duration, num, parse_duration
from exporter.generate.promtool_common import alert_case, counter, expected_alert, series_text, values_text
from exporter.generate.rules import Alert
from exporter.generate.rules_serving import BACKUP, BOOTSTRAP_FAILED, DROPPED, IDLE, IMBALANCE, QUEUE, TRANSFER_FAILED
from exporter.generate.settings import RuleSettings

SCHEDULER = {"engine_type": "unified", "model_name": "m", "moe_ep_rank": "0", "pp_rank": "0"}
SERVING_NATIVE = ("SGLangNativeAdmissionBlocked", "SGLangNativeSchedulerIdleWithQueue",
                  "SGLangNativePDTransferFailures", "SGLangNativeHiCacheTokensDropped",
                  "SGLangNativeDPAttentionImbalance")


def _ranks(pod: dict) -> list[dict]:
    """Two DP-attention schedulers of one server (DP0 on TP0, DP1 on TP1), as 0.5.23 labels them."""
    return [{**pod, **SCHEDULER, "dp_rank": str(i), "tp_rank": str(i)} for i in (0, 1)]


def serving_native_tests(settings: RuleSettings, a: Alert, step: float, pods: tuple, out_labels) -> list[dict]:
    assert a.signal is not None, a.name
    t = settings.thresholds_in_force(a.signal)
    assert t is not None, a.signal
    f = parse_duration(a.for_)
    w = parse_duration(a.expr.split("[", 1)[1].split("]", 1)[0])      # the rule's range
    steps = int((w + f) / step) + 4
    late = (steps - 1) * step                 # the window full of samples: rates come out exact
    pod_a, pod_b, pod_c = pods
    series: list[dict] = []

    def add(name: str, labels: dict, values: list) -> None:
        series.append({"series": series_text(name, labels), "values": values_text(values)})

    if a.name == "SGLangNativeAdmissionBlocked":
        cap = t["max_queued_requests"]
        for lab in _ranks(pod_a):
            add(QUEUE, lab, [cap] * steps)
        for lab in _ranks(pod_b):
            add(QUEUE, lab, [cap // 2] * steps)
        what, value = f"a queue pinned at {num(cap)} fires, half of it does not", cap
    elif a.name == "SGLangNativeSchedulerIdleWithQueue":
        busy, stuck = _ranks(pod_a)
        add(IDLE, busy, [0] * steps)               # busy with a queue
        add(QUEUE, busy, [5] * steps)
        add(IDLE, stuck, counter(step, steps))     # idle the whole time with a queue: fires
        add(QUEUE, stuck, [5] * steps)
        for lab in _ranks(pod_b):                   # idle and nothing queued: quiet
            add(IDLE, lab, counter(step, steps))
            add(QUEUE, lab, [0] * steps)
        for lab in _ranks(pod_c):                   # half idle with a queue: below min_idle
            add(IDLE, lab, counter(step / 2, steps))
            add(QUEUE, lab, [5] * steps)
        what, value = "a scheduler idle with a queue fires; idle and empty, or half busy, does not", 1.0
    elif a.name == "SGLangNativePDTransferFailures":
        per_step = t["per_minute"] * step / 60
        for lab in _ranks(pod_a)[:1]:
            add(TRANSFER_FAILED, lab, counter(per_step, steps))
            add(BOOTSTRAP_FAILED, lab, counter(per_step, steps))
        for lab in _ranks(pod_b)[:1]:
            add(TRANSFER_FAILED, lab, counter(per_step / 4, steps))
        what, value = "2x the failure rate fires (transfers + bootstraps), a quarter does not", 2 * t["per_minute"]
    elif a.name == "SGLangNativeHiCacheTokensDropped":
        lots = max(1.0, 2 * t["min_tokens"] * step / w)      # dropped per step: twice min_tokens per window
        for pod, dropped, backup in ((pod_a, lots, 4 * lots), (pod_b, lots / 100, 4 * lots), (pod_c, 0.5, 0.5)):
            lab = _ranks(pod)[0]
            add(DROPPED, {**lab, "reason": "evicted", "pool": "kv"}, counter(dropped, steps))
            add(BACKUP, {**lab, "pool": "kv"}, counter(backup, steps))
        what, value = "a fifth of evictions dropped fires; 1/400, or a few tokens, does not", 0.2
    elif a.name == "SGLangNativeDPAttentionImbalance":
        per_step = max(1.0, t["min_steps"] * step / w)       # steps per rank per scrape: twice min_steps in all
        ratio = t["max_ratio"]
        for pod, lo in ((pod_a, ratio), (pod_b, 0.0)):
            for lab in _ranks(pod):
                for le in (num(1), num(ratio), num(ratio + 0.5), "+Inf"):
                    above = le == "+Inf" or float(le) > lo
                    add(IMBALANCE + "_bucket", {**lab, "le": le}, counter(per_step if above else 0, steps))
                add(IMBALANCE + "_count", lab, counter(per_step, steps))
        what, value = f"every step between {num(ratio)} and {num(ratio + 0.5)} fires; balanced steps do not", \
            ratio + 0.25
    else:
        raise KeyError(f"no promtool test scenario for native alert {a.name}")
    return [{"name": f"{a.name}: {what}", "interval": fmt_duration(step), "input_series": series,
             "alert_rule_test": [alert_case(a.name, 0, []),
                                 alert_case(a.name, late, [expected_alert(a, out_labels(pod_a), value)])]}]
