"""Replays a log through the live engine, on the log's own clock, and reports each signal over time with
the reconciled advice (schema: docs/analyze.md)."""
from __future__ import annotations

import math
import os
import sys
import time
from datetime import datetime, timezone

from exporter.catalog import SIGNALS_BY_ID, runbook_url
from exporter.config import Config
from exporter.engine import Engine, advice_facts, verdict
from exporter.ingest.events import as_event
from exporter.ingest.lines import compression
from exporter.ingest.pipeline import SourceParser, iter_file_item_lists, layouts_read
from exporter.signals.advice import reconcile
from exporter.signals.judgement import Judgement, retractions_per_minute
from exporter.state import per_scheduler
from exporter.state.failures import TALLIED

SCHEMA = "sglang-exporter/analyze/v2"   # v2: `events` renamed `records`; `profile_default` added
MAX_CATCHUP_STEPS = 200      # evaluations inserted into one silent gap of the log
_SERVER_ARGS_SHOWN = ("model_path", "served_model_name", "tp_size", "dp_size", "pp_size", "enable_dp_attention",
                      "mem_fraction_static", "max_running_requests", "chunked_prefill_size",
                      "schedule_conservativeness", "schedule_policy", "cuda_graph_max_bs", "cuda_graph_max_bs_decode",
                      "disable_cuda_graph", "ep_size",
                      "attention_backend", "speculative_algorithm", "disaggregation_mode", "quantization",
                      "context_length", "decode_log_interval", "watchdog_timeout")


def iso(ts: float | None, time_only: bool = False) -> str | None:
    if ts is None:
        return None
    dt = datetime.fromtimestamp(ts, tz=timezone.utc)
    return dt.strftime("%H:%M:%S") if time_only and ts < 10 * 86400 else dt.strftime("%Y-%m-%dT%H:%M:%S")


class Progress:
    """A one-line progress meter on a terminal (stderr); silent otherwise."""

    def __init__(self, total_bytes: int, stream=sys.stderr, enabled: bool | None = None):
        self.total = total_bytes
        self.stream = stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self.start = time.monotonic()
        self.next = self.start + 0.5

    def update(self, done_bytes: int, lines: int) -> None:
        now = time.monotonic()
        if not self.enabled or now < self.next:
            return
        self.next = now + 0.5
        done = f"{min(100.0, 100.0 * done_bytes / self.total):5.1f}%  " if self.total else ""   # 0: unknown
        rate = lines / max(now - self.start, 1e-9)
        self.stream.write(f"\ranalyze: {done}{lines:,} lines  {rate:,.0f} lines/s ")
        self.stream.flush()

    def done(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * 60 + "\r")
            self.stream.flush()


class Series:
    """Per-evaluation samples for charts (analyze --format html)."""

    def __init__(self):
        self.t: list[float] = []
        self.cols: dict[str, list] = {k: [] for k in ("queue", "running", "max_running", "token_usage",
                                                       "gen_throughput", "retractions_per_minute",
                                                       "retraction_storm_per_minute")}
        self.ranks: dict[str, dict[str, list]] = {}
        self.markers: list[dict] = []

    def sample(self, engine: Engine, now: float) -> None:
        st = engine.state
        ranks = st.ranks
        schedulers = per_scheduler(ranks)
        self.t.append(now)
        c = self.cols
        c["queue"].append(sum(r.queue or 0 for r in schedulers.values()) if ranks else None)
        c["running"].append(sum(r.running or 0 for r in schedulers.values()) if ranks else None)
        c["max_running"].append(st.memory_config.get("max_running_requests"))
        usages = [r.usage for r in ranks.values() if r.usage is not None]
        c["token_usage"].append(max(usages) if usages else None)
        c["gen_throughput"].append(sum(r.throughput or 0 for r in schedulers.values()) if ranks else None)
        # the signals' own values (signals.retraction_rate): the storm shading starts where its line crosses
        c["retractions_per_minute"].append(retractions_per_minute(st, now, engine.params))
        c["retraction_storm_per_minute"].append(retractions_per_minute(st, now, engine.params, "retraction_storm"))
        if len(ranks) > 1:
            n = len(self.t) - 1
            for key, r in ranks.items():
                label = " ".join(f"{k.upper()}{v}" for k, v in zip(("dp", "tp", "pp"), key) if v is not None) \
                    or "rank"
                cols = self.ranks.setdefault(label, {"queue": [], "running": [], "token_usage": []})
                for name, v in (("queue", r.queue), ("running", r.running), ("token_usage", r.usage)):
                    col = cols[name]
                    col.extend([None] * (n - len(col)))
                    col.append(v)


