"""Golden exposition of a Sidecar over a fixed small log, family names against catalog.METRICS, and
`promtool check metrics` on the output. Regenerate the golden file with UPDATE_GOLDEN=1."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers import require_tool
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.catalog import METRICS, METRICS_BY_NAME
from exporter.config import Config
from exporter.expose import SidecarCollector
from exporter.sidecar import Sidecar

GOLDEN = Path(__file__).parent / "golden" / "exposition.txt"
T = 1_754_932_623.0       # 2025-08-11 17:17:03 UTC

LOG = """\
this line is not sglang at all
[2025-08-11 17:17:00] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', served_model_name='llama-8b', tp_size=2, schedule_conservativeness=1.0, max_running_requests=None, cuda_graph_max_bs=8, mem_fraction_static=0.88, chunked_prefill_size=8192)
[2025-08-11 17:17:01 TP0] max_total_num_tokens=130000, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4097, context_len=131072, available_gpu_mem=13.50 GB
[2025-08-11 17:17:02] The server is fired up and ready to roll!
[2025-08-11 17:17:03 TP0] Prefill batch, #new-seq: 3, #new-token: 4012, #cached-token: 1280, token usage: 0.21, #running-req: 5, #queue-req: 0, #pending-token: 0, cuda graph: False, input throughput (token/s): 15342.77
[2025-08-11 17:17:03 TP0] Decode batch, #running-req: 5, #token: 26740, token usage: 0.21, cuda graph: False, gen throughput (token/s): 1834.27, #queue-req: 0
[2025-08-11 17:17:03 TP1] Decode batch, #running-req: 5, #token: 26740, token usage: 0.21, cuda graph: False, gen throughput (token/s): 1834.27, #queue-req: 0
[2025-08-11 17:17:04 TP0] Decode batch, #running-req: 5, #token: 26740, token usage: 0.22, cuda graph: False, gen throughput (token/s): 1900.00, #queue-req: 0
[2025-08-11 17:17:05 TP0] Decode batch, #running-req: 5, #token: 26740, token usage: 0.23, cuda graph: False, gen throughput (token/s): 1950.50, #queue-req: 0
[2025-08-11 17:17:06 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 2048, #new_token_ratio: 0.9998 -> 1.0000
[2025-08-11 17:17:06 TP1] KV cache pool is full. Retract requests. #retracted_reqs: 2, #new_tokens_gained: 2048, #new_token_ratio: 0.9998 -> 1.0000
[2025-08-11 17:17:07 TP0] Decode out of memory. Try to lower your batch size.
Try to allocate 5 tokens.
Available tokens: 3 (available_size=3 + evictable_size=0)
[2025-08-11 17:17:08 TP0] Some message nobody knows about
"""


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def render(tmp_path) -> tuple[str, str]:
    log = tmp_path / "sglang.log"
    log.write_text(LOG)
    clock = Clock(T)
    sc = Sidecar(Config(log_files=(str(log),), from_start=True), clock=clock)
    sc.poll_logs_once()
    clock.t += 1
    sc.poll_logs_once()          # idle pass flushes the pending multi-line record
    clock.t += 9
    reg = CollectorRegistry(auto_describe=False)
    reg.register(SidecarCollector(sc))
    text = generate_latest(reg).decode()
    sc.shutdown()
    return text, str(log)


def normalise(text: str, log_path: str) -> str:
    text = text.replace(log_path, "LOG")
    text = re.sub(r'(sglang_exporter_build_info\{python=")[^"]*(",version=")[^"]*"', r'\1X\2X"', text)
    text = re.sub(r"^(sglang_exporter_scrape_duration_seconds\{[^}]*\}) .*$", r"\1 X", text, flags=re.M)
    return text


@pytest.fixture
def exposition(tmp_path):
    return render(tmp_path)


def test_golden_exposition(exposition):
    text = normalise(*exposition)
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert GOLDEN.exists(), "run with UPDATE_GOLDEN=1 to create tests/golden/exposition.txt"
    assert text == GOLDEN.read_text(), "exposition changed; if intended, regenerate with UPDATE_GOLDEN=1"


def test_golden_content_is_meaningful(exposition):
    """Independent of the golden file: the values the log implies."""
    text = exposition[0]
    fams = {f.name: f for f in text_string_to_metric_families(text)}

    def value(name, **labels):
        for fam in fams.values():
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return s.value
        return None
    assert value("sglang_exporter_retractions_total") == 1          # TP0 only
    assert value("sglang_exporter_retracted_requests_total") == 2
    assert value("sglang_exporter_oom_events_total", phase="decode") == 1
    assert value("sglang_exporter_gpu_headroom_bytes") == 13.5 * 2**30
    assert value("sglang_exporter_max_running_requests") == 4097
    assert value("sglang_exporter_signal_firing", signal="gpu_headroom_high") == 1
    assert value("sglang_exporter_signal_firing", signal="cuda_graph_off_small_batch") == 1
    assert value("sglang_exporter_signal_firing", signal="oom_decode", severity="critical") == 1
    assert value("sglang_exporter_signal_firing", signal="queue_below_range") == 1
    assert value("sglang_exporter_signal_known", signal="concurrency_capped") == 1
    assert value("sglang_exporter_queue_requests", tp="1") == 0
    assert value("sglang_exporter_log_lines_unparsed_total", reason="no_sglang_prefix") == 1
    assert value("sglang_exporter_log_lines_unparsed_total", reason="unknown_message") == 1
    # small batches under --cuda-graph-max-bs 8 ran without CUDA graph: raising it cannot help
    assert value("sglang_exporter_advice_info", flag="--cuda-graph-max-bs", action="keep",
                 current="8", suggested="") == 1
    assert value("sglang_exporter_sglang_info", model="llama-8b") == 1
    assert value("sglang_exporter_last_batch_age_seconds") == 10


def test_families_match_catalog(exposition):
    text = exposition[0]
    declared = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, flags=re.M))
    exposed = {}
    for fam, typ in declared.items():
        # prometheus_client declares counters by their exposed name (with _total)
        exposed[fam if fam.endswith("_total") or typ != "counter" else fam + "_total"] = typ
    assert set(exposed) == {m.name for m in METRICS}
    for name, typ in exposed.items():
        spec = METRICS_BY_NAME[name]
        assert typ == ("counter" if spec.type == "counter" else "gauge"), name
    # every sample's labels are exactly the catalog's labels
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            spec = METRICS_BY_NAME[s.name]
            assert set(s.labels) == set(spec.labels), s


def test_exposition_follows_naming_rules(exposition):
    text = exposition[0]
    for name in re.findall(r"^# TYPE (\S+) ", text, flags=re.M):
        assert ":" not in name and name.startswith("sglang_exporter_") and name == name.lower()
    for m in METRICS:
        assert m.name.endswith("_total") == (m.type == "counter"), m.name


def test_promtool_check_metrics(exposition):
    promtool = require_tool("promtool")
    proc = subprocess.run([promtool, "check", "metrics"], input=exposition[0], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and not proc.stdout.strip() and not proc.stderr.strip(), \
        proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------- docs/metrics.md
METRICS_DOC = Path(__file__).parent.parent / "docs" / "metrics.md"


def metrics_doc() -> str:
    from exporter.catalog import SIGNALS
    out = ["# Metrics", "",
           "<!-- Generated from exporter/catalog.py (METRICS, SIGNALS) by tests/test_expose.py; regenerate with",
           "     UPDATE_GOLDEN=1 pytest tests/test_expose.py. Do not edit by hand. -->", "",
           "Everything `sglang-exporter serve` exposes on `/metrics` (besides the standard `process_*` "
           "collector). Names follow Prometheus' exporter rules: `snake_case`, base units, `_total` only on "
           "counters, no colons. A family may be empty (for example `sglang_exporter_signal_firing` has no "
           "series for a signal that cannot be judged; `sglang_exporter_scrape_success` has none when no "
           "`--sglang-url` is configured).", "",
           "| metric | type | labels | help |", "|---|---|---|---|"]
    for m in METRICS:
        labels = ", ".join(f"`{label}`" for label in m.labels) or "—"
        out.append(f"| `{m.name}` | {m.type} | {labels} | {m.help.replace('|', '/')} |")
    out += ["", "Rank labels `dp`, `tp`, `pp` are the rank tags of the SGLang log line (empty when the line has "
            "none); at most 64 label sets are kept, later ones share `dp=\"other\"`.", "",
            "## Signals", "",
            "Values of the `signal` label, with the unit of `sglang_exporter_signal_value`:", "",
            "| signal | severity | unit | window | rule |", "|---|---|---|---|---|"]
    for s in SIGNALS:
        window = f"{s.window_seconds:g} s" if s.window_seconds else "epoch"
        out.append(f"| `{s.id}` | {s.severity} | {s.value_unit} | {window} | {s.formula.replace('|', '/')} |")
    return "\n".join(out) + "\n"


def test_metrics_doc_is_generated_from_catalog():
    text = metrics_doc()
    if os.environ.get("UPDATE_GOLDEN"):
        METRICS_DOC.write_text(text)
    assert METRICS_DOC.read_text() == text, "docs/metrics.md is stale: UPDATE_GOLDEN=1 pytest tests/test_expose.py"
    for m in METRICS:
        assert f"`{m.name}`" in text
