"""The analyze report (exporter/report/analyze.py) as text: the headline, the verdict and what fired, the server and
its restarts, the layouts read, the advice."""
from __future__ import annotations

from exporter.report.analyze import iso
from exporter.state.failures import STAGE_TEXT

_VERDICT_TEXT = {"failed": "the server failed", "problems": "fired", "healthy": "nothing fired",
                 "insufficient data": "too little to judge health"}
_COUNT_NAMES = {"retractions": "retractions", "ooms": "OOMs", "exceptions": "exceptions",
                "watchdog_timeouts": "watchdog timeouts", "restarts": "restarts"}


def headline(report: dict) -> str:
    """The report's first line: the verdict and what it rests on."""
    v = report["verdict"]
    line = f"Verdict: {v.upper()}: {_VERDICT_TEXT[v]}"
    if v == "failed":
        last = {}
        for f in report.get("failures", []):
            last[f["signal"]] = f
        # a start-up OOM says more than the crash it caused (its stage picks the advice)
        first = last.get("startup_oom") or next(iter(last.values()), None)
        if first is not None:
            where = f" while {STAGE_TEXT[first['stage']]}" if first.get("stage") else ""
            line += f"{where} ({report['verdict_reason']}); cause ({first['cause_class']}): {first['cause']}"
        else:
            line += f" ({report['verdict_reason']})"
    elif v == "problems":
        line = f"Verdict: PROBLEMS: {report['verdict_reason']} {_VERDICT_TEXT[v]}"
    elif v == "insufficient data":
        line += f": {report['verdict_reason']}"
    return line


def render_text(report: dict) -> str:
    out = [headline(report)]
    span = report["span"]
    when = "no timestamps" if span["start"] is None else \
        f"{span['start']} .. {span['end']} ({span['seconds']:.0f} s)"
    # the release is stated once, in the Server block (the format family narrows it there)
    default = " (the default; --profile offline for a batch job)" if report.get("profile_default") else ""
    out.append(f"  {', '.join(report['sources'])}: profile {report['profile']}{default}, {when}, "
               f"model {report['model'] or 'unknown'}")
    lines = report["lines"]
    unparsed = ", ".join(f"{k} {v}" for k, v in sorted(lines["unparsed"].items())) or "none"
    out.append(f"  lines {lines['read']:,} read, {lines['recognised']:,} records recognised; unparsed: {unparsed}")
    out += layouts_text(report.get("layouts"))
    counts = []
    for name, c in report["counts"].items():
        text = f"{_COUNT_NAMES[name]} {c['count']}"
        if c["count"] and c["first"] is not None:
            text += f" ({c['first']}" + (f" .. {c['last']})" if c["last"] != c["first"] else ")")
        counts.append(text)
    out.append("  events: " + "; ".join(counts))
    out += _server_lines(report.get("server"), report["lines"]["recognised"])
    failures = report.get("failures", [])
    if failures:
        out.append("")
        out.append("Failures:")
        for f in failures:
            stage = f" while {STAGE_TEXT[f['stage']]}" if f.get("stage") else ""
            line = f" (line {f['line']})" if f.get("line") else ""
            out.append(f"  {f['signal']}{stage} at {f['time'] or 'an unknown time'}{line}")
            out.append(f"      cause ({f['cause_class']}): {f['cause']}")
    out.append("")
    out.append("Signals:")
    for s in report["signals"]:
        if not s["active"]:
            continue
        if s["fired"]:
            ivs = s["intervals"]
            first_iv = ivs[0]
            more = f" (+{len(ivs) - 1} more)" if len(ivs) > 1 else ""
            worst = format_value(s["worst"], s["unit"])
            span_text = "" if first_iv["start"] is None else f"{first_iv['start']} .. {first_iv['end']}{more}"
            out.append(f"  FIRED    {s['id']:<28} {s['severity']:<8} worst {worst:<14} {span_text}".rstrip())
            if s["detail"]:
                out.append(f"           {s['detail']}")
            if s.get("runbook_url"):
                out.append(f"           runbook: {s['runbook_url']}")
        elif s["known"]:
            out.append(f"  ok       {s['id']:<28} {s['severity']:<8} {s['detail']}".rstrip())
        else:
            out.append(f"  unknown  {s['id']:<28} {s['severity']:<8} {s['detail'] or 'not judged'}".rstrip())
    if report["advice"]:
        out.append("")
        out.append("Advice:")
        for a in report["advice"]:
            out.append(f"  {advice_phrase(a['action'], a['flag'], a['current'], a['suggested'])}  "
                       f"[{', '.join(a['signals'])}]")
            out.append(f"      {a['reason']}")
    advised = {sid for a in report["advice"] for sid in a["signals"]}
    bare = [s for s in report["signals"] if s["fired"] and s["id"] not in advised]
    if bare:
        # a crash or a stall has no flag to change, and still somewhere to go
        out.append("")
        out.append("No flag to change for " + ", ".join(s["id"] for s in bare) + "; follow the runbook:")
        out += [f"  {s['id']}: {s['runbook_url']}" for s in bare if s.get("runbook_url")]
    elif not report["advice"]:
        out.append("")
        out.append("Advice: none; nothing to tune." if report["verdict"] != "insufficient data"
                   else "Advice: none; too little was judged to advise.")
    return "\n".join(out) + "\n"


