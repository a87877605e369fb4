"""The judges (state -> signals): each signal judged from state, thresholds and time, then advice reconciled.

- `judgement`: `Judgement`, the `Evaluator` that runs every judge, the core signals' judges;
- `tuning`, `errors`, `serving`: the judges of the latency and tuning, error-rate and serving signals;
- `advice`: one recommendation per flag, conflicts reconciled.
"""
from exporter.signals.judgement import (
    Evaluator,
    Judgement,
    Sources,
    evaluate,
    observed_window,
    retraction_rate,
    retractions_per_minute,
)

__all__ = ["Evaluator", "Judgement", "Sources", "evaluate", "observed_window", "retraction_rate",
           "retractions_per_minute"]
