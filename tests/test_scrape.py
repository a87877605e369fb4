"""The scraper against a real HTTP server on 127.0.0.1 serving /metrics texts shaped like SGLang versions,
and the failure modes a dead, slow, broken or flapping target shows; each source optional in the Sidecar."""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import free_port

from exporter.config import Config
from exporter.ingest.scrape import metrics_url, parse_exposition, scrape
from exporter.sidecar.run import SGLANG_SOURCE, Sidecar

# ---------------------------------------------------------------------------------------------- fixtures
V0_3_6 = """\
# HELP sglang:num_running_reqs The number of running requests
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="llama"} 12.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="llama"} 150.0
# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="llama"} 0.42
# HELP sglang:gen_throughput The generate throughput (token/s)
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{model_name="llama"} 812.5
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="llama"} 5000.0
# HELP sglang:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE sglang:time_per_output_token_seconds histogram
sglang:time_per_output_token_seconds_bucket{le="0.05",model_name="llama"} 10.0
sglang:time_per_output_token_seconds_bucket{le="0.1",model_name="llama"} 30.0
sglang:time_per_output_token_seconds_bucket{le="+Inf",model_name="llama"} 40.0
sglang:time_per_output_token_seconds_sum{model_name="llama"} 3.0
sglang:time_per_output_token_seconds_count{model_name="llama"} 40.0
"""

V0_4_10 = """\
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 7.0
sglang:num_queue_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="1"} 7.0
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 64.0
# HELP sglang:is_cuda_graph Whether the batch is using CUDA graph.
# TYPE sglang:is_cuda_graph gauge
sglang:is_cuda_graph{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 1.0
# HELP sglang:total_retracted_reqs The total number of retracted requests due to kvcache full.
# TYPE sglang:total_retracted_reqs gauge
sglang:total_retracted_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 17.0
# HELP sglang:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_bucket{le="0.1",model_name="m"} 5.0
sglang:inter_token_latency_seconds_bucket{le="+Inf",model_name="m"} 6.0
sglang:inter_token_latency_seconds_sum{model_name="m"} 0.7
sglang:inter_token_latency_seconds_count{model_name="m"} 6.0
"""

V0_5_7 = """\
# HELP sglang:num_retracted_requests_total Number of retracted requests.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 23.0
# HELP sglang:num_retracted_reqs The number of retracted requests.
# TYPE sglang:num_retracted_reqs gauge
sglang:num_retracted_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pid="21313",pp_rank="0",tp_rank="0"} 1.0
sglang:num_retracted_reqs{engine_type="unified",model_name="m",moe_ep_rank="0",pid="21314",pp_rank="0",tp_rank="0"} 0.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="m",moe_ep_rank="0",pp_rank="0",tp_rank="0"} 0.5
"""

V0_5_17 = """\
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{is_streaming="true",model_name="m"} 100.0
sglang:generation_tokens_total{is_streaming="false",model_name="m"} 50.0
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{is_streaming="true",le="1.0",model_name="m"} 3.0
sglang:time_to_first_token_seconds_bucket{is_streaming="true",le="+Inf",model_name="m"} 4.0
sglang:time_to_first_token_seconds_bucket{is_streaming="false",le="1.0",model_name="m"} 1.0
sglang:time_to_first_token_seconds_bucket{is_streaming="false",le="+Inf",model_name="m"} 2.0
sglang:time_to_first_token_seconds_sum{is_streaming="true",model_name="m"} 3.0
sglang:time_to_first_token_seconds_count{is_streaming="true",model_name="m"} 4.0
sglang:time_to_first_token_seconds_sum{is_streaming="false",model_name="m"} 3.0
sglang:time_to_first_token_seconds_count{is_streaming="false",model_name="m"} 2.0
"""

PRIORITY = """\
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="m",pp_rank="0",priority="",tp_rank="0"} 30.0
sglang:num_queue_reqs{engine_type="unified",model_name="m",pp_rank="0",priority="1",tp_rank="0"} 10.0
sglang:num_queue_reqs{engine_type="unified",model_name="m",pp_rank="0",priority="2",tp_rank="0"} 20.0
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m",priority=""} 900.0
sglang:prompt_tokens_total{model_name="m",priority="1"} 400.0
"""

