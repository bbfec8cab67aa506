"""System samples folded as they are read: every sample under a cap, time buckets past it.

The system sampler writes one record every 2 s per task, so a day of 1,024 workers is
tens of millions of them. ``SystemBuckets`` holds one task file's samples as they came
while it holds at most ``SYSTEM_ROWS`` (every test's run, a run of hours: analysed
exactly as the rows themselves, ``row_fold``); past that it compacts them into buckets of
time per (writing task, task, host, pid), each one row with the kind's columns:

- ``time_ns`` and the cumulative counters (network, disk bytes), ``cpu_count``, ``pid``,
  ``job_processes`` and the names: the bucket's last sample's, so a rate between two rows
  is the rate between those samples (``rates.mean_rate``);
- percentages (``cpu_pct``, ``mem_used_frac``, ``proc_cpu_pct``, ``job_cpu_pct``,
  ``hog_cpu_pct``): the mean of the bucket's samples, weighted by the samples each row
  stands for (a peak is then the highest bucket mean); the busiest other process's
  ``hog_pid`` and ``hog_name`` are the last sample's, like the other names;
- the sampler's counts since its previous sample (``wakes``, ``late_wakes``, ``late_ms``,
  ``throttled_ms``, ``run_ms``, ``runq_wait_ms``): their sum, so a row still counts the
  time since the previous row (``sync_steps.stopped_shares``, ``run_queue``).

``JobProcessBuckets`` folds the ``job_process`` records (the run-queue figures of the job's
other processes, one row per process per sample) the same way: per (task, host, pid), sums.

A process's first sample stays a row of its own: it dates the process's start
(``restarts``) and begins the time its later rows cover. Buckets start at ``BUCKET_NS``
and double until a compaction leaves at most half the cap, aligned on multiples of their
width, so the tasks' charts share their times; the samples since the last compaction
follow as they came. What is held stays under 1.5 times the cap whatever the run's length.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tfdiag.analysis.row_fold import RowFold, group_codes

# Samples of a task file kept as they are (68 min of the sampler's 2 s); past it, buckets.
SYSTEM_ROWS = 2048
# The narrowest bucket: the width doubles from here until a compaction leaves half the cap.
BUCKET_NS = 4_000_000_000
MEANS = ("cpu_pct", "mem_used_frac", "proc_cpu_pct", "job_cpu_pct", "hog_cpu_pct")
SUMS = ("wakes", "late_wakes", "late_ms", "throttled_ms", "run_ms", "runq_wait_ms")
_SAMPLES = "__samples"  # how many samples a row stands for: a bucket's weight when buckets merge


class SystemBuckets(RowFold):
    """The ``system`` record batches of one task file, folded.

    Example:
        >>> buckets = SystemBuckets()
        >>> buckets.add(batch, "worker:0")  # doctest: +SKIP
        >>> buckets.batches()  # doctest: +SKIP
        [(pyarrow.RecordBatch ..., 'worker:0')]
    """

    ROWS = SYSTEM_ROWS
    RUN_ROWS = 64 * SYSTEM_ROWS
    OWN_COLUMN = _SAMPLES
    width = BUCKET_NS  # the buckets' width in ns: doubles until a compaction leaves half the cap
    MEANS, SUMS = MEANS, SUMS  # the columns averaged and summed over a bucket

    def _fresh(self, table: pa.Table) -> pa.Table:
        return table.append_column(_SAMPLES, pa.array(np.ones(len(table), "int64")))

    def _compacted(self, table: pa.Table) -> pa.Table:
        bucketed = _bucketed(table, self.width, self.MEANS, self.SUMS)
        span = pc.min_max(table["time_ns"])
        span_ns = (span["max"].as_py() or 0) - (span["min"].as_py() or 0)
        while len(bucketed) > self.cap // 2 and self.width <= span_ns:  # past the span: a bucket per process
            self.width *= 2
            bucketed = _bucketed(bucketed, self.width, self.MEANS, self.SUMS)
        return bucketed


class JobProcessBuckets(SystemBuckets):
    """The ``job_process`` record batches of one task file, folded as ``system``'s: sums per bucket."""

    MEANS, SUMS = (), ("run_ms", "runq_wait_ms", "throttled_ms", "probes", "stopped_probes")


def _bucketed(table: pa.Table, width: int, means: tuple = MEANS, sums: tuple = SUMS) -> pa.Table:
    """One row per (task, host, pid, bucket of ``width`` ns); a process's first row alone."""
    if not len(table):
        return table
    names = group_codes(table, ("task", "host"))
    pid = table["pid"].fill_null(-1).to_numpy()
    time = table["time_ns"].fill_null(0).to_numpy()
    # Rows are only sorted as numpy indices: taking every column of the table in that order
    # costs more than the rest of a compaction, and only each bucket's last row is kept.
    order = np.lexsort((time, pid, names))
    names, pid = names[order], pid[order]
    new_process = np.r_[True, (names[1:] != names[:-1]) | (pid[1:] != pid[:-1])]
    bucket = time[order] // width
    bucket[new_process] = -1  # a process's first sample: a row of its own
    starts = np.flatnonzero(new_process | np.r_[True, bucket[1:] != bucket[:-1]])
    lasts = np.r_[starts[1:], len(table)] - 1
    rows = table.take(order[lasts])
    weight = table[_SAMPLES].to_numpy()[order].astype("float64")
    columns = {_SAMPLES: pa.array(np.add.reduceat(weight, starts).astype("int64"))}
    for name in means + sums:
        column = table[name] if name in rows.schema.names else None
        if column is None or column.null_count == len(column):  # a log from before the column, or
            continue  # a sampler without it: read as null, kept null (the last row's)
        values = column.to_numpy(zero_copy_only=False)[order].astype("float64")
        known = ~np.isnan(values)
        if name in means:  # weighted by the samples each row stands for
            total = np.add.reduceat(np.where(known, values * weight, 0.0), starts)
            counted = np.add.reduceat(np.where(known, weight, 0.0), starts)
            result = np.divide(total, counted, out=np.full(len(starts), np.nan), where=counted > 0)
        else:
            result = np.add.reduceat(np.where(known, values, 0.0), starts)
            result[np.add.reduceat(known, starts) == 0] = np.nan
        kind = column.type
        columns[name] = pa.array(result if pa.types.is_floating(kind) else np.nan_to_num(result).astype("int64"),
                                 kind, mask=np.isnan(result))
    return pa.Table.from_arrays([columns.get(name, rows.column(name)) for name in rows.schema.names],
                                schema=rows.schema)
