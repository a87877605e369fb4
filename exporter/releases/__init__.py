"""What each SGLang release defines, read from its wheel by scripts/sglang-releases and committed here as data.

One JSON file per kind, each covering every extracted release (the latest patch of every 0.X.Y from 0.3.0):
`releases.json` (versions and wheel hashes), `server_args.json` (fields, flags, defaults, help),
`metrics.json` (metric families of the collector), `log_templates.json` (message templates of the lines the
exporter reads) and `log_fields.json` (the printed keys of batch lines). A value that changes across releases
is stored as `[[release, value], ...]`, one pair per change.

A `release` argument may be any version string: an exact extracted release, an X.Y.Z whose latest patch was
extracted ("0.4.6" -> "0.4.6.post5"), or a newer/older one (the nearest extracted release at or below it;
the oldest for anything older). None means the newest extracted release.

    server_args_flag("cuda_graph_max_bs_decode", "0.5.20")  -> "--cuda-graph-max-bs-decode"
    first_release("--cuda-graph-max-bs-decode")             -> "0.5.20"
    metric_families("0.5.23")["sglang:num_queue_reqs"].type -> "gauge"
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class ServerArg:
    name: str           # the ServerArgs field
    flag: str | None    # its primary CLI flag in that release (None: not settable from the command line)
    aliases: tuple      # its other flag spellings in that release
    default: str | None  # the default as source text ("0.9", "None", "'fcfs'")
    help: str           # first sentence of the newest help text


@dataclass(frozen=True)
class MetricFamily:
    name: str           # as defined ("sglang:num_queue_reqs"); the exposition may spell it "sglang_..."
    short: str          # without the prefix ("num_queue_reqs")
    type: str           # gauge | counter | histogram | summary
    labels: tuple       # label names, or ("<expr>",) when computed at run time
    help: str


@dataclass(frozen=True)
class Rename:
    kind: str           # "server_arg" | "flag" | "metric" | "log_field"
    old: str
    new: str
    release: str        # the first release with the new name


@cache       # the release tables compare a few dozen versions thousands of times while the catalog loads
def version_key(version: str) -> tuple:
    """(major, minor, patch, post) of "0.4.10.post2"; ValueError for anything else."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", version.strip())
    if not m:
        raise ValueError(f"not an SGLang release version: {version!r}")
    return tuple(int(x or 0) for x in m.groups())


@cache
def _load(name: str) -> dict:
    path = DATA_DIR / name
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise RuntimeError(f"{path}: unreadable release data ({exc}); run scripts/sglang-releases extract") from exc


def releases() -> list[str]:
    """Every extracted release, oldest first."""
    return sorted(_load("releases.json"), key=version_key)


def newest() -> str:
    return releases()[-1]


def resolve(release: str | None = None) -> str:
    """The extracted release that stands for `release` (see the module docstring)."""
    known = releases()
    if release is None:
        return known[-1]
    key = version_key(release)
    if release in known:
        return release
    same = [v for v in known if version_key(v)[:3] == key[:3]]
    if same:
        return same[-1]
    below = [v for v in known if version_key(v) <= key]
    return below[-1] if below else known[0]


def _at(changes: list, release: str):
    """The value of a `[[release, value], ...]` change list in `release` (None before the first change)."""
    key, value = version_key(release), None
    for rel, val in changes:
        if version_key(rel) > key:
            break
        value = val
    return value


def _present(entry: dict, release: str) -> bool:
    key = version_key(release)
    if version_key(entry["first"]) > key or release in entry.get("absent_in", ()):
        return False
    return entry["last"] is None or version_key(entry["last"]) >= key


# ------------------------------------------------------------------------------------------------------------
# ServerArgs

def server_args(release: str | None = None) -> dict[str, ServerArg]:
    """Every ServerArgs field of `release`, by field name."""
    rel = resolve(release)
    return {name: ServerArg(name, _at(e["flag"], rel), tuple(_at(e.get("aliases", []), rel) or ()),
                            _at(e["default"], rel), e["help"])
            for name, e in _load("server_args.json").items() if _present(e, rel)}


def server_args_flag(key: str, release: str | None = None) -> str | None:
    """The CLI flag that sets ServerArgs field `key` in `release`, or None when that release has no such
    field (or it has no flag)."""
    e = _load("server_args.json").get(key)
    rel = resolve(release)
    return _at(e["flag"], rel) if e is not None and _present(e, rel) else None


def server_arg_for_flag(flag: str, release: str | None = None) -> str | None:
    """The ServerArgs field a flag (primary or alias) sets in `release`, or None."""
    rel = resolve(release)
    for name, arg in server_args(rel).items():
        if flag == arg.flag or flag in arg.aliases:
            return name
    return None


def server_arg_default(key: str, release: str | None = None) -> str | None:
    e = _load("server_args.json").get(key)
    rel = resolve(release)
    return _at(e["default"], rel) if e is not None and _present(e, rel) else None


