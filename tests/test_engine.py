"""The engine's remembered evaluation (Evaluator, Reconciler, history of changed judgements only) answers
exactly what a fresh evaluation of every signal, every time, answers."""
from __future__ import annotations

import copy
from datetime import datetime

import pytest

from exporter.catalog import PROFILES, SIGNALS_BY_ID
from exporter.config import Config
from exporter.engine import Engine
from exporter.ingest.pipeline import iter_file_events
from exporter.signals.advice import reconcile
from exporter.signals.judgement import _JUDGES, Judgement, Sources, _judgement, evaluate, observed_window
from exporter.simulate import Simulator, load_scenario
from exporter.state import ServerState


class FreshEvaluator:
    """signals.evaluate anew at every call, every judgement reported as changed: the engine as it was."""

    def __init__(self, params: dict):
        self.params = params
        self.changed: list[str] = []
        self.said: dict[str, tuple] = {}
        self._out: dict[str, Judgement] = {}

    def judge(self, state, sources, now):
        out = self._out = evaluate(state, self.params, sources, now)
        self.said = {sid: (j.firing, j.value, j.detail, j.cause, j.unsupported) for sid, j in out.items()}
        self.changed = list(out)
        self.firing = tuple(sid for sid, j in out.items() if j.firing)

    def judgements(self):
        return dict(self._out)


def fresh_engine(config: Config) -> Engine:
    eng = Engine(config, log_fed=True)
    eng._evaluate = FreshEvaluator(eng.params)
    eng._reconcile = lambda *args, firing=None: reconcile(*args)
    return eng


@pytest.mark.parametrize("scenario", ["retraction_storm", "stalled", "restart", "concurrency_capped",
                                      "cuda_graph_off", "oom_decode", "too_conservative"])
@pytest.mark.parametrize("profile", list(PROFILES))
def test_remembered_evaluation_equals_fresh_evaluation(tmp_path, scenario, profile):
    log = tmp_path / f"{scenario}.log"
    Simulator(load_scenario(scenario), start=datetime(2025, 8, 11, 17), seed=1).write_log(log)
    config = Config(profile=profile)
    eng, ref = Engine(config, log_fed=True), fresh_engine(config)
    replay = Engine(config, log_fed=True)      # as analyze runs it: judge() at each step, evaluate() at the end
    evaluations, next_eval = 0, None

    def check(t):
        nonlocal evaluations
        a, b = eng.evaluate(t), ref.evaluate(t)
        replay.judge(t)
        assert a.judgements == b.judgements and a.advice == b.advice, (scenario, t)
        evaluations += 1

    for i, ev in enumerate(iter_file_events(str(log), config.max_line_bytes)):
        now = ev.ts
        next_eval = now if next_eval is None else next_eval
        while next_eval <= now:            # every step, through silent gaps too (as analyze does)
            check(next_eval)
            next_eval += config.evaluate_interval
        if i % 7 == 0:
            check(now)                     # and at odd times in between
        eng.ingest(ev, now)
        ref.ingest(ev, now)
        replay.ingest(ev, now)
    check(now)
    assert eng.history == ref.history == replay.history
    assert eng.failures_seen == ref.failures_seen == replay.failures_seen
    assert replay.evaluate(now).judgements == eng.last.judgements
    assert evaluations > 100


