"""Configuration: defaults < YAML file < environment variables < command-line flags.

Every bad value raises ConfigError naming the file, line and key (or the flag / variable) and why.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from urllib.parse import urlparse

import yaml

from exporter.catalog import DEFAULT_PROFILE, PROFILES, SIGNALS, SIGNALS_BY_ID

DEFAULT_PORT = 10060
ENV_PREFIX = "SGLANG_EXPORTER_"


class ConfigError(ValueError):
    """A configuration mistake; the message says where and why."""


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
    signals: dict = field(default_factory=dict)   # signal id -> {param: value, "enabled": bool}

    def signal_params(self) -> dict[str, dict | None]:
        """Thresholds in force per signal for this profile and these overrides (None = inactive)."""
        out: dict[str, dict | None] = {}
        for sig in SIGNALS:
            base = sig.params(self.profile)
            over = dict(self.signals.get(sig.id) or {})
            enabled = over.pop("enabled", None)
            if enabled is False or (base is None and not enabled):
                out[sig.id] = None
                continue
            out[sig.id] = {**(base or sig.defaults), **over}
        return out

    @property
    def stale_after(self) -> float:
        """Seconds after the last good scrape past which its values are dropped and /metrics reads as down."""
        return self.scrape_stale_after if self.scrape_stale_after is not None else 3 * self.scrape_interval

    @property
    def listen_host_port(self) -> tuple[str, int]:
        return split_host_port(self.listen, "listen")


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
}
assert set(_SCALARS) | {"signals"} == {f.name for f in fields(Config)}


def split_host_port(text: str, where: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{where}: expected HOST:PORT (e.g. 0.0.0.0:{DEFAULT_PORT}), got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _coerce(key: str, value, where: str):
    kind = _SCALARS[key][0]
    if kind is list:
        if isinstance(value, str):
            return tuple(p for p in value.replace(os.pathsep, ",").split(",") if p.strip())
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return tuple(value)
        raise ConfigError(f"{where}: expected a list of paths or globs, got {value!r}")
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
            return value.lower() in ("1", "true", "yes", "on")
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
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


def _key_lines(text: str) -> dict[tuple, int]:
    """Line numbers (1-based) of mapping keys in a YAML document, by key path."""
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


def load_file(path: str) -> dict:
    """Read and validate a YAML config file into Config keyword arguments."""
    return _load_file(path)[0]


def _load_file(path: str) -> tuple[dict, dict]:
    """load_file, plus where each setting came from ("FILE:LINE: key") for later cross-field checks."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror or exc}") from None
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
    lines = _key_lines(text)

    def where(*keys) -> str:
        line = lines.get(tuple(keys))
        return f"{path}:{line}: {'.'.join(keys)}" if line else f"{path}: {'.'.join(keys)}"

    out: dict = {}
    for key, value in data.items():
        if key == "signals":
            out["signals"] = _signals(value, where)
        elif key in _SCALARS:
            out[key] = _coerce(key, value, where(key))
        else:
            known = ", ".join(sorted([*_SCALARS, "signals"]))
            raise ConfigError(f"{where(str(key))}: unknown setting (known: {known})")
    return out, {key: where(key) for key in out}


def _signals(value, where) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"{where('signals')}: expected a mapping of signal id to thresholds")
    out = {}
    for sid, over in value.items():
        sig = SIGNALS_BY_ID.get(sid)
        if sig is None:
            raise ConfigError(f"{where('signals', str(sid))}: unknown signal (known: {', '.join(SIGNALS_BY_ID)})")
        if not isinstance(over, dict):
            raise ConfigError(f"{where('signals', sid)}: expected a mapping of parameter to value")
        clean = {}
        for param, v in over.items():
            if param == "enabled":
                if not isinstance(v, bool):
                    raise ConfigError(f"{where('signals', sid, 'enabled')}: expected true or false")
            elif param not in sig.defaults and not any(param in (o or {}) for o in sig.profiles.values()):
                raise ConfigError(f"{where('signals', sid, str(param))}: unknown parameter "
                                  f"(known: {', '.join(sig.defaults)}, enabled)")
            elif not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"{where('signals', sid, param)}: expected a non-negative number, got {v!r}")
            clean[param] = v
        out[sid] = clean
    return out


def from_env(environ=os.environ) -> dict:
    out = {}
    for key, (_, env) in _SCALARS.items():
        name = ENV_PREFIX + env
        if environ.get(name, "") != "":
            out[key] = _coerce(key, environ[name], name)
    return out


def build(flags: dict, environ=os.environ, config_file: str | None = None) -> Config:
    """Merge defaults < file < env < flags (flags: only the options the user gave, None meaning unset)."""
    path = config_file or environ.get(ENV_PREFIX + "CONFIG") or None
    merged, origin = _load_file(path) if path else ({}, {})
    env = from_env(environ)
    merged.update(env)
    origin.update({key: ENV_PREFIX + _SCALARS[key][1] for key in env})
    for key, value in flags.items():
        if value is None or (key == "log_files" and not value):
            continue
        flag = "--" + key.replace("_", "-").rstrip("s") if key == "log_files" else "--" + key.replace("_", "-")
        merged[key] = _coerce(key, value, flag)
        origin[key] = flag
    return validate(replace(Config(), **merged), origin)


def validate(cfg: Config, origin: dict | None = None) -> Config:
    """Cross-field and value checks. `origin` maps a key to where its value came from ("FILE:LINE: key",
    an environment variable or a flag), so the message names that place; defaults are named by key."""
    origin = origin or {}

    def at(key: str) -> str:
        return origin.get(key, key)
    if cfg.profile not in PROFILES:
        raise ConfigError(f"{at('profile')}: unknown profile {cfg.profile!r} (known: {', '.join(PROFILES)})")
    if cfg.scrape_timeout >= cfg.scrape_interval:
        raise ConfigError(f"{at('scrape_timeout')}: scrape_timeout ({cfg.scrape_timeout}s) must be below "
                          f"scrape_interval ({cfg.scrape_interval}s, from {at('scrape_interval')})")
    if cfg.scrape_stale_after is not None and cfg.scrape_stale_after < cfg.scrape_interval:
        raise ConfigError(f"{at('scrape_stale_after')}: scrape_stale_after ({cfg.scrape_stale_after}s) must be at "
                          f"least scrape_interval ({cfg.scrape_interval}s, from {at('scrape_interval')}), or "
                          "values would vanish between two good scrapes")
    split_host_port(cfg.listen, at("listen"))
    if cfg.from_start and cfg.from_end:
        raise ConfigError(f"{at('from_end')}: from_end and from_start (from {at('from_start')}) exclude each other")
    if cfg.sglang_url:
        u = urlparse(cfg.sglang_url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise ConfigError(f"{at('sglang_url')}: expected http(s)://HOST:PORT, got {cfg.sglang_url!r}")
    if cfg.web_config and not os.path.isfile(cfg.web_config):
        raise ConfigError(f"{at('web_config')}: no such file {cfg.web_config!r}")
    return cfg
