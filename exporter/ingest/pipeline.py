"""Wires the ingest stages for one source: physical lines -> container records -> SGLang Events."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from exporter.ingest.containers import ContainerDecoder
from exporter.ingest.events import Event, as_event
from exporter.ingest.grammar import SGLANG_LAYOUT, Parser
from exporter.ingest.lines import Block, read_blocks  # (not via follower.py: `analyze` and `parse` follow no file)


class SourceParser:
    """Decoder + parser state of one source (a file being read or followed)."""

    def __init__(self, source: str, container_format: str = "auto", fold_request_logs: bool = False):
        """`fold_request_logs`: for a reader that counts request logs and takes the count of those at the time
        of the Row before them from `take_folded()` (Parser.fold_request_logs)."""
        self.decoder = ContainerDecoder(container_format)
        self.parser = Parser(source)
        self.parser.fold_request_logs = fold_request_logs
        self.lines = 0
        self.bytes = 0      # approximate (decoded text + newline): for progress meters
        self.cut = 0

    def feed_block_items(self, block: Block) -> list:
        """Lines in bulk -> Events and rows (events.py): a plain-text source goes straight to the parser,
        with no object per line, and the lines of its learned layouts stay rows."""
        texts = block.texts
        self.lines += len(texts)
        self.cut += block.cuts
        self.bytes += sum(map(len, texts)) + len(texts)
        whole = self.decoder.whole_records(texts)
        if whole is not None:
            messages, times = whole
            return self.parser.feed_items(messages, block.first, times)
        out: list[Event] = []
        i, n = 0, len(texts)
        records = []
        while i < n and self.decoder.format != "plain":    # until detected, and for every line of CRI/docker
            rec = self.decoder.feed(block.first + i, texts[i])
            if rec is not None:
                records.append(rec)
            i += 1
        if records:
            out += self._feed_records(records)
        if i < n:
            out += self.parser.feed_items(texts[i:] if i else texts, block.first + i)
        return out

    def _feed_records(self, records: list) -> list:
        """Container records to the parser's block path, each run of records on consecutive lines at once (a
        record joined from partial lines leaves a gap: its later pieces made none)."""
        out: list = []
        start = 0
        for k in range(1, len(records) + 1):
            if k == len(records) or records[k].lineno != records[k - 1].lineno + 1:
                run = records[start:k]
                out += self.parser.feed_items([r.text for r in run], run[0].lineno, [r.time for r in run])
                start = k
        return out

    def take_folded(self) -> int:
        """The request logs folded since the last call (see __init__)."""
        n, self.parser.folded_request_logs = self.parser.folded_request_logs, 0
        return n

    def flush(self) -> list[Event]:
        out = []
        while (rec := self.decoder.flush()) is not None:     # one unfinished record per stream
            out += self.parser.feed(rec.text, rec.lineno, rec.time)
        return out + self.parser.flush()


class Sources:
    """One SourceParser per source path, created on first sight (follow mode adds files over time)."""

    def __init__(self):
        self.by_source: dict[str, SourceParser] = {}

    def feed_blocks(self, blocks: Iterable[Block]) -> list:
        """Blocks of any sources -> Events and rows, in order."""
        out: list = []
        for block in blocks:
            out += self._source(block.source).feed_block_items(block)
        return out

    def _source(self, source: str) -> SourceParser:
        sp = self.by_source.get(source)
        if sp is None:
            sp = self.by_source[source] = SourceParser(source)
        return sp

    def flush(self) -> list[Event]:
        out: list[Event] = []
        for sp in self.by_source.values():
            out += sp.flush()
        return out

    def unparsed(self) -> Counter:
        """The unparsed lines of every source by reason. Read from copies (made in C, under the GIL): the live
        sidecar asks from another thread than the one that feeds lines, adds sources and new reasons."""
        total: Counter = Counter()
        for sp in dict(self.by_source).values():
            total.update(dict(sp.parser.unparsed))
        return total


def layouts_read(stats: Iterable[SourceParser]) -> dict:
    """How a log was read (`parse --stats`, analyze's "layouts"): records behind each prefix layout (the ones
    learned by message, and SGLang's own for the others), the share of its non-blank lines read as records,
    the lines skipped by what they look like, and the records without any time."""
    stats = list(stats)
    custom: Counter = Counter()
    skipped: Counter = Counter()
    unparsed: Counter = Counter()
    for sp in stats:
        custom.update(sp.parser.layouts)
        skipped.update(sp.parser.skipped)
        unparsed.update(sp.parser.unparsed)
    own = sum(sp.parser.recognised for sp in stats) - sum(custom.values())
    layouts = {SGLANG_LAYOUT: own} if own > 0 else {}
    layouts.update(custom.most_common())
    lines = sum(sp.lines for sp in stats) - unparsed["empty"]
    not_read = sum(unparsed.values()) - unparsed["empty"]
    return {"layouts": layouts, "share_read": round((lines - not_read) / lines, 4) if lines > 0 else None,
            "skipped": dict(skipped.most_common()), "untimed": sum(sp.parser.untimed for sp in stats)}


def iter_file_events(path: str, max_line_bytes: int = 1 << 20, stats: SourceParser | None = None
                     ) -> Iterator[Event]:
    """Every Event of a whole file ("-" = stdin), in file order. Pass `stats` to read counts afterwards."""
    return map(as_event, iter_file_items(path, max_line_bytes, stats))


def iter_file_items(path: str, max_line_bytes: int = 1 << 20, stats: SourceParser | None = None) -> Iterator:
    """`iter_file_events` with the lines of learned layouts left as rows (events.py), for the bulk readers."""
    for items in iter_file_item_lists(path, max_line_bytes, stats):
        yield from items


def iter_file_item_lists(path: str, max_line_bytes: int = 1 << 20, stats: SourceParser | None = None
                         ) -> Iterator[list]:
    """`iter_file_items` a block at a time (one list per block read, the last one from the final flush)."""
    sp = stats or SourceParser(path)
    feed = sp.feed_block_items
    for block in read_blocks(path, max_line_bytes):
        yield feed(block)
    yield sp.flush()
