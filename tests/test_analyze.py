"""`sglang-exporter analyze` on synthetic 0.5.23-format logs that show each tuning-guide problem."""
from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
START = datetime(2025, 8, 11, 17, 0, 0, tzinfo=timezone.utc)


class LogWriter:
    """Writes SGLang 0.5.23-format records with timestamps; records are written in time order (stable), as
    SGLang writes them, whatever order the scenario adds them in."""

    def __init__(self):
        self.records: list[tuple[float, int, list[str]]] = []

    def at(self, t: float, msg: str, rank: str = "TP0", more: tuple = ()) -> None:
        stamp = (START + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S")
        self.records.append((t, len(self.records), [f"[{stamp}{' ' + rank if rank else ''}] {msg}", *more]))

    def startup(self, t=0.0, avail_gb=6.50, max_running=4096, max_bs=160, conservativeness=1.0, mfs=0.88):
        self.at(t, f"server_args={{'model_path': 'meta-llama/Llama-3.1-8B-Instruct', 'served_model_name': "
                   f"'llama', 'tp_size': 1, 'schedule_conservativeness': {conservativeness}, "
                   f"'mem_fraction_static': {mfs}, 'max_running_requests': None, 'cuda_graph_max_bs': {max_bs}, "
                   f"'chunked_prefill_size': 8192}}", rank="")
        self.at(t + 20, f"max_total_num_tokens=665690, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                        f"max_running_requests={max_running}, context_len=65536, available_gpu_mem={avail_gb:.2f} GB")
        self.at(t + 30, "The server is fired up and ready to roll!", rank="")

    def decode(self, t, running=200, queue=500, usage=0.95, graph=True):
        self.at(t, f"Decode batch, #running-req: {running}, #token: 370959, token usage: {usage:.2f}, "
                   f"cuda graph: {graph}, gen throughput (token/s): 4594.01, #queue-req: {queue}")

    def prefill(self, t, running=200, queue=500, usage=0.95):
        self.at(t, f"Prefill batch, #new-seq: 3, #new-token: 4012, #cached-token: 1280, token usage: {usage:.2f}, "
                   f"#running-req: {running}, #queue-req: {queue}, #pending-token: 0, cuda graph: False, "
                   f"input throughput (token/s): 15342.77")

    def retraction(self, t):
        self.at(t, "KV cache pool is full. Retract requests. #retracted_reqs: 1, #new_tokens_gained: 2048, "
                   "#new_token_ratio: 0.9998 -> 1.0000")

    def oom(self, t, phase):
        self.at(t, f"{phase} out of memory. Try to lower your batch size.",
                more=("Try to allocate 5 tokens.", "Available tokens: 3 (available_size=3 + evictable_size=0)"))

    def steady(self, t0, t1, step=10.0, **kw):
        t = t0
        while t < t1:
            self.decode(t, **kw)
            t += step

    def write(self, path: Path) -> str:
        lines = [ln for _, _, rec in sorted(self.records, key=lambda r: (r[0], r[1])) for ln in rec]
        path.write_text("\n".join(lines) + "\n")
        return str(path)


def analyze(path: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exporter", "analyze", path, *args, "-q"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def report(path: str, *args: str) -> dict:
    proc = analyze(path, "--format", "json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def healthy_log(w: LogWriter, until=1200.0):
    w.startup()
    w.steady(60, until)


# scenario -> (builder, signal expected, [(flag, action)] expected, profile)
def _starved(w):
    w.startup()
    w.steady(60, 1200, queue=0, usage=0.40)     # a starved batch leaves the KV cache part empty


def _conservative(w):
    w.startup()
    w.steady(60, 1200, queue=300, usage=0.50)


def _retractions(w):
    healthy_log(w)
    for i in range(30):                 # one every 30 s: 2 per minute
        w.retraction(100 + 30 * i)


def _storm(w):
    healthy_log(w)
    for i in range(200):                # one every 3 s: 20 per minute
        w.retraction(100 + 3 * i)


def _oom_prefill(w):
    healthy_log(w)
    w.oom(600, "Prefill")


def _oom_decode(w):
    healthy_log(w)
    w.oom(600, "Decode")


def _headroom_high(w):
    w.startup(avail_gb=13.50)
    w.steady(60, 600)


def _headroom_low(w):
    w.startup(avail_gb=3.00)
    w.steady(60, 600)


def _graph_off(w):
    w.startup()
    w.steady(60, 600, running=40, graph=False)


def _capped(w):
    w.startup(max_running=200)
    w.steady(60, 1200, running=200, queue=300, usage=0.60)


def _stalled(w):
    w.startup()
    w.steady(60, 400, queue=50)
    w.steady(700, 900, queue=50)        # a 300 s silent gap with requests waiting


SCENARIOS = {
    "queue_starved": (_starved, "queue_below_range", [("request-rate", "increase")]),
    "too_conservative": (_conservative, "kv_cache_underused", [("--schedule-conservativeness", "decrease")]),
    "frequent_retractions": (_retractions, "retractions_frequent", [("--schedule-conservativeness", "increase")]),
    "retraction_storm": (_storm, "retraction_storm", [("--schedule-conservativeness", "increase"),
                                                      ("--max-running-requests", "decrease"),
                                                      ("--mem-fraction-static", "check")]),
    "oom_prefill": (_oom_prefill, "oom_prefill", [("--chunked-prefill-size", "decrease"),
                                                  ("--mem-fraction-static", "decrease")]),
    "oom_decode": (_oom_decode, "oom_decode", [("--max-running-requests", "decrease"),
                                               ("--mem-fraction-static", "decrease")]),
    "headroom_high": (_headroom_high, "gpu_headroom_high", [("--mem-fraction-static", "increase")]),
    "headroom_low": (_headroom_low, "gpu_headroom_low", [("--mem-fraction-static", "decrease")]),
    # batches of 40 under --cuda-graph-max-bs 160: raising it cannot help; check graph is not disabled
    "cuda_graph_off": (_graph_off, "cuda_graph_off_small_batch", [("--cuda-graph-max-bs", "keep"),
                                                                   ("--disable-cuda-graph", "check"),
                                                                   ("--attention-backend", "check")]),
    "concurrency_capped": (_capped, "concurrency_capped", [("--max-running-requests", "increase")]),
    "stalled": (_stalled, "stalled", []),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario_fires_with_guide_advice(tmp_path, name):
    build, sid, advice = SCENARIOS[name]
    w = LogWriter()
    build(w)
    # these are the guide's offline-throughput cases (an online server's empty queue is healthy)
    rep = report(w.write(tmp_path / f"{name}.log"), "--profile", "offline")
    signals = {s["id"]: s for s in rep["signals"]}
    sig = signals[sid]
    assert sig["fired"], (sid, sig)
    assert rep["verdict"] == "problems"
    assert sig["intervals"], sig
    for iv in sig["intervals"]:
        assert re.fullmatch(r"2025-08-11T17:\d\d:\d\d", iv["start"]) and iv["end"] >= iv["start"]
        assert iv["start_ts"] <= iv["end_ts"]
    assert sig["worst"] is not None or sid == "stalled"
    got = {(a["flag"], a["action"]) for a in rep["advice"]}
    for want in advice:
        assert want in got, (want, rep["advice"])
    for a in rep["advice"]:
        if (a["flag"], a["action"]) in advice:
            assert sid in a["signals"]


def test_scenario_details(tmp_path):
    w = LogWriter()
    _stalled(w)
    rep = report(w.write(tmp_path / "s.log"))
    stalled = next(s for s in rep["signals"] if s["id"] == "stalled")
    (iv,) = stalled["intervals"]
    # last batch at 17:06:30 (t=390), stall_seconds 60: fires between 17:07:30 and the next line at 17:11:40
    # interval bounds have the resolution of evaluate_interval (5 s)
    assert "2025-08-11T17:07:30" < iv["start"] <= "2025-08-11T17:07:40"
    assert "2025-08-11T17:11:40" <= iv["end"] <= "2025-08-11T17:11:45"
    assert stalled["worst"] >= 300

    w = LogWriter()
    _conservative(w)
    rep = report(w.write(tmp_path / "c.log"))
    (a,) = [a for a in rep["advice"] if a["flag"] == "--schedule-conservativeness"]
    assert (a["current"], a["suggested"]) == (1.0, 0.3)

    w = LogWriter()
    _headroom_high(w)
    rep = report(w.write(tmp_path / "h.log"))
    assert rep["startup"]["gpu_headroom_bytes"] == pytest.approx(13.5 * 2**30, rel=1e-3)
    (a,) = [a for a in rep["advice"] if a["flag"] == "--mem-fraction-static"]
    assert a["current"] == 0.88


def test_storm_interval_times(tmp_path):
    w = LogWriter()
    _storm(w)                 # retractions every 3 s from 17:01:40 to 17:11:37
    rep = report(w.write(tmp_path / "storm.log"))
    storm = next(s for s in rep["signals"] if s["id"] == "retraction_storm")
    (iv,) = storm["intervals"]
    assert "2025-08-11T17:01:40" <= iv["start"] <= "2025-08-11T17:05:00"
    assert "2025-08-11T17:11:37" <= iv["end"] <= "2025-08-11T17:17:00"
    assert storm["worst"] == pytest.approx(20.0, rel=0.05)


def write_maybe_compressed(path: Path, text: str) -> None:
    """``text`` into ``path``, compressed as its name says (logrotate `compress`, kubelet's gzip)."""
    data = text.encode()
    for suffix, module in ((".gz", gzip), (".bz2", bz2), (".xz", lzma)):
        if path.name.endswith(suffix):
            data = module.compress(data)
    path.write_bytes(data)


@pytest.mark.parametrize("names", [(".2", ".1", ""), ("-20250810", "-20250811", ""), (".2.gz", ".1", ""),
                                   ("-20250810.xz", "-20250811.bz2", "")],
                         ids=["numbered", "dated", "numbered-compressed", "dated-compressed"])
def test_rotated_copies_in_the_shells_order_are_read_oldest_first(tmp_path, names):
    """`analyze storm.log*` lists the live file first (and .1 before the older .2): the copies are read before
    it, oldest first, so the report is the one of the whole log in order, and stderr says the order. Copies
    compressed by logrotate or kubelet are read decompressed, in the same order."""
    w = LogWriter()
    _storm(w)
    lines = Path(w.write(tmp_path / "whole.log")).read_text().splitlines(keepends=True)
    third = len(lines) // 3
    parts = [tmp_path / f"storm.log{suffix}" for suffix in names]      # oldest first
    for part, chunk in zip(parts, (lines[:third], lines[third:2 * third], lines[2 * third:])):
        write_maybe_compressed(part, "".join(chunk))
    shell = sorted(str(p) for p in parts)                              # what `storm.log*` expands to
    assert shell != [str(p) for p in parts]
    proc = subprocess.run([sys.executable, "-m", "exporter", "analyze", *shell, "--format", "json", "-q"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    got, whole = json.loads(proc.stdout), report(str(tmp_path / "whole.log"))
    assert got["sources"] == [str(p) for p in parts]
    assert proc.stderr == (f"analyze: reading {', '.join(str(p) for p in parts)} in this order (a file's rotated "
                           "copies before it, oldest first)\n")
    assert got["restarts"] == whole["restarts"] and got["signals"] == whole["signals"]
    assert got["span"] == whole["span"]


def test_a_compressed_log_cut_short_is_read_up_to_the_cut_with_a_warning(tmp_path):
    """A .gz still being written by logrotate (or cut by a full disk) ends without gzip's trailer: its lines up
    to there are read, stderr says so, and the report is made."""
    w = LogWriter()
    _storm(w)
    whole = Path(w.write(tmp_path / "storm.log")).read_text()
    data = gzip.compress(whole.encode())
    cut = tmp_path / "storm.log.1.gz"
    cut.write_bytes(data[: len(data) * 2 // 3])
    proc = analyze(str(cut), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert "storm.log.1.gz: the compressed data is damaged or cut short" in proc.stderr
    read = json.loads(proc.stdout)["lines"]["read"]
    assert 0 < read < whole.count("\n")


def test_a_zstd_log_says_how_to_read_it(tmp_path):
    log = tmp_path / "sglang.log.1.zst"
    log.write_bytes(b"\x28\xb5\x2f\xfd" + bytes(range(60)))
    proc = analyze(str(log))
    assert proc.returncode == 2
    assert f"{log}: zstd-compressed, which Python cannot read: decompress it first, e.g. zstd -dc {log} |" \
        in proc.stderr


def test_retractions_and_underuse_reconciled(tmp_path):
    w = LogWriter()
    w.startup()
    w.steady(60, 1200, queue=300, usage=0.50)
    for i in range(30):
        w.retraction(100 + 30 * i)
    rep = report(w.write(tmp_path / "mix.log"))
    fired = {s["id"] for s in rep["signals"] if s["fired"]}
    assert {"kv_cache_underused", "retractions_frequent"} <= fired
    cons = [a for a in rep["advice"] if a["flag"] == "--schedule-conservativeness"]
    assert len(cons) == 1 and cons[0]["action"] == "increase"
    assert "kv_cache_underused" in cons[0]["reason"]


def test_healthy_log(tmp_path):
    w = LogWriter()
    healthy_log(w)
    path = w.write(tmp_path / "healthy.log")
    rep = report(path)
    assert rep["verdict"] == "healthy", [s for s in rep["signals"] if s["fired"]]
    assert rep["advice"] == []
    assert all(not s["fired"] and s["intervals"] == [] for s in rep["signals"])
    text = analyze(path).stdout
    assert "Verdict: HEALTHY" in text and "Advice: none" in text


def test_online_profile_healthy_queue_zero(tmp_path):
    w = LogWriter()
    _starved(w)
    rep = report(w.write(tmp_path / "online.log"), "--profile", "online")
    assert rep["verdict"] == "healthy" and rep["profile"] == "online"
    below = next(s for s in rep["signals"] if s["id"] == "queue_below_range")
    assert below["active"] is False


def test_text_output_mentions_advice(tmp_path):
    w = LogWriter()
    _oom_decode(w)
    proc = analyze(w.write(tmp_path / "oom.log"))
    assert proc.returncode == 0
    assert "Verdict: PROBLEMS" in proc.stdout
    assert "FIRED    oom_decode" in proc.stdout
    assert "decrease --max-running-requests" in proc.stdout


def test_not_an_sglang_log_and_missing_file(tmp_path):
    junk = tmp_path / "junk.log"
    junk.write_text("hello\nworld\n")
    proc = analyze(str(junk))
    assert proc.returncode == 1 and "no SGLang log record" in proc.stderr
    proc = analyze(str(tmp_path / "missing.log"))
    assert proc.returncode == 2 and "no such file" in proc.stderr


def test_schema_keys_documented(tmp_path):
    """Every key of the JSON report appears in docs/analyze.md's tables, and every documented key exists."""
    w = LogWriter()
    _storm(w)
    rep = report(w.write(tmp_path / "storm.log"))
    doc = (ROOT / "docs" / "analyze.md").read_text()

    def table(heading: str) -> set[str]:
        section = doc.split(f"### {heading}", 1)[1].split("\n#", 1)[0]
        return set(re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M))
    sig = next(s for s in rep["signals"] if s["fired"])
    assert table("Top level") == set(rep)
    assert table("signals[]") == set(sig)
    assert table("signals[].intervals[]") == set(sig["intervals"][0])
    assert table("advice[]") == set(rep["advice"][0])
    assert table("span") == set(rep["span"])
    assert table("lines") == set(rep["lines"])
    assert table("startup") == set(rep["startup"])
    assert f'"{rep["schema"]}"' in doc


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_report_is_the_same_when_every_evaluation_advises(tmp_path, name, monkeypatch):
    """analyze skips the reconciler at each evaluation (engine.advise = False) because its report reconciles
    once at the end: the report must not change when every evaluation advises, as serve's do."""
    from exporter.config import Config
    from exporter.engine import Engine
    from exporter.report import analyze as analyze_module

    class Advising(Engine):
        advise = property(lambda self: True, lambda self, value: None)

    build, _, _ = SCENARIOS[name]
    w = LogWriter()
    build(w)
    log = w.write(tmp_path / f"{name}.log")
    quiet = analyze_module.analyze([log], Config(), progress=False, series=True)
    monkeypatch.setattr(analyze_module, "Engine", Advising)
    assert analyze_module.analyze([log], Config(), progress=False, series=True) == quiet


def test_progress_shows_a_share_only_where_the_total_is_known(tmp_path):
    """Bytes read from a compressed log are its decompressed bytes: no share of its size is shown."""
    from exporter.report import analyze as analyze_module
    plain, packed = tmp_path / "a.log", tmp_path / "a.log.gz"
    plain.write_text("x\n" * 10)
    packed.write_bytes(gzip.compress(b"x\n" * 10))
    for paths, shows_share in (([str(plain)], True), ([str(plain), str(packed)], False)):
        stream = io.StringIO()
        meter = analyze_module.Progress(analyze_module.total_bytes(paths), stream=stream, enabled=True)
        meter.next = 0.0
        meter.update(10, 5)
        assert ("%" in stream.getvalue()) is shows_share, stream.getvalue()


def test_compressed_standard_input_is_read_decompressed(tmp_path):
    """`zcat` forgotten: `cat sglang.log.2.gz | sglang-exporter analyze -` reads the log, not its bytes."""
    w = LogWriter()
    _storm(w)
    text = Path(w.write(tmp_path / "storm.log")).read_text()
    proc = subprocess.run([sys.executable, "-m", "exporter", "analyze", "-", "--format", "json", "-q"], cwd=ROOT,
                          input=gzip.compress(text.encode()), capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["lines"]["read"] == text.count("\n")
