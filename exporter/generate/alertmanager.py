"""alerts/alertmanager.yml, an example route tree (page / ticket / dead man's switch) with inhibitions, and the
routing cases amtool checks it against (alerts/tests/alertmanager-routes.yml)."""
from __future__ import annotations

from exporter import catalog
from exporter.config import Config
from exporter.generate.promtool_common import NAMESPACE
from exporter.generate.rules import HEADER, WATCHDOG, all_alerts, dump
from exporter.generate.settings import RuleSettings

ALERTMANAGER = "alertmanager.yml"
ROUTES_CASES = "tests/alertmanager-routes.yml"
# Serving out of memory: the cause of the crash and the stall that follow it on the same server
SERVING_OOM_ALERTS = ("SGLangPrefillOOM", "SGLangDecodeOOM")
# a crashed, hung, out-of-memory or unwatched server: its tuning advice is noise until that is fixed
BLINDING_ALERTS = ("SGLangStalled", "SGLangTargetDown", "SGLangExporterDown", "SGLangServerCrashed",
                   "SGLangStartupOOM", "SGLangStartupStalled", *SERVING_OOM_ALERTS)
# every sidecar of a cluster gone: the per-target alerts of that cluster say nothing more
VANISHED = "SGLangExportersVanished"

# the scheduler idle while requests wait (catalog_serving): the stall's second witness
IDLE_ALERT = catalog.SIGNALS_BY_ID["scheduler_idle_waiting"].alert.name  # type: ignore[union-attr]  # (it has one)

# the gateway's alerts joined with an engine's verdict (exporter/catalog/gateway.py)
GATEWAY_CRASHED = "SGLangGatewayWorkerEngineCrashed"
GATEWAY_FAILING = "SGLangGatewayWorkerEngineFailing"
GATEWAY_JOINED = (GATEWAY_CRASHED, GATEWAY_FAILING, "SGLangGatewayCutsOffHealthyEngine")
GATEWAY_FAILING_TARGETS = ("SGLangStartupOOM", *SERVING_OOM_ALERTS, "SGLangStartupStalled", "SGLangStalled", IDLE_ALERT)


def failure_alerts() -> tuple[str, ...]:
    """Alerts that mean "this server died": they silence its stall page."""
    return tuple(s.alert.name for s in catalog.SIGNALS if s.failure and s.alert)


def receiver_for(alert_labels: dict) -> str:
    """The receiver the example Alertmanager config must pick (the routing contract, also used in tests)."""
    if alert_labels.get("alertname") == WATCHDOG:
        return "deadmansswitch"
    if alert_labels.get("severity") == "critical":
        return "page"
    return "ticket"


