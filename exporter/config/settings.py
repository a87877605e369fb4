"""The settings and their defaults: the sidecar's Config, the `alerts:` section's AlertSettings, each signal's
thresholds under a profile and overrides, and the listen address read and explained when it cannot be bound."""
from __future__ import annotations

from dataclasses import dataclass, field

from exporter import catalog
from exporter.catalog import DEFAULT_PROFILE, RUNBOOK_BASE
from exporter.catalog import slo as catalog_slo

DEFAULT_PORT = 10060
ENV_PREFIX = "SGLANG_EXPORTER_"


class ConfigError(ValueError):
    """A configuration mistake; the message says where and why (one line per mistake)."""


@dataclass(frozen=True)
class AlertSettings:
    """The `alerts:` section: what `sglang-exporter generate` needs besides the signals' thresholds."""
    # PromQL matchers (without braces) of the sidecar's scrape job, and of SGLang's own /metrics job.
    exporter_selector: str = 'job="sglang-exporter"'
    sglang_selector: str = 'job="sglang"'
    # Labels one server's two targets (the sidecar and SGLang's /metrics) share, in every cluster: the
    # native rules stand down, Alertmanager groups and inhibits on them. The last one names the server
    # itself (pod): a target without it is never joined to another. `cluster` may be an external label.
    identity_labels: tuple = ("cluster", "namespace", "pod")
    # Labels of one target, for joins of one target's series (None: identity_labels + instance, job).
    join_labels: tuple | None = None
    native_keep_labels: tuple = ("model_name",)     # SGLang's labels the native alerts keep
    group_by: tuple | None = None        # Alertmanager route grouping (None: identity_labels)
    inhibit_equal: tuple | None = None   # labels equal for an inhibition (None: identity_labels)
    # Labels that tell clusters apart (often an external label): fleet roll-ups keep them, and the
    # absence alert pages per their values when a cluster's exporters vanish.
    cluster_labels: tuple = ("cluster",)
    absence_window: str = "1h"           # how far back a vanished cluster's exporters are remembered
    runbook_base_url: str = RUNBOOK_BASE             # runbook_url = <this>/<AlertName>.md
    # Profile whose thresholds the native rules compare; None: catalog defaults and every native alert
    # (one rule file usually serves a fleet of profiles, so this is not the sidecar's `profile`).
    profile: str | None = None
    alert_for: dict = field(default_factory=dict)    # alert name -> `for:` (overrides the catalog's)
    max_unknown_ratio: float = 0.2                   # parser drift: (unknown + malformed) / SGLang lines
    drift_window: str = "30m"
    log_stale_window: str = "15m"
    rate_window: str = "5m"                          # recording rules and latency quantiles
    # End-to-end tests: every non-zero `for:` becomes short_for and every range short_range.
    short_windows: bool = False
    short_for: str = "10s"
    short_range: str = "1m"
    page_url: str = "http://127.0.0.1:9/page"        # the Alertmanager example's webhooks
    ticket_url: str = "http://127.0.0.1:9/ticket"
    deadmansswitch_url: str = "http://127.0.0.1:9/deadmansswitch"
    # Labels of the promtool test series, when a selector is not a plain equality (e.g. job=~"...").
    exporter_test_labels: dict | None = None
    sglang_test_labels: dict | None = None


