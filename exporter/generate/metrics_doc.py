"""docs/metrics.md: every metric the exporter exposes, with its lifecycle, and the SGLang families it reads,
from the catalog (catalog_metrics, the signals, catalog_native)."""
from __future__ import annotations

from exporter.catalog import METRICS, SIGNAL_VALUE_METRICS, SIGNALS
from exporter.catalog.native import native_families, native_family

PATH = "docs/metrics.md"


def _cell(text: str) -> str:
    return text.replace("|", "/")


def render(config=None) -> dict[str, str]:
    """{"docs/metrics.md": text}. The text depends on the catalog only; `config` is taken for the shared
    generator contract."""
    out = ["# Metrics", "",
           "<!-- Generated from the catalog (exporter/catalog/metrics.py, the signals, exporter/catalog/native.py) "
           "by exporter/generate/metrics_doc.py; regenerate with `sglang-exporter generate`. Do not edit by "
           "hand. -->", "",
           "Everything `sglang-exporter serve` exposes on `/metrics` (besides the standard `process_*` "
           "collector). Names follow Prometheus' exporter rules: `snake_case`, base units (seconds, bytes, "
           "ratios 0-1, rates per second), one unit per name, `_total` only on counters, no colons, and no two "
           "names saying the same thing. A family may be empty (for example `sglang_exporter_signal_firing` has "
           "no series for a signal that cannot be judged; the `source_up` series of `sglang_metrics` is absent "
           "when no `--sglang-url` is configured).", "",
           "A renamed metric is still exported, unchanged, for one release after its rename: it is marked "
           "**deprecated** below with the release that deprecated it and what replaces it, and the next "
           "release drops it. Move queries, alerts and dashboards to the replacement.", "",
           "| metric | type | labels | help | status |", "|---|---|---|---|---|"]
    for m in METRICS:
        labels = ", ".join(f"`{label}`" for label in m.labels) or "—"
        status = (f"**deprecated** in {m.deprecated}: use `{_cell(m.replaced_by)}`" if m.deprecated else "current")
        out.append(f"| `{m.name}` | {m.type} | {labels} | {_cell(m.help)} | {status} |")
    deprecated = [m for m in METRICS if m.deprecated]
    if deprecated:
        out += ["", "## Deprecated metrics", "",
                "| deprecated metric | since | replaced by |", "|---|---|---|"]
        out += [f"| `{m.name}` | {m.deprecated} | `{_cell(m.replaced_by)}` |" for m in deprecated]
    out += ["", "Rank labels `dp`, `tp`, `pp` are the rank tags of the SGLang log line, or the rank labels of its "
            "`/metrics`. SGLang tags a kind of rank only when there are several, so an untagged rank is rank 0 "
            "of its kind: a single-GPU server reads `dp=\"0\"`, `tp=\"0\"`, `pp=\"0\"` (never an empty label), "
            "and `rank=\"TP0\"` on `sglang_exporter_rank_gpu_headroom_bytes`. At most 64 rank label sets are "
            "kept; later ones share `dp=\"other\"` (with `tp` and `pp` \"other\" too).", "",
            "## Signal values, one family per unit", "",
            "A signal's judged value goes to the family of its unit, so no family mixes units (a sum or a "
            "`max by (signal)` over one family always adds like to like, and the unit suffix says what a "
            "dashboard axis shows). One family per signal would multiply names by the number of signals for "
            "no gain: the `signal` label already tells them apart, and alert rules join on it.", "",
            "| unit | family | scale from the judged value |", "|---|---|---|"]
    for unit, (name, scale) in SIGNAL_VALUE_METRICS.items():
        factor = "1" if scale == 1 else "1/60 (judged per minute, exported per second)"
        out.append(f"| {unit} | `{name}` | {factor} |")
    out += ["", "## Signals", "",
            "Values of the `signal` label, with the family that carries the value:", "",
            "| signal | severity | value family | window | rule |", "|---|---|---|---|---|"]
    for s in SIGNALS:
        window = f"{s.window_seconds:g} s" if s.window_seconds else "epoch"
        family = SIGNAL_VALUE_METRICS[s.value_unit][0]
        out.append(f"| `{s.id}` | {s.severity} | `{family}` | {window} | {_cell(s.formula)} |")
    out += ["", "## SGLang's own metrics: renames across releases", "",
            "The SGLang families the sidecar reads whose newest release no longer exports them (from "
            "exporter/catalog/native.py and the release data); the sidecar reads the old spelling from the "
            "releases that have it. Every family read, and what it feeds, is in "
            "[signal-sources.md](signal-sources.md).", "",
            "| SGLang metric | releases | replaced by |", "|---|---|---|"]
    for f in native_families():
        if f.deprecated:
            repl = f"`{native_family(f.replaced_by).exposed}`" if f.replaced_by else "— (dropped)"
            out.append(f"| `{f.exposed}` | {f.first} – {f.last} | {repl} |")
    out += _series_budget()
    return {PATH: "\n".join(out) + "\n"}


