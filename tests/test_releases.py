"""The release data (exporter/releases/), the script that extracts it and docs/compatibility.md.

The pinned fixtures (tests/fixtures/releases/<version>.json) are what `scripts/sglang-releases snapshot` extracted
from three wheels (facts only, no SGLang source): the committed data must say exactly the same about those
releases, and merging them must give back each one. The extractor itself is checked on small sources written
here in the styles SGLang used (dataclass + add_argument, `A[T, help]` annotations, prefixed metric names,
messages built with `+=`).
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from exporter import releases as rel
from exporter.releases import compatibility

ROOT = Path(__file__).resolve().parent.parent
PINNED = sorted((ROOT / "tests" / "fixtures" / "releases").glob("*.json"))


def _script():
    name = "sglang_releases_script"
    if name not in sys.modules:
        loader = importlib.machinery.SourceFileLoader(name, str(ROOT / "scripts" / "sglang-releases"))
        spec = importlib.util.spec_from_loader(name, loader)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        loader.exec_module(mod)
    return sys.modules[name]


def _facts(path: Path) -> dict:
    return json.loads(path.read_text())


# ------------------------------------------------------------------------------------------------------------
# committed data vs the pinned extraction

def test_pinned_set_covers_old_middle_and_newest():
    versions = [p.stem for p in PINNED]
    assert versions[0] == "0.3.0" and rel.newest() in versions and len(versions) >= 3


@pytest.mark.parametrize("path", PINNED, ids=lambda p: p.stem)
def test_committed_data_says_what_the_pinned_extraction_says(path):
    facts = _facts(path)
    v = facts["version"]
    data_releases = json.loads((rel.DATA_DIR / "releases.json").read_text())
    assert data_releases[v] == {"wheel": facts["wheel"], "sha256": facts["sha256"]}

    args = rel.server_args(v)
    assert set(args) == set(facts["server_args"])
    for name, e in facts["server_args"].items():
        got = args[name]
        assert (got.flag, got.default, list(got.aliases)) == (e["flag"], e["default"], e.get("aliases", [])), name

    fams = rel.metric_families(v)
    assert {f.short: (f.type, list(f.labels)) for f in fams.values()} == \
        {rel.short_metric(n): (e["type"], e["labels"]) for n, e in facts["metrics"].items()}

    assert rel.log_kinds(v) == set(facts["log_templates"])
    for kind, variants in facts["log_templates"].items():
        assert sorted(rel.log_templates(kind, v), key=json.dumps) == sorted(variants, key=json.dumps), kind


def test_merging_the_pinned_releases_gives_each_back():
    s = _script()
    facts = [_facts(p) for p in PINNED]
    merged = s.merge(facts)
    for f in facts:
        for name, e in f["server_args"].items():
            entry = merged["server_args.json"][name]
            assert s.vkey(entry["first"]) <= s.vkey(f["version"])
            at = [val for r, val in entry["default"] if s.vkey(r) <= s.vkey(f["version"])][-1]
            assert at == e["default"], name
    # one entry per line, sorted: a release that adds a few names changes a few lines
    text = s.dump(merged["server_args.json"])
    lines = text.splitlines()[1:-1]
    assert [json.loads("{" + ln.rstrip(",") + "}") for ln in lines[:2]]
    assert lines == sorted(lines)


def test_extract_is_deterministic_from_the_facts():
    s = _script()
    facts = [_facts(p) for p in PINNED]
    assert s.dump(s.merge(facts)["metrics.json"]) == s.dump(s.merge(list(reversed(facts)))["metrics.json"])


# ------------------------------------------------------------------------------------------------------------
# the extractor on sources in SGLang's styles (written for this test)

DATACLASS_STYLE = '''
import dataclasses
@dataclasses.dataclass
class ServerArgs:
    tp_size: int = 1
    mem_fraction_static: Optional[float] = None
    schedule_policy: str = "fcfs"
    lora_paths: List[str] = dataclasses.field(default_factory=list)

    @staticmethod
    def add_cli_args(parser):
        parser.add_argument("--tensor-parallel-size", "--tp-size", type=int, default=ServerArgs.tp_size,
                            help="The tensor parallelism size.")
        parser.add_argument("--mem-fraction-static", type=float, default=ServerArgs.mem_fraction_static,
                            help="The fraction of the memory used for static allocation. More text here.")
        parser.add_argument("--schedule-policy", type=str, default=ServerArgs.schedule_policy,
                            help="The scheduling policy " "of the requests.")
'''

ANNOTATED_STYLE = '''
class Exec(msgspec.Struct):
    cuda_graph_max_bs_decode: A[Optional[int], "Maximum decode batch size captured."] = None
    disable_cuda_graph: A[bool, Arg(no_cli=True)] = False
    tp_size: A[int, Arg(help="Tensor parallel size.", aliases=["--tensor-parallel-size"])] = 1
    _private: int = 0
'''

ANNOTATED_MAIN = '''
class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        add_cli_args_from_dataclass(parser, ServerArgs)
        parser.add_argument("--cuda-graph-max-bs", action=DeprecatedAction, dest="cuda_graph_max_bs_decode",
                            help="Deprecated.")
        parser.add_argument("--disable-cuda-graph", action=DeprecatedStoreTrueAction,
                            help="Deprecated. Use the backend flag.")
'''


def test_server_args_from_a_dataclass_and_add_argument():
    got = _script().extract_server_args({"sglang/srt/server_args.py": DATACLASS_STYLE})
    assert got["tp_size"] == {"flag": "--tensor-parallel-size", "aliases": ["--tp-size"], "default": "1",
                              "help": "The tensor parallelism size."}
    assert got["mem_fraction_static"]["help"] == "The fraction of the memory used for static allocation."
    assert got["schedule_policy"] == {"flag": "--schedule-policy", "default": "'fcfs'",
                                      "help": "The scheduling policy of the requests."}
    assert got["lora_paths"]["default"] == "list()" and got["lora_paths"]["flag"] is None


def test_server_args_from_annotations_keep_derived_flags_and_hand_registered_ones():
    got = _script().extract_server_args({"sglang/srt/arg_groups/fields/exec_.py": ANNOTATED_STYLE,
                                         "sglang/srt/server_args.py": ANNOTATED_MAIN})
    assert got["cuda_graph_max_bs_decode"]["flag"] == "--cuda-graph-max-bs-decode"
    assert got["cuda_graph_max_bs_decode"]["aliases"] == ["--cuda-graph-max-bs"]
    assert got["disable_cuda_graph"]["flag"] == "--disable-cuda-graph"     # no_cli, but registered by hand
    assert got["tp_size"] == {"flag": "--tp-size", "aliases": ["--tensor-parallel-size"], "default": "1",
                              "help": "Tensor parallel size."}
    assert "_private" not in got


COLLECTOR = '''
PREFIX = "sglang:"
class SchedulerMetricsCollector:
    def __init__(self, labels):
        from prometheus_client import Counter, Gauge
        self.num_queue_reqs = Gauge(name=PREFIX + "num_queue_reqs", documentation="The number of requests in "
                                    "the waiting queue.", labelnames=labels.keys(), multiprocess_mode="mostrecent")
        self.retracted = Counter(name=f"{PREFIX}num_retracted_requests", documentation="Retracted.",
                                 labelnames=["model_name", "tp_rank"])
        self.other = Gauge(name="vllm:unrelated", documentation="not ours")
'''


def test_metrics_resolve_prefix_variables_and_read_labels():
    got = _script().extract_metrics({"sglang/srt/metrics/collector.py": COLLECTOR})
    assert set(got) == {"sglang:num_queue_reqs", "sglang:num_retracted_requests"}
    assert got["sglang:num_queue_reqs"]["type"] == "gauge"
    assert got["sglang:num_queue_reqs"]["help"] == "The number of requests in the waiting queue."
    assert got["sglang:num_queue_reqs"]["labels"] == ["<labels.keys()>"]
    assert got["sglang:num_retracted_requests"] == {"type": "counter", "labels": ["model_name", "tp_rank"],
                                                     "help": "Retracted.", "file": "srt/metrics/collector.py"}


SCHEDULER = '''
class Scheduler:
    def log_decode_stats(self):
        num_used = 5
        msg = f"Decode batch. #running-req: {len(self.running_batch.reqs)}, #token: {num_used}, "
        if self.spec:
            msg += f"accept len: {self.accept:.2f}, "
        msg += (f"{'cuda graph' if self.device == 'cuda' else 'cpu graph'}: {self.graph}, "
                f"#queue-req: {len(self.waiting_queue)}")
        logger.info(msg)

    def retract(self):
        prefix = "KV cache pool is full. Retract requests. " if self.full else "Testing retraction. "
        logger.warning(prefix + f"#retracted_reqs: {n}, #new_token_ratio: {a:.4f} -> {b:.4f}")

    def ready(self):
        logger.info("The server is fired up and ready to roll!")
'''


def test_log_templates_follow_incremental_messages_in_source_order():
    got = _script().extract_log_templates({"sglang/srt/managers/scheduler.py": SCHEDULER})
    (decode,) = got["decode_batch"]
    assert decode["function"] == "log_decode_stats"
    assert decode["fragments"] == ["Decode batch. #running-req: {reqs}, #token: {num_used}, ",
                                   "accept len: {accept:.2f}, ", "cuda graph: {graph}, #queue-req: {waiting_queue}"]
    assert decode["fields"] == ["#running-req", "#token", "accept len", "cuda graph", "#queue-req"]
    (retract,) = got["retract"]
    assert retract["fragments"][0].startswith("KV cache pool is full. Retract requests. ")
    assert got["ready"][0]["fragments"] == ["The server is fired up and ready to roll!"]


def test_latest_patches_pick_the_newest_post_release_of_each_version():
    s = _script()
    assert s.latest_patches(["0.2.15", "0.3.0", "0.4.6", "0.4.6.post5", "0.4.6.post10", "0.5.0rc2", "0.5.1"]) == \
        ["0.3.0", "0.4.6.post10", "0.5.1"]


def test_the_newest_check_reports_what_a_release_adds_and_what_we_do_not_read():
    s = _script()
    newest = _facts(ROOT / "tests" / "fixtures" / "releases" / "0.5.23.json")
    found = s.compare(newest, "0.4.10.post2")
    assert "cuda_graph_max_bs_decode" in found["new ServerArgs fields"]
    assert "cuda_graph_max_bs" in found["removed ServerArgs fields"]
    assert "num_retracted_requests_total" in found["new metric families"]
    assert {"#pending-token", "#bootstrap-req"} <= set(found["new batch-line fields"])
    assert found["advised flags missing from the newest release"] == ["--cuda-graph-max-bs"]
    assert "tp_size" in found["fields whose flag changed"]          # --tensor-parallel-size -> --tp-size
    same = s.compare(newest, "0.5.23")
    assert not any(same[k] for k in ("new ServerArgs fields", "removed ServerArgs fields", "new metric families",
                                     "new batch-line fields", "fields whose flag changed"))


# ------------------------------------------------------------------------------------------------------------
# the loader API

def test_every_minor_release_from_0_3_to_newest_is_extracted():
    versions = rel.releases()
    minors = {rel.version_key(v)[:2] for v in versions}
    assert {(0, 3), (0, 4), (0, 5)} <= minors
    assert versions == sorted(versions, key=rel.version_key) and len(versions) >= 40
    assert all(len(e["sha256"]) == 64 for e in json.loads((rel.DATA_DIR / "releases.json").read_text()).values())


def test_resolve_maps_any_version_to_an_extracted_release():
    assert rel.resolve("0.4.6") == "0.4.6.post5"
    assert rel.resolve("0.4.6.post5") == "0.4.6.post5"
    assert rel.resolve("9.0.0") == rel.newest()
    assert rel.resolve("0.2.1") == "0.3.0"
    assert rel.resolve(None) == rel.newest()
    with pytest.raises(ValueError, match="not an SGLang release version"):
        rel.resolve("latest")


def test_flags_follow_their_renames():
    assert rel.server_args_flag("cuda_graph_max_bs", "0.5.13") == "--cuda-graph-max-bs"
    assert rel.server_args_flag("cuda_graph_max_bs", "0.5.20") is None
    assert rel.server_args_flag("cuda_graph_max_bs_decode", "0.5.20") == "--cuda-graph-max-bs-decode"
    assert rel.server_arg_for_flag("--cuda-graph-max-bs", "0.5.14") == "cuda_graph_max_bs_decode"
    assert rel.server_arg_for_flag("--tp-size", "0.3.0") == "tp_size"
    assert rel.server_arg_default("decode_log_interval", "0.5.23") == "40"
    assert rel.first_release("--cuda-graph-max-bs-decode") == "0.5.14"   # derived from the field's name
    found = {(r.kind, r.old, r.new) for r in rel.renames()}
    assert ("server_arg", "cuda_graph_max_bs", "cuda_graph_max_bs_decode") in found
    assert ("flag", "--cuda-graph-max-bs", "--cuda-graph-max-bs-decode") in found


def test_metric_families_and_both_spellings():
    assert rel.first_release("sglang:num_retracted_requests_total") == "0.5.7"
    assert rel.first_release("sglang_num_retracted_requests_total") == "0.5.7"
    assert rel.last_release("sglang:total_retracted_reqs") == "0.5.2"
    assert ("metric", "total_retracted_reqs", "num_retracted_requests_total") in \
        {(r.kind, r.old, r.new) for r in rel.renames()}
    assert rel.metric_families("0.3.0") == {}
    fam = rel.metric_families("0.5.23")["sglang:num_queue_reqs"]
    assert fam.type == "gauge" and fam.short == "num_queue_reqs"
    assert rel.metric_spellings("sglang_token_usage") == ("sglang:token_usage", "sglang_token_usage")


def test_log_fields_by_release():
    assert "#pending-token" in rel.log_fields("prefill_batch", "0.5.11")
    assert "#pending-token" not in rel.log_fields("prefill_batch", "0.5.10")
    assert "cache hit rate" in rel.log_fields("prefill_batch", "0.3.0")
    assert "token usage" in rel.log_fields("decode_batch", "0.5.23")     # built by the pool helper
    assert rel.first_release("#bootstrap-req") == "0.5.12.post1"
    assert {"prefill_batch", "decode_batch", "retract", "capacity", "ready"} <= rel.log_kinds("0.5.23")


def test_unreadable_data_names_the_file(tmp_path, monkeypatch):
    (tmp_path / "releases.json").write_text("{not json")
    monkeypatch.setattr(rel, "DATA_DIR", tmp_path)
    rel._load.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="releases.json"):
            rel.releases()
    finally:
        monkeypatch.undo()
        rel._load.cache_clear()


# ------------------------------------------------------------------------------------------------------------
# docs/compatibility.md

def test_compatibility_doc_is_fresh_and_names_every_release():
    text = compatibility.render()
    assert (Path(__file__).parents[1] / compatibility.PATH).read_text() == text
    for v in rel.releases():
        assert f"| {v} |" in text


def test_generate_check_fails_when_the_compatibility_doc_is_stale(tmp_path, capsys):
    from exporter import cli
    assert cli.main(["generate", "--out", str(tmp_path)]) == 0
    stale = tmp_path / compatibility.PATH
    stale.write_text(compatibility.render().replace("| 0.5.23 |", "| 0.5.22 |"))
    assert cli.main(["generate", "--check", "--out", str(tmp_path)]) != 0
    assert f"stale: {compatibility.PATH}" in capsys.readouterr().err


def test_compatibility_marks_new_and_renamed():
    text = compatibility.render()
    flags = text.split("## Flags advised")[1].split("##")[0]
    row = next(ln for ln in flags.splitlines() if ln.startswith("| 0.5.20 |"))
    header = next(ln for ln in flags.splitlines() if ln.startswith("| release |"))
    col = [c.strip() for c in header.split("|")].index("`--cuda-graph-max-bs`")
    assert [c.strip() for c in row.split("|")][col] == "renamed"
    kinds = text.split("## Log lines read")[1].split("##")[0]
    assert "new" in kinds and "✓" in kinds


def test_data_files_hold_no_source_code():
    # facts only: no function bodies, imports or class definitions travel with the data
    for path in rel.DATA_DIR.glob("*.json"):
        text = path.read_text()
        assert "def " not in text and "import " not in text and "class " not in text, path.name
