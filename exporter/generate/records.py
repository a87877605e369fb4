"""The recording rules: the exporter's fleet roll-ups, one series per server (`sglang-exporter.servers`), SGLang's
latency quantiles recorded once per histogram, and the retraction rates the alerts and boards read."""
from __future__ import annotations

from exporter.catalog.native import native_metric_names
from exporter.generate.promql import by, num, sel
from exporter.generate.series import (
    M_BUILD,
    M_EVENTS,
    M_FIRING,
    M_INFO,
    M_KNOWN,
    M_OOM,
    M_READ,
    M_RETR,
    M_RETR_REQ,
    M_UNPARSED,
    RETRACTED,
)
from exporter.generate.settings import RuleSettings

# How often the groups that only record windowed roll-ups (quantiles over a 5m window, fleet sums over 5m and 1h)
# run. Their windows move a fifth per minute, so a record at most a minute old says what a fresh one would; at
# 1,000 servers these groups read ~2.7 M samples per evaluation, and evaluating them every 15 s kept both cores
# of a 2-core Prometheus busy (bench/fleet.py). Alerts keep the global 15 s and their own `for:`.
RECORD_INTERVAL = "1m"


def record_interval(settings: RuleSettings) -> dict:
    """The `interval:` of a recording group (none in the end-to-end tests' short windows: their records
    must follow the test's 15 s steps)."""
    return {} if settings.short_windows else {"interval": RECORD_INTERVAL}


def exporter_recording_rules(settings: RuleSettings) -> list[dict]:
    exporter = sel(settings.exporter_selector)
    w = settings.window(settings.rate_window)
    rate_ops = "rate" + w
    join = by(settings.join_labels)
    info_join = f"on ({join}) group_left (model)\n  max by ({join}, model) ({M_INFO}{exporter})"
    c = "".join(f"{label}, " for label in settings.cluster_labels)   # roll-ups never mix clusters
    firing = firing_record(settings)
    rules = [
        ("namespace", M_RETR, f"sum by ({c}namespace) (rate({M_RETR}{exporter}[{w}]))", rate_ops),
        ("namespace_pod", M_RETR, f"sum by ({c}namespace, pod) (rate({M_RETR}{exporter}[{w}]))", rate_ops),
        ("namespace_model", M_RETR,
         f"sum by ({c}namespace, model) (\n  rate({M_RETR}{exporter}[{w}])\n  * {info_join}\n)", rate_ops),
        ("namespace_pod", M_RETR_REQ, f"sum by ({c}namespace, pod) (rate({M_RETR_REQ}{exporter}[{w}]))", rate_ops),
        ("namespace_phase", M_OOM, f"sum by ({c}namespace, phase) (increase({M_OOM}{exporter}[1h]))",
         "increase1h"),
        # the servers firing each signal, counted from the firing record (the signals group's few series) rather
        # than the raw family's one series per signal and server (~0.4 s of this group at 1,000 servers,
        # bench/fleet.py): a signal firing nowhere has no series, where the raw sum gave 0
        ("namespace_signal_severity", M_FIRING, f"sum by ({c}namespace, signal, severity) ({firing})", "sum"),
        ("namespace_model_signal", M_FIRING,
         f"sum by ({c}namespace, model, signal) (\n  {firing}\n  * {info_join}\n)", "sum"),
        ("namespace_signal", M_KNOWN, f"avg by ({c}namespace, signal) ({M_KNOWN}{exporter})", "avg"),
        ("namespace_pod", M_READ, f"sum by ({c}namespace, pod) (rate({M_READ}{exporter}[{w}]))", rate_ops),
        ("namespace_pod_reason", M_UNPARSED,
         f"sum by ({c}namespace, pod, reason) (rate({M_UNPARSED}{exporter}[{w}]))", rate_ops),
    ]
    out = []
    for level, metric, expr, ops in rules:
        base = metric[:-len("_total")] if metric.endswith("_total") else metric
        out.append({"record": f"{level}:{base}:{ops}", "expr": expr + "\n" if "\n" in expr else expr})
    # per server (its identity, instance and job): the detail board's "Events recognised" reads it
    out.append({"record": events_record(settings), "expr": f"sum by ({join}, kind) (rate({M_EVENTS}{exporter}[{w}]))"})
    return out


