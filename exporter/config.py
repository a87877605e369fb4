"""Configuration: defaults < YAML file < environment variables < command-line flags.

One validator for the sidecar and for `sglang-exporter generate`: every bad value becomes a ConfigError
naming the file, line and key (or the flag / variable) and why; a file's mistakes are all reported at once,
in file order.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from urllib.parse import urlparse

from exporter import catalog
from exporter.catalog import DEFAULT_PROFILE, PROFILES, RUNBOOK_BASE
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
    listen: str = f"0.0.0.0:{DEFAULT_PORT}"
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


# key -> (type, env var) for the scalar settings; flags carry the same names with dashes
_SCALARS = {
    "log_files": (list, "LOG_FILE"), "from_start": (bool, "FROM_START"), "from_end": (bool, "FROM_END"),
    "readback_bytes": (int, "READBACK_BYTES"), "positions_file": (str, "POSITIONS_FILE"),
    "positions_interval": (float, "POSITIONS_INTERVAL"), "sglang_url": (str, "SGLANG_URL"),
    "listen": (str, "LISTEN"), "profile": (str, "PROFILE"), "scrape_interval": (float, "SCRAPE_INTERVAL"),
    "scrape_timeout": (float, "SCRAPE_TIMEOUT"), "scrape_max_bytes": (int, "SCRAPE_MAX_BYTES"),
    "scrape_stale_after": (float, "SCRAPE_STALE_AFTER"),
    "max_line_bytes": (int, "MAX_LINE_BYTES"), "poll_interval": (float, "POLL_INTERVAL"),
    "evaluate_interval": (float, "EVALUATE_INTERVAL"), "web_config": (str, "WEB_CONFIG"),
    "per_rank_series": (bool, "PER_RANK_SERIES"),
}
assert set(_SCALARS) | {"signals", "slo", "alerts"} == {f.name for f in fields(Config)}

# `alerts:` keys -> kind; `for` is spelt as in a rule file (the field is alert_for)
_ALERT_KEYS = {
    "exporter_selector": "selector", "sglang_selector": "selector", "identity_labels": "labels",
    "cluster_labels": "labels", "join_labels": "labels", "native_keep_labels": "labels",
    "absence_window": "duration", "group_by": "labels", "inhibit_equal": "labels", "runbook_base_url": "url",
    "profile": "profile", "for": "for", "max_unknown_ratio": "ratio", "drift_window": "duration",
    "log_stale_window": "duration", "rate_window": "duration", "short_windows": "bool", "short_for": "duration",
    "short_range": "duration", "page_url": "url", "ticket_url": "url", "deadmansswitch_url": "url",
    "exporter_test_labels": "label_values", "sglang_test_labels": "label_values",
}
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_DURATION = re.compile(r"(?:\d+(?:ms|s|m|h|d|w|y))+|0")


def split_host_port(text: str, where: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{where}: expected HOST:PORT (e.g. 0.0.0.0:{DEFAULT_PORT}), got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def cannot_listen(listen: str, where: str, exc: OSError, change: str) -> str:
    """Why binding `listen` failed, for people: `where` names what set the address (a flag, an environment
    variable, a config file's line, or "the default"), `change` how to give another one."""
    import errno
    host, port = split_host_port(listen, where)
    other = f"{host}:{port + 1 if port < 65535 else DEFAULT_PORT}"
    if exc.errno == errno.EADDRINUSE:
        why = (f"port {port} is in use (another sglang-exporter or demo, or another program: "
               f"`ss -ltnp 'sport = :{port}'` names it)")
    elif exc.errno == errno.EACCES:
        why = f"port {port} needs privileges (ports below 1024); use one above 1024"
    elif exc.errno == errno.EADDRNOTAVAIL:
        why = f"{host} is no address of this machine; use 0.0.0.0 (every interface) or 127.0.0.1 (this machine only)"
    else:
        why = str(exc.strerror or exc)
    return f"{where} {listen}: cannot listen: {why}; pick another address with {change}, e.g. {other}"


def _coerce(key: str, value, where: str):
    kind = _SCALARS[key][0]
    if kind is list:
        if isinstance(value, str):
            return tuple(p for p in value.replace(os.pathsep, ",").split(",") if p.strip())
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigError(f"{where}: expected a list of paths or globs, got {value!r}")
    if kind is bool:
        return _bool(value, where)
    if kind in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        try:
            number = kind(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: expected a number, got {value!r}") from None
        if number <= 0:
            raise ConfigError(f"{where}: must be positive, got {value!r}")
        return number
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where}: expected a string, got {value!r}")
    return value


def _bool(value, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return value.lower() in ("1", "true", "yes", "on")
    raise ConfigError(f"{where}: expected true or false, got {value!r}")


def _key_lines(text: str) -> dict[tuple, int]:
    """Line numbers (1-based) of mapping keys in a YAML document, by key path."""
    import yaml
    lines: dict[tuple, int] = {}

    def walk(node, path):
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = (*path, k.value)
                lines[key] = k.start_mark.line + 1
                walk(v, key)
    try:
        walk(yaml.compose(text), ())
    except yaml.YAMLError:
        pass
    return lines


class _Problems:
    """Mistakes found in one file, kept with their line so they are reported in file order."""

    def __init__(self, path: str, lines: dict[tuple, int]):
        self.path, self.lines = path, lines
        self.found: list[str] = []

    def where(self, *keys) -> str:
        line = self.lines.get(tuple(str(k) for k in keys))
        name = ".".join(str(k) for k in keys)
        return f"{self.path}:{line}: {name}" if line else f"{self.path}: {name}"

    def line_of(self, where: str) -> int:
        head = where.split(": ", 1)[0]
        tail = head.rsplit(":", 1)[-1]
        return int(tail) if tail.isdigit() else 1 << 30

    def add(self, error: ConfigError) -> None:
        self.found.append(str(error))

    def raise_if_any(self) -> None:
        if self.found:
            ordered = sorted(self.found, key=self.line_of)     # stable: same line keeps its order
            raise ConfigError("\n".join(ordered))


def load_file(path: str) -> dict:
    """Read and validate a YAML config file into Config keyword arguments."""
    return _load_file(path)[0]


def _load_file(path: str, problems: _Problems | None = None) -> tuple[dict, dict]:
    """load_file, plus where each setting came from ("FILE:LINE: key") for later cross-field checks.
    With `problems`, mistakes are collected there instead of raised."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        hint = {FileNotFoundError: " (check the path)", IsADirectoryError: " (name the YAML file in it)"}.get(
            type(exc), "")
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror or exc}{hint}") from None
    # yaml is imported here, not at the top: most runs (analyze, parse) read no config file, and importing it
    # is a tenth of their start-up
    import yaml
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{at}: not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of settings")
    own = problems is None
    problems = problems or _Problems(path, _key_lines(text))
    problems.path, problems.lines = path, _key_lines(text)
    out: dict = {}
    for key, value in data.items():
        try:
            if key == "signals":
                out["signals"] = _signals(value, problems)
            elif key == "slo":
                out["slo"] = _slo(value, problems)
            elif key == "alerts":
                out["alerts"] = _alerts(value, problems)
            elif key in _SCALARS:
                out[key] = _coerce(key, value, problems.where(key))
            else:
                known = ", ".join(sorted([*_SCALARS, "signals", "slo", "alerts"]))
                raise ConfigError(f"{problems.where(key)}: unknown setting (known: {known})")
        except ConfigError as exc:
            problems.add(exc)
    if own:
        problems.raise_if_any()
    return out, {key: problems.where(key) for key in out}


def _signals(value, problems: _Problems) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{problems.where('signals')}: expected a mapping of signal id to thresholds")
    out = {}
    for sid, over in value.items():
        sig = catalog.SIGNALS_BY_ID.get(sid)
        if sig is None:
            problems.add(ConfigError(f"{problems.where('signals', sid)}: unknown signal "
                                     f"(known: {', '.join(catalog.SIGNALS_BY_ID)})"))
            continue
        if not isinstance(over, dict):
            problems.add(ConfigError(f"{problems.where('signals', sid)}: expected a mapping of parameter to value"))
            continue
        clean = {}
        for param, v in over.items():
            where = problems.where("signals", sid, param)
            if param == "enabled":
                if not isinstance(v, bool):
                    problems.add(ConfigError(f"{where}: expected true or false"))
                    continue
            elif param not in sig.defaults and not any(param in (o or {}) for o in sig.profiles.values()):
                problems.add(ConfigError(f"{where}: unknown parameter (known: {', '.join(sig.defaults)}, enabled)"))
                continue
            elif not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                problems.add(ConfigError(f"{where}: expected a non-negative number, got {v!r}"))
                continue
            clean[param] = v
        out[sid] = clean
    return out


def _slo(value, problems: _Problems) -> dict:
    """`slo:` kind -> {target, threshold_seconds, custom_buckets}; every mistake named by file, line and key."""
    if not isinstance(value, dict):
        raise ConfigError(f"{problems.where('slo')}: expected a mapping of objective to its target "
                          f"(known: {', '.join(catalog_slo.KINDS_BY_ID)})")
    out = {}
    for kind_id, spec in value.items():
        kind = catalog_slo.KINDS_BY_ID.get(kind_id)
        if kind is None:
            problems.add(ConfigError(f"{problems.where('slo', kind_id)}: unknown objective "
                                     f"(known: {', '.join(catalog_slo.KINDS_BY_ID)})"))
            continue
        known = ("target", "threshold_seconds", "custom_buckets") if kind.latency else ("target",)
        if not isinstance(spec, dict):
            problems.add(ConfigError(f"{problems.where('slo', kind_id)}: expected a mapping of "
                                     f"{', '.join(known)}"))
            continue
        clean, ok = {}, True
        for key, v in spec.items():
            where = problems.where("slo", kind_id, key)
            if key not in known:
                problems.add(ConfigError(f"{where}: unknown key (known: {', '.join(known)})"))
                ok = False
            elif key == "custom_buckets":
                if not isinstance(v, bool):
                    problems.add(ConfigError(f"{where}: expected true or false, got {v!r}"))
                    ok = False
                clean[key] = v
            elif isinstance(v, bool) or not isinstance(v, (int, float)):
                problems.add(ConfigError(f"{where}: expected a number, got {v!r}"))
                ok = False
            elif key == "target" and not 0 < v < 1:
                problems.add(ConfigError(f"{where}: expected the share of good events between 0 and 1 "
                                         f"(e.g. 0.99 for 99 %), got {v!r}"))
                ok = False
            elif key == "threshold_seconds" and v <= 0:
                problems.add(ConfigError(f"{where}: must be positive, got {v!r}"))
                ok = False
            else:
                clean[key] = float(v)
        for key in ("target", "threshold_seconds") if kind.latency else ("target",):
            if key not in spec:
                problems.add(ConfigError(f"{problems.where('slo', kind_id)}: missing {key}"))
                ok = False
        threshold = clean.get("threshold_seconds")
        bounds = catalog_slo.DEFAULT_BUCKETS.get(kind_id, ())
        if ok and kind.latency and not clean.get("custom_buckets") and threshold not in bounds:
            problems.add(ConfigError(
                f"{problems.where('slo', kind_id, 'threshold_seconds')}: {threshold:g} s is not a bucket bound of "
                f"SGLang's {kind.title} histogram, so no bucket counts the requests under it (bounds: "
                f"{', '.join(f'{b:g}' for b in bounds)}); pick one, or set custom_buckets: true if your server "
                "sets its own buckets with this bound"))
            ok = False
        if ok:
            out[kind_id] = clean
    return out


def _alerts(value, problems: _Problems) -> AlertSettings:
    if not isinstance(value, dict):
        raise ConfigError(f"{problems.where('alerts')}: expected a mapping of alert generation settings")
    out = {}
    for key, v in value.items():
        where = problems.where("alerts", key)
        kind = _ALERT_KEYS.get(key)
        try:
            if kind is None:
                raise ConfigError(f"{where}: unknown setting (known: {', '.join(sorted(_ALERT_KEYS))})")
            out["alert_for" if key == "for" else key] = _alert_value(kind, v, where, problems, key)
        except ConfigError as exc:
            problems.add(exc)
    return replace(AlertSettings(), **out)


def _alert_value(kind: str, v, where: str, problems: _Problems, key: str):
    if kind == "bool":
        return _bool(v, where)
    if kind == "ratio":
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
            raise ConfigError(f"{where}: expected a number between 0 and 1, got {v!r}")
        return float(v)
    if kind == "duration":
        if not isinstance(v, str) or not _DURATION.fullmatch(v):
            raise ConfigError(f"{where}: expected a Prometheus duration such as 5m, got {v!r}")
        return v
    if kind == "labels":
        if not isinstance(v, list) or not all(isinstance(x, str) and _LABEL.fullmatch(x) for x in v):
            raise ConfigError(f"{where}: expected a list of label names, got {v!r}")
        if key == "identity_labels" and not v:
            raise ConfigError(f"{where}: name at least one label (the default: cluster, namespace, pod)")
        return tuple(v)
    if kind == "label_values":
        if v is not None and (not isinstance(v, dict) or not all(
                isinstance(k, str) and _LABEL.fullmatch(k) and isinstance(x, str) for k, x in v.items())):
            raise ConfigError(f"{where}: expected a mapping of label name to value, got {v!r}")
        return v
    if kind == "profile":
        if v is not None and v not in PROFILES:
            raise ConfigError(f"{where}: unknown profile {v!r} (known: {', '.join(PROFILES)}, or null)")
        return v
    if kind == "for":
        return _alert_for(v, where, problems)
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(f"{where}: expected a string, got {v!r}")
    if kind == "url" and urlparse(v).scheme not in ("http", "https", "file") and not v.startswith("/"):
        raise ConfigError(f"{where}: expected an http(s) URL or an absolute path, got {v!r}")
    return v


def _alert_for(v, where: str, problems: _Problems) -> dict:
    if not isinstance(v, dict):
        raise ConfigError(f"{where}: expected a mapping of alert name to duration")
    known = default_alert_for()
    out = {}
    for name, d in v.items():
        at = problems.where("alerts", "for", name)
        if name not in known:
            problems.add(ConfigError(f"{at}: unknown alert (known: {', '.join(known)})"))
        elif not isinstance(d, str) or not _DURATION.fullmatch(d):
            problems.add(ConfigError(f"{at}: expected a Prometheus duration such as 5m, got {d!r}"))
        else:
            out[name] = d
    return out


def from_env(environ=os.environ) -> dict:
    out = {}
    for key, (_, env) in _SCALARS.items():
        name = ENV_PREFIX + env
        if environ.get(name, "") != "":
            out[key] = _coerce(key, environ[name], name)
    return out


def build(flags: dict, environ=os.environ, config_file: str | None = None, origins: dict | None = None) -> Config:
    """Merge defaults < file < env < flags (flags: only the options the user gave, None meaning unset).
    A file's mistakes, its cross-field ones included, are raised together in file order. `origins`, when
    given, is filled with where each setting that is not a default came from (flag, variable, file line)."""
    path = config_file or environ.get(ENV_PREFIX + "CONFIG") or None
    problems = _Problems(path or "", {})
    merged, origin = _load_file(path, problems) if path else ({}, {})
    env = from_env(environ)
    merged.update(env)
    origin.update({key: ENV_PREFIX + _SCALARS[key][1] for key in env})
    for key, value in flags.items():
        if value is None or (key == "log_files" and not value):
            continue
        flag = "--" + key.replace("_", "-").rstrip("s") if key == "log_files" else "--" + key.replace("_", "-")
        merged[key] = _coerce(key, value, flag)
        origin[key] = flag
    cfg = replace(Config(), **merged)
    if origins is not None:
        origins.update(origin)
    for error in _cross_field(cfg, origin):
        problems.add(error)
    problems.raise_if_any()
    return cfg


def validate(cfg: Config, origin: dict | None = None) -> Config:
    """Cross-field and value checks. `origin` maps a key to where its value came from ("FILE:LINE: key",
    an environment variable or a flag), so the message names that place; defaults are named by key."""
    errors = _cross_field(cfg, origin or {})
    if errors:
        raise ConfigError("\n".join(str(e) for e in errors))
    return cfg


def _cross_field(cfg: Config, origin: dict) -> list[ConfigError]:
    def at(key: str) -> str:
        return origin.get(key, key)
    errors = []
    if cfg.profile not in PROFILES:
        errors.append(ConfigError(f"{at('profile')}: unknown profile {cfg.profile!r} (known: {', '.join(PROFILES)})"))
    if cfg.scrape_timeout >= cfg.scrape_interval:
        errors.append(ConfigError(f"{at('scrape_timeout')}: scrape_timeout ({cfg.scrape_timeout}s) must be below "
                                  f"scrape_interval ({cfg.scrape_interval}s, from {at('scrape_interval')})"))
    if cfg.scrape_stale_after is not None and cfg.scrape_stale_after < cfg.scrape_interval:
        errors.append(ConfigError(
            f"{at('scrape_stale_after')}: scrape_stale_after ({cfg.scrape_stale_after}s) must be at least "
            f"scrape_interval ({cfg.scrape_interval}s, from {at('scrape_interval')}), or values would vanish "
            "between two good scrapes"))
    try:
        split_host_port(cfg.listen, at("listen"))
    except ConfigError as exc:
        errors.append(exc)
    if cfg.from_start and cfg.from_end:
        errors.append(ConfigError(f"{at('from_end')}: from_end and from_start (from {at('from_start')}) "
                                  "exclude each other"))
    if cfg.sglang_url:
        u = urlparse(cfg.sglang_url)
        if u.scheme not in ("http", "https") or not u.netloc:
            errors.append(ConfigError(f"{at('sglang_url')}: expected http(s)://HOST:PORT, got {cfg.sglang_url!r}"))
    if cfg.web_config and not os.path.isfile(cfg.web_config):
        errors.append(ConfigError(f"{at('web_config')}: no such file {cfg.web_config!r}"))
    return errors
