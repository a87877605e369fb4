"""SGLang's log grammar: turns log records (one text line at a time) into typed Events.

Version-tolerant for SGLang 0.3.0 - 0.5.23 (see docs/log-events.md for kinds and fields). The record may
start anywhere in the line (process managers, Ray and Slurm add their own prefixes); time and rank come
from SGLang's own `[date time RANKS]` prefix when present. Unknown lines are counted by reason, never fatal.
Multi-line records (tracebacks, the KV-pool OOM message) are assembled per source: their Event is emitted
when the next record starts or on flush().

The package's modules, by job: patterns (prefixes, message anchors, printed keys, request-log markers), values
(printed values to fields), messages (messages to Events), shapes (learned batch-line shapes), layouts (skeleton
layouts: rows), prefixes (custom prefix layouts), parser (one source's parser) with its helpers anchored (records
found by message) and block (the block path), which see the parser through scanning (its scanning state, a Protocol:
no import circle). This module names what callers use.
"""
from exporter.ingest.grammar.parser import Parser
from exporter.ingest.grammar.patterns import (
                                              _ANCHOR,
                                              _BATCH_KEYS,
                                              _GRAPH_KEYS,
                                              _RETRACT_KEYS,
                                              SGLANG_LAYOUT,
                                              request_marked,
                                              request_phase,
)
from exporter.ingest.grammar.shapes import MAX_FRUITLESS_LEARNING, MAX_SHAPES, learn_shape
from exporter.ingest.grammar.values import (
                                              fields_in_range,
                                              literal,
                                              parse_batch_body,
                                              parse_server_args,
                                              snake,
                                              split_top_level,
                                              value_of,
)

__all__ = ["MAX_FRUITLESS_LEARNING", "MAX_SHAPES", "SGLANG_LAYOUT", "Parser", "_ANCHOR", "_BATCH_KEYS", "_GRAPH_KEYS",
           "_RETRACT_KEYS", "fields_in_range", "learn_shape", "literal", "parse_batch_body", "parse_server_args",
           "request_marked", "request_phase", "snake", "split_top_level", "value_of"]
