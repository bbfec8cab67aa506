"""Step records folded as they are read: exact counters, a duration histogram, bounded rows.

A run's step records grow with its length; what the analysis keeps of them must not.
``StepAccumulator.add`` folds each record batch the reader yields into, per (task file,
task, clock), exact counters (records, training steps, examples, sums of durations and
input waits, first and last times), a log-bucketed histogram of step durations (a
mergeable sketch: percentiles within ``PERCENTILE_RELATIVE_ERROR``), and a bounded set
of the rows themselves:

- a sample chosen by step number: rows whose ``step`` is a multiple of a stride that
  doubles whenever a task holds more than ``SAMPLED_ROWS`` of them. Every worker of a
  synchronous job keeps the same step numbers, so steps still match across workers and
  timelines keep their shape;
- the most recent ``RECENT_ROWS`` rows in full (what a live view and the stall check read);
- each task's first step (its warm-up, left out of its timing).

And a timeline of *segments*: at most ``SEGMENTS`` runs of consecutive records per task,
each with its exact counters (records, steps, examples, duration sum, first and last
times) and the duration of one of its records, chosen by a hash of the record's index; a
segment's length doubles with the task's records. ``step_windows.window_counters`` reads a task's timing over any time window from them (the
straggler's overlap of every worker's steps): counts and sums exact for the segments
inside the window, a segment across its edge counted by the share of its time inside.

A task that never passed the cap keeps every row, so the analysis of a short run is
exactly what it was before. Memory is bounded by the number of tasks, not of steps, and
a refresh folds only the new batches.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

# Rows of the step-number sample per task before its stride doubles (it then holds half).
SAMPLED_ROWS = 1024
# The most recent rows of each task kept in full.
RECENT_ROWS = 256
# Segments of consecutive records kept per task (their length doubles when there are more):
# a window's edges are placed within 1/SEGMENTS of a task's records, at 72 bytes a segment
# (37 KB a task).
SEGMENTS = 512
# Bucket bounds grow by this factor; a percentile is read by rank inside its bucket, so it
# lies between the bucket's bounds, as the exact value does: within 1 % of it.
BUCKET_GROWTH = 1.01
PERCENTILE_RELATIVE_ERROR = BUCKET_GROWTH - 1
# Durations up to 2**62 ns (the reader's bound on int64 values) fit the buckets.
_BUCKETS = int(math.log(2.0**62) / math.log(BUCKET_GROWTH)) + 2
_SEQUENCE = "__row"  # a row's position in its file's step records: tells sample and tail rows apart


def bucket_of(durations: np.ndarray) -> np.ndarray:
    """Histogram bucket of each duration (ns): 0 for 0 (and below); bucket ``b`` > 0 holds
    [g**(b-1), g**b) with g = ``BUCKET_GROWTH``."""
    values = np.maximum(durations.astype("float64"), 1.0)
    buckets = 1 + np.floor(np.log(values) / math.log(BUCKET_GROWTH)).astype("int64")
    return np.where(durations > 0, np.minimum(buckets, _BUCKETS - 1), 0)


def _value_at_rank(counts: np.ndarray, cumulative: np.ndarray, rank: int, first_bucket: int = 0) -> float:
    """The ``rank``-th smallest value (0-based), spread evenly over its bucket's bounds."""
    index = int(np.searchsorted(cumulative, rank + 1))
    bucket = first_bucket + index
    if bucket == 0:
        return 0.0
    low = BUCKET_GROWTH ** (bucket - 1)
    before = int(cumulative[index - 1]) if index else 0
    return low + low * (BUCKET_GROWTH - 1) * (rank - before + 0.5) / int(counts[index])


def histogram_quantile(counts: np.ndarray, q: float, first_bucket: int = 0) -> float:
    """The ``q`` quantile of the values counted in ``counts`` (of buckets ``first_bucket``
    on), interpolated between the two nearest ranks as pandas does; each rank is read
    inside its bucket, so the result is within ``PERCENTILE_RELATIVE_ERROR`` of the exact quantile.

    >>> counts = np.bincount(bucket_of(np.array([100, 200, 300])), minlength=_BUCKETS)
    >>> abs(histogram_quantile(counts, 0.5) - 200) / 200 <= PERCENTILE_RELATIVE_ERROR
    True
    """
    total = int(counts.sum())
    if total == 0:
        return math.nan
    cumulative = np.cumsum(counts)
    position = q * (total - 1)
    low, high = math.floor(position), math.ceil(position)
    value_low, value_high = (_value_at_rank(counts, cumulative, rank, first_bucket) for rank in (low, high))
    return value_low + (value_high - value_low) * (position - low)


