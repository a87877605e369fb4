"""The engine's remembered evaluation (Evaluator, Reconciler, history of changed judgements only) answers
exactly what a fresh evaluation of every signal, every time, answers."""
from __future__ import annotations

from datetime import datetime

import pytest

from exporter.advice import reconcile
from exporter.catalog import PROFILES
from exporter.config import Config
from exporter.engine import Engine
from exporter.ingest.pipeline import iter_file_events
from exporter.signals import evaluate
from exporter.simulate import Simulator, load_scenario


class FreshEvaluator:
    """signals.evaluate anew at every call, every judgement reported as changed: the engine as it was."""

    def __init__(self, params: dict):
        self.params = params
        self.changed: list[str] = []

    def __call__(self, state, sources, now):
        out = evaluate(state, self.params, sources, now)
        self.changed = list(out)
        return out


def fresh_engine(config: Config) -> Engine:
    eng = Engine(config, log_fed=True)
    eng._evaluate = FreshEvaluator(eng.params)
    eng._reconcile = reconcile
    return eng


@pytest.mark.parametrize("scenario", ["retraction_storm", "stalled", "restart", "concurrency_capped",
                                      "cuda_graph_off", "oom_decode", "too_conservative"])
@pytest.mark.parametrize("profile", list(PROFILES))
def test_remembered_evaluation_equals_fresh_evaluation(tmp_path, scenario, profile):
    log = tmp_path / f"{scenario}.log"
    Simulator(load_scenario(scenario), start=datetime(2025, 8, 11, 17), seed=1).write_log(log)
    config = Config(profile=profile)
    eng, ref = Engine(config, log_fed=True), fresh_engine(config)
    evaluations, next_eval = 0, None

    def check(t):
        nonlocal evaluations
        a, b = eng.evaluate(t), ref.evaluate(t)
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
    check(now)
    assert eng.history == ref.history
    assert evaluations > 100