def advice_phrase(action: str, flag: str, current, suggested) -> str:
    """One piece of advice as a command to a person: "increase --x (now 0.3) to 1.3"; a switch is added or
    removed ("remove --disable-cuda-graph (now set)"), and a value to check is something to try, not a move."""
    if isinstance(suggested, bool) or isinstance(current, bool):
        if suggested is False and current:
            return f"remove {flag} (now set)"
        if suggested is True and not current:
            return f"add {flag}" + ("" if current is None else " (now not set)")
    now = "" if current is None else f"now {current}"
    if action == "check":
        detail = "; ".join(x for x in (now, "" if suggested is None else f"try {suggested}") if x)
        return f"check {flag}" + (f" ({detail})" if detail else "")
    return f"{action} {flag}" + (f" ({now})" if now else "") + ("" if suggested is None else f" to {suggested}")


def release_text(server: dict | None) -> str:
    """The report's one statement of the SGLang release: the range server_args and the batch lines' format
    both allow (flags.infer_release)."""
    rel = (server or {}).get("release")
    return "unknown" if rel is None else rel["first"] if rel["first"] == rel["last"] \
        else f"{rel['first']} .. {rel['last']}"


def _server_lines(server: dict | None, recognised: int = 1) -> list[str]:
    """The server as a whole: release range, rank layout, restarts with their evidence, headroom per GPU.
    Nothing when no record was recognised: the verdict already says so."""
    if not server or not recognised:
        return []
    release = release_text(server)
    lay = server["layout"]
    sizes = ", ".join(f"{k}={lay[k]}" for k in ("dp", "tp", "pp", "ep") if lay[k] is not None) or "unknown"
    dpa = {True: ", DP attention", False: "", None: ""}[lay["dp_attention"]]
    n = lay["ranks_seen"]
    ranks = f"{n} rank{'' if n == 1 else 's'} printed start-up lines" if server["startup_seen"] else \
        "start-up not in the log (it begins after SGLang started)"
    out = ["", "Server:", f"  SGLang release {release}; layout {sizes}{dpa}; {ranks}"]
    for e in server["restart_evidence"]:
        where = f" (line {e['line']})" if e.get("line") else ""
        out.append(f"  restart at {e.get('time') or iso(e['t'], False)}{where}: {e['evidence']}")
    gpus = server["gpu_headroom"]
    if len(gpus) == 1:
        out.append(f"  free GPU memory after start-up: {gpus[0]['bytes'] / 2**30:.2f} GiB"
                   + (f" ({gpus[0]['rank']})" if gpus[0]["rank"] else ""))
    elif gpus:
        shown = ", ".join(f"{g['rank'] or 'rank'} {g['bytes'] / 2**30:.2f} GiB" for g in gpus[:4])
        more = f" (+{len(gpus) - 4} more)" if len(gpus) > 4 else ""
        out.append(f"  free GPU memory after start-up, least first: {shown}{more}")
    return out


def layouts_text(lay: dict | None) -> list[str]:
    """The report's "layouts" section for people: which prefix layouts the records were found behind, the
    share of lines read, what was skipped, and whether the log had times (else: file order)."""
    if not lay:
        return []
    share = "-" if lay["share_read"] is None else f"{lay['share_read']:.1%}"
    out = [f"  layouts: {share} of non-blank lines read as records"
           + ("" if lay["share_read"] is None or lay["share_read"] >= 0.9 else " (only partly understood)")]
    for name, n in list(lay["layouts"].items())[:6]:
        out.append(f"    {n:>10,}  {name.strip() or '(none)'}")
    if len(lay["layouts"]) > 6:
        out.append(f"    ... {len(lay['layouts']) - 6} more layouts")
    if lay["skipped"]:
        out.append("    skipped: " + ", ".join(f"{k.replace('_', ' ')} {n:,}" for k, n in lay["skipped"].items()))
    if lay["clock"] == "file order":
        out.append("    no line has a time: records are taken in file order; rates are unknown")
    elif lay["untimed"]:
        out.append(f"    {lay['untimed']:,} records without a time: taken in file order, at the previous line's time")
    return out


def format_value(v, unit: str, missing: str = "-") -> str:
    """A signal value for people, in its catalog unit (text and HTML reports)."""
    if v is None:
        return missing
    if unit == "bytes":
        return f"{v / 2**30:.2f} GiB"
    if unit == "ratio":
        return f"{v:.0%}"
    if unit == "per_minute":
        return f"{v:.1f}/min"
    if unit == "seconds":
        return f"{v:.0f} s"
    return f"{v:g}"