# restarts are not among them: a ready line is one only after another start-up (the state decides; _report)
_MARKER_KINDS = {"oom": "oom", "watchdog_timeout": "watchdog",
                 "scheduler_exception": "crash", "sigquit": "crash", "traceback": "crash", "subprocess_crash": "crash",
                 "init_failed": "crash", "nccl_timeout": "crash", "health_check_failed": "crash"}


def analyze(paths: list[str], config: Config, progress: bool | None = None, series: bool = False,
            profile_default: bool = False) -> dict:
    """The report of `paths` replayed under `config`; `profile_default`: the user chose no profile (the report
    says so, and how to choose another)."""
    engine = Engine(config, log_fed=True)
    engine.set_sources(log_up=True)
    engine.advise = False       # the report's advice is reconciled once, from what fired (_report)
    step = config.evaluate_interval
    stall = (engine.params.get("stalled") or {}).get("stall_seconds", 60)
    meter = Progress(total_bytes(paths), enabled=progress)
    chart = Series() if series else None
    stats = []
    first = last = None
    last_eval = 0.0         # (set with `first`, before it is read)
    lines_seen = 0
    time_only = False
    ingest_row = engine.ingest_row
    # the Rows between two evaluations or Events go to the state in one call (see ServerState.apply_rows), which
    # times them as this loop does; `due` is when the next evaluation is (when step > 0: else at every item)
    apply_rows = engine.state.apply_rows if step > 0 else None
    due = math.inf
    untimed = []          # records before the first timestamp: they happened before it (serve gives them the
                          # time they arrive, which is also no later than the next stamped line)
    for path in paths:
        # (with one evaluation per item, step <= 0, each request log is one more evaluation: none is folded)
        sp = SourceParser(path, fold_request_logs=apply_rows is not None)
        stats.append(sp)
        for items in iter_file_item_lists(path, config.max_line_bytes, stats=sp):
            it = iter(items)
            for item in it:
                while item is not None:
                    row = item.__class__ is tuple       # a Row (events.py): most lines of a log
                    ts = item[2] if row else item.ts
                    now = ts if ts is not None else last
                    if now is None:
                        untimed.append(as_event(item))
                        break
                    if last is not None and now < last:
                        now = last             # lines of several ranks can interleave slightly out of order
                    if first is None:
                        first, last_eval = now, now
                        due = next_due(last_eval, step)
                        engine.state.observed_from = now
                        stamp = item[3] if row else item.time
                        time_only = stamp is not None and "T" not in stamp and "-" not in stamp
                        _replay_untimed(engine, chart, untimed, now)
                    if now - last_eval >= step:
                        _catch_up(engine, chart, last_eval, now, step, stall)
                        last_eval = now
                        due = next_due(last_eval, step)
                    last = now
                    if row:
                        ingest_row(item, now)
                    else:
                        engine.ingest(item, now)
                        if chart is not None and item.kind in _MARKER_KINDS:
                            chart.markers.append({"t": now, "kind": _MARKER_KINDS[item.kind], "line": item.line,
                                                  "detail": item.fields.get("phase") or item.fields.get("component")
                                                  or ""})
                    if apply_rows is None:
                        break
                    item, last = apply_rows(it, now, due)     # the next item it did not apply, or None
            folded = sp.take_folded()
            if folded:          # (no judge reads the count, only whether any record came: they come after one)
                engine.state.count_rows("request_log", folded)
            if sp.lines - lines_seen >= 20000:
                lines_seen = sp.lines
                meter.update(sum(s.bytes for s in stats), sum(s.lines for s in stats))
    meter.done()
    # the batch lines' format narrows the release server_args tell: one release statement (flags.py)
    engine.state.format_family = next((sp.parser.format_family for sp in stats if sp.parser.format_family), "")
    timed = last is not None
    if not timed and untimed:
        # no timestamp at all: judged once, at an arbitrary 0, by what needs no clock (rates say unknown)
        engine.state.clock_known = False
        engine.state.observed_from = 0.0
        _replay_untimed(engine, chart, untimed, 0.0)
        last = 0.0
    if last is not None:
        engine.evaluate(last)
        if chart is not None:
            chart.sample(engine, last)
    report = _report(paths, config, engine, stats, first if timed else None, last if timed else None, time_only,
                     chart)
    report["profile_default"] = profile_default
    return report