RECORDED_HISTOGRAMS = ("ttft", "itl", "e2e", "queue_time")    # SGLang's latency histograms, by catalog value
QUANTILES = (0.5, 0.9, 0.99)          # recorded per server (the detail board draws all three)
MODEL_QUANTILES = (0.99,)             # recorded per model (the fleet board, SLO views)


def level(labels) -> str:
    """The `level` part of a recorded name: the labels it is aggregated to, `cluster_namespace_pod`."""
    return "_".join(labels)


def server_level(settings: RuleSettings) -> str:
    return level(settings.identity_labels)


def model_labels(settings: RuleSettings) -> tuple:
    """A model's identity: its cluster and namespace (the same model in two clusters is two models) and
    SGLang's own labels kept (model_name)."""
    outer = settings.identity_labels[:-1]
    return outer + tuple(label for label in settings.native_keep_labels if label not in outer)


def _bare(metric: str) -> str:
    return metric.replace(":", "_")


def bucket_record(settings: RuleSettings, metric: str) -> str:
    w = settings.window(settings.rate_window)
    return f"{server_level(settings)}:{_bare(metric)}_bucket:rate{w}"


def quantile_record(settings: RuleSettings, metric: str, q: float, labels: tuple | None = None) -> str:
    """`cluster_namespace_pod:sglang_time_to_first_token_seconds:p99_5m` (per server) or, with `labels`, the
    same quantile aggregated to them (per model)."""
    w = settings.window(settings.rate_window)
    return f"{level(labels) if labels else server_level(settings)}:{_bare(metric)}:p{num(q * 100)}_{w}"


def latency_record_sources(settings: RuleSettings) -> dict[str, tuple]:
    """Each latency record -> the SGLang histogram families (every spelling) it is computed from."""
    out = {}
    for value in RECORDED_HISTOGRAMS:
        names = tuple(native_metric_names(value))
        out[bucket_record(settings, names[0])] = names
        for q in QUANTILES:
            out[quantile_record(settings, names[0], q)] = names
        for q in MODEL_QUANTILES:
            out[quantile_record(settings, names[0], q, model_labels(settings))] = names
    return out


def latency_groups(settings: RuleSettings) -> list[dict]:
    """One group per SGLang latency histogram (groups run concurrently): its buckets' rate per server, recorded
    once, then every quantile from that small record (rules of a group run in order, at one timestamp)."""
    sglang = sel(settings.sglang_selector)
    w = settings.window(settings.rate_window)
    group = by(settings.join_labels + settings.native_keep_labels)
    per_model = model_labels(settings)
    groups = []
    for value in RECORDED_HISTOGRAMS:
        newest, *older = native_metric_names(value)
        rates = "\nor\n".join(f"sum by (le, {group}) (rate({name}_bucket{sglang}[{w}]))"
                               for name in (newest, *older))
        if older:
            rates = f"# SGLang before 0.4.4 named it {older[0].split(':')[1]}\n" + rates
        buckets = bucket_record(settings, newest)
        rules = [{"record": buckets, "expr": rates + "\n"}]
        rules += [{"record": quantile_record(settings, newest, q), "expr": f"histogram_quantile({num(q)}, {buckets})"}
                  for q in QUANTILES]
        rules += [{"record": quantile_record(settings, newest, q, per_model),
                   "expr": f"histogram_quantile({num(q)},\n  sum by (le, {by(per_model)}) ({buckets})\n)\n"}
                  for q in MODEL_QUANTILES]
        groups.append({"name": f"sglang-native.latency-{value}", **record_interval(settings), "rules": rules})
    return groups


