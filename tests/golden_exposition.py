"""The golden exposition (tests/golden/exposition.txt): a Sidecar over a fixed small log, at a fixed time, its
/metrics text normalised (log path, versions, durations). tests/test_expose.py compares against the file;
after an intended change regenerate it with

    .venv/bin/python tests/golden_exposition.py

and review the diff. No test writes it."""
from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from exporter.config import Config
from exporter.sidecar.run import Sidecar
from exporter.web.expose import SidecarCollector

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
    sc = Sidecar(Config(profile="offline", log_files=(str(log),), from_start=True), clock=clock)
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


def golden_text() -> str:
    """The normalised exposition the golden file must hold."""
    with tempfile.TemporaryDirectory() as tmp:
        return normalise(*render(Path(tmp)))


def main() -> int:
    GOLDEN.write_text(golden_text())
    print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
