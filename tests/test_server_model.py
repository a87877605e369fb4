"""The server as a whole: one start-up across all ranks, restarts only on evidence, memory facts per GPU.

The multi-rank logs in tests/fixtures/ranks/ were written by SGLang's own logger set-up, rank-prefix code and
start-up f-strings (tests/fixtures/ranks/README.md); expected.json holds what each layout must read as.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.config import Config
from exporter.engine import Engine
from exporter.ingest.events import EMPTY_RANK, Event, as_event
from exporter.ingest.pipeline import iter_file_item_lists
from exporter.state import ServerState, parse_rank_label, rank_label

RANKS = Path(__file__).parent / "fixtures" / "ranks"
EXPECTED = json.loads((RANKS / "expected.json").read_text())
GIB = 1 << 30
T0 = 1750428000.0


def replay(path: Path) -> Engine:
    eng = Engine(Config(profile="offline"), log_fed=True)
    eng.set_sources(log_up=True)
    for items in iter_file_item_lists(str(path)):
        for item in items:
            ev = as_event(item)
            ev.source = path.name
            eng.ingest(ev, ev.ts)
    return eng


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_multi_rank_startups_and_restarts(name):
    want = EXPECTED[name]
    eng = replay(RANKS / f"{name}.log")
    st = eng.state
    assert st.restarts == want["restarts"], list(st.restart_evidence)
    assert st.epoch == want["restarts"] + 1
    assert len(st.restart_evidence) == want["restarts"]
    if want["restarts"]:
        assert st.restart_evidence[0]["evidence"] == "server_args after batch lines"
    # the facts of the (last) start-up are all kept: server_args, the capacity line, every GPU's memory
    assert st.server_args["tp_size"] == want["tp"] and st.model == "deepseek-ai/DeepSeek-V3"
    assert st.memory_config["max_running_requests"] == 256
    assert len(st.memory_by_rank) == want["ranks"]
    assert st.headroom_bytes == int(want["headroom_gb"] * GIB)
    if want["headroom_gb"] < 6.8:
        dp, tp, pp, ep = want["worst_rank"]
        assert parse_rank_label(st.headroom_rank).get("tp", 0) == tp
    layout = st.layout()
    assert {k: layout[k] for k in ("dp", "tp", "pp", "ep", "dp_attention")} == {
        k: want[k] for k in ("dp", "tp", "pp", "ep", "dp_attention")}
    assert layout["ranks_seen"] == want["ranks"]
    # the windows hold every scheduler's batches since the last start-up: one sample per DP rank and line
    assert st.fraction["queue_below_range"].total == 10 * want["dp"]
    snap = eng.evaluate(st.last_batch_t)
    assert snap.judgements["gpu_headroom_low"].firing is (want["headroom_gb"] < 5)


def test_a_64_gpu_startup_is_one_start():
    eng = replay(RANKS / "0.5.23-dp8-tp8.log")
    assert eng.state.restarts == 0 and eng.state.epoch == 1 and len(eng.state.memory_by_rank) == 64
    detail = eng.evaluate(eng.state.last_batch_t).judgements["gpu_headroom_low"].detail
    assert detail == "4.20 GiB left after start-up on DP7 TP7 (the least of 64 GPUs)"


# ------------------------------------------------------------------------------------------ evidence, unit
def ev(kind, t, fields=None, source="log", **rank):
    return Event(kind, dict(fields or {}), None, t, {**EMPTY_RANK, **rank}, source)


def capacity(t, gb=6.5, **rank):
    return ev("memory_config", t, {"max_running_requests": 100, "available_gpu_mem_bytes": int(gb * GIB)}, **rank)


def decode(t, **rank):
    return ev("decode_batch", t, {"running_req": 3, "queue_req": 0, "token_usage": 0.5}, **rank)


def state():
    return ServerState(Config(profile="offline").signal_params())


def test_each_dp_replica_prints_its_own_startup_and_that_is_one_start():
    st = state()
    st.apply_event(ev("server_args", T0, {"dp_size": 8}), T0)
    for dp in range(8):
        st.apply_event(ev("load_weight", T0 + 1, {"phase": "begin", "avail_mem_bytes": 80 * GIB}, dp=dp, tp=0), T0)
        st.apply_event(capacity(T0 + 2, 6 + dp / 10, dp=dp, tp=0), T0 + 2)
    st.apply_event(ev("server_ready", T0 + 3), T0 + 3)
    assert (st.epoch, st.restarts) == (1, 0)
    assert st.server_args == {"dp_size": 8} and st.headroom_rank == "DP0 TP0"
    assert st.headroom_bytes == int(6.0 * GIB)


@pytest.mark.parametrize("again,evidence", [
    (lambda t: ev("server_args", t, {"dp_size": 2}), "server_args after batch lines"),
    (lambda t: ev("load_weight", t, {"phase": "begin"}, dp=1, tp=0),
     "load weight begin on DP1 TP0 after its batch lines"),
    (lambda t: capacity(t, dp=1, tp=0), "a second capacity line on DP1 TP0"),
    (lambda t: ev("server_ready", t), "a second ready line"),
])
def test_a_restart_needs_evidence_and_names_it(again, evidence):
    st = state()
    st.apply_event(ev("server_args", T0, {"dp_size": 2}), T0)
    for dp in range(2):
        st.apply_event(capacity(T0 + 1, dp=dp, tp=0), T0 + 1)
    st.apply_event(ev("server_ready", T0 + 2), T0 + 2)
    st.apply_event(decode(T0 + 3, dp=1, tp=0), T0 + 3)
    # another rank's start-up line, after batches of other ranks: still no evidence
    st.apply_event(ev("memory_pool", T0 + 4, {"avail_mem_bytes": 9 * GIB}, dp=0, tp=3), T0 + 4)
    assert st.restarts == 0
    st.apply_event(again(T0 + 5), T0 + 5)
    assert st.restarts == 1 and st.restart_evidence[-1]["evidence"] == evidence


def test_what_is_no_restart():
    st = state()
    st.apply_event(capacity(T0), T0)                   # an old release may print the capacity line first
    st.apply_event(ev("server_args", T0 + 1, {"tp_size": 1}), T0 + 1)
    st.apply_event(ev("server_args", T0 + 1, {"tp_size": 1}), T0 + 1)     # the same line twice
    st.apply_event(ev("load_weight", T0 + 2, {"phase": "begin"}, tp=0), T0 + 2)
    st.apply_event(ev("load_weight", T0 + 3, {"phase": "begin"}, tp=0), T0 + 3)   # a draft model's weights
    st.apply_event(ev("server_ready", T0 + 4), T0 + 4)
    st.apply_event(decode(T0 + 5, tp=0), T0 + 5)
    st.apply_event(ev("graph_capture", T0 + 6, {"phase": "end", "avail_mem_bytes": GIB}, tp=1), T0 + 6)
    assert (st.epoch, st.restarts) == (1, 0)


def test_a_crash_then_server_args_is_a_restart_and_so_is_the_clock_going_back_after_serving():
    st = state()
    st.apply_event(ev("server_args", T0, {"tp_size": 1}), T0)
    st.apply_event(ev("scheduler_exception", T0 + 5, {"component": "Scheduler", "traceback": "x"}), T0 + 5)
    st.apply_event(ev("server_args", T0 + 9, {"tp_size": 1}), T0 + 9)
    assert st.restarts == 1 and st.restart_evidence[-1]["evidence"] == "server_args after a crash"
    st.apply_event(ev("load_weight", T0 + 3600, {"phase": "begin"}, tp=0), T0 + 3600)
    st.apply_event(ev("server_ready", T0 + 3601), T0 + 3601)
    st.apply_event(ev("load_weight", T0 + 60, {"phase": "begin"}, tp=1), T0 + 3602)
    assert st.restarts == 2
    assert st.restart_evidence[-1]["evidence"] == "the log's clock went back 3541 s in log"
    st.apply_event(ev("load_weight", T0 + 61, {"phase": "end"}, tp=1), T0 + 3603)    # its own clock from here
    assert st.restarts == 2


def test_a_clock_step_inside_one_start_up_block_is_no_restart():
    """An NTP step back (or a DST fall-back) while the ranks load: the ranks that reported before it stay."""
    st = state()
    st.apply_event(ev("server_args", T0, {"tp_size": 2}), T0)
    st.apply_event(ev("load_weight", T0 + 1, {"phase": "begin"}, tp=0), T0 + 1)
    st.apply_event(capacity(T0 + 30, tp=0), T0 + 30)
    st.apply_event(ev("load_weight", T0 + 31 - 3600, {"phase": "begin"}, tp=1), T0 + 31)
    st.apply_event(capacity(T0 + 60 - 3600, tp=1), T0 + 60)
    st.apply_event(ev("server_ready", T0 + 61 - 3600), T0 + 61)
    assert (st.epoch, st.restarts) == (1, 0)
    assert st.layout()["ranks_seen"] == 2
    assert len(st.facts()["gpu_headroom"]) == 2


def test_different_server_args_in_one_startup_is_a_new_launch():
    st = state()
    st.apply_event(ev("server_args", T0, {"tp_size": 1}), T0)
    st.apply_event(ev("server_args", T0 + 1, {"tp_size": 2}), T0 + 1)
    assert st.restarts == 1 and st.server_args == {"tp_size": 2}


# ------------------------------------------------------------------------------------------ joining mid-life
def test_joining_a_running_server_is_not_a_restart_and_startup_facts_are_unknown():
    eng = Engine(Config(profile="offline"), log_fed=True)
    eng.set_sources(log_up=True)
    for i in range(30):
        eng.ingest(decode(T0 + i, tp=0), T0 + i)
    st = eng.state
    assert (st.restarts, st.startup_seen) == (0, False)
    snap = eng.evaluate(T0 + 30)
    for sid in ("gpu_headroom_low", "gpu_headroom_high"):
        j = snap.judgements[sid]
        assert j.firing is None and j.detail.startswith("start-up not seen (joined a running server)")
    assert snap.judgements["startup_stalled"].detail.startswith("start-up not seen (joined a running server)")
    # a real restart later brings the facts (and counts: SGLang started again)
    eng.ingest(ev("server_args", T0 + 40, {"tp_size": 1}), T0 + 40)
    eng.ingest(capacity(T0 + 41, 3.0, tp=0), T0 + 41)
    assert st.startup_seen and st.restarts == 1
    assert eng.evaluate(T0 + 42).judgements["gpu_headroom_low"].firing is True


def test_rank_labels_round_trip():
    for rank in ({"dp": 3, "tp": 7}, {"tp": 1, "pp": 1}, {"attn_cp": 2, "moe_dp": 1, "ep": 4}, {}):
        label = rank_label({**EMPTY_RANK, **rank})
        assert parse_rank_label(label) == rank


# ------------------------------------------------------------------------------------------ release-aware flags
def graph_advice(server_args: dict):
    from exporter.signals.advice import reconcile
    from exporter.signals.judgement import Judgement
    fired = {"cuda_graph_off_small_batch": Judgement("cuda_graph_off_small_batch", "warning", True, 0.5)}
    recs = reconcile(fired, server_args, {}, facts={"graph_off_peak": 300})
    return next(r for r in recs if "cuda-graph-max-bs" in r.flag)


def test_the_renamed_graph_limit_is_read_whatever_the_release_calls_it():
    from exporter.releases import flags
    assert flags.chain("cuda_graph_max_bs") == ("cuda_graph_max_bs", "cuda_graph_max_bs_decode")
    st = state()
    st.apply_event(ev("server_args", T0, {"cuda_graph_max_bs_decode": 512}), T0)
    assert st._graph_max_bs == 512             # not the profile's default of 160
    st.apply_event(ev("decode_batch", T0 + 1, {"running_req": 300, "queue_req": 0, "token_usage": 0.5,
                                                "cuda_graph": False}, tp=0), T0 + 1)
    assert st.graph_off.hits == 1              # 300 <= 512: a small batch that ran without CUDA graph


@pytest.mark.parametrize("name,flag", [("0.5.23-dp2", "--cuda-graph-max-bs-decode"),
                                       ("0.4.6-dp2", "--cuda-graph-max-bs")])
def test_advice_names_the_flag_the_release_accepts(name, flag):
    from exporter import releases
    from exporter.releases.flags import infer_release
    st = replay(RANKS / f"{name}.log").state
    release = infer_release(st.server_args)
    assert release is not None
    rec = graph_advice(st.server_args)
    assert rec.flag == flag and rec.current == 160
    for r in release:                           # every release the line may come from accepts it
        assert releases.server_arg_for_flag(flag, r) in ("cuda_graph_max_bs", "cuda_graph_max_bs_decode")


def test_a_full_server_args_dump_pins_the_release():
    from exporter import releases
    from exporter.releases.flags import infer_release
    for r in ("0.4.6.post5", "0.5.13.post1", "0.5.14", "0.5.23"):
        assert infer_release(dict.fromkeys(releases.server_args(r), 1)) == (r, r)
    assert infer_release({"cuda_graph_max_bs": 1}) == ("0.3.5.post2", "0.5.13.post1")
    assert infer_release({}) is None
    assert infer_release({"x": 1}, version="0.5.23") == ("0.5.23", "0.5.23")


def test_advice_for_an_unknown_release_names_both_spellings():
    rec = graph_advice({"model_path": "m", "disable_cuda_graph": False})
    assert rec.spellings == ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode")
    assert rec.flag == "--cuda-graph-max-bs" and "--cuda-graph-max-bs-decode (SGLang 0.5.14 on)" in rec.reason
    assert rec.to_json()["spellings"] == ["--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"]


def test_analyze_reports_the_server_as_a_whole():
    from exporter.report.analyze import analyze
    from exporter.report.text import render_text
    rep = analyze([str(RANKS / "0.4.6-dp4-to-dp2-dpa.log")], Config(profile="offline"), progress=False)
    server = rep["server"]
    assert server["startup_seen"] and server["restarts"] == rep["restarts"] == 1
    assert [e["evidence"] for e in server["restart_evidence"]] == ["server_args after batch lines"]
    assert server["layout"] == {"dp": 2, "tp": 8, "pp": 1, "ep": 1, "dp_attention": True, "ranks_seen": 8}
    # server_args say 0.4.9.post6 .. 0.5.13.post1; the batch lines' format (0.4.7-0.5.3) narrows it
    assert rep["format_family"] == "0.4.7-0.5.3"
    assert len(server["gpu_headroom"]) == 8 and server["release"] == {"first": "0.4.9.post6", "last": "0.5.3.post3"}
    text = render_text(rep)
    assert "layout dp=2, tp=8, pp=1, ep=1, DP attention; 8 ranks printed start-up lines" in text
    assert "server_args after batch lines" in text


def test_a_sidecar_joining_a_running_server_says_start_up_not_seen_until_it_restarts(tmp_path):
    """Real files, the sidecar's own start (read-back finds no start-up) and follower pass; no threads."""
    from exporter.sidecar.run import Sidecar
    lines = (RANKS / "0.5.23-dp2-restart.log").read_text().splitlines(keepends=True)
    restart = next(i for i, t in enumerate(lines) if "server_args=" in t and i > 0)
    serving = [t for t in lines[:restart] if "Decode batch" in t]
    log = tmp_path / "sglang.log"
    log.write_text("".join(serving[:6]))                       # SGLang started before us: batches only
    clock = [T0 + 100]
    sc = Sidecar(Config(profile="offline", log_files=(str(log),)), clock=lambda: clock[0])
    sc.prepare()
    with open(log, "a") as fh:
        fh.write("".join(serving[6:]))
    sc.poll_logs_once()
    view = sc.view()
    assert view.server["startup_seen"] is False and view.restarts == 0
    assert view.snapshot.judgements["gpu_headroom_low"].detail.startswith("start-up not seen")
    with open(log, "a") as fh:                                   # a real restart brings the facts
        fh.write("".join(lines[restart:]))
    sc.poll_logs_once()
    clock[0] = T0 + 300
    view = sc.view()
    assert view.server["startup_seen"] is True and view.restarts == 1
    assert view.server["restart_evidence"][0]["evidence"] == "server_args after batch lines"
    j = view.snapshot.judgements["gpu_headroom_low"]
    assert (j.firing, j.detail) == (False, "6.80 GiB left after start-up on DP0 (the least of 2 GPUs)")
    assert [g["rank"] for g in view.server["gpu_headroom"]] == ["DP0", "DP1"]


def test_the_flag_index_agrees_with_the_release_loader():
    """flags builds its per-release index in one pass for speed; it must say what exporter.releases says."""
    from exporter import releases
    from exporter.releases import flags
    _, pos, fields, accepts, primary = flags._index()
    for r in releases.releases():
        args = releases.server_args(r)
        assert fields[pos[r]] == set(args), r
        assert primary[pos[r]] == {n: a.flag for n, a in args.items() if a.flag}, r
        spelled = {f for a in args.values() for f in ((a.flag,) if a.flag else ()) + a.aliases}
        assert set(accepts[pos[r]]) == spelled, r