SEVERITY_RANK = {"info": 1, "warning": 2, "critical": 3}     # the fleet board's "worst firing signal"


def firing_record(settings: RuleSettings) -> str:
    """The record of the signals firing now, one series per server and firing signal (the overview's timeline
    and the fleet board's attention table read it)."""
    return f"{server_level(settings)}_signal:{M_FIRING}:max"


def firing_rule(settings: RuleSettings) -> dict:
    """Only what fires: a few series across the fleet where the raw family has one per signal and server. The
    first rule of the signals group: every signal alert reads its firing side here, one select of the raw family
    per evaluation where each alert used to make two (at 1,000 servers the alerts and the server roll-ups read
    half the series they did: bench/fleet.py)."""
    # `without ()`: every label kept, the target's beyond the identity ones too (container, endpoint): they are
    # the signal alerts' labels, as when the alerts read the raw family
    return {"record": firing_record(settings),
            "expr": f"max without () ({M_FIRING}{sel(settings.exporter_selector)} == 1)"}


def server_rules(settings: RuleSettings) -> list[dict]:
    """Small per-server series the fleet board, its variables and the overview read instead of every signal of
    every server: the firing signals alone, an inventory (one series per server carrying its model and
    release) for cluster -> namespace -> model -> server, the worst firing severity and how many signals fire.

    The worst severity and the count read the firing record (firing_rule, written by the signals group at the
    same interval: at most one evaluation behind) rather than the raw family (a series per signal and server:
    19k at 1,000 servers), with every server given its 0 from the one build_info series it always exports."""
    exporter = settings.exporter_selector
    join = by(settings.join_labels)
    lvl = server_level(settings)
    firing = firing_record(settings)
    weighted = "\nor\n".join(f'{firing}{{severity="{severity}"}} * {rank}' for severity, rank in SEVERITY_RANK.items())
    every_server = f"0 * max by ({join}) ({M_BUILD}{sel(exporter)})"
    return [
        {"record": f"{lvl}:{M_INFO}:max",
         "expr": (f"max by ({join}, model, format, version) (\n  {M_INFO}{sel(exporter)}\n"
                  f"  * on ({join}) group_left (version)\n  max by ({join}, version) ({M_BUILD}{sel(exporter)})\n)\n")},
        # 0 when nothing fires, 1 info, 2 warning, 3 critical; every server has one series (sorts the board)
        {"record": f"{lvl}:{M_FIRING}:max_severity",
         "expr": f"max by ({join}) (\n{weighted}\n)\nor on ({join})\n{every_server}\n"},
        {"record": f"{lvl}:{M_FIRING}:sum", "expr": f"count by ({join}) ({firing})\nor on ({join})\n{every_server}\n"},
    ]


def retraction_rules(settings: RuleSettings) -> list[dict]:
    sglang = sel(settings.sglang_selector)
    w = settings.window(settings.rate_window)
    group = by(settings.join_labels + settings.native_keep_labels)
    return [{"record": f"{server_level(settings)}:{_bare(RETRACTED).removesuffix('_total')}:rate{w}",
             "expr": f"sum by ({group}) (\n  max by ({group}, dp_rank) "
                     f"(rate({RETRACTED}{sglang}[{w}]))\n)\n"}]


def native_recording_rules(settings: RuleSettings) -> list[dict]:
    """Every native recording rule, latency groups first (the docs' table)."""
    return [rule for g in latency_groups(settings) for rule in g["rules"]] + retraction_rules(settings)



def events_record(settings: RuleSettings) -> str:
    """The per-server rate of each kind of log event recognised (one of the fleet group's records)."""
    w = settings.window(settings.rate_window)
    return f"{server_level(settings)}_kind:{M_EVENTS.removesuffix('_total')}:rate{w}"