def histogram_quantiles(buckets: np.ndarray, counts: np.ndarray, bounds: np.ndarray,
                        qs: tuple[float, ...]) -> np.ndarray:
    """``histogram_quantile`` of many histograms at once, the same numbers: histogram ``i``
    counts ``counts[bounds[i]:bounds[i + 1]]`` values in ``buckets`` of those rows (increasing
    within each histogram; buckets not listed hold none). One row per histogram, a column
    per ``q``; NaN for an empty histogram. A 1,024-worker run's 4,096 links, each read at
    three quantiles, in a few array operations rather than 12,288 calls.

    >>> counts = np.bincount(bucket_of(np.array([100, 200, 300])), minlength=_BUCKETS)
    >>> listed = np.flatnonzero(counts)
    >>> both = histogram_quantiles(listed, counts[listed], np.array([0, len(listed)]), (0.5, 0.95))
    >>> both.tolist() == [[histogram_quantile(counts, 0.5), histogram_quantile(counts, 0.95)]]
    True
    """
    cumulative = np.cumsum(counts.astype("int64"))
    counted = np.r_[0, cumulative]
    before_each, totals = counted[bounds[:-1]], counted[bounds[1:]] - counted[bounds[:-1]]
    nonempty = totals > 0
    result = np.full((len(totals), len(qs)), np.nan)
    for column, q in enumerate(qs):
        position = q * (totals[nonempty] - 1)
        low = np.floor(position).astype("int64")
        value_low, value_high = (_values_at_ranks(buckets, counts, cumulative, bounds[:-1][nonempty],
                                                  before_each[nonempty], rank)
                                 for rank in (low, np.ceil(position).astype("int64")))
        result[nonempty, column] = value_low + (value_high - value_low) * (position - low)
    return result


def dense_histogram_quantiles(histograms: np.ndarray, qs: tuple[float, ...], first_bucket: int = 0) -> np.ndarray:
    """``histogram_quantiles`` of the rows of a 2-D array of counts (buckets ``first_bucket``
    on): ``histogram_quantile`` of each row, at each ``q``.

    >>> counts = np.array([[0, 2, 5], [0, 0, 0]])
    >>> read = dense_histogram_quantiles(counts, (0.5,), 10)
    >>> float(read[0, 0]) == histogram_quantile(counts[0], 0.5, 10), bool(np.isnan(read[1, 0]))
    (True, True)
    """
    rows, columns = np.nonzero(histograms)  # row by row, buckets increasing
    bounds = np.searchsorted(rows, np.arange(len(histograms) + 1))
    return histogram_quantiles(first_bucket + columns, histograms[rows, columns], bounds, qs)


def _values_at_ranks(buckets: np.ndarray, counts: np.ndarray, cumulative: np.ndarray, starts: np.ndarray,
                     before_each: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """``_value_at_rank`` of each histogram (its rows from ``starts``, ``before_each`` values
    counted before them) at its ``ranks``: the same operations, element by element."""
    index = np.searchsorted(cumulative, before_each + ranks + 1)
    bucket = buckets[index].astype("int64")
    before = np.where(index > starts, cumulative[np.maximum(index - 1, 0)] - before_each, 0)
    low = np.array([BUCKET_GROWTH ** (int(value) - 1) for value in bucket.tolist()], "float64")  # Python's pow, as there
    spread = low + low * (BUCKET_GROWTH - 1) * (ranks - before + 0.5) / counts[index]
    return np.where(bucket == 0, 0.0, spread)


@dataclass
class _Group:
    """What is kept of the step records of one (file, task, clock)."""

    rows: int = 0
    steps: int = 0
    examples: float = 0.0
    duration_sum: float = 0.0
    wait_sum: float = 0.0
    histogram: np.ndarray = field(default_factory=lambda: np.zeros(_BUCKETS, "int64"))
    first_begin: int | None = None  # raw clock
    second_begin: int | None = None  # the earliest begin after first_begin
    first_rows: pa.Table | None = None  # the rows that began at first_begin (the warm-up)
    last_begin: int | None = None
    last_end: int | None = None
    longest_gap: int = 0  # between consecutive step ends, the first record's excepted (stalled's rule)
    previous_end: int | None = None  # the last end of the previous batch
    stride: int = 1
    sample: list[pa.Table] = field(default_factory=list)
    sample_rows: int = 0
    recent: deque = field(default_factory=deque)
    recent_rows: int = 0
    recent_copied: bool = True  # False: ``recent`` holds a slice of a batch read (``settle`` copies it)
    segment_length: int = 1
    # Per segment: first begin, last begin, last end, the duration (per step) of its sampled
    # record and that record's priority (``_priority``) ...
    segment_times: np.ndarray = field(default_factory=lambda: np.zeros((0, 5), "int64"))
    # ... and records, steps, examples, duration sum.
    segment_sums: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), "float64"))

    @property
    def sampled(self) -> bool:
        return self.stride > 1


