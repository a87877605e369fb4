"""The sidecar's status page at `/`: what a person who opens the port in a browser reads first. The verdict,
what to change, the signals, the sources, the server's restarts and ranks, and small charts of the last hour.

Built only when asked for, from what the API serves (`signals_document`) and the last hour the sidecar sampled
at evaluation time (recent.py): it computes nothing of its own. No script: it reloads itself (meta refresh),
so it works behind basic auth and TLS as every other page does. Links are relative, so a path prefix added by a
proxy or `kubectl proxy` keeps working.
"""
from __future__ import annotations

import time
from datetime import datetime, timezone
from html import escape

from exporter.report.text import format_value
from exporter.web.svg_chart import line_chart

REFRESH_SECONDS = 10
_VERDICT_WORDS = {"failed": "SGLang failed", "problems": "Problems", "healthy": "Healthy",
                  "insufficient data": "Not enough data to judge yet"}
_STATE_ORDER = {"firing": 0, "unknown": 1, "ok": 2}
MAX_RANK_ROWS = 32


def _esc(x) -> str:
    return escape("" if x is None else str(x))


def _when(ts: float | None, now: float) -> str:
    if ts is None:
        return "–"
    ago = max(0.0, now - ts)
    clock = datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%H:%M:%S")
    if ago < 90:
        rel = f"{ago:.0f} s ago"
    elif ago < 5400:
        rel = f"{ago / 60:.0f} min ago"
    elif ago < 2 * 86400:
        rel = f"{ago / 3600:.1f} h ago"
    else:
        rel = f"{ago / 86400:.0f} days ago"
    return f"{clock} UTC ({rel})"


def runbook_page(runbook: str | None) -> str | None:
    """This server's HTML page of a runbook the API names as `/runbooks/X.md`, relative to `/`."""
    if not runbook:
        return None
    return runbook.lstrip("/").removesuffix(".md") + ".html"


def _signal_link(sig: dict) -> str:
    href = runbook_page(sig.get("runbook"))
    name = f"<code>{_esc(sig['id'])}</code>"
    return f"<a href='{_esc(href)}'>{name}</a>" if href else name


def render(doc: dict, samples: list, params: dict, ranks: dict, now: float | None = None) -> str:
    """The page: `doc` the /api/v1/signals document, `samples` the last hour (Recent.samples), `params` the
    thresholds in force per signal (for the charts' threshold lines), `ranks` the View's latest values per rank."""
    now = time.time() if now is None else now
    by_id = {s["id"]: s for s in doc["signals"]}
    body = [_header(doc, now), _verdict(doc, by_id), _advice(doc, by_id), _charts(samples, params, now),
            _signals(doc, now), _sources(doc, now), _server(doc, ranks), _links()]
    verdict = _VERDICT_WORDS.get(doc["verdict"], doc["verdict"])
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='refresh' content='{REFRESH_SECONDS}'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>{_esc(verdict)} – sglang-exporter</title><style>{CSS}</style></head><body>"
            + "\n".join(body) + "</body></html>\n")


