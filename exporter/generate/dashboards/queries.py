"""PromQL building blocks of the dashboards: the variable selectors, per-server aggregations, latency quantiles,
and SGLang's metric names and release spans taken from the native-metric table (exporter.catalog.native)."""
from __future__ import annotations

from exporter import releases
from exporter.catalog.native import family_span, native_metric_names
from exporter.generate.dashboards.model import Limits, Target
from exporter.generate.records import quantile_record
from exporter.generate.settings import RuleSettings

# The `instance` variable holds a host (the instance label without its port): the sidecar and the SGLang server
# it watches share a host (a pod IP, or 127.0.0.1 locally) but not a port, so one selection covers both the
# exporter's series and SGLang's own /metrics series.
INSTANCE_MATCH = '$instance(:[0-9]+)?'
EXPORTER_SELECTOR = f'namespace=~"$namespace", instance=~"{INSTANCE_MATCH}"'
SGLANG_SELECTOR = EXPORTER_SELECTOR + ', model_name=~"$model"'
PER_SERVER = "namespace, instance"
PER_NATIVE_RANK = f"{PER_SERVER}, dp_rank, tp_rank, pp_rank"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

PERCENTILES = (50, 90, 99)     # latency quantiles drawn (p99 is what latency_high judges)


def sglang(value: str) -> str:
    """The newest exposed name of a native value's family ("ttft" -> "sglang:time_to_first_token_seconds")."""
    return native_metric_names(value)[0]


def sglang_family(short: str) -> str:
    """The exposed name of an SGLang family the exporter itself does not read (shown only), checked against the
    newest release's families so a misspelt or dropped name fails generation."""
    for family in releases.metric_families().values():
        if family.short in (short, short + "_total"):
            return "sglang:" + short + ("_total" if family.type == "counter" else "")
    raise KeyError(f"no SGLang release defines the metric family {short!r}")


def exported(metric: str) -> str:
    """`metric` of the sidecar's own, with the variable selector."""
    return f"{metric}{{{EXPORTER_SELECTOR}}}"


def native(name: str) -> str:
    """An SGLang metric (exposed name), with the variable selector."""
    return f"{name}{{{SGLANG_SELECTOR}}}"


def rank_max(metric: str) -> str:
    """One value per DP rank (TP/PP ranks of one DP rank print the same batch state), summed per server."""
    return f"sum by ({PER_SERVER}) (max by ({PER_SERVER}, dp) ({exported(metric)}))"


def rate_per_server(name: str) -> str:
    """Per-second rate of an SGLang counter (or histogram part), per series first, then summed per server."""
    return f"sum by ({PER_SERVER}) (rate({native(name)}[$__rate_interval]))"


def latency_targets(limits: Limits, value: str) -> list[Target]:
    """Quantiles of a histogram value read from the per-server records of the latency rule groups (every bucket
    of every server is read once, by the ruler, not by each viewer; older spellings are folded in there), and
    the mean from the histogram's _sum and _count (two series per server)."""
    settings = RuleSettings(limits.config)
    newest, *older = native_metric_names(value)
    targets = []
    for percent in PERCENTILES:
        record = quantile_record(settings, newest, percent / 100)
        targets.append(Target(f"max by ({PER_SERVER}) ({native(record)})", f"{{{{instance}}}} p{percent}",
                              reads=tuple(name + "_bucket" for name in (newest, *older))))
    mean = f"{rate_per_server(newest + '_sum')}\n/\n{rate_per_server(newest + '_count')}"
    targets.append(Target(mean, "{{instance}} mean"))
    return targets


def newest_or_older(value: str, template: str) -> str:
    """`template` (with `{metric}` for a selector) over a value's newest family, `or` each older spelling."""
    return "\nor\n".join(template.format(metric=native(name)) for name in native_metric_names(value))


def absent_text(*names: str, condition: str = "") -> str:
    """A panel's text for no data: since which release SGLang's /metrics exports any of the families `names`
    (exposed names, from the release data), and what else it takes (`condition`)."""
    spans = [family_span(_bare(name)) for name in names]
    firsts = [span[0] for span in spans if span]
    since = f"SGLang {min(firsts, key=releases.version_key)}+" if firsts else "no release"
    return f"not exported by this release ({since}{', ' + condition if condition else ''})"


def absent_value_text(*values: str, condition: str = "") -> str:
    """absent_text for every spelling of native values."""
    return absent_text(*(name for value in values for name in native_metric_names(value)), condition=condition)


def _bare(name: str) -> str:
    """"sglang:cached_tokens_total" -> "cached_tokens" (the short name family_span takes)."""
    short = releases.short_metric(name)
    return short[: -len("_total")] if short.endswith("_total") else short


def base_family(name: str) -> str:
    """An exposed SGLang series name without its histogram suffix ("..._bucket" -> "...")."""
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and family_of(name[: -len(suffix)]) is not None:
            return name[: -len(suffix)]
    return name


def family_of(name: str) -> releases.MetricFamily | None:
    """The release data's family of an exposed SGLang name (the newest release defining it), or None."""
    bare = _bare(name)
    span = family_span(bare)
    if span is None:
        return None
    families = releases.metric_families(span[1] or releases.newest())
    return families.get("sglang:" + bare) or families.get("sglang:" + releases.short_metric(name))
