"""The scalar settings (every one but `signals:`, `slo:` and `alerts:`): their type and environment variable, and
a value from a file, a variable or a flag coerced to that type or refused, naming where it came from."""
from __future__ import annotations

import os
from dataclasses import fields

from exporter.config.settings import ENV_PREFIX, Config, ConfigError

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
# settings naming files: a leading ~ is the home directory, as a shell would read it (a config file, an
# environment variable or `--log-file=~/...` reach us without one expanding it)
_PATHS = {"log_files", "positions_file", "web_config"}


def _coerce(key: str, value, where: str):
    value = _coerce_type(key, value, where)
    if key in _PATHS and value is not None:
        return tuple(map(os.path.expanduser, value)) if isinstance(value, tuple) else os.path.expanduser(value)
    return value


def _coerce_type(key: str, value, where: str):
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


def from_env(environ=os.environ) -> dict:
    out = {}
    for key, (_, env) in _SCALARS.items():
        name = ENV_PREFIX + env
        if environ.get(name, "") != "":
            out[key] = _coerce(key, environ[name], name)
    return out
