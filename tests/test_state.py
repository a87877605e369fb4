"""State windows, rank tables and helpers."""
from __future__ import annotations

import random

from test_signals import T0, decode, memory_config, prefill, server_args

from exporter.config import Config
from exporter.ingest.events import Event, as_event
from exporter.ingest.grammar import Parser
from exporter.ingest.scrape import ScrapeResult
from exporter.state import MAX_RANKS, MAX_WINDOW_BUCKETS, HitWindow, ServerState, TimeWindow, usage_of
from exporter.state.windows import CountWindow


def counts(w: HitWindow, i: int = 0) -> tuple[int, int]:
    series = w.series(i)
    return series.total, series.hits


def test_hit_window_counts_and_expires():
    w = HitWindow(10)
    for i in range(10):
        w.push(T0 + i, i % 2 == 0)
    assert counts(w) == (10, 5)
    w.expire(T0 + 14)              # keeps samples at >= T0 + 4
    assert counts(w) == (6, 3)
    w.clear()
    assert counts(w) == (0, 0)
    w.push(T0 + 30, True)
    assert counts(w) == (1, 1)


def test_hit_window_series_counted_together():
    w = HitWindow(10, series=3)
    for i in range(10):
        b = w.bucket(T0 + i / 2)
        b[0] += 1                  # series 0: every sample, hit on even i
        b[1] += i % 2 == 0
        if i >= 4:                 # series 1: samples from i = 4 on, all hits; series 2: none
            b[2] += 1
            b[3] += 1
    assert [counts(w, i) for i in range(3)] == [(10, 5), (6, 6), (0, 0)]
    w.expire(T0 + 11.9)            # edge T0 + 1.9: buckets T0 and T0 + 1 (i = 0..3) leave
    assert [counts(w, i) for i in range(3)] == [(6, 3), (6, 6), (0, 0)]


def test_hit_window_bucket_edges():
    """Samples are tallied in 1-second buckets; a bucket leaves when its start is older than now - seconds."""
    w = HitWindow(10)
    w.push(T0 + 0.0, True)
    w.push(T0 + 0.5, False)        # same bucket [T0, T0 + 1)
    w.push(T0 + 1.0, True)         # next bucket
    assert (len(w.items), *counts(w)) == (2, 3, 2)
    w.expire(T0 + 10.0)            # edge T0: the bucket starting at T0 stays (samples at the edge count)
    assert counts(w) == (3, 2)
    # edge T0 + 0.2: the whole first bucket leaves, the T0 + 0.5 sample too (up to 1 s early: the granularity)
    w.expire(T0 + 10.2)
    assert (len(w.items), *counts(w)) == (1, 1, 1)
    w.expire(T0 + 11.0)            # edge T0 + 1: the T0 + 1 sample is at the edge and stays
    assert counts(w) == (1, 1)
    w.expire(T0 + 11.001)          # the newest bucket leaves too: nothing is left
    assert (len(w.items), *counts(w)) == (0, 0, 0)
    w.push(T0 + 11.5, True)        # in the second of the bucket that left: a new bucket, counted from zero
    assert (len(w.items), *counts(w)) == (1, 1, 1)
    w.push(T0 + 20.7, True)
    w.push(T0 + 20.2, False)       # older than the newest bucket (ranks interleave): counted in it
    assert (len(w.items), *counts(w)) == (2, 3, 2)
    w.expire(T0 + 30.0)            # edge T0 + 20: the T0 + 11 bucket leaves, the T0 + 20 one stays
    assert (len(w.items), *counts(w)) == (1, 2, 1)


