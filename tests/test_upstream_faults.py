"""A hostile SGLang /metrics: a raw-socket peer on 127.0.0.1 that replies whatever it is told, driving a real
Sidecar with an injected clock.

Protocol faults: the scrape fails with a reason of the right category within its timeout, up reads 0 at once,
no value of the scrape remains after the staleness time, and the source comes back with fresh values when the
peer heals. Value faults: the bad samples are dropped and counted, never exported, and scraping goes on.
"""
from __future__ import annotations

import logging
import math
import socket
import threading

import pytest
from helpers import wait_until
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import Config
from exporter.ingest.scrape import scrape
from exporter.sidecar.run import SGLANG_SOURCE, Sidecar
from exporter.web.server import App

TIMEOUT = 0.3        # per scrape: the hang and drip faults cost this much each
MAX_BYTES = 50_000
INTERVAL = 15.0
STALE_AFTER = 3 * INTERVAL


def exposition(queue: float, running: float = 4.0, usage: float = 0.5, generated: float = 1000.0,
               retracted: float = 10.0) -> str:
    return f"""\
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{model_name="m",tp_rank="0",pp_rank="0"}} {queue}
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{model_name="m",tp_rank="0",pp_rank="0"}} {running}
# TYPE sglang:token_usage gauge
sglang:token_usage{{model_name="m",tp_rank="0",pp_rank="0"}} {usage}
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{{model_name="m"}} {generated}
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{{model_name="m"}} {retracted}
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_bucket{{le="1.0",model_name="m"}} 3
sglang:e2e_request_latency_seconds_bucket{{le="+Inf",model_name="m"}} 4
sglang:e2e_request_latency_seconds_sum{{model_name="m"}} 2.5
sglang:e2e_request_latency_seconds_count{{model_name="m"}} 4
"""


def http_reply(body: bytes, status: str = "200 OK", headers: str = "") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n{headers}\r\n").encode() + body


class Upstream:
    """A stand-in for SGLang's /metrics on a raw socket: each connection is answered by `mode` (switchable at
    any time) with `body` when the mode serves one."""

    def __init__(self):
        self.mode = "ok"
        self.body = exposition(queue=7).encode()
        self.stop = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.threads: list[threading.Thread] = []
        self.accepter = threading.Thread(target=self._accept, daemon=True)
        self.accepter.start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            t = threading.Thread(target=self._answer, args=(conn, self.mode, self.body), daemon=True)
            self.threads.append(t)
            t.start()

    def _drip(self, conn, data: bytes) -> None:
        for i in range(len(data)):
            conn.sendall(data[i:i + 1])
            if self.stop.wait(0.02):
                return

    def _answer(self, conn: socket.socket, mode: str, body: bytes) -> None:
        with conn:
            try:
                conn.settimeout(2)
                conn.recv(65536)                              # the request
                if mode == "ok":
                    conn.sendall(http_reply(body))
                elif mode == "closed":
                    pass
                elif mode == "reset":
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                elif mode == "hang":
                    self.stop.wait(30)
                elif mode == "500":
                    conn.sendall(http_reply(b"internal error", "500 Internal Server Error"))
                elif mode == "404":         # SGLang started without --enable-metrics: no /metrics route
                    conn.sendall(http_reply(b'{"detail":"Not Found"}', "404 Not Found"))
                elif mode == "garbage":
                    conn.sendall(http_reply(b"<html><body>It works!</body></html>\n"))
                elif mode == "binary":
                    conn.sendall(http_reply(bytes(range(256)) * 4))
                elif mode == "huge":
                    conn.sendall(http_reply(b"# " + b"x" * (MAX_BYTES * 2) + b"\n"))
                elif mode == "huge_unannounced":        # no Content-Length: the cap must hold while reading
                    conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + b"# " + b"x" * (MAX_BYTES * 2) + b"\n")
                elif mode == "drip_body":
                    reply = http_reply(body)
                    head = reply.index(b"\r\n\r\n") + 4
                    conn.sendall(reply[:head])
                    self._drip(conn, reply[head:])
                elif mode == "drip_headers":
                    self._drip(conn, b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"y" * 1000 + b"\r\n\r\n")
                elif mode == "banner":
                    conn.sendall(b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3\r\n")
                    self.stop.wait(30)
                elif mode == "bad_chunks":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n" + body + b"\r\n")
                elif mode == "cut_short":
                    reply = http_reply(body)
                    conn.sendall(reply[:len(reply) - 40])
                elif mode == "huge_header":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Big: " + b"h" * 70_000 + b"\r\n\r\n" + body)
                elif mode == "many_headers":
                    conn.sendall(b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(200))
                                 + b"\r\n" + body)
                else:
                    raise AssertionError(f"unknown mode {mode}")
            except OSError:
                pass           # the scraper gave up first: that is the point of several modes

    def close(self):
        self.stop.set()
        self.accepter.join(5)
        self.sock.close()
        for t in self.threads:
            t.join(5)
        assert not any(t.is_alive() for t in self.threads)


