"""Wires the ingest stages for one source: physical lines -> container records -> SGLang Events."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from exporter.ingest.containers import ContainerDecoder
from exporter.ingest.events import Event
from exporter.ingest.follower import Line, read_lines
from exporter.ingest.grammar import Parser


class SourceParser:
    """Decoder + parser state of one source (a file being read or followed)."""

    def __init__(self, source: str, container_format: str = "auto"):
        self.decoder = ContainerDecoder(container_format)
        self.parser = Parser(source)
        self.lines = 0
        self.bytes = 0      # approximate (decoded text + newline): for progress meters
        self.cut = 0

    def feed(self, line: Line) -> list[Event]:
        self.lines += 1
        self.bytes += len(line.text) + 1
        self.cut += line.cut
        rec = self.decoder.feed(line.lineno, line.text)
        if rec is None:
            return []
        return self.parser.feed(rec.text, rec.lineno, rec.time)

    def flush(self) -> list[Event]:
        out = []
        while (rec := self.decoder.flush()) is not None:     # one unfinished record per stream
            out += self.parser.feed(rec.text, rec.lineno, rec.time)
        return out + self.parser.flush()


class Sources:
    """One SourceParser per source path, created on first sight (follow mode adds files over time)."""

    def __init__(self):
        self.by_source: dict[str, SourceParser] = {}

    def feed(self, lines: Iterable[Line]) -> list[Event]:
        out: list[Event] = []
        for line in lines:
            sp = self.by_source.get(line.source)
            if sp is None:
                sp = self.by_source[line.source] = SourceParser(line.source)
            out += sp.feed(line)
        return out

    def flush(self) -> list[Event]:
        out: list[Event] = []
        for sp in self.by_source.values():
            out += sp.flush()
        return out

    def unparsed(self) -> Counter:
        total: Counter = Counter()
        for sp in self.by_source.values():
            total.update(sp.parser.unparsed)
        return total


def iter_file_events(path: str, max_line_bytes: int = 1 << 20, stats: SourceParser | None = None
                     ) -> Iterator[Event]:
    """Every Event of a whole file ("-" = stdin), in file order. Pass `stats` to read counts afterwards."""
    sp = stats or SourceParser(path)
    feed = sp.feed
    for line in read_lines(path, max_line_bytes):
        yield from feed(line)
    yield from sp.flush()