def _header(doc: dict, now: float) -> str:
    stamp = datetime.fromtimestamp(now, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (f"<header><h1>SGLang status</h1><p class='meta'>model <b>{_esc(doc['model'] or 'unknown')}</b> · "
            f"profile <b>{_esc(doc['profile'])}</b> · log format {_esc(doc['format_family'] or 'unknown')} · "
            f"sglang-exporter {_esc(doc['version'])} · updated {stamp}, every {REFRESH_SECONDS} s</p></header>")


def _verdict(doc: dict, by_id: dict) -> str:
    v = doc["verdict"]
    fired = [s for s in doc["signals"] if s["state"] == "firing"]
    lines = []
    if v in ("failed", "problems"):
        lines.append("Firing: " + ", ".join(f"{_signal_link(s)} ({_esc(s['title'])})" for s in fired))
    else:
        lines.append(_esc(doc["verdict_reason"]))
    for s in fired:
        if s.get("cause"):
            lines.append(f"Cause ({_esc(s['cause']['class'])}): <code>{_esc(s['cause']['line'])}</code>")
    return (f"<section id='verdict' class='verdict {_esc(v.replace(' ', '-'))}'>"
            f"<h2>{_esc(_VERDICT_WORDS.get(v, v))}</h2>" + "".join(f"<p>{x}</p>" for x in lines) + "</section>")


def _advice(doc: dict, by_id: dict) -> str:
    rows = []
    advised: set = set()
    for a in doc["advice"]:
        advised.update(a["signals"])
        because = ", ".join(_signal_link(by_id[s]) if s in by_id else f"<code>{_esc(s)}</code>"
                            for s in a["signals"])
        current = "–" if a["current"] is None else a["current"]
        suggested = "–" if a["suggested"] is None else a["suggested"]
        rows.append(f"<tr><td><code>{_esc(a['flag'])}</code></td><td>{_esc(a['action'])}</td><td>{_esc(current)}</td>"
                    f"<td><b>{_esc(suggested)}</b></td><td>{_esc(a['reason'])}</td><td>{because}</td></tr>")
    out = ["<section id='advice'><h2>What to change</h2>"]
    if rows:
        out.append("<table class='advice'><tr><th>flag</th><th>action</th><th>current</th><th>suggested</th>"
                   f"<th>why</th><th>signal</th></tr>{''.join(rows)}</table>")
    # a fired signal no flag helps (a crash, a stall) still says where to look
    bare = [s for s in doc["signals"] if s["state"] == "firing" and s["id"] not in advised]
    if bare:
        out.append("<ul class='runbooks'>" + "".join(
            f"<li>{_signal_link(s)}: no flag to change; follow its runbook"
            + (f" (<a href='{_esc(runbook_page(s.get('runbook')))}'>open</a>)" if s.get("runbook") else "")
            + "</li>" for s in bare) + "</ul>")
    if not rows and not bare:
        out.append("<p>Nothing to change." if doc["verdict"] == "healthy" else "<p>No advice yet.")
    out.append("</section>")
    return "".join(out)


def _signals(doc: dict, now: float) -> str:
    rows = []
    for s in sorted(doc["signals"], key=lambda s: (_STATE_ORDER.get(s["state"], 3), s["id"])):
        value = format_value(s["value"], s["unit"], missing="–")
        rows.append(f"<tr class='{_esc(s['state'])}'><td>{_signal_link(s)}<br><small>{_esc(s['title'])}</small></td>"
                    f"<td class='state'>{_esc(s['state'])}</td><td>{_esc(s['severity'])}</td><td>{_esc(value)}</td>"
                    f"<td>{_esc(_when(s['since'], now))}</td><td>{_esc(s['detail'])}</td></tr>")
    return ("<section id='signals'><h2>Signals</h2><table><tr><th>signal</th><th>state</th><th>severity</th>"
            f"<th>value</th><th>since</th><th>detail</th></tr>{''.join(rows)}</table></section>")


def _sources(doc: dict, now: float) -> str:
    rows = "".join(
        f"<tr class='{'ok' if s['up'] else 'firing'}'><td><code>{_esc(s['source'])}</code></td><td>{_esc(s['kind'])}"
        f"</td><td class='state'>{'up' if s['up'] else 'down'}</td><td>{_esc(s['reason'] or '')}</td>"
        f"<td>{_esc(_when(s['since'], now))}</td><td>{_esc(s['last_error'] or '–')}"
        + (f" <small>({_esc(_when(s['last_error_time'], now))})</small>" if s.get("last_error_time") else "")
        + "</td></tr>" for s in doc["sources"])
    return ("<section id='sources'><h2>Sources</h2><table><tr><th>source</th><th>kind</th><th>state</th>"
            f"<th>reason</th><th>since</th><th>last error</th></tr>{rows or '<tr><td colspan=6>none yet</td></tr>'}"
            "</table></section>")


def _rank_name(key: tuple) -> str:
    # a single-GPU server prints no rank prefix: its one row is the GPU, as in the free-memory line above it
    return " ".join(f"{k.upper()}{v}" for k, v in zip(("dp", "tp", "pp"), key) if v is not None) or "GPU"


def _rank_cells(values: tuple) -> list[str]:
    queue, running, usage, throughput, graph = values
    return ["–" if queue is None else f"{queue:g}", "–" if running is None else f"{running:g}",
            "–" if usage is None else f"{usage:.2f}", "–" if throughput is None else f"{throughput:.0f}",
            {True: "on", False: "off", None: "–"}[graph]]


def _server(doc: dict, ranks: dict) -> str:
    srv = doc.get("server") or {}
    rel = srv.get("release")
    release = ("unknown" if not rel else rel["first"] if rel["first"] == rel["last"]
               else f"{rel['first']} – {rel['last']}")
    lay = srv.get("layout") or {}
    sizes = ", ".join(f"{k}={lay[k]}" for k in ("dp", "tp", "pp", "ep") if lay.get(k) is not None) or "unknown"
    restarts = srv.get("restarts", 0)
    evidence = "".join(f"<li>{_esc(e.get('time') or '')} {_esc(e['evidence'])}</li>"
                       for e in srv.get("restart_evidence", [])[-5:])
    gpus = ", ".join(f"{_esc(g['rank'] or 'GPU')} {g['bytes'] / 2**30:.2f} GiB"
                     for g in srv.get("gpu_headroom", [])[:8])
    shown = sorted(ranks.items(), key=lambda kv: tuple(
        -1 if v is None else v if isinstance(v, int) else 1 << 30 for v in kv[0]))[:MAX_RANK_ROWS]
    rank_rows = "".join(
        f"<tr><td>{_esc(_rank_name(key))}</td>" + "".join(f"<td>{_esc(c)}</td>" for c in _rank_cells(values))
        + "</tr>" for key, values in shown)
    more = f"<p class='meta'>+{len(ranks) - MAX_RANK_ROWS} more ranks</p>" if len(ranks) > MAX_RANK_ROWS else ""
    table = ("<table><tr><th>rank</th><th>queue</th><th>running</th><th>token usage</th><th>gen tokens/s</th>"
             f"<th>CUDA graph</th></tr>{rank_rows}</table>{more}" if rank_rows else "<p>No rank has reported yet.</p>")
    return (f"<section id='server'><h2>Server</h2><p>SGLang release {_esc(release)} · layout {_esc(sizes)} · "
            f"<b>restarts {restarts}</b>" + (f" · free GPU memory after start-up: {gpus}" if gpus else "")
            + "</p>" + (f"<ul>{evidence}</ul>" if evidence else "") + table + "</section>")


def _charts(samples: list, params: dict, now: float) -> str:
    t = [s[0] for s in samples]
    # the axis spans what was sampled (a sidecar started a minute ago shows that minute, not a flat hour)
    t0 = min(t[0], now - 10) if t else now - 3600
    rng = (t0, now)
    below, above = params.get("queue_below_range"), params.get("queue_above_range")
    queue = [s[1] for s in samples]
    qmax = max((v for v in queue if v is not None), default=0)
    q_lines = []
    if below:
        q_lines.append((below["min_queue"], f"healthy ≥ {below['min_queue']:g}", "#27ae60"))
    if above and above["max_queue"] <= 2 * max(qmax, 1):      # far above the data it would flatten the line
        q_lines.append((above["max_queue"], f"too long > {above['max_queue']:g}", "#c0392b"))
    kv = params.get("kv_cache_underused")
    u_lines = [(kv["min_usage"], f"target {kv['min_usage']:g}", "#27ae60")] if kv else []
    rpm = [s[3] for s in samples]
    rmax = max((v for v in rpm if v is not None), default=0)
    r_lines = []
    for sid, word, color in (("retractions_frequent", "frequent", "#f39c12"), ("retraction_storm", "storm", "#c0392b")):
        p = params.get(sid)
        if p and p["per_minute"] <= 2 * max(rmax, p["per_minute"] if sid == "retractions_frequent" else 0):
            r_lines.append((p["per_minute"], f"{word} {'>' if word == 'frequent' else '≥'} {p['per_minute']:g}",
                            color))
    charts = [
        line_chart("queue", "Waiting queue", "requests", t, [("queue", queue, "#2c3e50")], rng, hlines=q_lines),
        line_chart("token_usage", "KV cache token usage", "ratio", t, [("token usage", [s[2] for s in samples],
                                                                         "#2c3e50")], rng, hlines=u_lines,
                   y_ceiling=1.0),
        line_chart("retractions_per_minute", "Retractions per minute", "per minute", t,
                   [("retractions/min", rpm, "#2c3e50")], rng, hlines=r_lines),
    ]
    note = ("<p class='meta'>As sampled by this sidecar since it started; times in UTC.</p>" if t and t[0] > now - 3540
            else "<p class='meta'>Times in UTC.</p>")
    return ("<section id='charts'><h2>Last hour</h2><div class='charts'>" + "".join(charts) + f"</div>{note}"
            "</section>")


def _links() -> str:
    return ("<footer><a href='metrics'>/metrics</a> · <a href='api/v1/signals'>/api/v1/signals</a> (JSON) · "
            "<a href='runbooks/'>runbooks</a> · <a href='healthz'>/healthz</a> · <a href='readyz'>/readyz</a>"
            "</footer>")


CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px auto;max-width:1320px;
padding:0 12px;color:#222}h1{font-size:20px;margin:0}h2{font-size:16px;border-bottom:1px solid #ddd;padding-bottom:3px}
.meta{color:#555;font-size:13px}table{border-collapse:collapse;margin:4px 0 10px}td,th{border:1px solid #ddd;
padding:3px 8px;font-size:13px;text-align:left;vertical-align:top}.verdict{padding:6px 14px;border-radius:6px;
margin-top:10px}.verdict h2{border:0;font-size:22px;margin:6px 0}.verdict.healthy{background:#eafaf1}
.verdict.problems{background:#fef5e7}.verdict.failed{background:#fdedec}.verdict.insufficient-data{background:#f4f6f7}
tr.firing td.state{color:#c0392b;font-weight:600}tr.ok td.state{color:#1e8449}tr.unknown td.state{color:#7f8c8d}
.charts{display:flex;flex-wrap:wrap;gap:10px}.charts svg{border:1px solid #eee}footer{margin:16px 0;font-size:13px}
code{font-size:12.5px}td code{white-space:nowrap}"""
