"""The sidecar's threads: what reaches the engine when the log goes quiet."""
from __future__ import annotations

from helpers import wait_until

from exporter.config import Config
from exporter.sidecar.run import Sidecar

CRASH = """[2025-08-11 17:17:03 TP0] Decode batch, #running-req: 3, #token: 100, token usage: 0.10, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 0
[2025-08-11 17:17:04 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sglang/srt/managers/scheduler.py", line 2000, in run_scheduler_process
    scheduler.event_loop_overlap()
RuntimeError: boom
"""


def test_a_trailing_traceback_reaches_the_engine_when_the_log_goes_quiet(tmp_path):
    """A crashing server's traceback is the last thing it prints: nothing follows to complete the record, so the
    follower's went-quiet call must flush it (served threads, real files, no sleeps)."""
    log = tmp_path / "sglang.log"
    log.write_text("")
    sc = Sidecar(Config(log_files=(str(log),), poll_interval=0.02))
    sc.start()
    try:
        wait_until(lambda: sc.follower.stats.get(str(log)) is not None and sc.follower.stats[str(log)].up,
                   what="following")
        with open(log, "a") as fh:
            fh.write(CRASH)
        wait_until(lambda: sc.engine.state.events_total.get("scheduler_exception") == 1, timeout=10,
                   what="the traceback emitted as scheduler_exception")
        assert sc.engine.state.events_total["decode_batch"] == 1
    finally:
        sc.shutdown(timeout=10)
    assert not any(t.is_alive() for t in sc.threads)


def test_start_up_says_a_log_holds_no_start_up_only_when_it_has_bytes(tmp_path, caplog):
    """An empty log (SGLang has not written yet) is joined without a word; one with lines but no start-up in
    reach is said to be joined at its end (its start-up facts unknown until SGLang prints them)."""
    empty, headless = tmp_path / "empty.log", tmp_path / "headless.log"
    empty.write_text("")
    headless.write_text(CRASH * 40)
    caplog.set_level("INFO", logger="exporter.sidecar.startup")
    for log in (empty, headless):
        sc = Sidecar(Config(log_files=(str(log),), readback_bytes=1024))
        sc.prepare()
        sc.shutdown()
    said = [r.getMessage() for r in caplog.records if "no SGLang start-up" in r.getMessage()]
    assert said == [f"log {headless}: no SGLang start-up in its last 1024 bytes and the file is larger; joining at "
                    "the end (start-up facts unknown until SGLang prints them)"]


class _GrowsWhileRead(dict):
    """A follower's stats as the follow thread changes them: a new glob match lands while another thread
    walks the paths (items() or values() of the dict itself)."""

    def _grow(self):
        self[f"new-{len(self)}.log"] = next(iter(dict.values(self)))

    def items(self):
        for i, kv in enumerate(super().items()):
            if i == 0:
                self._grow()
            yield kv

    def values(self):
        for i, v in enumerate(super().values()):
            if i == 0:
                self._grow()
            yield v


def test_the_sources_are_judged_while_the_follow_thread_adds_a_path(tmp_path):
    """The follow thread adds and drops paths (a glob's new match, a let-go rotated copy), parsers and unparsed
    reasons outside the sidecar's lock: judging the sources and building the view read copies, never a dict as
    it changes size."""
    log = tmp_path / "sglang.log"
    log.write_text(CRASH)
    sc = Sidecar(Config(log_files=(str(log),)))
    sc.prepare()
    sc.follower.stats = _GrowsWhileRead(sc.follower.stats)
    sources = sc.log_sources.by_source
    (parser,) = [sp.parser for sp in sources.values()]
    parser.unparsed = _GrowsWhileRead(parser.unparsed or {"traceback": 1})   # a new reason, as lines come
    sc.log_sources.by_source = _GrowsWhileRead(sources)                      # a new glob match's first lines
    sc.evaluate_once()
    view = sc.view()
    assert str(log) in view.log_sources and view.unparsed
    sc.shutdown()
