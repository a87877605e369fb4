"""The catalog's vocabulary: profiles, severities, the namespace, and the Signal, Advice and alert records every
catalog module builds on."""
from __future__ import annotations

from dataclasses import dataclass, field

GIB = 1024 ** 3

PROFILES = {
    "offline": "Offline batch inference: throughput first. A queue of 100-2000 keeps the batch full.",
    "online": "Online serving: latency first. An empty queue is healthy; latency objectives apply.",
    "long-context": "Long prompts: prefill dominates; queue depth and latency objectives are relaxed.",
    "multi-turn": "Chat sessions sharing prefixes: latency objectives apply; queue depth is not judged.",
}
# the profile of a server nobody described: SGLang is mostly an online server (the kustomize base says
# `profile: online` too), and an idle online server is healthy; the offline profile judges an empty queue as
# a client too slow for a batch job, which it is only when the user says it is one (--profile offline)
DEFAULT_PROFILE = "online"

SEVERITIES = ("critical", "warning", "info")

# Prefix of every metric the exporter itself exports. SGLang's own metrics use `sglang:`; ours never carry
# a colon (colons are reserved for recording rules).
NS = "sglang_exporter"

RUNBOOK_BASE = "https://github.com/sglang-exporter/sglang-exporter/blob/main/docs/runbooks"


def runbook_url(alertname: str, base: str = RUNBOOK_BASE) -> str:
    """Where an alert's runbook is: `alerts.runbook_base_url` + /<AlertName>.md (the alerts' runbook_url, the API's
    and the reports' links alike)."""
    return f"{base.rstrip('/')}/{alertname}.md"


@dataclass(frozen=True)
class Advice:
    """One tuning recommendation a signal makes when it fires."""
    flag: str            # an SGLang flag ("--schedule-conservativeness") or a client knob ("request-rate")
    action: str          # "increase" | "decrease" | "check"
    suggested: object    # a value, or None when it depends on the current value (computed in advice.py)
    reason: str
    # Following it lowers memory pressure (OOM / retraction risk). Wins a tie between opposite directions.
    relieves_pressure: bool = False
    # The start-up stages (exporter.state.failures.STAGES) it applies to; empty: always.
    when: tuple = ()


@dataclass(frozen=True)
class AlertSpec:
    name: str            # CamelCase, starts with SGLang
    for_: str            # Prometheus duration
    summary: str         # static sentence ending in a period
    description: str     # Go template; may use $labels and $value
    page: bool           # True: pages a human (critical route); False: a ticket


# threshold parameters that count what a judge needs before it judges (the configuration wants whole numbers
# of at least 1: 0 would judge an empty window, a share of none)
COUNT_PARAMS = frozenset(("min_samples", "min_requests", "min_events", "history"))


@dataclass(frozen=True)
class Signal:
    id: str
    title: str
    meaning: str              # what it means when it fires (runbook "Meaning")
    impact: str               # what users feel (runbook "Impact")
    severity: str
    inputs: tuple             # event kinds (log) and SGLang metric names (scrape) it reads
    formula: str              # the rule, in words, with the parameter names used below
    value_unit: str           # unit of sglang_exporter_signal_value for this signal
    window_seconds: float
    defaults: dict            # threshold parameters
    profiles: dict            # profile -> None (inactive) or overrides of `defaults`; absent = defaults
    advice: tuple = ()
    alert: AlertSpec | None = None
    guide: str = ""           # the tuning-guide sentence it encodes, paraphrased
    family: str = ""          # signals of one family: the family's critical alert silences its warnings
    failure: bool = False     # the server failed (crashed, could not start): the verdict is `failed`

    def params(self, profile: str) -> dict | None:
        """Thresholds in force for `profile`, or None when the signal is inactive there."""
        if profile in self.profiles and self.profiles[profile] is None:
            return None
        return {**self.defaults, **(self.profiles.get(profile) or {})}

    @property
    def runbook_anchor(self) -> str:
        return self.alert.name.lower() if self.alert else self.id


# Alerts that watch the monitoring itself rather than SGLang's health.
@dataclass(frozen=True)
class MetaAlert:
    alert: AlertSpec
    severity: str
    meaning: str
    impact: str
    params: dict = field(default_factory=dict)