@pytest.fixture
def upstream():
    u = Upstream()
    yield u
    u.close()


class Clock:
    def __init__(self, t=1_700_000_000.0):
        self.t = t

    def __call__(self):
        return self.t


def metrics_only(upstream, **over) -> tuple[Sidecar, Clock, App]:
    clock = Clock()
    settings = {"scrape_interval": INTERVAL, "scrape_timeout": TIMEOUT, "scrape_max_bytes": MAX_BYTES, **over}
    sc = Sidecar(Config(sglang_url=upstream.url, **settings), clock=clock)
    return sc, clock, App(sc, {})


def samples(app: App) -> dict:
    """(name, sorted labels) -> value of everything the exporter exposes on /metrics."""
    text = generate_latest(app.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def value(exposed: dict, name: str, **labels):
    return exposed.get((name, tuple(sorted(labels.items()))))


RANK = {"dp": "0", "tp": "0", "pp": "0"}     # an untagged rank is rank 0 of its kind
PER_RANK = ("sglang_exporter_queue_requests", "sglang_exporter_running_requests",
            "sglang_exporter_token_usage_ratio")


def scraped_rank_values(exposed: dict) -> dict:
    return {k: v for k, v in exposed.items() if k[0] in PER_RANK}


# ---------------------------------------------------------------------------------------------- protocol faults
PROTOCOL_FAULTS = [
    ("closed", "protocol: closed without a reply"),
    ("reset", "protocol: "),
    ("hang", "timeout: "),
    ("500", "http 500"),
    ("404", "http 404: no /metrics there (SGLang serves it only when started with --enable-metrics; or "
            "--sglang-url names another port or path)"),
    ("garbage", "not an exposition: "),
    ("binary", "not an exposition: "),
    ("huge", "too large: "),
    ("huge_unannounced", "too large: "),
    ("drip_body", "timeout: "),
    ("drip_headers", "timeout: "),
    ("banner", "protocol: not an HTTP reply: "),
    ("bad_chunks", "protocol: body cut short or broken chunked encoding"),
    ("cut_short", "protocol: body cut short"),
    ("huge_header", "protocol: got more than 65536 bytes"),
    ("many_headers", "protocol: HTTPException: got more than 100 headers"),
]


@pytest.mark.parametrize("mode, reason", PROTOCOL_FAULTS, ids=[m for m, _ in PROTOCOL_FAULTS])
def test_protocol_fault_down_at_once_stale_values_go_and_heal_brings_fresh_ones(upstream, mode, reason):
    sc, clock, app = metrics_only(upstream)
    sc.scrape_once()
    before = samples(app)
    assert value(before, "sglang_exporter_source_up", source=SGLANG_SOURCE) == 1.0
    assert value(before, "sglang_exporter_queue_requests", **RANK) == 7.0

    upstream.mode = mode
    clock.t += INTERVAL
    sc.scrape_once()
    view = sc.view()
    assert view.scrape["success"] is False and view.scrape["error"].startswith(reason), view.scrape["error"]
    assert view.scrape["duration"] < TIMEOUT + 1.0          # bounded by the scrape timeout, whatever the peer
    exposed = samples(app)
    assert value(exposed, "sglang_exporter_source_up", source=SGLANG_SOURCE) == 0.0     # within one interval
    assert value(exposed, "sglang_exporter_scrape_success", source=SGLANG_SOURCE) == 0.0
    assert all(j.firing is None for sid, j in view.snapshot.judgements.items()
               if sid in ("queue_above_range", "kv_cache_underused", "latency_high", "stalled"))

    # the fault lasts past the staleness time: nothing the scrape gave is left
    while clock.t - 1_700_000_000.0 <= STALE_AFTER:
        clock.t += INTERVAL
        sc.scrape_once()
    view = sc.view()
    assert view.scrape["stale"] is True and view.ranks == {}
    assert sc.engine.state.histograms == {}
    exposed = samples(app)
    assert scraped_rank_values(exposed) == {}
    assert value(exposed, "sglang_exporter_source_up", source=SGLANG_SOURCE) == 0.0

    upstream.mode, upstream.body = "ok", exposition(queue=9, generated=1500).encode()
    clock.t += INTERVAL
    sc.scrape_once()
    view = sc.view()
    assert view.scrape["up"] is True and view.scrape["stale"] is False and view.scrape["error"] == ""
    exposed = samples(app)
    assert value(exposed, "sglang_exporter_source_up", source=SGLANG_SOURCE) == 1.0
    assert value(exposed, "sglang_exporter_scrape_success", source=SGLANG_SOURCE) == 1.0
    assert value(exposed, "sglang_exporter_queue_requests", **RANK) == 9.0


def test_values_remain_until_the_staleness_time_then_go(upstream):
    """Staleness counts from the last good scrape, and is configurable: a 100 s setting keeps the values
    through three failed scrapes, and drops them at the first look past 100 s."""
    sc, clock, app = metrics_only(upstream, scrape_stale_after=100.0)
    sc.scrape_once()
    upstream.mode = "500"
    for _ in range(6):
        clock.t += INTERVAL          # 15 .. 90 s after the good scrape
        sc.scrape_once()
        assert value(samples(app), "sglang_exporter_queue_requests", **RANK) == 7.0
    clock.t += 10.001                # 100.001 s
    assert scraped_rank_values(samples(app)) == {}


def test_a_stuck_scraper_reads_as_down_not_frozen_up(upstream):
    """No scrape finishes (a hung thread): after 2 x (interval + timeout) both up and scrape_success read 0,
    though the last scrape that finished succeeded; the values go at the staleness time."""
    sc, clock, app = metrics_only(upstream, scrape_stale_after=600.0)
    sc.scrape_once()
    clock.t += 2 * (INTERVAL + TIMEOUT) - 0.1
    exposed = samples(app)
    assert value(exposed, "sglang_exporter_scrape_success", source=SGLANG_SOURCE) == 1.0
    assert value(exposed, "sglang_exporter_source_up", source=SGLANG_SOURCE) == 1.0
    clock.t += 0.2
    exposed = samples(app)
    assert sc.view().scrape["stuck"] is True
    assert value(exposed, "sglang_exporter_scrape_success", source=SGLANG_SOURCE) == 0.0
    assert value(exposed, "sglang_exporter_source_up", source=SGLANG_SOURCE) == 0.0
    assert value(exposed, "sglang_exporter_queue_requests", **RANK) == 7.0    # not stale yet
    clock.t += 600
    assert scraped_rank_values(samples(app)) == {}


def test_with_logs_followed_a_stale_scrape_leaves_the_log_values(tmp_path, upstream):
    """Logs and /metrics both configured: the per-rank values are the log's and stay; only what the scrape
    alone gives (latency) goes stale."""
    log = tmp_path / "sglang.log"
    log.write_text("[2025-08-11 17:17:03] Decode batch, #running-req: 5, #token: 100, token usage: 0.50, "
                   "cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 3\n")
    clock = Clock()
    sc = Sidecar(Config(log_files=(str(log),), from_start=True, sglang_url=upstream.url, scrape_interval=INTERVAL,
                        scrape_timeout=TIMEOUT, profile="online"), clock=clock)
    sc.poll_logs_once()
    sc.scrape_once()
    assert sc.engine.state.histograms
    upstream.mode = "500"
    for _ in range(4):
        clock.t += INTERVAL
        sc.scrape_once()
    view = sc.view()
    assert view.scrape["stale"] is True and sc.engine.state.histograms == {}
    assert view.ranks[(None, None, None)][0] == 3                 # the log's queue
    assert view.snapshot.judgements["latency_high"].firing is None


def test_one_line_is_logged_per_change_of_up(upstream, caplog):
    sc, clock, _ = metrics_only(upstream)
    with caplog.at_level(logging.INFO, logger="exporter.sidecar.source_health"):
        sc.scrape_once()
        upstream.mode = "500"
        for _ in range(3):
            clock.t += INTERVAL
            sc.scrape_once()
            sc.view()
        upstream.mode = "ok"
        clock.t += INTERVAL
        sc.scrape_once()
    lines = [r.getMessage() for r in caplog.records if r.name == "exporter.sidecar.source_health"]
    assert len(lines) == 3, lines
    assert lines[0].endswith("is up") and lines[1].endswith("is down: http 500") and lines[2].endswith("is up")


def test_a_fault_of_ours_is_counted_and_scraping_goes_on(upstream, monkeypatch):
    sc, clock, app = metrics_only(upstream)

    def broken(res, now):
        raise RuntimeError("boom")
    monkeypatch.setattr(sc.engine, "ingest_scrape", broken)
    sc.scrape_once()                                   # does not raise
    view = sc.view()
    assert view.scrape["success"] is False and view.scrape["error"] == "internal: RuntimeError: boom"
    assert view.scrape["internal_errors"] == 1 and view.scrape["up"] is False
    monkeypatch.undo()
    clock.t += INTERVAL
    sc.scrape_once()
    assert sc.view().scrape["up"] is True


def test_the_scrape_thread_survives_what_it_did_not_expect(upstream, monkeypatch):
    """A fault escaping scrape_once (here: injected) is logged and counted; the thread keeps scraping."""
    sc, _, _ = metrics_only(upstream, scrape_interval=0.02)
    real, calls = sc.scrape_once, []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("unexpected")
        real()
    monkeypatch.setattr(sc, "scrape_once", flaky)
    thread = threading.Thread(target=sc._scrape_loop, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(calls) >= 3, timeout=10, what="the loop scraping again after the fault")
        assert thread.is_alive() and sc.last_scrape["internal_errors"] == 1
    finally:
        sc.stop.set()
        thread.join(5)
    assert not thread.is_alive()


# ---------------------------------------------------------------------------------------------- value faults
VALUE_FAULTS = [
    ("queue", "+Inf", "non_finite"),
    ("queue", "NaN", "non_finite"),
    ("queue", "-3", "out_of_range"),
    ("queue", "1e12", "out_of_range"),
    ("running", "-Inf", "non_finite"),
    ("usage", "7.5", "out_of_range"),
    ("usage", "-0.1", "out_of_range"),
]


@pytest.mark.parametrize("field, bad, reason", VALUE_FAULTS, ids=[f"{f}={b}" for f, b, _ in VALUE_FAULTS])
def test_a_bad_gauge_sample_is_dropped_and_counted_the_rest_kept(upstream, field, bad, reason):
    sc, clock, app = metrics_only(upstream)
    sc.scrape_once()
    upstream.body = exposition(**{"queue": 8, field: bad}).encode()
    clock.t += INTERVAL
    sc.scrape_once()
    view = sc.view()
    assert view.scrape["up"] is True and view.scrape["rejected"] == {reason: 1}
    exposed = samples(app)
    assert value(exposed, "sglang_exporter_scrape_samples_rejected_total", reason=reason) == 1.0
    names = {"queue": "sglang_exporter_queue_requests", "running": "sglang_exporter_running_requests",
             "usage": "sglang_exporter_token_usage_ratio"}
    expected = {"queue": 7.0, "running": 4.0, "usage": 0.5}      # the bad one keeps its last good value
    expected.update({k: 8.0 for k in ("queue",) if field != "queue"})
    for f, name in names.items():
        assert value(exposed, name, **RANK) == expected[f], f
    assert all(math.isfinite(v) for v in exposed.values())


@pytest.mark.parametrize("bad", ["+Inf", "NaN", "-5", "1e400", "9" * 400])
def test_a_bad_counter_sample_is_dropped_and_our_totals_stay_sane(upstream, bad):
    """An infinite or huge counter once killed the scrape thread (OverflowError); now it is a rejected sample,
    the retraction totals keep their last value, and the next good scrape counts on."""
    sc, clock, app = metrics_only(upstream)
    sc.scrape_once()
    upstream.body = exposition(queue=7, retracted=bad).encode()
    clock.t += INTERVAL
    sc.scrape_once()
    view = sc.view()
    assert view.scrape["up"] is True and sum(view.scrape["rejected"].values()) == 1
    assert view.retracted_requests_total == 0
    upstream.body = exposition(queue=7, retracted=14).encode()
    clock.t += INTERVAL
    sc.scrape_once()
    assert sc.view().retracted_requests_total == 4
    assert value(samples(app), "sglang_exporter_retracted_requests_total") == 4.0


def test_a_bad_histogram_bucket_drops_that_histogram_only(upstream):
    sc, clock, _ = metrics_only(upstream)
    body = exposition(queue=5).replace('le="1.0",model_name="m"} 3', 'le="1.0",model_name="m"} NaN')
    body = body.replace('le="+Inf",model_name="m"}', 'le="soon",model_name="m"}')
    upstream.body = body.encode()
    sc.scrape_once()
    view = sc.view()
    assert view.scrape["up"] is True and view.scrape["rejected"] == {"non_finite": 1, "bad_le": 1}
    assert sc.engine.state.histograms == {} and view.ranks[(None, 0, 0)][0] == 5


def test_a_counter_reset_counts_the_new_value_never_a_decrease(upstream):
    """SGLang restarted: its counters start again from 0. Our totals add what it counted since (as Prometheus'
    increase() does) and the progress counter's drop is not mistaken for a hang or a decrease."""
    sc, clock, app = metrics_only(upstream)
    totals = []
    for retracted in (100, 130, 5, 12):
        upstream.body = exposition(queue=7, retracted=retracted).encode()
        sc.scrape_once()
        totals.append(sc.view().retracted_requests_total)
        clock.t += INTERVAL
    assert totals == [0, 30, 35, 42]
    assert value(samples(app), "sglang_exporter_retracted_requests_total") == 42.0
    assert sc.view().retractions_total == 3


def test_a_reset_of_one_series_is_not_a_reset_of_the_others(upstream):
    """A counter summed over series (is_streaming="true"/"false"): one series restarting from 0 adds its own
    new value, the other keeps counting by difference."""
    sc, clock, _ = metrics_only(upstream)
    template = ('# TYPE sglang:num_retracted_requests_total counter\n'
                'sglang:num_retracted_requests_total{{is_streaming="true"}} {}\n'
                'sglang:num_retracted_requests_total{{is_streaming="false"}} {}\n')
    for a, b in ((50, 60), (55, 2)):
        upstream.body = template.format(a, b).encode()
        sc.scrape_once()
        clock.t += INTERVAL
    assert sc.view().retracted_requests_total == 5 + 2


def test_scrape_never_raises_on_a_url_it_cannot_use():
    for url in ("http://127.0.0.1:0/metrics", "http://[::1/metrics", "http://127.0.0.1:99999/metrics"):
        res = scrape(url, TIMEOUT, MAX_BYTES)
        assert res.success is False and res.error.startswith(("unreachable: ", "refused: ")), (url, res.error)
