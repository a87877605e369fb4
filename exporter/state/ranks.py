"""Latest batch-line values per rank, and how ranks are named, grouped into schedulers and read."""
from __future__ import annotations

from dataclasses import dataclass

from exporter.ingest.events import RANK_KEYS

MAX_RANKS = 64            # distinct rank label sets kept; more fold into "other" (bounded label sets)
OTHER_RANK = ("other", None, None)


@dataclass(slots=True)
class RankValues:
    queue: float | None = None
    running: float | None = None
    usage: float | None = None
    throughput: float | None = None
    cuda_graph: bool | None = None
    unread: dict | None = None      # row shape -> its latest batch line not yet read (see apply_row)

    def read(self) -> None:
        """Take in the batch lines apply_row left unread: the latest of each shape, in the order they came (a
        newer line of a shape sets everything an older one of that shape set), so the values end up as if
        every line had been read."""
        assert self.unread is not None    # callers read a rank only when it holds unread lines
        for shape, line in self.unread.items():
            self.take(*shape.values(line))
        self.unread = None

    def take(self, queue, running, usage, throughput, graph) -> None:
        """A batch line's numbers (None: the line does not print it, the last value stands)."""
        if queue is not None:
            self.queue = queue
        if running is not None:
            self.running = running
        if usage is not None:
            self.usage = usage
        if throughput is not None:
            self.throughput = throughput
        if graph is not None:
            self.cuda_graph = graph


class _Fields:
    """The `shape` of a batch Event in apply_row: its values come from the Event's fields, as a learned shape's
    come from its groups (events.Row)."""
    __slots__ = ("kind",)
    batch = True

    def __init__(self, kind: str):
        self.kind = kind

    def values(self, f: dict) -> tuple:
        usage = f.get("token_usage")
        if usage.__class__ is not float:
            usage = usage_of(f)     # an int, or a hybrid model's pools
        if self.kind == "decode_batch":
            return f.get("queue_req"), f.get("running_req"), usage, f.get("gen_throughput"), f.get("cuda_graph")
        return f.get("queue_req"), f.get("running_req"), usage, None, None


_FIELDS = {kind: _Fields(kind) for kind in ("decode_batch", "prefill_batch")}
_FIELDS_BY_PRINTED: dict[tuple, _Fields] = {}


def fields_shape(kind: str, f: dict) -> _Fields:
    """The `shape` of a batch Event in apply_row: one per kind and set of the five numbers the line prints. A
    rank keeps the latest unread line of each shape; with one shape per kind, a line lacking a number (say
    "cuda graph") would hide an earlier unread line that printed it, as learned shapes (one per key set) never
    do."""
    printed = tuple(v is not None for v in _FIELDS[kind].values(f))
    shape = _FIELDS_BY_PRINTED.get((kind, printed))
    if shape is None:
        shape = _FIELDS_BY_PRINTED[(kind, printed)] = _Fields(kind)    # at most 2 x 32
    return shape


def per_scheduler(ranks: dict) -> dict:
    """One RankValues per DP rank (the lowest TP/PP rank's). TP ranks of one DP rank share one scheduler
    queue, and some versions print the same numbers on every TP rank: summing those would multiply them."""
    out: dict = {}
    for key in sorted(ranks, key=lambda k: tuple(-1 if v is None else v if isinstance(v, int) else 1 << 30
                                                 for v in k)):
        out.setdefault(key[0], ranks[key])
    return out


def rank_label(rank: dict) -> str:
    """A rank as SGLang's prefix spells it ("DP1 TP4 EP4"; "" for a line without a rank tag)."""
    return " ".join(f"{k.upper()}{rank[k]}" for k in RANK_KEYS if rank.get(k) is not None)


def parse_rank_label(label: str) -> dict:
    """rank_label's inverse: {"dp": 1, "tp": 4}."""
    out = {}
    for part in label.split():
        for k in sorted(RANK_KEYS, key=len, reverse=True):
            tag = k.upper()
            if part.startswith(tag) and part[len(tag):].isdigit():
                out[k] = int(part[len(tag):])
                break
    return out


def usage_of(fields: dict):
    """KV pool usage of a batch line: `token usage`, or the fullest pool of a hybrid model."""
    u = fields.get("token_usage")
    if isinstance(u, (int, float)):
        return u
    best = None
    for key in ("full_token_usage", "swa_token_usage", "mamba_usage", "gpu_token_usage"):
        v = fields.get(key)
        if isinstance(v, (int, float)) and (best is None or v > best):
            best = v
    return best
