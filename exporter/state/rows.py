"""What batch lines, access lines and request logs do to ServerState, read as Rows (events.py): the hot path.

Nearly every line of a log is a Row, and what a Row does depends only on its layout and its rank: a request log
is only counted, an access line too unless it answered a POST (an inference request: its status feeds the error
rate, state/errors.py); a batch line updates its rank's gauges (lazily: see `apply_row`); a scheduler
leader's decode line is also a sample (`classify`), and a leader's batch lines may feed the tuning tallies. So
that is decided once per (layout, rank) and kept in a slot, and `apply_rows` applies a run of Rows in one loop
(the `analyze` replay) where `apply_row` takes one at a time (`serve`): both do the same through the same slots.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from exporter.state.errors import RequestOutcomes
from exporter.state.parts import StatePart
from exporter.state.ranks import MAX_RANKS, OTHER_RANK, RankValues, rank_label
from exporter.state.tuning import LogTuning, line_reader, numbers
from exporter.state.windows import HitWindow

MAX_ROW_SLOTS = 4096     # (layout, rank) slots kept; past it they are all learned again
# what a Row does, by slot (see _row_slot): counted only; a batch line whose numbers wait unread; a sample; an
# access line (counted, and a POST's status kept)
COUNT, GAUGE, SAMPLE, ACCESS = 0, 1, 2, 3


class BatchRows(StatePart):
    """ServerState's part that takes in Rows: counts them, keeps each rank's latest batch lines, and counts a
    leader's samples and tuning numbers in their windows."""

    # what it feeds of the rest of ServerState (ServerState.__init__ sets them)
    events_total: dict[str, int]
    outcomes: RequestOutcomes
    last_batch_t: float | None
    last_progress_t: float | None
    samples: HitWindow
    tuning: LogTuning
    chunk_size: int | None
    graph_off_peak: int
    _batch_ranks: set
    _tally: list
    _tuning_shapes: dict
    _row_slots: dict           # layout -> {id(rank dict): its slot} (_row_slot)
    _slot_ranks: list[dict]    # the rank dicts of those slots
    _row_kinds: list[str]      # the kinds of the Rows seen, in the order seen
    _row_counts: list[int]     # Rows of each of them that apply_rows counted and has not added to events_total
    # classify's thresholds and limits (None: the signal is inactive; _cap is None whenever _cap_fraction is)
    _min_queue: Any
    _max_queue: Any
    _min_usage: Any
    _cap_fraction: Any
    _cap_max_usage: Any
    _graph_default_bs: Any
    _cap: Any
    _graph_max_bs: Any
    _queued_cap: Any           # the admission cap's queue length (ServingFeed; None: no cap known)

    if TYPE_CHECKING:
        def admission_sample(self, now: float, queue) -> None: ...

    def apply_row(self, row: tuple, now: float) -> None:
        """A line still in its learned layout (events.Row), at `now`: what apply_event does with its Event, without
        building the Event. A batch line updates its rank's gauges; a decode line of a DP rank's leader is also a
        sample. An access line or request log is only counted. (apply_rows does the same for a run of Rows.)"""
        shape = row[0]
        try:
            code, k, rv, tune = self._row_slots[shape][id(row[4])]
        except KeyError:
            code, k, rv, tune = self._row_slot(shape, row[4])
        kind = self._row_kinds[k]
        try:
            self.events_total[kind] += 1
        except KeyError:
            self.events_total[kind] = 1
        if code == COUNT:
            return
        if code == ACCESS:
            self._access_row(row, now)
            return
        self.last_batch_t = self.last_progress_t = now
        if tune:
            self._tuning_row(shape, kind, row, now)
        if code == GAUGE:
            # not a sample: nothing needs its numbers before someone reads the rank (`ranks`), and by then
            # only the latest line of each shape counts; most lines of a log end here, unread
            unread = rv.unread
            if unread is None:
                rv.unread = {shape: row[1]}
                self._unread.append(rv)
            else:
                unread.pop(shape, None)     # keep them in the order they came
                unread[shape] = row[1]
        else:
            self._sample(rv, shape, row[1], now)

    def apply_rows(self, items, last: float, due: float) -> tuple[object, float]:
        """apply_row for each Row that `items` (an iterator) gives, each at its own time: the latest timestamp
        so far, from `last` on (a line with none, or an earlier one, takes `last`), as `analyze` times them.
        Stops at the first item that is not a Row or whose time reaches `due` (an evaluation is due first), and
        returns it unapplied with the time so far; (None, time) when `items` runs out.

        The loop of `analyze`: every Row of a log passes here, so apply_row is inlined for what most Rows do
        (count, and leave a batch line unread), the slots are one dict look-up each, the counts go to
        events_total once per run, and so do last_batch_t and last_progress_t (nothing reads them in between)."""
        slots, counts = self._row_slots, self._row_counts
        batch_t = None
        stop = None
        for item in items:
            if item.__class__ is not tuple:
                stop = item
                break
            ts = item[2]
            if ts is not None and ts > last:
                if ts >= due:
                    stop = item
                    break
                last = ts
            shape = item[0]
            try:
                code, k, rv, tune = slots[shape][id(item[4])]
            except KeyError:
                code, k, rv, tune = self._row_slot(shape, item[4])
            counts[k] += 1
            if code == COUNT:
                continue
            if code == ACCESS:
                self._access_row(item, last)
                continue
            batch_t = last
            if tune:
                self._tuning_row(shape, shape.kind, item, last)
            if code == GAUGE:
                unread = rv.unread          # as in apply_row
                if unread is None:
                    rv.unread = {shape: item[1]}
                    self._unread.append(rv)
                else:
                    unread.pop(shape, None)
                    unread[shape] = item[1]
            else:
                self._sample(rv, shape, item[1], last)
        events = self.events_total
        for k, n in enumerate(counts):
            if n:
                kind = self._row_kinds[k]
                events[kind] = events.get(kind, 0) + n
                counts[k] = 0
        if batch_t is not None:
            self.last_batch_t = self.last_progress_t = batch_t
        return stop, last

    def count_rows(self, kind: str, n: int) -> None:
        """`n` more records of `kind` that were counted instead of read as Rows (Parser.fold_request_logs)."""
        self.events_total[kind] = self.events_total.get(kind, 0) + n

    def _row_slot(self, shape, rank: dict) -> tuple:
        """What a Row of this layout and rank does: (COUNT, GAUGE or SAMPLE, the index of its kind in
        _row_kinds, its rank's RankValues (None when counted only), whether it feeds the tuning tallies), kept
        in _row_slots[shape][id(rank)] with the rank dict, until the leaders, the rank table or what a layout
        feeds changes."""
        kind = shape.kind
        try:
            k = self._row_kinds.index(kind)
        except ValueError:      # a handful of kinds in all (events.KINDS)
            k = len(self._row_kinds)
            self._row_kinds.append(kind)
            self._row_counts.append(0)
        rv: RankValues | None = None
        # an access line's layout knows whether its lines answered a POST (layouts._EventLayout.post_status)
        code, tune = (ACCESS if kind == "http_access" and shape.post_status is not None else COUNT), False
        if shape.batch:
            rv, sample = self._batch_rank(rank)
            code = SAMPLE if sample and kind == "decode_batch" else GAUGE
            tune = sample and self._tuning_shapes.get(shape) is not False
        if len(self._slot_ranks) >= MAX_ROW_SLOTS:
            self._forget_row_slots()
        by_rank = self._row_slots.get(shape)
        if by_rank is None:
            by_rank = self._row_slots[shape] = {}
        by_rank[id(rank)] = slot = (code, k, rv, tune)
        self._slot_ranks.append(rank)    # alive while its slot is: no other dict can take its id meanwhile
        return slot

    def _access_row(self, row: tuple, now: float) -> None:
        """An access line of a POST read as a Row: its status is read (an inference response; the other methods'
        lines, health checks and scrapes, are only counted: COUNT slots)."""
        self.outcomes.access("POST", int(row[1][row[0].post_status]), now)

    def _forget_row_slots(self) -> None:
        """Every slot is learned again from the next Row on (the leaders or the rank table changed)."""
        self._row_slots.clear()
        self._slot_ranks.clear()

    def _batch_rank(self, rank: dict) -> tuple[RankValues, bool]:
        """(the rank's RankValues, whether its batch lines are samples).

        One sample per scheduler, not per TP rank. The TP ranks of a DP rank share one scheduler, and when they
        all print batch lines (--enable-metrics-for-all-schedulers) they repeat its queue, running and usage:
        every line still updates its rank's gauges, but only the lines of the DP rank's lowest TP rank (its
        leader: TP0, or DP1 TP4 with DP attention and tp=8, dp=2) are tallied, so a window holds the same samples
        (and min_samples means the same) whatever the TP size."""
        dp, tp = rank.get("dp"), rank.get("tp")
        sample = True
        if tp is not None:
            leaders = self._leader_tp
            leader = leaders.get(dp)
            if leader is None:
                if len(leaders) < MAX_RANKS:
                    leaders[dp] = tp
                    self._forget_row_slots()
                # else the table is full: every line of this DP rank is a sample (per-rank sampling)
            elif tp < leader:
                leaders[dp] = tp      # a lower TP rank showed up: it leads from now on (the choice is stable)
                self._forget_row_slots()
            elif tp != leader:
                sample = False
        if len(self._batch_ranks) < 4 * MAX_RANKS:
            self._batch_ranks.add(rank_label(rank))
        key = (dp, tp, rank.get("pp"))
        rv = self._ranks.get(key)
        if rv is None:
            rv = self._new_rank(key)
        return rv, sample

    def _new_rank(self, key: tuple) -> RankValues:
        """A slot for a rank not seen yet; past MAX_RANKS - 1 distinct ranks they share the "other" slot, so
        the table (and the exported label sets) never exceed MAX_RANKS entries."""
        if len(self._ranks) >= MAX_RANKS - 1:
            key = OTHER_RANK
        self._schedulers = None
        return self._ranks.setdefault(key, RankValues())

    def _sample(self, rv: RankValues, shape, text, now: float) -> None:
        """A leader's decode line: its rank's gauges, and a sample."""
        queue, running, usage, throughput, graph = values = shape.values(text)
        if rv.unread:
            # a leader's unread lines are (but for ranks folded into "other") its prefill lines since its last
            # sample; a line that sets all five numbers overwrites whatever reading them would set, so they are
            # dropped unread (the same result; reading them cost a sample as much as its own numbers)
            if None in values:
                rv.read()
            else:
                rv.unread = None
        rv.take(queue, running, usage, throughput, graph)
        self.classify(now, queue, running, usage, graph)

    def _tuning_row(self, shape, kind: str, row: tuple, now: float) -> None:
        """A leader's batch line for self.tuning. Per learned layout, the first line's Event says whether its
        lines print what the tallies read (all prefill lines; decode lines with speculative or PD fields) and
        where (tuning.line_reader); later lines are read by slicing those numbers out (from their Event, when
        they could not be located)."""
        text = row[1]
        if text.__class__ is dict:
            values = numbers(kind, text)
            if not self.tuning.reads(kind, values):
                return
        else:
            read = self._tuning_shapes.get(shape)
            if read is None or read is True:
                values = numbers(kind, shape.event(text, row[2], row[3], row[4], row[5]).fields)
                if read is None:
                    if len(self._tuning_shapes) >= 4096:
                        self._tuning_shapes.clear()
                        self._forget_row_slots()    # their `tune` read the answers just forgotten
                    reads = self.tuning.reads(kind, values)
                    self._tuning_shapes[shape] = (line_reader(kind, text, shape.event(
                        text, row[2], row[3], row[4], row[5]).fields) or True) if reads else False
                    if not reads:
                        self._row_slots.pop(shape, None)     # its slots no longer call this
                        return
            else:
                values = read(text)
        if kind == "prefill_batch":
            new, cached, queue, pd = values     # numbers() of a prefill line
            self.tuning.prefill(now, new, cached, queue, pd, self.chunk_size)
        else:
            self.tuning.decode(now, *values)

    def classify(self, now: float, queue, running, usage, cuda_graph) -> None:
        """Count one batch sample in every series it is judged in. The tally's layout follows the series
        order of self.samples: (total, hits) x (queue_below_range, queue_above_range, kv_cache_underused,
        concurrency_capped, cuda_graph_off_small_batch); literal indices keep it fast, as do the limits read
        once per change (_limits), the window's bucket check inline (HitWindow.bucket) and a hit added only
        when there is one."""
        w = self.samples
        if not now < w._end:
            w.start(now)
        b = self._tally
        if queue is not None:
            if self._queued_cap is not None:
                self.admission_sample(now, queue)
            if self._min_queue is not None:
                b[0] += 1
                if queue < self._min_queue:
                    b[1] += 1
            if self._max_queue is not None:
                b[2] += 1
                if queue > self._max_queue:
                    b[3] += 1
            if usage is not None:
                if self._min_usage is not None:
                    b[4] += 1
                    if queue > 0 and usage < self._min_usage:
                        b[5] += 1
                cap = self._cap
                if cap and running is not None:
                    b[6] += 1
                    if running >= self._cap_fraction * cap and queue > 0 and usage < self._cap_max_usage:
                        b[7] += 1
        if cuda_graph is not None and running is not None and self._graph_default_bs is not None:
            b[8] += 1
            max_bs = self._graph_max_bs
            if not cuda_graph and (max_bs is None or running <= max_bs) and running > 0:
                b[9] += 1
                if running > self.graph_off_peak:
                    self.graph_off_peak = running