@dataclass(frozen=True)
class Config:
    log_files: tuple[str, ...] = ()
    from_start: bool = False          # replay every existing line (on the log's own clock)
    from_end: bool = False            # replay nothing: join at the end (no start-up read-back)
    readback_bytes: int = 256 << 20   # how far back from the end to look for the latest start-up block
    positions_file: str | None = None  # where read positions and counters survive a sidecar restart
    positions_interval: float = 5.0   # seconds between writes of the positions file (and one at shutdown)
    sglang_url: str | None = None
    listen: str = f":{DEFAULT_PORT}"   # every address, IPv6 and IPv4 (web/address.py)
    profile: str = DEFAULT_PROFILE
    scrape_interval: float = 15.0
    scrape_timeout: float = 5.0
    scrape_max_bytes: int = 16 * 1024 * 1024
    scrape_stale_after: float | None = None   # seconds; None: 3 x scrape_interval (see stale_after)
    max_line_bytes: int = 1 << 18          # SGLang records we read are < 64 KiB (server_args); longer: request text
    poll_interval: float = 0.25
    evaluate_interval: float = 5.0
    web_config: str | None = None
    # False: one series per family for the per-rank batch gauges (dp/tp/pp = "all") instead of one per rank
    per_rank_series: bool = True
    signals: dict = field(default_factory=dict)   # signal id -> {param: value, "enabled": bool}
    # objective kind (catalog_slo.KINDS) -> {"target": 0-1, "threshold_seconds": bucket bound (latency kinds)}
    slo: dict = field(default_factory=dict)
    alerts: AlertSettings = field(default_factory=AlertSettings)

    def signal_params(self) -> dict[str, dict | None]:
        """Thresholds in force per signal for this profile and these overrides (None = inactive)."""
        return {sig.id: thresholds(sig.id, self.profile, self.signals) for sig in catalog.SIGNALS}

    @property
    def stale_after(self) -> float:
        """Seconds after the last good scrape past which its values are dropped and /metrics reads as down."""
        return self.scrape_stale_after if self.scrape_stale_after is not None else 3 * self.scrape_interval

    @property
    def listen_host_port(self) -> tuple[str, int]:
        return split_host_port(self.listen, "listen")


def thresholds(signal_id: str, profile: str | None, overrides: dict) -> dict | None:
    """One signal's thresholds: the profile's (None: the catalog defaults, signal always active) under the
    `signals:` overrides; None when the profile or `enabled: false` turns it off."""
    sig = catalog.SIGNALS_BY_ID[signal_id]
    over = dict(overrides.get(signal_id) or {})
    enabled = over.pop("enabled", None)
    base = sig.defaults if profile is None else sig.params(profile)
    if enabled is False or (base is None and not enabled):
        return None
    return {**(base or sig.defaults), **over}


def default_alert_for() -> dict:
    """Every alert's `for:` from the catalog (signal and meta alerts; native alerts use their signal's)."""
    out = {s.alert.name: s.alert.for_ for s in catalog.SIGNALS if s.alert}
    out.update({m.alert.name: m.alert.for_ for m in catalog.META_ALERTS})
    for kind in catalog_slo.KINDS:
        page, ticket = catalog_slo.alert_names(kind)
        out.update({page: catalog_slo.PAGE_FOR, ticket: catalog_slo.TICKET_FOR})
    return out


def split_host_port(text: str, where: str) -> tuple[str, int]:
    """(host, port) of ``HOST:PORT``; an IPv6 host in brackets loses them, an empty host (``:PORT``) is every
    address."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{where}: expected HOST:PORT (e.g. :{DEFAULT_PORT}, every address), got {text!r}")
    return host.strip("[]"), int(port)


def url_host(host: str) -> str:
    """``host`` as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def reachable_host(host: str) -> str:
    """Where this machine reaches a listener bound to ``host``: a wildcard address on loopback (``[::]`` is
    IPv6 alone, so on ::1)."""
    return {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)


def cannot_listen(listen: str, where: str, exc: OSError, change: str) -> str:
    """Why binding `listen` failed, for people: `where` names what set the address (a flag, an environment
    variable, a config file's line, or "the default"), `change` how to give another one."""
    import errno
    host, port = split_host_port(listen, where)
    other = f"{url_host(host)}:{port + 1 if port < 65535 else DEFAULT_PORT}"
    if exc.errno == errno.EADDRINUSE:
        why = (f"port {port} is in use (another sglang-exporter or demo, or another program: "
               f"`ss -ltnp 'sport = :{port}'` names it)")
    elif exc.errno == errno.EACCES:
        why = f"port {port} needs privileges (ports below 1024); use one above 1024"
    elif exc.errno == errno.EADDRNOTAVAIL:
        why = f"{host} is no address of this machine; use :{port} (every address) or 127.0.0.1 (this machine only)"
    else:
        why = str(exc.strerror or exc)
    return f"{where} {listen}: cannot listen: {why}; pick another address with {change}, e.g. {other}"