@pytest.mark.parametrize("log_fed", [True, False])
def test_remembered_evaluation_follows_the_sources_changing(tmp_path, log_fed):
    """The Evaluator plans its judges per mode (logs only, /metrics only, both): switching sources back and
    forth gives what a fresh evaluation gives, the fixed answers of a mode included."""
    log = tmp_path / "storm.log"
    Simulator(load_scenario("retraction_storm"), start=datetime(2025, 8, 11, 17), seed=1).write_log(log)
    config = Config()
    eng, ref = Engine(config, log_fed=log_fed), fresh_engine(config)
    ref.state.log_fed = log_fed
    modes = [(True, False), (True, True), (False, True), (False, False), (True, False), (False, True)]
    seen_modes = set()
    for i, ev in enumerate(iter_file_events(str(log), config.max_line_bytes)):
        if i % 50 == 0:
            log_up, metrics_up = modes[(i // 50) % len(modes)]
            for e in (eng, ref):
                e.set_sources(log_up=log_up, metrics_up=metrics_up)
            seen_modes.add((log_up, metrics_up))
        if i % 5 == 0:
            a, b = eng.evaluate(ev.ts), ref.evaluate(ev.ts)
            assert a.judgements == b.judgements and list(a.judgements) == list(b.judgements), (i, ev.ts)
            assert a.advice == b.advice
            assert eng._evaluate.firing == tuple(sid for sid, j in a.judgements.items() if j.firing)
        eng.ingest(ev, ev.ts)
        ref.ingest(ev, ev.ts)
    assert seen_modes == set(modes)
    assert eng.history == ref.history


def test_expire_drops_what_every_window_drops():
    """ServerState.expire calls a window's expire only when its oldest entry is due: the windows end up as
    if each had expired itself, out-of-order pushes included."""
    state = ServerState(Config().signal_params())
    times = [100.0, 100.5, 130.0, 99.0, 400.0, 401.2, 700.0, 650.0, 1000.0]
    for t in times:
        state.samples.push(t, True)
        state.tuning.prefix.window.push(t, False)
        state.tuning.pd.window.push(t, True)
        state.tuning.spec.push(t, 3.0)
        state.retractions.push(t)
        state.ooms["decode"].push(t)
        state.watchdogs.push(t)
    windows = ("samples", "retractions", "watchdogs")

    def contents(st):
        hit = [(list(w.starts), list(w.items), list(w.tally), list(w._gone)) for w in
               (st.samples, st.tuning.prefix.window, st.tuning.chunked.window, st.tuning.pd.window)]
        timed = [list(w.items) for w in (st.retractions, *st.ooms.values(), st.watchdogs, st.tuning.spec)]
        return hit, timed
    for now in (150.0, 399.0, 405.0, 699.5, 950.0, 1000.0, 1250.0, 1400.0, 5000.0):
        ref = copy.deepcopy(state)
        for name in windows:
            getattr(ref, name).expire(now)
        for w in (*ref.ooms.values(), ref.tuning.prefix.window, ref.tuning.chunked.window, ref.tuning.pd.window,
                  ref.tuning.spec):
            w.expire(now)
        state.expire(now)
        assert contents(state) == contents(ref), now
    assert not state.retractions.items and not state.samples.starts


def test_a_judges_template_detail_is_formatted_into_its_judgement():
    """A judge's (template, *args) detail is compared as said and formatted when its Judgement is built."""
    said = (True, 3.0, ("no progress for {:.0f} s", 3.0))
    j = _judgement("stalled", "critical", said)
    assert j == Judgement("stalled", "critical", True, 3.0, "no progress for 3 s")
    assert Judgement("stalled", "critical", None, None).detail == ""
    with pytest.raises(AttributeError):     # a Judgement is a value: nobody changes a kept one
        j.detail = "changed"  # type: ignore[misc]


def test_a_hit_series_counts_are_its_total_and_hits():
    state = ServerState(Config().signal_params())
    for t, hit in ((1.0, True), (2.0, False), (400.0, True)):
        state.samples.push(t, hit, series=1)
    state.expire(350.0)
    w = state.fraction["queue_above_range"]
    assert w.counts() == (w.total, w.hits) == (1, 1)


@pytest.mark.parametrize("observed", [None, 0.0, 990.0, 1000.0])
@pytest.mark.parametrize("min_span", [0, 30, float("nan")])
def test_retraction_rate_of_an_empty_window_is_the_computed_rate(observed, min_span):
    """The retraction judges skip computing the rate of an empty window (0.0); what they say is what the
    computed rate gives, for every span, a zero or NaN one included (computed, as before)."""
    params = Config().signal_params()
    state = ServerState(params)
    state.observed_from = observed
    state.events_total["decode_batch"] = 1      # the log has shown SGLang: its silence about retractions counts
    sid = "retraction_storm"
    p = {**params[sid], "min_span_seconds": min_span}
    window = SIGNALS_BY_ID[sid].window_seconds
    span = observed_window(state, 1000.0, window, min_span)
    try:
        want = state.retractions_per_minute(1000.0, span)
    except ZeroDivisionError:
        with pytest.raises(ZeroDivisionError):
            _JUDGES[sid](state, p, Sources(log_up=True), 1000.0, window)
        return
    said = _JUDGES[sid](state, p, Sources(log_up=True), 1000.0, window)
    assert said[1] == want or (said[1] != said[1] and want != want)