class StepAccumulator:
    """Folds step record batches as they are read; ``counters()``, ``rows()`` read the result.

    Example:
        >>> accumulator = StepAccumulator()
        >>> accumulator.add("worker-0.tfdiag", "worker:0", batch)  # doctest: +SKIP
        >>> accumulator.counters()[["task", "rows", "steps"]]  # doctest: +SKIP
    """

    def __init__(self, sampled_rows: int = SAMPLED_ROWS, recent_rows: int = RECENT_ROWS, segments: int = SEGMENTS):
        self.sampled_rows = sampled_rows
        self.recent_rows = recent_rows
        self.segments = segments
        self._groups: dict[tuple[str, str, str, str], _Group] = {}  # (file, source, task, clock)
        self._unsettled: dict[int, _Group] = {}  # the groups a read added to (``settle``), by id

    def add(self, file: str, source: str, batch: pa.RecordBatch) -> None:
        """Folds one batch of ``step`` records (the kind's columns, in order) that ``file``
        held in a frame of ``source`` (the writing task)."""
        if batch.num_rows == 0:
            return
        table = pa.Table.from_batches([batch])
        task, clock = _only_value(table["task"]), _only_value(table["clock_task"])
        if task is not None and clock is not None:  # a worker's file: one task on its own clock
            self._add((file, source, task, clock), table)
            return
        keys = pc.binary_join_element_wise(table["task"].fill_null(""), table["clock_task"].fill_null(""), "\x00")
        for key in pc.unique(keys).to_pylist():
            task, clock = key.split("\x00")
            self._add((file, source, task, clock), table.filter(pc.equal(keys, key)))

    def empty_like(self) -> StepAccumulator:
        """A new accumulator with the same caps (one file's, in ``RunLoader.fold_file``)."""
        return StepAccumulator(self.sampled_rows, self.recent_rows, self.segments)

    @property
    def groups(self) -> dict[tuple[str, str, str, str], _Group]:
        """What was folded, per (file, source, task, clock)."""
        return self._groups

    def adopt(self, other: StepAccumulator) -> None:
        """Takes the groups ``other`` folded of files this one has not read."""
        self._groups.update(other.groups)

    def of_file(self, file: str) -> StepAccumulator:
        """A new accumulator holding the groups folded from ``file`` (one file's fold, to save)."""
        part = self.empty_like()
        part.groups.update((key, group) for key, group in self._groups.items() if key[0] == file)
        return part

    def forget(self, file: str) -> None:
        """Drops what was folded from ``file`` (read again from byte 0)."""
        for key in [key for key in self._groups if key[0] == file]:
            del self._groups[key]

    def _add(self, key: tuple[str, str, str, str], table: pa.Table) -> None:
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = _Group()
        self._unsettled[id(group)] = group
        table = table.append_column(_SEQUENCE, pa.array(np.arange(group.rows, group.rows + len(table), dtype="int64")))
        begin, end = _values(table["begin_ns"], 0), _values(table["end_ns"], 0)
        covered = np.maximum(_values(table["steps"], 1), 1)
        duration = (end - begin) // covered
        wait = _values(table["input_wait_ns"], 0) // covered
        examples = _values(table["examples"], 0)
        self._fold_segments(group, begin, end, np.column_stack([np.ones(len(table)), covered, examples, duration]),
                            duration)
        group.rows += len(table)
        group.steps += int(covered.sum())
        group.examples += float(examples.sum(dtype="float64"))
        group.duration_sum += float(duration.sum(dtype="float64"))
        group.wait_sum += float(wait.sum(dtype="float64"))
        group.histogram = group.histogram + np.bincount(bucket_of(duration), minlength=_BUCKETS)  # counters() shares it
        self._fold_times(group, table, begin, end)
        self._fold_sample(group, table)
        self._fold_recent(group, table)

    @staticmethod
    def _fold_times(group: _Group, table: pa.Table, begin: np.ndarray, end: np.ndarray) -> None:
        first = int(begin.min())
        if group.first_begin is not None and first > group.first_begin:  # the common case: a later batch
            group.second_begin = first if group.second_begin is None else min(group.second_begin, first)
        elif group.first_begin is None or first < group.first_begin:
            later = begin[begin > first]
            second = int(later.min()) if len(later) else None
            candidates = [value for value in (group.first_begin, second) if value is not None]
            group.second_begin = min(candidates) if candidates else None
            group.first_begin = first
            group.first_rows = table.filter(pc.equal(table["begin_ns"], first))
        else:  # the batch holds more rows at the first begin
            group.first_rows = pa.concat_tables([group.first_rows, table.filter(pc.equal(table["begin_ns"], first))])
            later = begin[begin > first]
            candidates = [value for value in (group.second_begin, int(later.min()) if len(later) else None)
                          if value is not None]
            group.second_begin = min(candidates) if candidates else None
        ends = end if len(end) < 2 or bool((end[1:] >= end[:-1]).all()) else np.sort(end)  # as written: in order
        if group.previous_end is not None:
            ends = np.concatenate(([group.previous_end], ends))
        elif len(ends) > 1:  # the gap after a task's first (warm-up) record is not its rhythm
            ends = ends[1:]
        if len(ends) > 1:
            group.longest_gap = max(group.longest_gap, int(np.diff(ends).max()))
        group.previous_end = int(ends[-1])
        group.last_begin = max(int(begin.max()), group.last_begin if group.last_begin is not None else -1)
        group.last_end = max(int(end.max()), group.last_end if group.last_end is not None else -1)

    def _fold_segments(self, group: _Group, begin: np.ndarray, end: np.ndarray, sums: np.ndarray,
                       duration: np.ndarray) -> None:
        """Adds a batch's records (``sums``: a row of records, steps, examples, duration each)
        to the task's segments: record ``i`` of the task belongs to segment ``i // segment_length``."""
        index = np.arange(group.rows, group.rows + len(begin))
        segment = index // group.segment_length
        starts = np.flatnonzero(np.r_[True, segment[1:] != segment[:-1]])
        priority = _priority(index)
        # Each segment's record of least priority: the least of (priority, position) per segment.
        key = np.minimum.reduceat((priority << 32) | np.arange(len(index)), starts)
        chosen, priority = key & 0xFFFFFFFF, key >> 32
        times = np.column_stack([np.minimum.reduceat(begin, starts), np.maximum.reduceat(begin, starts),
                                 np.maximum.reduceat(end, starts), duration[chosen], priority])
        added = np.add.reduceat(sums.astype("float64"), starts, axis=0)
        if len(group.segment_times) and segment[0] == len(group.segment_times) - 1:  # continues the last one
            group.segment_times[-1] = _joined_times(group.segment_times[-1], times[0])
            group.segment_sums[-1] += added[0]
            times, added = times[1:], added[1:]
        group.segment_times = np.concatenate([group.segment_times, times])
        group.segment_sums = np.concatenate([group.segment_sums, added])
        while len(group.segment_times) > self.segments:  # pairs of segments become one
            group.segment_length *= 2
            pairs = np.arange(0, len(group.segment_times), 2)
            last = np.minimum(pairs + 1, len(group.segment_times) - 1)
            group.segment_times = _joined_times(group.segment_times[pairs], group.segment_times[last])
            group.segment_sums = np.add.reduceat(group.segment_sums, pairs, axis=0)

    def _fold_sample(self, group: _Group, table: pa.Table) -> None:
        # A take of the few rows kept, not a filter: a filter's cost is the batch's, a take's the rows'.
        kept = table if group.stride == 1 else table.take(
            np.flatnonzero(_multiple_of(_values(table["step"], 0), group.stride)))
        group.sample.append(kept)
        group.sample_rows += len(kept)
        while group.sample_rows > self.sampled_rows:
            group.stride *= 2
            whole = pa.concat_tables(group.sample)
            whole = whole.filter(_multiple_of(_values(whole["step"], 0), group.stride))
            group.sample, group.sample_rows = [whole], len(whole)

    def _fold_recent(self, group: _Group, table: pa.Table) -> None:
        if len(table) > 2 * self.recent_rows:  # the batch alone holds them: its end, copied at ``settle``
            group.recent = deque([table.slice(len(table) - self.recent_rows)])
            group.recent_rows = self.recent_rows
            group.recent_copied = False
            return
        group.recent.append(table)
        group.recent_rows += len(table)
        while group.recent_rows - len(group.recent[0]) >= self.recent_rows:
            group.recent_rows -= len(group.recent.popleft())
        if group.recent_rows > 2 * self.recent_rows:  # large batches: a copy of their end, not the whole frames
            end = pa.concat_tables(list(group.recent)).slice(group.recent_rows - self.recent_rows)
            group.recent = deque([end.take(np.arange(len(end)))])
            group.recent_rows = len(end)

    def settle(self) -> None:
        """After each read: each task's sample made one table (a batch adds a few rows as a
        table of its own, and a small table's columns cost more than their rows), and its
        recent rows copied where they are a slice of a batch read (each new batch's end
        is), so what is kept no longer holds the frames read."""
        for group in self._unsettled.values():
            if len(group.sample) > 1:
                group.sample = [pa.concat_tables(group.sample).combine_chunks()]
            if not group.recent_copied:
                group.recent = deque(part.take(np.arange(len(part))) for part in group.recent)
                group.recent_copied = True
        self._unsettled = {}

    def rows(self) -> pa.Table | None:
        """The rows kept, in the order each file logged them (one table of the kind's columns)."""
        tables, sources = [], []
        for (_, source, _, _), group in self._groups.items():
            parts = group.sample + ([] if not group.sampled else list(group.recent) + [group.first_rows])
            table = pa.concat_tables(parts)
            if group.sampled:  # a row can be in the sample, the recent rows and the warm-up: keep it once
                _, first_of_each = np.unique(table[_SEQUENCE].to_numpy(), return_index=True)
                table = table.take(first_of_each)
            tables.append(table.drop_columns([_SEQUENCE]))
            sources.append(source)
        if not tables:
            return None
        table = pa.concat_tables(tables)
        names, codes = np.unique(np.asarray(sources, dtype=object), return_inverse=True)
        indices = pa.array(np.repeat(codes.astype("int32"), [len(part) for part in tables]))
        return table.append_column("source", pa.DictionaryArray.from_arrays(indices, pa.array(list(names), pa.string())))

    def counters(self) -> pd.DataFrame:
        """One row per (task, clock): the exact counters, merged over files.

        Columns: ``task``, ``clock_task``, ``rows``, ``steps``, ``examples``,
        ``duration_sum``, ``wait_sum``, ``first_begin_ns``, ``second_begin_ns``,
        ``last_begin_ns``, ``last_end_ns`` (raw clock), ``longest_gap_ns`` (between consecutive
        step ends after the first record, as the stall check measures a task's rhythm; a
        file's order, so exact when each file is in time order), ``sampled``, ``histogram``, and of the
        warm-up rows (those at ``first_begin_ns``): ``first_rows``, ``first_steps``,
        ``first_duration_sum``, ``first_wait_sum``, ``first_histogram``.
        """
        merged: dict[tuple[str, str], dict] = {}
        for (_, _, task, clock), group in self._groups.items():
            first = _warmup(group.first_rows)
            row = merged.get((task, clock))
            if row is None:
                merged[(task, clock)] = {
                    "task": task, "clock_task": clock, "rows": group.rows, "steps": group.steps,
                    "examples": group.examples, "duration_sum": group.duration_sum, "wait_sum": group.wait_sum,
                    "first_begin_ns": group.first_begin, "second_begin_ns": group.second_begin,
                    "last_begin_ns": group.last_begin, "last_end_ns": group.last_end,
                    "longest_gap_ns": group.longest_gap, "sampled": group.sampled,
                    "histogram": group.histogram,  # never changed in place (``_add``, ``_merge`` make new ones)
                    "segments": (group.segment_times, group.segment_sums), **first,
                }
                continue
            _merge(row, group, first)
        columns = ["task", "clock_task", "rows", "steps", "examples", "duration_sum", "wait_sum", "first_begin_ns",
                   "second_begin_ns", "last_begin_ns", "last_end_ns", "longest_gap_ns", "sampled", "histogram",
                   "segments", "first_rows",
                   "first_steps", "first_duration_sum", "first_wait_sum", "first_histogram"]
        return pd.DataFrame(list(merged.values()), columns=columns)


