"""Configuration: defaults < YAML file < environment variables < command-line flags.

One validator for the sidecar and for `sglang-exporter generate`: every bad value becomes a ConfigError
naming the file, line and key (or the flag / variable) and why; a file's mistakes are all reported at once,
in file order. The settings are in settings.py, the scalar ones' coercion in scalars.py, the file in file.py.
"""
from __future__ import annotations

import os
from dataclasses import replace
from urllib.parse import urlparse

from exporter.catalog import PROFILES
from exporter.config.file import _load_file, _Problems, load_file
from exporter.config.scalars import _SCALARS, _coerce, from_env
from exporter.config.settings import (
    DEFAULT_PORT,
    ENV_PREFIX,
    AlertSettings,
    Config,
    ConfigError,
    cannot_listen,
    default_alert_for,
    reachable_host,
    split_host_port,
    thresholds,
    url_host,
)

__all__ = ["DEFAULT_PORT", "ENV_PREFIX", "AlertSettings", "Config", "ConfigError", "build", "cannot_listen",
           "default_alert_for", "from_env", "load_file", "reachable_host", "split_host_port", "thresholds",
           "url_host", "validate"]


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
