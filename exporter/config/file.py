"""The YAML config file: read, each section checked, and every mistake named by file, line and key, all of them
at once, in file order."""
from __future__ import annotations

import re
from dataclasses import replace
from urllib.parse import urlparse

from exporter import catalog
from exporter.catalog import PROFILES
from exporter.catalog import slo as catalog_slo
from exporter.config.scalars import _SCALARS, _bool, _coerce
from exporter.config.settings import AlertSettings, ConfigError, default_alert_for

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
            elif param in catalog.COUNT_PARAMS and (v < 1 or v != int(v)):
                problems.add(ConfigError(f"{where}: expected a whole number of at least 1, got {v!r}"))
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
