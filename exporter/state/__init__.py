"""Per-server state: latest values per rank, start-up facts per epoch, bounded time windows (ServerState)."""
from exporter.state.ranks import _FIELDS, MAX_RANKS, parse_rank_label, per_scheduler, rank_label, usage_of
from exporter.state.scraped import scrape_sample
from exporter.state.server import FRACTION_SIGNALS, ServerState
from exporter.state.windows import MAX_WINDOW_BUCKETS, MAX_WINDOW_SAMPLES, Histogram, HitSeries, HitWindow, TimeWindow

State = ServerState     # the short name

__all__ = ["FRACTION_SIGNALS", "MAX_RANKS", "MAX_WINDOW_BUCKETS", "MAX_WINDOW_SAMPLES", "_FIELDS", "Histogram",
           "HitSeries", "HitWindow", "ServerState", "State", "TimeWindow", "parse_rank_label", "per_scheduler",
           "rank_label", "scrape_sample", "usage_of"]
