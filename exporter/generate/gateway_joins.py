"""PromQL joining the gateway's view of a worker with the verdict of the sidecar beside that worker's engine, and
the gateway's time to first token with the engines' own (the joined signals of exporter/catalog/gateway.py).

A worker is known to the gateway by its URL (the `worker` label); an engine by its sidecar's target labels (the
identity labels, `instance`). Two keys join them, both derived as a `host` label on each side:
  - the URL's host is an IPv4 address: it is the engine pod's IP, the host of its sidecar's `instance` (the
    gateway's Kubernetes discovery builds worker URLs from pod IPs). Pod IPs are unique in a cluster, so this join
    matches on the cluster labels only: the gateway may run in another namespace. An IP shared by several sidecar
    targets (hostNetwork pods on one node) joins nothing rather than the wrong engine.
  - the URL's host is a name: its first DNS label is the engine's pod name (`http://sglang-0.sglang:30000`, a
    StatefulSet behind a headless Service), matched in the gateway's own namespace.
Neither side's host may be missing: an address neither key reads gets a placeholder that matches nothing.
"""
from __future__ import annotations

from exporter.generate.promql import by, sel
from exporter.generate.records import model_labels, quantile_record
from exporter.generate.series import M_FIRING, M_SOURCE_UP, SRC_METRICS
from exporter.generate.settings import RuleSettings

OPEN, UNHEALTHY = 1, 2          # the joined alerts' value: why the gateway stopped routing to the worker
STATE_TEMPLATE = "{{ if eq $value 1.0 }}circuit open{{ else }}marked unhealthy{{ end }}"
IPV4 = "[0-9]+[.][0-9]+[.][0-9]+[.][0-9]+"


def cluster_labels(settings: RuleSettings) -> tuple:
    return tuple(lab for lab in settings.join_labels if lab in settings.cluster_labels)


def site_labels(settings: RuleSettings) -> tuple:
    """The labels a gateway target shares with the engines of its own namespace."""
    return cluster_labels(settings) + tuple(lab for lab in ("namespace",) if lab in settings.join_labels)


def stopped(settings: RuleSettings, cb_state: str, health: str) -> str:
    """Per worker (and gateway site), why the gateway no longer routes to it: 1 its circuit breaker is open (it wins
    when both hold), 2 its health check fails. `cb_state`/`health`: the families under every spelling."""
    w = by((*site_labels(settings), "worker"))
    return (f"(\n    max by ({w}) ({cb_state} == 1)\n    or on ({w})\n"
            f"    max by ({w}) ({health} == 0) + {UNHEALTHY}\n  )")


def _worker_host(v: str) -> str:
    return (f'label_replace(label_replace(label_replace({v},\n    "host", "no-host:worker", "worker", ".*"),\n'
            f'    "host", "$1", "worker", "[a-z]+://([^.:/]+)([.:/].*)?"),\n'
            f'    "host", "$1", "worker", "[a-z]+://({IPV4})([:/].*)?")')


def _engine_host(settings: RuleSettings, v: str, key: str) -> str:
    """`v` (one series per sidecar target) with `host` = its instance's IP (`key` "ip") or its pod name ("name")."""
    source, regex = ("instance", f"({IPV4}):[0-9]+") if key == "ip" else (settings.server_label, "(.+)")
    return (f'label_replace(label_replace({v},\n    "host", "no-host:engine", "{source}", ".*"),\n'
            f'    "host", "$1", "{source}", "{regex}")')


def joined(settings: RuleSettings, gateway_state: str, engine: str, carried: tuple = ()) -> str:
    """The gateway's `gateway_state` per worker (from `stopped`) joined with `engine` (one series per sidecar target,
    by join_labels, value 1), keeping the engine's identity labels and `carried` ones; the value is the gateway's."""
    j, cl, site = settings.join_labels, cluster_labels(settings), site_labels(settings)
    exp = settings.exporter_selector
    on_ip, on_name = by((*cl, "host")), by((*site, "host"))
    sidecars = _engine_host(settings, f"max by ({by(j)}) (up{sel(exp)})", "ip")
    by_ip = (_engine_host(settings, engine, "ip") +
             f"\n  # an IP several sidecar targets share (hostNetwork) names no one engine\n"
             f"  unless on ({on_ip}) (count by ({on_ip}) ({sidecars}) > 1)")
    gateway = _worker_host(gateway_state)
    copy_ip = by(tuple(lab for lab in j if lab not in cl) + carried)
    copy_name = by(tuple(lab for lab in j if lab not in site) + carried)
    return (f"max without (host) (\n"
            f"  # the worker's IP is its engine pod's (any namespace of the cluster)\n"
            f"  min by ({by((*cl, 'worker', 'host'))}) (\n  {gateway}\n  )\n"
            f"  * on ({on_ip}) group_left ({copy_ip})\n  (\n  {by_ip}\n  )\n"
            f"  or\n"
            f"  # the worker's host name starts with its engine's pod name (the gateway's namespace)\n"
            f"  {gateway}\n"
            f"  * on ({on_name}) group_left ({copy_name})\n  {_engine_host(settings, engine, 'name')}\n)")


def firing(settings: RuleSettings, signals: tuple) -> str:
    """1 per sidecar target where any of `signals` fires."""
    match = f'signal="{signals[0]}"' if len(signals) == 1 else f'signal=~"{"|".join(signals)}"'
    return f"max by ({by(settings.join_labels)}) ({M_FIRING}{sel(settings.exporter_selector, match)} == 1)"


def verdict(settings: RuleSettings, signals: tuple, unless: tuple = ()) -> str:
    """1 per sidecar target where one of `signals` fires, its id in `engine_signal`: the first of `signals` that
    fires (one series per engine, so one alert), none where any of `unless` fires (another joined alert's)."""
    j = by(settings.join_labels)
    picks = [f'label_replace({firing(settings, (s,))}, "engine_signal", "{s}", "engine_signal", "")'
             for s in signals]
    out = "(\n    " + f"\n    or on ({j})\n    ".join(picks) + "\n  )"
    if unless:
        out += f"\n  unless on ({j})\n  {firing(settings, unless)}"
    return out


def healthy(settings: RuleSettings, failures: tuple) -> str:
    """1 per sidecar target whose last scrape of its engine's own /metrics worked (the engine's HTTP server answers
    beside it: not starting, not gone) and that reports none of `failures`. A sidecar reading only the log says
    nothing here: it cannot tell an engine still starting from one serving."""
    j = by(settings.join_labels)
    answering = f"{M_SOURCE_UP}{sel(settings.exporter_selector, SRC_METRICS)}"
    return (f"(\n    max by ({j}) ({answering} == 1)\n    unless on ({j})\n"
            f"    {firing(settings, failures)}\n  )")


def ttft_ratio(settings: RuleSettings, gateway_p99: str, ttft_metric: str) -> tuple[str, str]:
    """(the gateway's p99 TTFT per model / the engines' recorded p99, the gateway's p99 - the engines'). The engines'
    is the native rules' per-model record (model_name); the slowest namespace of the cluster stands for the model."""
    cl = cluster_labels(settings)
    record = quantile_record(settings, ttft_metric, 0.99, model_labels(settings))
    engines = (f'max by ({by((*cl, "model"))}) (\n    label_replace({record}, "model", "$1", "model_name", "(.*)")\n'
               "  )")
    on = by((*cl, "model"))
    return (f"{gateway_p99}\n/ on ({on}) group_left\n  {engines}",
            f"{gateway_p99}\n- on ({on}) group_left\n  {engines}")