def total_bytes(paths: list[str]) -> int:
    """What the progress meter counts up to: the files' sizes, or 0 (unknown) when one is compressed, as
    the bytes read are decompressed bytes."""
    files = [p for p in paths if p != "-" and os.path.isfile(p)]
    return 0 if any(_compressed(p) for p in files) else sum(os.path.getsize(p) for p in files)


def _compressed(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return compression(fh.read(8)) is not None
    except OSError:
        return False


def next_due(last_eval: float, step: float) -> float:
    """The least time t with `t - last_eval >= step`, the evaluation check of analyze's loop, so a line's time is
    compared with it alone (ServerState.apply_rows) and the evaluations stay at the same times: the subtraction
    rounds, so last_eval + step may be a float off."""
    if not step > 0:
        return -math.inf if step <= 0 else math.inf      # every line; never (NaN)
    due = last_eval + step
    while due - last_eval < step:
        due = math.nextafter(due, math.inf)
    while (below := math.nextafter(due, -math.inf)) - last_eval >= step:
        due = below
    return due


def _replay_untimed(engine: Engine, chart, untimed: list, now: float) -> None:
    for ev in untimed:
        engine.ingest(ev, now)
        if chart is not None and ev.kind in _MARKER_KINDS:
            chart.markers.append({"t": now, "kind": _MARKER_KINDS[ev.kind], "line": ev.line,
                                  "detail": ev.fields.get("phase") or ev.fields.get("component") or ""})
    untimed.clear()


def _catch_up(engine: Engine, chart, last_eval: float, now: float, step: float, stall: float) -> None:
    """Evaluate at each step up to `now`, so silent gaps (a hung server prints nothing) show up in time. (The
    replay reads no snapshot but the last: `judge`, not `evaluate`.)"""
    t = last_eval + step
    n = 0
    while t <= now and n < MAX_CATCHUP_STEPS:
        engine.judge(t)
        if chart is not None:
            chart.sample(engine, t)
        t += step
        n += 1
    if t <= now:
        engine.judge(now)
        if chart is not None:
            chart.sample(engine, now)


def _report(paths, config, engine: Engine, stats, first, last, time_only, chart) -> dict:
    st = engine.state
    signals = []
    fired_judgements = {}
    for sid, p in engine.params.items():
        sig = SIGNALS_BY_ID[sid]
        h = engine.history.get(sid)
        entry = {"id": sid, "title": sig.title, "severity": sig.severity, "active": p is not None,
                 "unit": sig.value_unit, "fired": bool(h and h.fired), "intervals": [], "worst": None,
                 "runbook_url": runbook_url(sig.alert.name, config.alerts.runbook_base_url) if sig.alert else None,
                 "final_state": h.state if h else "inactive",
                 "detail": engine.last.judgements[sid].detail if engine.last and sid in engine.last.judgements
                 else ""}
        entry["known"] = bool(h and h.known)
        if h:
            timed = st.clock_known
            entry["intervals"] = [{"start": iso(s, time_only) if timed else None,
                                   "end": iso(e if e is not None else last, time_only) if timed else None,
                                   "start_ts": s if timed else None,
                                   "end_ts": (e if e is not None else last) if timed else None, "worst": w}
                                  for s, e, w in h.intervals]
            entry["dropped_intervals"] = h.dropped_intervals
            entry["worst"] = h.worst
            if h.fired:
                fired_judgements[sid] = Judgement(sid, sig.severity, True, h.worst)
        signals.append(entry)
    facts = advice_facts(st)
    # the stage of the start-up OOM that fired (a later ready line clears the tracker, not the history)
    facts["startup_oom_stage"] = engine.startup_oom_stage
    advice = reconcile(fired_judgements, st.server_args, st.memory_config, st.headroom_bytes, st.total_gpu_bytes,
                       facts)
    verdict_name, verdict_reason = verdict((s["id"] for s in signals if s["fired"]),
                                           (s["id"] for s in signals if s.get("known")),
                                           _missing(st, stats, first),
                                           (s["id"] for s in signals if not s.get("known")))
    unparsed: dict = {}
    for sp in stats:
        for reason, n in sp.parser.unparsed.items():
            unparsed[reason] = unparsed.get(reason, 0) + n
    report = {
        "schema": SCHEMA,
        "sources": list(paths),
        "profile": config.profile,
        "span": {"start": iso(first, time_only), "end": iso(last, time_only),
                 "seconds": (last - first) if first is not None and last is not None else None},
        "lines": {"read": sum(sp.lines for sp in stats), "recognised": sum(sp.parser.recognised for sp in stats),
                  "cut": sum(sp.cut for sp in stats), "unparsed": unparsed},
        "layouts": {**layouts_read(stats), "clock": "log" if st.clock_known else "file order"},
        # every rank's record: a retraction printed by 2 TP ranks is 2 records and 1 retraction (`counts`)
        "records": dict(sorted(st.events_total.items())),
        "format_family": next((sp.parser.format_family for sp in stats if sp.parser.format_family), None),
        "model": st.model or None,
        "epochs": st.epoch,
        "restarts": st.restarts,
        "startup": {"server_args": {k: st.server_args[k] for k in _SERVER_ARGS_SHOWN if k in st.server_args},
                    "memory_config": dict(st.memory_config),
                    "gpu_headroom_bytes": st.headroom_bytes},
        "server": st.facts(),
        "verdict": verdict_name,
        "verdict_reason": verdict_reason,
        "failures": [{**f, "time": iso(f["t"], time_only) if st.clock_known else None}
                     for f in engine.failures_seen],
        "counts": _counts(st, time_only),
        "oom_phases": dict(st.oom_total),
        "signals": signals,
        "advice": [r.to_json() for r in advice],
    }
    if chart is not None:
        restarts = [{"t": e["t"], "kind": "restart", "line": e.get("line") or 0, "detail": e["evidence"]}
                    for e in st.restart_evidence]
        report["series"] = {"t": chart.t, **chart.cols, "ranks": chart.ranks,
                            "markers": sorted(chart.markers + restarts, key=lambda m: m["t"])}
    return report


def _missing(st, stats, first) -> str:
    """What a log lacks for a health verdict (the reason of `insufficient data`)."""
    if not any(sp.parser.recognised for sp in stats):
        return "no SGLang log record recognised"
    gaps = []
    if first is None:
        gaps.append("no timestamps")
    batches = st.events_total.get("decode_batch", 0) + st.events_total.get("prefill_batch", 0)
    if not batches:
        startup = any(st.events_total.get(k) for k in ("server_args", "memory_config", "load_weight", "server_ready"))
        gaps.append("no batch lines; start-up facts only" if startup else "no batch lines")
    elif not st.events_total.get("decode_batch"):
        gaps.append("no decode batch lines")
    else:
        gaps.append("too few batch samples in any window to judge")
    return "; ".join(gaps)


def _counts(st, time_only: bool) -> dict:
    """Count, first and last time of the events a failing log is read for (always all of them)."""
    out = {}
    for name in TALLIED:
        n, t0, t1 = st.failures.tally.get(name, (0, None, None))
        if not st.clock_known:
            t0 = t1 = None
        out[name] = {"count": n, "first": iso(t0, time_only), "last": iso(t1, time_only)}
    return out
