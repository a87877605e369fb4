"""The generators' read-only view of a validated `Config`: thresholds, `for:` and windows in force."""
from __future__ import annotations

from exporter.catalog import runbook_url
from exporter.config import AlertSettings, Config, default_alert_for, thresholds
from exporter.generate.promql import parse_duration


class RuleSettings:
    """What the rule, test, runbook and doc generators read; every value comes from one `Config`
    (its `alerts:` section and its `signals:` overrides); nothing here is validated again."""

    def __init__(self, config: Config | None = None):
        self.config = config or Config()
        self.alerts: AlertSettings = self.config.alerts
        self.alert_for = {**default_alert_for(), **self.alerts.alert_for}

    def __getattr__(self, name):        # selectors, label lists, windows, URLs: as in the alerts: section
        return getattr(self.alerts, name)

    @property
    def join_labels(self) -> tuple:
        """One target's labels: what joins of one target's own series match on."""
        joined = self.alerts.join_labels
        return joined if joined is not None else self.identity_labels + ("instance", "job")

    @property
    def group_by(self) -> tuple:
        return self.alerts.group_by if self.alerts.group_by is not None else self.identity_labels

    @property
    def inhibit_equal(self) -> tuple:
        return self.alerts.inhibit_equal if self.alerts.inhibit_equal is not None else self.identity_labels

    @property
    def server_label(self) -> str:
        """The identity label that names the server itself (pod): without it a target is joined to nothing."""
        return self.identity_labels[-1]

    def thresholds(self, signal_id: str) -> dict:
        """The catalog defaults under the `signals:` overrides, whatever the profile (test values)."""
        found = thresholds(signal_id, None, {signal_id: self._overrides(signal_id)})
        assert found is not None, signal_id      # without a profile a signal is off only by `enabled: false`
        return found

    def thresholds_in_force(self, signal_id: str) -> dict | None:
        """Thresholds the native rules compare (None: the signal is off in `alerts.profile`)."""
        return thresholds(signal_id, self.alerts.profile, self.config.signals)

    def objectives(self) -> dict:
        """The `slo:` objectives in force, in the catalog's order (kind -> {target, threshold_seconds})."""
        from exporter.catalog.slo import KINDS
        return {k.id: self.config.slo[k.id] for k in KINDS if k.id in self.config.slo}

    def _overrides(self, signal_id: str) -> dict:
        return {k: v for k, v in (self.config.signals.get(signal_id) or {}).items() if k != "enabled"}

    def for_duration(self, alertname: str) -> str:
        d = self.alert_for[alertname]
        if self.alerts.short_windows and parse_duration(d) > 0:
            return self.alerts.short_for
        return d

    def window(self, d: str) -> str:
        return self.alerts.short_range if self.alerts.short_windows else d

    def runbook_url(self, alertname: str) -> str:
        return runbook_url(alertname, self.alerts.runbook_base_url)