# ------------------------------------------------------------------------------------------------------------
# metrics

def short_metric(name: str) -> str:
    """"sglang:num_queue_reqs" / "sglang_num_queue_reqs" -> "num_queue_reqs"."""
    for prefix in ("sglang:", "sglang_"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def metric_families(release: str | None = None) -> dict[str, MetricFamily]:
    """The metric families `release`'s collector defines, by their defined name."""
    rel = resolve(release)
    out = {}
    for short, e in _load("metrics.json").items():
        if _present(e, rel):
            name = next((n for n in e["names"] if short_metric(n) == short), "sglang:" + short)
            out[name] = MetricFamily(name, short, _at(e["type"], rel), tuple(_at(e["labels"], rel) or ()), e["help"])
    return out


def metric_spellings(name: str) -> tuple[str, str]:
    """Both prefix spellings of a family: ("sglang:x", "sglang_x")."""
    short = short_metric(name)
    return ("sglang:" + short, "sglang_" + short)


# ------------------------------------------------------------------------------------------------------------
# log lines

def log_templates(kind: str, release: str | None = None) -> list[dict]:
    """The message-building functions for line `kind` in `release`: dicts with file, function, fragments
    (templates, `{name:spec}` placeholders) and fields (the printed keys)."""
    rel = resolve(release)
    return [{k: v for k, v in variant.items() if k != "releases"}
            for variant in _load("log_templates.json").get(kind, []) if rel in variant["releases"]]


def log_kinds(release: str | None = None) -> set[str]:
    """The line kinds `release` prints (of those the exporter reads)."""
    rel = resolve(release)
    return {kind for kind, variants in _load("log_templates.json").items()
            if any(rel in v["releases"] for v in variants)}


def log_fields(kind: str, release: str | None = None) -> set[str]:
    """Printed keys ("#queue-req", "token usage") a batch line of `kind` can carry in `release`, including the
    token-usage parts a pool helper builds for it."""
    keys = {k for v in log_templates(kind, release) for k in v["fields"]}
    if kind in ("prefill_batch", "decode_batch"):
        keys |= {k for v in log_templates("token_usage_parts", release) for k in v["fields"]}
    return keys


# ------------------------------------------------------------------------------------------------------------
# any name

def _entry(name: str) -> tuple[str, dict] | None:
    args = _load("server_args.json")
    if name in args:
        return "server_arg", args[name]
    if name.startswith("--"):
        for e in args.values():
            spelled = [r for r, f in e["flag"] if f == name] + \
                [r for r, al in e.get("aliases", []) if name in al]
            if spelled:
                return "flag", dict(e, first=min(spelled, key=version_key))
    if name in _load("log_fields.json"):
        return "log_field", _load("log_fields.json")[name]
    metrics = _load("metrics.json")
    short = short_metric(name)
    for candidate in (short, short[:-len("_total")] if short.endswith("_total") else None):
        if candidate in metrics:
            return "metric", metrics[candidate]
    return None


def first_release(name: str) -> str | None:
    """The first extracted release that has `name`: a ServerArgs field, a flag ("--tp-size"), a metric family
    (either prefix spelling) or a batch-line key ("#pending-token"). None when no release has it."""
    found = _entry(name)
    return found[1]["first"] if found else None


def last_release(name: str) -> str | None:
    """The last release that has `name`; None when the newest still has it (or no release ever had it)."""
    found = _entry(name)
    return found[1]["last"] if found else None


def renames() -> list[Rename]:
    """Every rename across releases, oldest first: flags (a field's primary flag changes and the old one is not
    kept as an alias), ServerArgs fields (a field disappears when one whose name extends it, or which keeps its
    flag, appears), metric families and batch-line keys."""
    out = []
    for e in _load("server_args.json").values():
        flags = e["flag"]
        for (_, old), (when, new) in zip(flags, flags[1:]):
            if old and new and old not in (_at(e.get("aliases", []), when) or ()):
                out.append(Rename("flag", old, new, when))
        aliases = e.get("aliases", [])
        for (_, before), (when, after) in zip(aliases, aliases[1:]):   # an old spelling kept a while, dropped
            for gone in sorted(set(before) - set(after) - {_at(e["flag"], when)}):
                if e["last"] is None or version_key(e["last"]) >= version_key(when):
                    out.append(Rename("flag", gone, _at(e["flag"], when), when))
    for kind, data in (("server_arg", _load("server_args.json")), ("metric", _load("metrics.json")),
                       ("log_field", _load("log_fields.json"))):
        for old, e in data.items():
            new = e.get("renamed_to")
            if new and new in data:
                out.append(Rename(kind, old, new, data[new]["first"]))
    return sorted(out, key=lambda r: (version_key(r.release), r.kind, r.old))