def _warmup(rows: pa.Table) -> dict:
    covered = np.maximum(_values(rows["steps"], 1), 1)
    duration = (_values(rows["end_ns"], 0) - _values(rows["begin_ns"], 0)) // covered
    wait = _values(rows["input_wait_ns"], 0) // covered
    return {"first_rows": len(rows), "first_steps": int(covered.sum()),
            "first_duration_sum": float(duration.sum(dtype="float64")), "first_wait_sum": float(wait.sum(dtype="float64")),
            "first_histogram": np.bincount(bucket_of(duration), minlength=_BUCKETS)}


def _merge(row: dict, group: _Group, first: dict) -> None:
    """Adds a second file's group of the same (task, clock) to ``row``."""
    for name in ("rows", "steps", "examples", "duration_sum", "wait_sum"):
        row[name] += getattr(group, name)
    row["histogram"] = row["histogram"] + group.histogram
    row["segments"] = tuple(np.concatenate([mine, theirs]) for mine, theirs in
                            zip(row["segments"], (group.segment_times, group.segment_sums)))
    row["sampled"] = row["sampled"] or group.sampled
    row["last_begin_ns"] = max(row["last_begin_ns"], group.last_begin)
    row["last_end_ns"] = max(row["last_end_ns"], group.last_end)
    row["longest_gap_ns"] = max(row["longest_gap_ns"], group.longest_gap)
    begins = sorted({row["first_begin_ns"], group.first_begin} | {value for value in (row["second_begin_ns"], group.second_begin)
                                                                    if value is not None})
    if group.first_begin < row["first_begin_ns"]:
        row.update(first)
    elif group.first_begin == row["first_begin_ns"]:
        for name in ("first_rows", "first_steps", "first_duration_sum", "first_wait_sum", "first_histogram"):
            row[name] = row[name] + first[name]
    row["first_begin_ns"] = begins[0]
    row["second_begin_ns"] = begins[1] if len(begins) > 1 else None