def alertmanager_config(settings: RuleSettings) -> dict:
    tuning = "|".join(("warning", "info"))
    return {
        "global": {"resolve_timeout": "5m"},
        "route": {
            "receiver": "ticket",
            "group_by": list(settings.group_by),
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "12h",
            "routes": [
                {"receiver": "deadmansswitch", "matchers": [f'alertname="{WATCHDOG}"'],
                 "group_wait": "0s", "group_interval": "1m", "repeat_interval": "1m"},
                {"receiver": "page", "matchers": ['severity="critical"'],
                 "group_wait": "10s", "repeat_interval": "1h"},
                {"receiver": "ticket", "matchers": [f'severity=~"{tuning}"']},
            ],
        },
        # Inhibitions match on the server's identity (cluster, namespace, pod), never on `instance`: the
        # sidecar's and SGLang's own targets of one pod differ in port. The cause silences its effects.
        "inhibit_rules": [
            {  # a hung, unscraped or unwatched server: its tuning advice is noise until that is fixed
                "source_matchers": [f'alertname=~"{"|".join(BLINDING_ALERTS)}"'],
                "target_matchers": [f'severity=~"{tuning}"', f'alertname!="{WATCHDOG}"'],
                "equal": list(settings.inhibit_equal),
            },
            {  # an OOM (at start-up or serving) that takes the server down: one page, the one with the
               # memory advice; the crash's cause line says the same
                "source_matchers": [f'alertname=~"{"|".join(("SGLangStartupOOM",) + SERVING_OOM_ALERTS)}"'],
                "target_matchers": ['alertname="SGLangServerCrashed"'],
                "equal": list(settings.inhibit_equal),
            },
            {  # a dead server's queue no longer moves: the crash page says why, the stall page would not
                "source_matchers": [f'alertname=~"{"|".join(failure_alerts() + SERVING_OOM_ALERTS)}"'],
                "target_matchers": [f'alertname=~"SGLangStalled|{IDLE_ALERT}"'],
                "equal": list(settings.inhibit_equal),
            },
            {  # the gateway cut off a worker whose engine crashed: one page, the joined one (its engine's crash
                # page, on the engine's identity)
                "source_matchers": [f'alertname="{GATEWAY_CRASHED}"'],
                "target_matchers": ['alertname="SGLangServerCrashed"'],
                "equal": list(settings.inhibit_equal),
            },
            {  # ... or whose engine stalled, ran out of memory or never started: the joined page names the engine's
               # verdict, so the engine's own pages for it are held back
                "source_matchers": [f'alertname="{GATEWAY_FAILING}"'],
                "target_matchers": [f'alertname=~"{"|".join(GATEWAY_FAILING_TARGETS)}"'],
                "equal": list(settings.inhibit_equal),
            },
            {  # ... and the gateway's own breaker alert on that worker. The joined alerts carry the engine's identity,
               # the breaker alert the gateway's (its namespace may differ): the worker URL is what they share
                "source_matchers": [f'alertname=~"{"|".join(GATEWAY_JOINED)}"'],
                "target_matchers": ['alertname="SGLangGatewayCircuitOpen"'],
                "equal": [lab for lab in settings.inhibit_equal if lab in settings.cluster_labels] + ["worker"],
            },
            {  # the gateway's p99 time to first token far above the engines' says more than its mean duration
                "source_matchers": ['alertname="SGLangGatewayTTFTAboveEngines"'],
                "target_matchers": ['alertname="SGLangGatewayLatencyAboveEngines"'],
                "equal": [lab for lab in settings.inhibit_equal if lab in settings.cluster_labels] + ["namespace"],
            },
            {  # no batch progress and the scheduler's own clock idle are one incident: the stall pages, the
               # idle scheduler (its second witness, catalog_serving) is held back; alone it pages itself
                "source_matchers": ['alertname="SGLangStalled"'],
                "target_matchers": [f'alertname="{IDLE_ALERT}"'],
                "equal": list(settings.inhibit_equal),
            },
            {  # a whole cluster's sidecars gone: one page for the cluster, not one per target
                "source_matchers": [f'alertname="{VANISHED}"'],
                "target_matchers": ['alertname=~"SGLangExporterDown|SGLangTargetDown"'],
                "equal": list(settings.cluster_labels),
            },
            {  # a critical of a family (retraction storm) silences its warnings (retractions frequent)
                "source_matchers": ['severity="critical"', 'family=~".+"'],
                "target_matchers": ['severity="warning"', 'family=~".+"'],
                "equal": list(settings.inhibit_equal) + ["family"],
            },
        ],
        "receivers": [
            {"name": "page", "webhook_configs": [{"url": settings.page_url, "send_resolved": True}]},
            {"name": "ticket", "webhook_configs": [{"url": settings.ticket_url, "send_resolved": True}]},
            {"name": "deadmansswitch", "webhook_configs": [{"url": settings.deadmansswitch_url,
                                                            "send_resolved": False}]},
        ],
    }


def route_cases(settings: RuleSettings) -> list[dict]:
    out = []
    for a in all_alerts(settings):
        labels = {"alertname": a.name, "severity": a.severity, **a.labels}
        if a.name == VANISHED:
            labels.update({label: "eu-1" for label in settings.cluster_labels})
        elif a.name != WATCHDOG:
            labels.update({"cluster": "eu-1", "namespace": NAMESPACE, "pod": "sglang-0",
                           "instance": "10.0.0.1:10060"})
        out.append({"labels": labels, "receiver": receiver_for(labels)})
    return out


def render(config: Config) -> dict[str, str]:
    settings = RuleSettings(config)
    return {
        f"alerts/{ALERTMANAGER}": (HEADER + "# Example Alertmanager configuration: replace the webhook URLs with "
                                   "your pager, ticketing and\n# dead-man's-switch endpoints.\n"
                                   + dump(alertmanager_config(settings))),
        f"alerts/{ROUTES_CASES}": (HEADER + "# Routing cases: amtool config routes test --config.file=alerts/"
                                   "alertmanager.yml --verify.receivers=<receiver> <labels...>\n"
                                   + dump({"cases": route_cases(settings)})),
    }
