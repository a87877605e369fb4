"""`analyze --format html`: one self-contained HTML file (inline SVG charts from matplotlib, no script, no
network) with the verdict and advice on top (each fired signal with its runbook), charts with thresholds, fired
intervals and event markers, per-rank views, the start-up configuration and the parser's coverage. The time
axis is the status page's (svg_chart.time_ticks): labels that say something from seconds to weeks.

matplotlib is an optional extra (`pip install 'sglang-exporter[html]'`).
"""
from __future__ import annotations

import html
import io
import re
from datetime import datetime, timezone
from typing import Any

from exporter.catalog import SIGNALS_BY_ID
from exporter.report.text import format_value, release_text
from exporter.report.text import headline as headline_text
from exporter.state.failures import STAGE_TEXT
from exporter.web.svg_chart import decimate as _decimate
from exporter.web.svg_chart import time_ticks

MAX_POINTS = 1200          # buckets per chart; each keeps its min and max so peaks survive
MAX_RANK_LINES = 16
PLOT_WIDTH_PX = 700        # of the 960 px figure, what the axis gets at the least (legend and labels take the rest)
_MARKER_STYLE = {"oom": ("#c0392b", "OOM"), "restart": ("#2471a3", "restart"), "watchdog": ("#d35400", "watchdog"),
                 "crash": ("#7d3c98", "crash")}
# which fired signals are shaded on which chart
_SHADE = {"queue": ("queue_below_range", "queue_above_range", "stalled"),
          "running": ("concurrency_capped", "stalled"),
          "token_usage": ("kv_cache_underused",),
          "retractions_per_minute": ("retractions_frequent", "retraction_storm"),
          "gen_throughput": ("cuda_graph_off_small_batch", "stalled")}


def decimate(t: list, y: list, buckets: int = MAX_POINTS) -> tuple[list, list]:
    """Min-max decimation to at most 2 points per bucket (svg_chart.decimate), MAX_POINTS buckets by default."""
    return _decimate(t, y, buckets)


def _dt(ts: float) -> Any:
    """A time matplotlib places on a date axis (its stubs type axis values as floats; its date converter takes
    datetimes)."""
    return datetime.fromtimestamp(ts, tz=timezone.utc).replace(tzinfo=None)