def _priority(index: np.ndarray) -> np.ndarray:
    """A hash of each record's index: a segment's sampled record is its record of least
    priority, a record chosen evenly whatever rhythm the step times have (the first record
    of each segment would alias with a periodic pattern), and merging two segments keeps
    the sample of the one with the lesser."""
    with np.errstate(over="ignore"):
        return ((index.astype("uint64") * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(33)).astype("int64")


def _joined_times(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Segment times of two segments made one (rows of ``_Group.segment_times``)."""
    sample = np.where(first[..., 4] <= second[..., 4], first[..., 3], second[..., 3])
    return np.stack([np.minimum(first[..., 0], second[..., 0]), np.maximum(first[..., 1], second[..., 1]),
                     np.maximum(first[..., 2], second[..., 2]), sample,
                     np.minimum(first[..., 4], second[..., 4])], axis=-1)


def _multiple_of(steps: np.ndarray, stride: int) -> np.ndarray:
    return (steps & (stride - 1)) == 0  # strides are powers of two


def _only_value(column: pa.ChunkedArray) -> str | None:
    """The string every row of ``column`` holds ("" for all null), or None when they differ.

    Compares the string buffers with numpy rather than hashing every row (``pc.unique``):
    a worker's batch holds its own name thousands of times.
    """
    if column.null_count == len(column):
        return ""
    if column.null_count or column.num_chunks != 1 or column.type != pa.string():
        unique = pc.unique(column)
        return (unique[0].as_py() or "") if len(unique) == 1 else None
    array = column.chunk(0)
    offsets = np.frombuffer(array.buffers()[1], np.int32, len(array) + 1, array.offset * 4)
    first = array[0].as_py()
    encoded = first.encode()
    if not np.array_equal(offsets - offsets[0], np.arange(len(array) + 1, dtype=np.int32) * len(encoded)):
        return None
    data = array.buffers()[2].slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    return first if data.equals(pa.py_buffer(encoded * len(array))) else None


def _values(column: pa.ChunkedArray, fill: int) -> np.ndarray:
    """An int64 column as numpy, nulls as ``fill``."""
    if column.null_count == len(column):
        return np.full(len(column), fill, "int64")
    if column.null_count:
        column = pc.fill_null(column, fill)
    return column.to_numpy()