def test_hit_window_running_totals_match_a_recount():
    """The O(1) running totals against a recount of every bucket's own samples, over a random stream of
    samples (some out of order), expiries and a clear."""
    rng = random.Random(7)
    w = HitWindow(30, series=2)
    buckets: list = []            # [start, [(series, hit), ...]] kept alongside, counted the slow way
    t = T0
    for step in range(5000):
        t += rng.choice((0.0, 0.1, 0.4, 1.0, 3.0, 45.0)) if step % 997 else 100.0
        when = t - rng.choice((0.0, 0.0, 0.0, 0.3))
        n = len(w.items)
        b = w.bucket(when)         # the tally (one list); a new bucket shows as one more item (never > 31 here)
        if not buckets or len(w.items) != n:
            buckets.append([w.starts[-1], []])
        series, hit = rng.randrange(2), rng.random() < 0.3
        b[2 * series] += 1
        b[2 * series + 1] += hit
        buckets[-1][1].append((series, hit))
        if step % 7 == 0:
            w.expire(t)
            buckets = [x for x in buckets if x[0] >= t - 30]
        if step == 3000:
            w.clear()
            buckets = []
        for series in range(2):
            samples = [h for x in buckets for s, h in x[1] if s == series]
            assert counts(w, series) == (len(samples), sum(samples)), step


def test_hit_window_bounded():
    w = HitWindow(1e9)             # a window longer than the bucket bound: the oldest buckets are dropped
    for i in range(MAX_WINDOW_BUCKETS + 500):
        w.push(T0 + i, True)
    assert len(w.items) == MAX_WINDOW_BUCKETS
    assert counts(w) == (MAX_WINDOW_BUCKETS, MAX_WINDOW_BUCKETS)


