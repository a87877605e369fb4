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
# a crashed, hung or unwatched server: its tuning advice is noise until that is fixed
BLINDING_ALERTS = ("SGLangStalled", "SGLangTargetDown", "SGLangExporterDown", "SGLangServerCrashed",
                   "SGLangStartupOOM", "SGLangStartupStalled")


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
        "inhibit_rules": [
            {  # a hung, unscraped or unwatched server: its tuning advice is noise until that is fixed
                "source_matchers": [f'alertname=~"{"|".join(BLINDING_ALERTS)}"'],
                "target_matchers": [f'severity=~"{tuning}"', f'alertname!="{WATCHDOG}"'],
                "equal": list(settings.inhibit_equal),
            },
            {  # a start-up OOM also crashes the server: one page, the one with the memory advice
                "source_matchers": ['alertname="SGLangStartupOOM"'],
                "target_matchers": ['alertname="SGLangServerCrashed"'],
                "equal": list(settings.inhibit_equal),
            },
            {  # a dead server's queue no longer moves: the crash page says why, the stall page would not
                "source_matchers": [f'alertname=~"{"|".join(failure_alerts())}"'],
                "target_matchers": ['alertname="SGLangStalled"'],
                "equal": list(settings.inhibit_equal),
            },
            {  # a gateway breaker open on a worker whose engine crashed: one page, the joined one (its engine's
                # crash page, on the engine's instance)
                "source_matchers": ['alertname="SGLangGatewayWorkerEngineCrashed"'],
                "target_matchers": ['alertname="SGLangServerCrashed"'],
                "equal": list(settings.inhibit_equal),
            },
            {  # ... and the gateway's own breaker alert on that worker
                "source_matchers": ['alertname="SGLangGatewayWorkerEngineCrashed"'],
                "target_matchers": ['alertname="SGLangGatewayCircuitOpen"'],
                "equal": [lab for lab in settings.inhibit_equal if lab != "instance"] + ["worker"],
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
        if a.name != WATCHDOG:
            labels.update({"namespace": NAMESPACE, "instance": "10.0.0.1:10060"})
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