def _chart(title: str, unit: str, series: list, t_all: list, report: dict, key: str,
           hlines=(), band=None, ylim=None) -> str:
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 2.6), dpi=96)
    ax = fig.add_subplot(1, 1, 1)
    drawn = False
    for label, ys, color in series:
        tt, yy = decimate(t_all, ys)
        if tt:
            ax.plot([_dt(x) for x in tt], yy, color=color, linewidth=1.1, label=label)
            drawn = True
    if band:
        ax.axhspan(band[0], band[1], color="#27ae60", alpha=0.10, label=f"healthy {band[0]:g}–{band[1]:g}")
    for value, label, color in hlines:
        ax.axhline(value, color=color, linestyle="--", linewidth=1, label=label)
    for sig in report["signals"]:
        if sig["id"] in _SHADE.get(key, ()) and sig["fired"]:
            color = "#e74c3c" if sig["severity"] == "critical" else "#f39c12"
            for i, iv in enumerate(sig["intervals"]):
                if iv["start_ts"] is not None and iv["end_ts"] is not None:
                    ax.axvspan(_dt(iv["start_ts"]), _dt(max(iv["end_ts"], iv["start_ts"] + 1)), color=color,
                               alpha=0.18, label=f"{sig['id']} fired" if i == 0 else None)
    for m in report.get("series", {}).get("markers", [])[:500]:
        color, _ = _MARKER_STYLE.get(m["kind"], ("#555", m["kind"]))
        ax.axvline(_dt(m["t"]), color=color, linewidth=1.2, alpha=0.8)
    t0, t1 = t_all[0], t_all[-1]
    if t1 - t0 < 2:                  # one instant: a few seconds around it, so the axis has a scale
        t0, t1 = t0 - 2, t1 + 2
    ax.set_xlim(_dt(t0), _dt(t1))
    ticks = time_ticks(t0, t1, width_px=PLOT_WIDTH_PX)
    ax.set_xticks([_dt(t) for t, _ in ticks])
    ax.set_xticklabels([label for _, label in ticks])
    if ylim:
        ax.set_ylim(*ylim)
    ax.set_title(title, loc="left", fontsize=11)
    ax.set_ylabel(unit, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.set_xlabel("UTC" if t_all[-1] - t_all[0] < 86400 else "date (UTC)", fontsize=8)
    ax.tick_params(labelsize=8)
    if drawn or band or hlines:
        ax.legend(loc="upper left", fontsize=7, framealpha=0.7, ncol=4)
    fig.tight_layout()
    buf = io.StringIO()
    import matplotlib as mpl
    with mpl.rc_context({"svg.fonttype": "none", "svg.hashsalt": "sglang-exporter"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)   # RDF boilerplate: bytes, no value
    return f'<figure class="chart" data-chart="{key}">{svg}</figure>'


def _params(report: dict, sid: str) -> dict | None:
    sig = SIGNALS_BY_ID[sid]
    return sig.params(report["profile"])


def render_html(report: dict) -> str:
    series = report.get("series") or {"t": []}
    # a log without timestamps is taken in file order at a made-up time: nothing to draw on a time axis
    untimed = (report.get("layouts") or {}).get("clock") == "file order"
    t = [] if untimed else series.get("t", [])
    charts = []
    if t:
        below, above = _params(report, "queue_below_range"), _params(report, "queue_above_range")
        band = (below["min_queue"], above["max_queue"]) if below and above else None
        hl = [] if band or not above else [(above["max_queue"], "upper bound", "#c0392b")]
        charts.append(_chart("Waiting queue (#queue-req)", "requests", [("queue", series["queue"], "#2c3e50")],
                             t, report, "queue", hlines=hl, band=band))
        charts.append(_chart("Running requests vs max_running_requests", "requests",
                             [("running", series["running"], "#2c3e50"),
                              ("max_running_requests", series["max_running"], "#7f8c8d")], t, report, "running"))
        kv = _params(report, "kv_cache_underused")
        charts.append(_chart("KV cache token usage", "ratio", [("token usage", series["token_usage"], "#2c3e50")],
                             t, report, "token_usage", ylim=(0, 1.05),
                             hlines=[(kv["min_usage"], f"target {kv['min_usage']:g}", "#27ae60")] if kv else []))
        freq, storm = _params(report, "retractions_frequent"), _params(report, "retraction_storm")
        lines = []
        if freq:
            lines.append((freq["per_minute"], f"frequent > {freq['per_minute']:g}/min", "#f39c12"))
        if storm:
            lines.append((storm["per_minute"], f"storm ≥ {storm['per_minute']:g}/min", "#c0392b"))
        # each signal's own value (signals.retraction_rate): the storm is judged over its shorter window
        def over(sid: str) -> str:
            return f"over {SIGNALS_BY_ID[sid].window_seconds / 60:g} min ({sid})"
        rates = [(over("retractions_frequent"), series["retractions_per_minute"], "#2c3e50")]
        if series.get("retraction_storm_per_minute"):
            rates.append((over("retraction_storm"), series["retraction_storm_per_minute"], "#8e44ad"))
        charts.append(_chart("Retractions per minute", "per minute", rates, t, report,
                             "retractions_per_minute", hlines=lines))
        charts.append(_chart("Generation throughput", "tokens/s",
                             [("gen throughput", series["gen_throughput"], "#2c3e50")], t, report, "gen_throughput"))
        ranks = series.get("ranks") or {}
        if len(ranks) > 1:
            palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                       "#bcbd22", "#17becf"]
            for col, title, unit in (("queue", "Queue per rank", "requests"),
                                     ("token_usage", "Token usage per rank", "ratio")):
                lines_ = [(name, vals[col] + [None] * (len(t) - len(vals[col])), palette[i % len(palette)])
                          for i, (name, vals) in enumerate(sorted(ranks.items())[:MAX_RANK_LINES])]
                charts.append(_chart(title, unit, lines_, t, report, f"rank_{col}"))
    return _page(report, charts)


def _esc(x) -> str:
    return html.escape("" if x is None else str(x))


def _layouts(lay: dict | None) -> str:
    """Which prefix layouts the records were found behind and the share of lines read (docs/log-events.md,
    "Custom log formats"): a log only partly understood shows at once."""
    if not lay:
        return ""
    share = "–" if lay["share_read"] is None else f"{lay['share_read']:.1%}"
    warn = "" if lay["share_read"] is None or lay["share_read"] >= 0.9 else " <b>(only partly understood)</b>"
    rows = "".join(f"<tr><td><code>{_esc(name.strip() or '(none)')}</code></td><td>{n:,}</td></tr>"
                   for name, n in lay["layouts"].items())
    skipped = "".join(f"<tr><td>{_esc(k)}</td><td>{n:,}</td></tr>" for k, n in lay["skipped"].items())
    clock = ("<p>No line has a time: records are taken in file order; rates are unknown.</p>"
             if lay["clock"] == "file order" else
             f"<p>{lay['untimed']:,} records without a time, taken in file order.</p>" if lay["untimed"] else "")
    # one block, kept on one printed page: its heading must not end a page with its tables on the next
    return (f"<div class='layouts'><h3 id='layouts'>Layouts learned</h3><p>{share} of non-blank lines read as "
            f"records{warn}.</p><table><tr><th>prefix layout</th><th>records</th></tr>{rows}</table>"
            + (f"<table><tr><th>skipped lines, by look</th><th>lines</th></tr>{skipped}</table>" if skipped else "")
            + clock + "</div>")


def _page(report: dict, charts: list[str]) -> str:
    verdict = report["verdict"]
    headline = _esc(headline_text(report).split(": ", 2)[2])     # the text report's first line, less "Verdict"
    failures = "".join(
        f"<tr><td>{_esc(f['signal'])}</td><td>{_esc(STAGE_TEXT.get(f.get('stage'), ''))}</td>"
        f"<td>{_esc(f['time'] or 'no timestamp')}</td><td>{_esc(f['cause_class'])}</td>"
        f"<td><code>{_esc(f['cause'])}</code></td></tr>" for f in report.get("failures", []))
    if failures:
        failures = ("<table class='failures'><tr><th>failure</th><th>while</th><th>at</th><th>class</th>"
                    f"<th>cause line</th></tr>{failures}</table>")
    counts = " · ".join(
        f"{_esc(name.replace('_', ' '))} {c['count']}"
        + (f" ({_esc(c['first'])}" + (f" – {_esc(c['last'])})" if c["last"] != c["first"] else ")")
           if c["count"] and c["first"] else "")
        for name, c in report.get("counts", {}).items())
    advice_rows = "".join(
        f"<tr><td><code>{_esc(a['flag'])}</code></td><td>{_esc(a['action'])}</td><td>{_esc(a['current'])}</td>"
        f"<td><b>{_esc(a['suggested'])}</b></td><td>{_esc(', '.join(a['signals']))}</td>"
        f"<td>{_esc(a['reason'])}</td></tr>"
        for a in report["advice"])
    advice = (f"<table class='advice'><tr><th>flag</th><th>action</th><th>current</th><th>suggested</th>"
              f"<th>because of</th><th>why</th></tr>{advice_rows}</table>" if advice_rows else "")
    # every fired signal says where to go: a crash or a stall has a runbook even when no flag helps
    advised = {sid for a in report["advice"] for sid in a["signals"]}
    bare = [s for s in report["signals"] if s["fired"] and s["id"] not in advised]
    if bare:
        advice += "<ul class='runbooks'>" + "".join(
            f"<li><code>{_esc(s['id'])}</code> ({_esc(s['title'])}): no flag to change; follow its "
            + (f"<a href='{_esc(s['runbook_url'])}'>runbook</a>" if s.get("runbook_url") else "runbook")
            + "</li>" for s in bare) + "</ul>"
    if not advice:
        advice = "<p>No advice.</p>"
    sig_rows = []
    for s in report["signals"]:
        if not s["active"]:
            continue
        ivs = s["intervals"]
        when = "; ".join(f"{_esc(iv['start'])} – {_esc(iv['end'])}" for iv in ivs[:5])
        if len(ivs) > 5:
            when += f"; +{len(ivs) - 5} more"
        state = "fired" if s["fired"] else ("ok" if s.get("known") else "unknown: " + (s["detail"] or "not judged"))
        worst = format_value(s["worst"], s["unit"], missing="–")
        title = _esc(s["title"])
        if s["fired"] and s.get("runbook_url"):
            title = f"<a href='{_esc(s['runbook_url'])}'>{title}</a> <small>(runbook)</small>"
        sig_rows.append(f"<tr class='{'fired' if s['fired'] else 'quiet'}'><td>{title}</td>"
                        f"<td>{_esc(s['severity'])}</td><td>{_esc(state)}</td><td>{worst}</td>"
                        f"<td>{when or '–'}</td></tr>")
    startup = report["startup"]
    cfg_rows = "".join(f"<tr><td><code>{_esc(k)}</code></td><td>{_esc(v)}</td></tr>"
                       for k, v in {**startup["memory_config"], **startup["server_args"]}.items()
                       if not k.endswith("_bytes"))
    headroom = startup.get("gpu_headroom_bytes")
    cfg_rows += (f"<tr><td>GPU headroom after start-up</td><td><b>{headroom / 2**30:.2f} GiB</b> "
                 f"(rule of thumb 5–8 GiB)</td></tr>" if headroom is not None else "")
    lines = report["lines"]
    unparsed = "".join(f"<tr><td>{_esc(k)}</td><td>{v:,}</td></tr>" for k, v in sorted(lines["unparsed"].items()))
    events = "".join(f"<tr><td>{_esc(k)}</td><td>{v:,}</td></tr>" for k, v in report["records"].items())
    legend = " ".join(f"<span style='color:{c}'>▎{n}</span>" for c, n in _MARKER_STYLE.values())
    span = report["span"]
    when = "no timestamps" if span["start"] is None else \
        f"{_esc(span['start'])} → {_esc(span['end'])} ({span['seconds']:.0f} s)"
    title = f"SGLang log analysis – {', '.join(report['sources'])}"
    body = f"""
<header><h1>{_esc(title)}</h1>
<p class="meta">{when}
· profile <b>{_esc(report['profile'])}</b>
· SGLang release {_esc(release_text(report.get('server')))} · model {_esc(report['model'] or 'unknown')}
· restarts {report['restarts']}</p></header>
<section id="verdict" class="verdict {_esc(verdict.replace(' ', '-'))}"><h2>Verdict: {_esc(verdict.upper())}</h2>
<p>{headline}</p>{failures}<p class="meta">{counts}</p></section>
<section id="advice"><h2>What to change</h2>{advice}</section>
<section id="signals"><h2>Signals</h2><table><tr><th>signal</th><th>severity</th><th>state</th><th>worst</th>
<th>fired</th></tr>{''.join(sig_rows)}</table></section>
<section id="charts"><h2>Over time</h2><p class="legend">Shaded: intervals where a signal fired. Lines: {legend}</p>
{''.join(charts) or '<p>No batch lines with timestamps: nothing to plot.</p>'}</section>
<section id="startup"><h2>Start-up configuration</h2>
<table>{cfg_rows or '<tr><td>not in this log</td></tr>'}</table></section>
<section id="coverage"><h2>Parser coverage</h2>
<p>{lines['read']:,} lines read, {lines['recognised']:,} records recognised, {lines['cut']:,} over-long lines cut.</p>
<table><tr><th>unrecognised, by reason</th><th>lines</th></tr>{unparsed}</table>
<table><tr><th>records, by kind</th><th>count</th></tr>{events}</table>{_layouts(report.get("layouts"))}</section>"""
    css = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1100px;
color:#222}h1{font-size:20px}h2{font-size:16px;border-bottom:1px solid #ddd;padding-bottom:4px}.meta{color:#555}
table{border-collapse:collapse;margin:6px 0 14px}td,th{border:1px solid #ddd;padding:4px 8px;font-size:13px;
text-align:left;vertical-align:top}.verdict{padding:8px 14px;border-radius:6px}.verdict.healthy{background:#eafaf1}
.verdict.problems,.verdict.failed{background:#fdedec}
.verdict.insufficient-data{background:#fef9e7}tr.fired td{background:#fef5e7}figure.chart{margin:0 0 8px}
figure.chart svg{width:100%;height:auto}.legend{font-size:12px;color:#555}
@media print{body{margin:0;max-width:none}h2,h3{break-after:avoid}figure.chart,tr,.layouts{break-inside:avoid}
section{break-inside:auto}}"""
    doc = (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{_esc(title)}</title>"
           f"<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; "
           f"img-src data:\"><style>{css}</style></head><body>{body}</body></html>\n")
    return re.sub(r"\n\s*\n", "\n", doc)