def test_hit_window_memory_bounded_under_huge_rate():
    """1000 samples a second for 400 s into a 5-minute window: memory is one bucket per second, and the
    counts are exactly the samples of the last 300 s (no cap by sample count)."""
    w = HitWindow(300)
    rate = 1000
    for s in range(400):
        for k in range(rate):
            w.push(T0 + s + k / rate, k % 4 == 0)
        if s % 5 == 0:
            w.expire(T0 + s)
    w.expire(T0 + 399.5)
    assert len(w.items) == 300
    assert counts(w) == (300 * rate, 300 * rate // 4)


def test_time_window_weight_and_count():
    w = TimeWindow(60)
    for i in range(6):
        w.push(T0 + 10 * i, 2.0)
    assert w.weight_since(T0 + 20) == 8.0
    assert w.count_since(T0 + 20) == 4
    w.expire(T0 + 100)             # edge T0 + 40 kept
    assert w.count_since(0) == 2


def test_count_window_keeps_the_sum_a_loop_over_its_buckets_gives():
    # counts merged in 10 s buckets; the sum kept as they come and expire must equal summing what is left, for
    # the whole window (the kept sum) and for a later start (summed over the newest buckets)
    rng = random.Random(7)
    w = CountWindow(60, 10.0)
    t = T0
    for _ in range(2000):
        t += rng.choice((0.5, 3, 12, 40))
        w.add(t, rng.choice((1.0, 1.0, 3.0)))
        w.expire(t)
        assert w.total == sum(n for _, n in w.items)
        assert w.weight_since(t - 60) == w.total
        since = t - rng.uniform(0, 60)
        assert w.weight_since(since) == sum(n for first, n in w.items if first >= since)
    assert len(w.items) <= 7        # one bucket per 10 s of the last minute, at most


def test_count_windows_fed_the_same_moments_keep_the_same_bucket_edges():
    # responses and the 5xx among them: the 5xx window starts later (the first answers were fine) and must not
    # cut its buckets elsewhere, or a span could hold more failures than answers
    rng = random.Random(11)
    whole, part = CountWindow(300, 10.0), CountWindow(300, 10.0)
    t = T0 + 3.7
    for i in range(3000):
        t += rng.choice((0.2, 0.9, 4.0, 13.0))
        whole.add(t)
        if i > 40 and rng.random() < 0.9:
            part.add(t)
        whole.expire(t)
        part.expire(t)
        since = t - rng.uniform(0, 300)
        assert part.weight_since(since) <= whole.weight_since(since)


def test_a_cleared_count_window_sums_to_zero_and_counts_again():
    # a new start-up clears the windows: the kept sum goes with the buckets, or the next evaluation would read
    # the last process's errors from an empty window
    w = CountWindow(60, 10.0)
    w.add(T0, 5.0)
    w.clear()
    assert (w.total, w.weight_since(T0 - 60)) == (0.0, 0.0)
    w.add(T0 + 1, 2.0)
    assert w.weight_since(T0 - 60) == 2.0


def test_ranks_bounded_with_other_bucket():
    st = ServerState(Config(profile="offline").signal_params())
    for tp in range(200):
        st.apply_event(decode(tp=tp, dp=tp % 3), T0 + tp)
    assert len(st.ranks) == MAX_RANKS
    assert ("other", None, None) in st.ranks


def test_rank_values_latest_per_rank():
    st = ServerState(Config(profile="offline").signal_params())
    st.apply_event(decode(queue=5, running=7, usage=0.5, tp=0), T0)
    st.apply_event(decode(queue=9, running=3, usage=0.7, tp=1), T0 + 1)
    st.apply_event(decode(queue=1, running=2, usage=0.9, tp=0), T0 + 2)
    assert st.ranks[(None, 0, None)].queue == 1
    assert st.ranks[(None, 1, None)].running == 3
    # TP ranks of one DP rank share one scheduler queue: the lowest TP rank speaks for it
    assert st.pending() == 1 + 2
    st.apply_event(decode(queue=4, running=4, dp=1, tp=2), T0 + 3)
    assert st.pending() == 1 + 2 + 4 + 4


def _samples(st: ServerState) -> tuple:
    return tuple(series.total for series in (*st.fraction.values(), st.graph_off))


def test_one_sample_per_scheduler_when_every_tp_rank_prints():
    """With tp=4 every TP rank prints the same scheduler's batch line: all four update their rank's gauges,
    only TP0's line is a sample (per scheduler, not per rank)."""
    st = ServerState(Config(profile="offline").signal_params())
    st.apply_event(memory_config(max_running=100), T0)
    for i in range(10):
        for tp in range(4):
            st.apply_event(decode(queue=i, running=10 + tp, graph=False, tp=tp), T0 + i)
    assert _samples(st) == (10, 10, 10, 10, 10)
    assert [st.ranks[(None, tp, None)].running for tp in range(4)] == [10, 11, 12, 13]
    assert all(st.ranks[(None, tp, None)].queue == 9 for tp in range(4))


def test_leader_is_the_lowest_tp_rank_seen():
    """Joining mid-batch, TP2's line may come first: it is a sample until TP0 shows up, then only TP0's are."""
    st = ServerState(Config(profile="offline").signal_params())
    st.apply_event(decode(tp=2), T0)
    st.apply_event(decode(tp=3), T0)
    for i in range(1, 6):
        for tp in (0, 1, 2, 3):
            st.apply_event(decode(tp=tp), T0 + i)
    assert st.fraction["queue_below_range"].total == 1 + 5
    st.apply_event(prefill(tp=1), T0 + 7)          # prefill lines also name the leader, never a higher one
    st.apply_event(decode(tp=1), T0 + 7)
    assert st.fraction["queue_below_range"].total == 6


def test_leaders_are_chosen_again_after_a_restart():
    """dp=4 tp=8 puts DP1's batch lines on TP2; restarted as dp=2 tp=8 they come from TP4 and must still count."""
    st = ServerState(Config(profile="offline").signal_params())
    st.apply_event(decode(dp=1, tp=2), T0)
    st.apply_event(memory_config(max_running=100), T0 + 10)      # after batches: a restart
    assert st.restarts == 1
    for i in range(1, 4):
        st.apply_event(decode(dp=1, tp=4), T0 + 10 + i)
    assert st.fraction["queue_below_range"].total == 3


def test_every_line_is_a_sample_without_tp_ranks_or_with_only_tp0():
    for tp in (None, 0):
        st = ServerState(Config(profile="offline").signal_params())
        for i in range(7):
            st.apply_event(decode(tp=tp), T0 + i)
        assert st.fraction["queue_below_range"].total == 7


def test_dp_attention_one_sample_per_dp_rank():
    """DP attention, tp=8, dp=2: DP0 TP0-3 and DP1 TP4-7 print; DP0 TP0 and DP1 TP4 lead their DP ranks."""
    st = ServerState(Config(profile="offline").signal_params())
    for i in range(5):
        for dp in (0, 1):
            for tp in range(dp * 4, dp * 4 + 4):
                st.apply_event(decode(queue=0 if dp else 5000, tp=tp, dp=dp), T0 + i)
    assert st.fraction["queue_below_range"].total == 10
    assert (st.fraction["queue_above_range"].total, st.fraction["queue_above_range"].hits) == (10, 5)
    assert len(st.ranks) == 8


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
    engine = Engine(Config(profile="offline"))
    for dp, tp in ((0, 0), (1, 4)):
        engine.ingest(Event("decode_batch", {"running_req": 5, "queue_req": 1, "token_usage": 0.5},
                            rank=rank(dp, tp)), 1.0)
    for dp in (0, 1):
        for tp in range(dp * 4, dp * 4 + 4):
            engine.ingest(Event("retraction", {"retracted_reqs": 2}, rank=rank(dp, tp)), 2.0)
    assert engine.state.retractions_total == 2
    assert engine.state.retracted_requests_total == 4


def test_rows_read_late_give_the_state_events_give():
    """apply_row reads a batch line's numbers only when it is a sample; other lines wait until the ranks are
    read. Whenever the state is read, it equals the state of applying every line's Event in order (decode and
    prefill lines of one rank interleaved, so the unread lines of two shapes must be read in order), and its
    ranks equal a plain reading of every line at once (a sample skips the unread lines only when it sets every
    number they would)."""
    rng = random.Random(7)
    lines = []
    for i in range(600):
        prefix = f"[2025-08-11 17:{17 + i // 60:02d}:{i % 60:02d} {rng.choice(['TP0', 'TP1', 'TP3', 'DP1 TP2'])}]"
        if rng.random() < 0.3:
            lines.append(f"{prefix} Prefill batch, #new-seq: 1, #new-token: {rng.randrange(999)}, #cached-token: 0, "
                         f"token usage: 0.{rng.randrange(10, 99)}, #running-req: {rng.randrange(50)}, "
                         f"#queue-req: {rng.randrange(300)}")
        else:
            # a line without "cuda graph" or "#queue-req" now and then: a leader's sample that does not set
            # every number must read the leader's unread lines first, and another rank's line must not hide an
            # earlier unread line that printed the number it lacks (rows and Events alike)
            graph = f"cuda graph: {rng.choice(['True', 'False'])}, " if rng.random() < 0.8 else ""
            queue = f", #queue-req: {rng.randrange(300)}" if rng.random() < 0.8 else ""
            lines.append(f"{prefix} Decode batch, #running-req: {rng.randrange(50)}, #token: {rng.randrange(9999)}, "
                         f"token usage: 0.{rng.randrange(10, 99)}, {graph}"
                         f"gen throughput (token/s): {rng.randrange(999)}.{rng.randrange(10, 99)}{queue}")
    parser = Parser("late")
    items = parser.feed_items(lines[:1], 1) + parser.feed_items(lines[1:], 2)
    assert sum(item.__class__ is tuple for item in items) > 500
    params = Config(profile="offline").signal_params()
    late, eager = ServerState(params), ServerState(params)

    def seen(st: ServerState):
        ranks = {k: (v.queue, v.running, v.usage, v.throughput, v.cuda_graph) for k, v in st.ranks.items()}
        return (ranks, st.pending(), dict(st.events_total), [st.samples.count(i) for i in range(10)],
                st.last_batch_t)

    plain: dict = {}    # rank -> its five numbers, every line read at once: what both states must show
    for k, item in enumerate(items):
        now = T0 + k
        if item.__class__ is tuple:
            late.apply_row(item, now)
        else:
            late.apply_event(item, now)
        ev = as_event(item)
        eager.apply_event(ev, now)
        f, decode = ev.fields, ev.kind == "decode_batch"
        new = (f.get("queue_req"), f.get("running_req"), usage_of(f), f.get("gen_throughput") if decode else None,
               f.get("cuda_graph") if decode else None)
        key = (ev.rank["dp"], ev.rank["tp"], ev.rank["pp"])
        plain[key] = tuple(old if v is None else v for old, v in zip(plain.get(key, (None,) * 5), new))
        if k % 7 == 0:      # what an evaluation reads: the schedulers' lines only, the others stay unread
            assert late.pending() == eager.pending()
            assert {d: rv.queue for d, rv in late.schedulers().items()} == \
                {d: rv.queue for d, rv in eager.schedulers().items()}
        if k % 37 == 0:
            assert seen(late) == seen(eager)
            assert seen(late)[0] == plain
    assert seen(late) == seen(eager)
    assert seen(late)[0] == plain


def test_reading_the_schedulers_leaves_other_ranks_unread_and_the_list_bounded():
    """schedulers() (every evaluation) reads the leaders' lines only; the list of ranks waiting to be read stays
    bounded however often that happens, and `ranks` still reads every line."""
    def dec(tp, q):
        return (f"[2025-08-11 17:17:03 TP{tp}] Decode batch, #running-req: 5, #token: 9, token usage: 0.50, "
                f"cuda graph: True, gen throughput (token/s): 1.00, #queue-req: {q}")

    def pre(tp, q):     # not a sample, even on the leader: it waits unread like any other rank's line
        return (f"[2025-08-11 17:17:03 TP{tp}] Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, "
                f"token usage: 0.60, #running-req: 6, #queue-req: {q}")
    parser = Parser("leaders")
    items = parser.feed_items([dec(0, 0), dec(1, 0), pre(0, 0)], 1)
    st = ServerState(Config(profile="offline").signal_params())
    for item in items:
        st.apply_row(item, T0) if item.__class__ is tuple else st.apply_event(item, T0)
    assert len(st.ranks) == 2          # every line read: nothing waits
    for k in range(3000):
        for item in parser.feed_items([dec(0, k), dec(1, 10_000 + k), pre(0, 20_000 + k)], 4 + 3 * k):
            st.apply_row(item, T0 + k)
        assert st.schedulers()[None].queue == 20_000 + k    # the leader's prefill line came last
        assert len(st._unread) <= 4 * MAX_RANKS + 2
    assert st._ranks[(None, 1, None)].unread            # TP1's latest line is still unread ...
    assert st.ranks[(None, 1, None)].queue == 12_999    # ... and read when someone reads the ranks


def test_unread_lines_of_two_shapes_are_read_in_order():
    """decode, prefill, decode on a non-leader rank: the last decode line's numbers win, the throughput too."""
    def dec(q, tput, tp=1):
        return (f"[2025-08-11 17:17:03 TP{tp}] Decode batch, #running-req: 5, #token: 9, token usage: 0.50, "
                f"cuda graph: True, gen throughput (token/s): {tput}.00, #queue-req: {q}")
    pre = ("[2025-08-11 17:17:03 TP1] Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, "
           "token usage: 0.60, #running-req: 6, #queue-req: 2")
    parser = Parser("order")
    items = parser.feed_items([dec(0, 1, tp=0), pre], 1) + parser.feed_items([dec(1, 10), pre, dec(3, 30)], 3)
    assert [i.__class__ for i in items[2:]] == [tuple] * 3
    st = ServerState(Config(profile="offline").signal_params())
    for item in items:
        (st.apply_row if item.__class__ is tuple else st.apply_event)(item, T0)
    rv = st.ranks[(None, 1, None)]
    assert (rv.queue, rv.running, rv.usage, rv.throughput) == (3, 5, 0.5, 30.0)


def _classified(params: dict, memory_config: dict, server_args: dict, queue, running, usage, graph) -> list:
    """What one sample adds to each of the ten tallies, read the plain way (the thresholds from `params`, the
    cap and the graph batch size from the dicts as they are now): classify's reference."""
    def param(sid, key):
        return params[sid][key] if params.get(sid) else None
    add = [0] * 10
    if queue is not None:
        if param("queue_below_range", "min_queue") is not None:
            add[0:2] = 1, queue < param("queue_below_range", "min_queue")
        if param("queue_above_range", "max_queue") is not None:
            add[2:4] = 1, queue > param("queue_above_range", "max_queue")
        if usage is not None:
            if param("kv_cache_underused", "min_usage") is not None:
                add[4:6] = 1, queue > 0 and usage < param("kv_cache_underused", "min_usage")
            fraction = param("concurrency_capped", "running_fraction")
            cap = memory_config.get("max_running_requests")
            if fraction is not None and running is not None and cap:
                add[6:8] = 1, (running >= fraction * cap and queue > 0
                               and usage < param("concurrency_capped", "max_usage"))
    default_bs = param("cuda_graph_off_small_batch", "default_max_bs")
    if graph is not None and running is not None and default_bs is not None:
        max_bs = server_args.get("cuda_graph_max_bs") or default_bs
        small = running <= max_bs if isinstance(max_bs, (int, float)) else True
        add[8:10] = 1, (not graph) and small and running > 0
    return [int(a) for a in add]


def test_classify_follows_memory_config_and_server_args_as_they_change():
    """classify reads the cap and the graph batch size once per change of memory_config / server_args (a
    memory_config line, a scrape's max_running_requests, server_args, a restart clearing both): every sample
    adds what the plain reading of the dicts at that moment gives, in every profile."""
    rng = random.Random(11)
    for profile in ("offline", "online"):
        params = Config(profile=profile).signal_params()
        st = ServerState(params)
        epochs, counted = st.epoch, 0
        for k in range(3000):
            now = T0 + k / 3
            r = rng.random()
            if r < 0.03:
                st.apply_event(memory_config(max_running=rng.choice([None, 0, 64, 150, 4096])), now)
            elif r < 0.05:
                bs = rng.choice([None, 0, 64, 160, 512, "auto"])
                st.apply_event(server_args(**({} if bs is None else {"cuda_graph_max_bs": bs})), now)
            elif r < 0.06:
                st.apply_scrape(ScrapeResult(True, max_running_requests=rng.choice([None, 100, 200])), now)
            elif r < 0.07:
                st.apply_event(Event("server_ready", {}), now)    # a second one is a restart
            else:
                queue = rng.choice([None, 0, 0, 3, 150, 2500])
                running = rng.choice([None, 0, 60, 63, 64, 100, 149, 150, 200])
                usage = rng.choice([None, 0.1, 0.5, 0.95])
                graph = rng.choice([None, True, False])
                before = [st.samples.count(i) for i in range(10)]
                st.apply_event(decode(queue=queue, running=running, usage=usage, graph=graph, tp=0), now)
                want = _classified(params, st.memory_config, st.server_args, queue, running, usage, graph)
                assert [st.samples.count(i) - b for i, b in enumerate(before)] == want, k
                counted += want[6] + want[8]
            if st.epoch != epochs:
                epochs = st.epoch
                assert [st.samples.count(i) for i in range(10)] == [0] * 10    # a restart clears the window
        assert epochs > 3 and counted > 500


# ------------------------------------------------------------------ tuning tallies: the row path reads as the Event
def test_line_reader_reads_every_releases_batch_lines_as_their_events(tmp_path):
    """The tuning tallies read a learned layout's lines by slicing their numbers (tuning.line_reader): on the
    conformance logs of every release, single-GPU and PD (SGLang's own batch-line code, each log repeated
    past the parser's first block so it reads them as learned layouts), what is sliced out of each line equals what its Event says."""
    from pathlib import Path

    from exporter.ingest.events import as_event
    from exporter.ingest.pipeline import iter_file_items
    from exporter.state.tuning import line_reader, numbers
    logs = [p for p in sorted((Path(__file__).parent / "conformance" / "fixtures").glob("*/*.log"))
            if p.stem in ("single", "pd_prefill", "pd_decode")]
    checked = 0
    for log in logs:
        readers: dict = {}
        longer = tmp_path / "sglang.log"
        longer.write_text(log.read_text() * 300)
        for item in iter_file_items(str(longer)):
            if item.__class__ is not tuple or item[0].kind not in ("prefill_batch", "decode_batch"):
                continue
            ev = as_event(item)
            want = numbers(ev.kind, ev.fields)
            read = readers.setdefault(item[0], line_reader(ev.kind, item[1], ev.fields))
            assert read is not None, (log, item[1])
            assert read(item[1]) == want, (log, item[1])
            checked += 1
    assert checked > 100
