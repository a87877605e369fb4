"""State windows, rank tables and helpers."""
from __future__ import annotations

from test_signals import T0, decode

from exporter.config import Config
from exporter.state import MAX_RANKS, MAX_WINDOW_SAMPLES, HitWindow, ServerState, TimeWindow, usage_of


def test_hit_window_counts_and_expires():
    w = HitWindow(10)
    for i in range(10):
        w.push(T0 + i, i % 2 == 0)
    assert (w.total, w.hits) == (10, 5)
    w.expire(T0 + 14)              # keeps samples at >= T0 + 4
    assert (w.total, w.hits) == (6, 3)
    w.clear()
    assert (w.total, w.hits) == (0, 0)


def test_hit_window_bounded():
    w = HitWindow(1e9)
    for i in range(MAX_WINDOW_SAMPLES + 500):
        w.push(T0 + i, True)
    assert w.total == MAX_WINDOW_SAMPLES and w.hits == MAX_WINDOW_SAMPLES


def test_time_window_weight_and_count():
    w = TimeWindow(60)
    for i in range(6):
        w.push(T0 + 10 * i, 2.0)
    assert w.weight_since(T0 + 20) == 8.0
    assert w.count_since(T0 + 20) == 4
    w.expire(T0 + 100)             # edge T0 + 40 kept
    assert w.count_since(0) == 2


def test_ranks_bounded_with_other_bucket():
    st = ServerState(Config().signal_params())
    for tp in range(200):
        st.apply_event(decode(tp=tp, dp=tp % 3), T0 + tp)
    assert len(st.ranks) == MAX_RANKS
    assert ("other", None, None) in st.ranks


def test_rank_values_latest_per_rank():
    st = ServerState(Config().signal_params())
    st.apply_event(decode(queue=5, running=7, usage=0.5, tp=0), T0)
    st.apply_event(decode(queue=9, running=3, usage=0.7, tp=1), T0 + 1)
    st.apply_event(decode(queue=1, running=2, usage=0.9, tp=0), T0 + 2)
    assert st.ranks[(None, 0, None)].queue == 1
    assert st.ranks[(None, 1, None)].running == 3
    # TP ranks of one DP rank share one scheduler queue: the lowest TP rank speaks for it
    assert st.pending() == 1 + 2
    st.apply_event(decode(queue=4, running=4, dp=1, tp=2), T0 + 3)
    assert st.pending() == 1 + 2 + 4 + 4


def test_usage_of_hybrid_pools():
    assert usage_of({"token_usage": 0.3}) == 0.3
    assert usage_of({"full_token_usage": 0.3, "swa_token_usage": 0.8}) == 0.8
    assert usage_of({"mamba_usage": 0.4}) == 0.4
    assert usage_of({}) is None


def test_dp_attention_retractions_count_once_per_dp_rank():
    """With DP attention every TP rank of each DP group prints the retraction; each DP rank's retraction counts
    once, from the rank that prints that DP rank's batch lines (DP0 TP0, DP1 TP4 for tp=8, dp=2)."""
    from exporter.config import Config
    from exporter.engine import Engine
    from exporter.ingest.events import Event

    def rank(dp, tp):
        return {"dp": dp, "tp": tp, "pp": None, "ep": None, "attn_cp": None, "moe_dp": None}
    engine = Engine(Config())
    for dp, tp in ((0, 0), (1, 4)):
        engine.ingest(Event("decode_batch", {"running_req": 5, "queue_req": 1, "token_usage": 0.5},
                            rank=rank(dp, tp)), 1.0)
    for dp in (0, 1):
        for tp in range(dp * 4, dp * 4 + 4):
            engine.ingest(Event("retraction", {"retracted_reqs": 2}, rank=rank(dp, tp)), 2.0)
    assert engine.state.retractions_total == 2
    assert engine.state.retracted_requests_total == 4