# Measured with bench/fleet_capture.py (a real `serve` on the simulator's retraction storm, SGLang 0.5.x
# format): series of one sidecar's /metrics, process_* included, for tp1 and dp8 x tp8, and the latter with
# per_rank_series: false. The per-family counts below come from the catalog.
MEASURED = {"tp1": 162, "dp8 x tp8": 260, "dp8 x tp8, per_rank_series: false": 161}


def _series_budget() -> list[str]:
    per_signal = [m.name for m in METRICS if m.labels and m.labels[0] == "signal"]
    per_rank = [m.name for m in METRICS if set(m.labels) >= {"dp", "tp", "pp"}]
    n = len(SIGNALS)
    out = ["", "## Series budget", "",
           f"What one sidecar costs Prometheus. Per signal ({n} signals in the catalog): "
           + ", ".join(f"`{name}`" for name in per_signal)
           + " carry at most one series per signal each (`signal_firing` none while unknown; the value families "
           "split the signals between them by unit), about 100 series in all. Per rank: "
           + ", ".join(f"`{name}`" for name in per_rank)
           + " one series per rank that prints batch lines (one per DP rank: TP/PP ranks of a DP rank print the "
           "same batch), and `sglang_exporter_rank_gpu_headroom_bytes` one per GPU. The rest is one series per "
           "family, or per source, phase, reason or kind. `failure_cause_info` is at most one series per failure "
           "signal, and `advice_action_info`, `advice_current_value` and `advice_suggested_value` one per flag with "
           "advice each (a suggestion that moves changes a value, not the series).", "",
           "| layout | series of one sidecar's `/metrics` |", "|---|---|"]
    out += [f"| {layout} | {count} |" for layout, count in MEASURED.items()]
    out += ["", "SGLang's own `/metrics` of the same server (the simulator's families) adds 125 series at tp1 and "
            "265 at dp8 x tp8. `per_rank_series: false` (docs/configuration.md) folds the per-rank batch gauges "
            "into one series per server (`dp`, `tp`, `pp` = `all`, summed over DP ranks as the dashboards do; the "
            "fullest KV pool; CUDA graph off if any rank ran without it) and leaves out the per-rank headroom, so "
            "a dp8 x tp8 sidecar costs what a single-GPU one does; the per-rank dashboard panels then show one "
            "line. Reproduce: `python bench/fleet_capture.py --tp 8 --dp 8 --out bench/out/fleet/dp8tp8`.", "",
            "What the rules cost on top (docs/alerts.md, \"Recording rules\"): the latency groups write one "
            "series per bucket and server and the fleet group one per server and event kind; both run every "
            "minute (`interval: 1m`), the alerts every 15 s. At 1,000 servers (471k head series) the rule groups "
            "read 1.3-1.4 M samples per 15 s, a 1m group's counted once in four, and Prometheus 3.5 evaluates "
            "every group in under 0.8 s on 2 CPUs (2.42: the latency groups 1.2-3.6 s; `python bench/fleet.py "
            "--servers 1000`; README, \"A fleet against a real Prometheus\")."]
    return out