UNDERSCORE = """\
# TYPE sglang_num_queue_reqs gauge
sglang_num_queue_reqs{model_name="m",tp_rank="0",dp_rank="1"} 3.0
# TYPE sglang_num_retracted_requests_total counter
sglang_num_retracted_requests_total{model_name="m"} 4.0
"""


# ---------------------------------------------------------------------------------------------- target
class Target:
    """A stand-in SGLang /metrics on 127.0.0.1. `responses` is a list used round-robin; each is
    (status, body, mode) with mode None | "slow" (no response until released) | "dribble" | "nolength"."""

    def __init__(self):
        self.responses = [(200, "", None)]
        self.hits = 0
        self.release = threading.Event()
        target = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *a):
                pass

            def do_GET(self):
                status, body, mode = target.responses[target.hits % len(target.responses)]
                target.hits += 1
                data = body.encode() if isinstance(body, str) else body
                if mode == "slow":
                    target.release.wait(30)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    if mode not in ("dribble", "nolength"):
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if mode == "dribble":
                        for i in range(len(data)):
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                            if target.release.wait(0.2):
                                break
                    else:
                        self.wfile.write(data)
                except OSError:
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"

    def serve(self, *responses):
        self.responses = list(responses)

    def close(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def target():
    t = Target()
    yield t
    t.close()


def ok(body):
    return (200, body, None)


# ---------------------------------------------------------------------------------------------- versions
def test_v0_3_6_no_rank_labels_and_time_per_output_token(target):
    target.serve(ok(V0_3_6))
    res = scrape(target.url, 2.0, 1 << 20)
    assert res.success, res.error
    assert res.ranks == {(None, None, None): {"queue": 150.0, "running": 12.0, "usage": 0.42,
                                              "throughput": 812.5}}
    assert res.model == "llama"
    assert res.counters == {"generation_tokens": 5000.0}
    assert res.histograms["time_per_output_token_seconds"] == {0.05: 10.0, 0.1: 30.0, float("inf"): 40.0}


def test_v0_4_10_rank_labels_and_retracted_gauge(target):
    target.serve(ok(V0_4_10))
    res = scrape(target.url, 2.0, 1 << 20)
    assert res.success
    assert res.ranks[(None, 0, 0)] == {"queue": 7.0, "running": 64.0, "cuda_graph": True}
    assert res.ranks[(None, 1, 0)] == {"queue": 7.0}
    assert res.counters["retracted_requests"] == 17.0
    assert res.histograms["inter_token_latency_seconds"][float("inf")] == 6.0


def test_v0_5_7_retraction_counter_wins_and_pid_gauge_ignored(target):
    target.serve(ok(V0_5_7))
    res = scrape(target.url, 2.0, 1 << 20)
    assert res.success
    assert res.counters["retracted_requests"] == 23.0      # not the per-pid num_retracted_reqs gauge
    assert res.ranks[(None, 0, 0)]["usage"] == 0.5


def test_v0_5_17_is_streaming_series_summed(target):
    target.serve(ok(V0_5_17))
    res = scrape(target.url, 2.0, 1 << 20)
    assert res.counters["generation_tokens"] == 150.0
    assert res.histograms["time_to_first_token_seconds"] == {1.0: 4.0, float("inf"): 6.0}


def test_priority_series_do_not_double_count(target):
    target.serve(ok(PRIORITY))
    res = scrape(target.url, 2.0, 1 << 20)
    assert res.ranks[(None, 0, 0)]["queue"] == 30.0
    assert res.counters["prompt_tokens"] == 900.0


def test_underscore_spelling(target):
    target.serve(ok(UNDERSCORE))
    res = scrape(target.url, 2.0, 1 << 20)
    assert res.ranks[(1, 0, None)]["queue"] == 3.0
    assert res.counters["retracted_requests"] == 4.0


def test_foreign_metrics_ignored():
    res = parse_exposition("# TYPE node_load1 gauge\nnode_load1 3\n")
    assert res.success and res.families == 1 and not res.ranks and not res.counters


# ---------------------------------------------------------------------------------------------- failures
def test_connection_refused():
    port = free_port()
    t0 = time.monotonic()
    res = scrape(f"http://127.0.0.1:{port}/metrics", 1.0, 1 << 20)
    assert not res.success and res.error.startswith("refused")
    assert time.monotonic() - t0 < 1.0


def test_slow_headers_fail_within_bounded_time(target):
    target.serve((200, V0_3_6, "slow"))
    t0 = time.monotonic()
    res = scrape(target.url, 0.5, 1 << 20)
    elapsed = time.monotonic() - t0
    assert not res.success and res.error.startswith("timeout")
    assert elapsed < 1.5


def test_dribbling_body_fails_within_bounded_time(target):
    # one byte every 0.2 s: each read is within the socket timeout, the whole scrape is not
    target.serve((200, V0_3_6, "dribble"))
    t0 = time.monotonic()
    res = scrape(target.url, 0.6, 1 << 20)
    elapsed = time.monotonic() - t0
    assert not res.success and res.error.startswith("timeout")
    assert elapsed < 1.5


@pytest.mark.parametrize("body", ["hello world\n", "<html><body>Not Found</body></html>", '{"a": 1}',
                                  b"\x00\x01\x02\xff\xfe"])
def test_garbage(target, body):
    target.serve(ok(body))
    res = scrape(target.url, 2.0, 1 << 20)
    assert not res.success and res.error.startswith("not an exposition")


@pytest.mark.parametrize("mode", [None, "nolength"])
def test_huge_response_over_cap(target, mode):
    body = V0_3_6 * 200
    target.serve((200, body, mode))
    res = scrape(target.url, 2.0, 10_000)
    assert not res.success and res.error.startswith("too large") and "10000 bytes" in res.error
    target.serve((200, V0_3_6, mode))
    assert scrape(target.url, 2.0, 10_000).success


def test_http_500(target):
    target.serve((500, "internal error", None))
    res = scrape(target.url, 2.0, 1 << 20)
    assert not res.success and res.error == "http 500"


# ---------------------------------------------------------------------------------------------- sidecar
class Clock:
    def __init__(self, t=1_700_000_000.0):
        self.t = t

    def __call__(self):
        return self.t


def metric(view_families, name, labels=None):
    for fam in view_families:
        for s in fam.samples:
            if s.name == name and (labels is None or all(s.labels.get(k) == v for k, v in labels.items())):
                return s.value
    return None


def families(sidecar):
    from exporter.web.expose import families as fams
    return fams(sidecar.view())


STARVED = V0_4_10.replace("} 7.0", "} 0.0")


def test_metrics_only_sidecar_flapping_target(target):
    clock = Clock()
    sc = Sidecar(Config(profile="offline", sglang_url=target.base, scrape_timeout=1.0), clock=clock)
    target.serve(ok(STARVED), (500, "boom", None))
    results = []
    for _ in range(6):
        clock.t += 15
        sc.scrape_once()
        fams = families(sc)
        up = metric(fams, "sglang_exporter_source_up", {"source": SGLANG_SOURCE})
        success = metric(fams, "sglang_exporter_scrape_success", {"source": SGLANG_SOURCE})
        known = metric(fams, "sglang_exporter_signal_known", {"signal": "queue_below_range"})
        j = sc.view().snapshot.judgements["queue_below_range"]
        results.append((up, success, known, j.firing))
    # scrapes 1,3,5 succeed (starved queue), 2,4,6 get HTTP 500
    assert results[0] == (1.0, 1.0, 0.0, None)                 # 1 sample < min_samples
    for down in (results[1], results[3], results[5]):
        assert down == (0.0, 0.0, 0.0, None)                    # down: unknown, never healthy
    assert results[4] == (1.0, 1.0, 1.0, True)                 # 3 samples: fires
    # no firing series for an unknown signal
    clock.t += 15
    target.serve((500, "boom", None))
    sc.scrape_once()
    assert metric(families(sc), "sglang_exporter_signal_firing", {"signal": "queue_below_range"}) is None


def test_metrics_only_down_target_everything_unknown():
    sc = Sidecar(Config(profile="offline", sglang_url=f"http://127.0.0.1:{free_port()}", scrape_timeout=0.5),
                 clock=Clock())
    sc.scrape_once()
    view = sc.view()
    assert view.scrape["success"] is False and view.scrape["error"].startswith("refused")
    assert all(j.firing is None for j in view.snapshot.judgements.values())
    fams = families(sc)
    assert metric(fams, "sglang_exporter_source_up", {"source": SGLANG_SOURCE}) == 0.0


def test_metrics_only_retractions_from_counter(target):
    clock = Clock()
    sc = Sidecar(Config(profile="offline", sglang_url=target.base), clock=clock)
    body = V0_5_7
    for value in (23.0, 40.0, 60.0):
        target.serve(ok(body.replace("} 23.0", f"}} {value}")))
        sc.scrape_once()
        clock.t += 30
    view = sc.view()
    j = view.snapshot.judgements["retractions_frequent"]
    # the sidecar has watched for 90 s, less than the 10 min window: 37 retracted requests over what it saw
    assert j.value == pytest.approx(37 / 1.5) and j.firing is True
    assert "observed" in j.detail
    assert view.retracted_requests_total == 37
    # SGLang exports no max_running_requests: metrics-only, concurrency_capped cannot be judged
    assert view.max_running_requests is None
    assert view.snapshot.judgements["concurrency_capped"].firing is None


def test_metrics_fed_stall_needs_counters_frozen(target):
    clock = Clock()
    sc = Sidecar(Config(profile="offline", sglang_url=target.base), clock=clock)
    body = V0_3_6
    target.serve(ok(body))
    for _ in range(6):                 # generation_tokens frozen with 162 requests pending
        sc.scrape_once()
        clock.t += 15
    j = sc.view().snapshot.judgements["stalled"]
    assert j.firing is True and j.value > 60


def _log(tmp_path, lines):
    p = tmp_path / "sglang.log"
    p.write_text("".join(f"[2025-08-11 17:17:{i:02d}] {ln}\n" for i, ln in enumerate(lines)))
    return str(p)


DECODE = "Decode batch, #running-req: 5, #token: 100, token usage: 0.50, cuda graph: True, " \
         "gen throughput (token/s): 10.00, #queue-req: 0"


def test_logs_only_sidecar_has_no_scrape_series(tmp_path):
    sc = Sidecar(Config(profile="offline", log_files=(_log(tmp_path, [DECODE] * 3),), from_start=True), clock=Clock())
    sc.poll_logs_once()
    sc.poll_logs_once()
    fams = families(sc)
    assert metric(fams, "sglang_exporter_scrape_success") is None
    assert metric(fams, "sglang_exporter_source_up", {"source": SGLANG_SOURCE}) is None
    assert metric(fams, "sglang_exporter_source_up") == 1.0
    view = sc.view()
    assert view.snapshot.judgements["queue_below_range"].firing is True
    assert view.scrape is None


def test_both_sources_logs_feed_batches_metrics_feed_latency(tmp_path, target):
    clock = Clock()
    cfg = Config(log_files=(_log(tmp_path, [DECODE] * 3),), from_start=True, sglang_url=target.base,
                 profile="online")
    sc = Sidecar(cfg, clock=clock)
    sc.poll_logs_once()
    target.serve(ok(V0_4_10))
    sc.scrape_once()
    view = sc.view()
    # with logs configured, the batch samples come from the log (queue 0), not from /metrics (queue 7)
    assert view.ranks[(None, None, None)][0] == 0
    assert (None, 0, 0) not in view.ranks
    assert view.snapshot.judgements["latency_high"].firing is None      # one snapshot: no window yet
    clock.t += 15
    sc.scrape_once()
    assert sc.view().snapshot.judgements["latency_high"].firing is None  # no new requests in the window
    target.serve((500, "", None))
    clock.t += 15
    sc.scrape_once()
    view = sc.view()
    assert view.snapshot.judgements["latency_high"].firing is None
    # the log stays up: log-fed signals are still judged while /metrics is down
    assert view.snapshot.judgements["oom_decode"].firing is False


# ---------------------------------------------------------------------------------------------- value checks
def test_bad_samples_are_dropped_and_counted_by_reason():
    res = parse_exposition(V0_4_10.replace('tp_rank="1"} 7.0', 'tp_rank="1"} NaN')
                           .replace("} 64.0", "} -1")
                           .replace('pp_rank="0",tp_rank="0"} 1.0', 'pp_rank="0",tp_rank="0"} 2')
                           .replace('le="0.1",model_name="m"} 5.0', 'le="-Inf",model_name="m"} 5.0'))
    assert res.success and res.rejected == {"non_finite": 1, "out_of_range": 2, "bad_le": 1}
    assert res.ranks == {(None, 0, 0): {"queue": 7.0}}        # the good sample of the same rank stays
    assert res.histograms == {}                               # a bucket missing: the whole histogram goes
    assert res.counters == {"retracted_requests": 17.0}


@pytest.mark.parametrize("value", ["+Inf", "-Inf", "NaN", "1e400", "9" * 400, "-1", str(2.0 ** 60)])
def test_a_counter_with_a_bad_series_is_left_out_of_the_scrape(value):
    text = ('# TYPE sglang:generation_tokens_total counter\n'
            'sglang:generation_tokens_total{is_streaming="true"} 10\n'
            f'sglang:generation_tokens_total{{is_streaming="false"}} {value}\n')
    res = parse_exposition(text)
    assert res.success and "generation_tokens" not in res.counters and sum(res.rejected.values()) == 1


def test_counter_series_are_kept_apart_for_reset_detection():
    res = parse_exposition(V0_5_17)
    assert res.counter_series["generation_tokens"] == {
        (("is_streaming", "true"), ("model_name", "m")): 100.0,
        (("is_streaming", "false"), ("model_name", "m")): 50.0}


def test_a_rank_label_that_is_not_a_small_ascii_number_is_no_rank():
    res = parse_exposition('# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{tp_rank="²",dp_rank="1234567"} 3\n')
    assert res.ranks == {(None, None, None): {"queue": 3}}


# ---------------------------------------------------------------------------------------------- config
def test_scrape_stale_after_defaults_to_three_intervals_and_is_checked():
    from exporter.config import ConfigError, build
    assert build({}, environ={}).stale_after == 45.0
    assert build({"scrape_interval": 10}, environ={}).stale_after == 30.0
    assert build({}, environ={"SGLANG_EXPORTER_SCRAPE_STALE_AFTER": "120"}).stale_after == 120.0
    with pytest.raises(ConfigError, match="^SGLANG_EXPORTER_SCRAPE_STALE_AFTER: must be positive"):
        build({}, environ={"SGLANG_EXPORTER_SCRAPE_STALE_AFTER": "0"})
    with pytest.raises(ConfigError, match="^SGLANG_EXPORTER_SCRAPE_STALE_AFTER: scrape_stale_after .* at least "
                                          "scrape_interval"):
        build({}, environ={"SGLANG_EXPORTER_SCRAPE_STALE_AFTER": "10"})


def test_https_target_read_through_the_deadline_reader(tmp_path, monkeypatch):
    """TLS goes through the same deadline-bounded reading; a certificate we cannot verify is a protocol failure."""
    import shutil
    import ssl
    import subprocess
    openssl = shutil.which("openssl")
    if not openssl:
        pytest.skip("openssl not installed")
    crt, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(crt)],
                   check=True, capture_output=True, timeout=60)
    t = Target()
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(crt, key)
        t.server.socket = ctx.wrap_socket(t.server.socket, server_side=True)
        t.serve(ok(V0_3_6))
        url = t.url.replace("http://", "https://")
        res = scrape(url, 2.0, 1 << 20)
        assert not res.success and res.error.startswith("protocol: TLS: CERTIFICATE_VERIFY_FAILED")
        monkeypatch.setenv("SSL_CERT_FILE", str(crt))
        res = scrape(url, 2.0, 1 << 20)
        assert res.success, res.error
        assert res.ranks[(None, None, None)]["queue"] == 150.0
    finally:
        t.close()


@pytest.mark.parametrize("base, url", [
    ("http://h:30000", "http://h:30000/metrics"), ("http://h:30000/", "http://h:30000/metrics"),
    ("http://h:30000/metrics/", "http://h:30000/metrics"), ("http://h:30000/sglang", "http://h:30000/sglang/metrics"),
    ("https://h/x?a=1", "https://h/x/metrics?a=1"), ("https://h/x/metrics?a=1", "https://h/x/metrics?a=1"),
    ("http://[::1]:30000", "http://[::1]:30000/metrics")])
def test_metrics_url_is_the_servers_metrics_path_with_the_query_kept(base, url):
    assert metrics_url(base) == url
