"""A task's step timing over a time window, read from the segments ``step_stats`` keeps.

``StepAccumulator`` keeps, per task, at most ``SEGMENTS`` runs of consecutive records with
their exact counters and one sampled duration each; ``window_counters`` reads any window
from them (the straggler's overlap of every worker's steps) without the rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

WINDOW_COLUMNS = ["task", "records", "steps", "p50_ns", "mean_ns", "period_ns", "examples", "first_begin_ns",
                  "last_end_ns"]


def window_counters(counters: pd.DataFrame, offsets: dict[str, int], start_ns: float, stop_ns: float) -> pd.DataFrame:
    """Per task, its step records from ``start_ns`` to ``stop_ns`` (reference clock) read from
    the segments of ``counters`` (``StepAccumulator.counters``).

    A segment inside the window counts whole; one across an edge by the share of its time
    (first begin to last end) inside, so counts and sums are exact but for the two edge
    segments. The median is the weighted median of the segments' sampled records (one
    record in every segment length); the period is the mean time between record starts
    over the training steps a record covers, as ``breakdown.worker_table`` has it.
    Columns: ``WINDOW_COLUMNS`` (``records``, ``steps``, ``examples`` may be fractional).
    Every task's segments are placed in the window at once (a 1,024-worker run has as many
    tasks); only the sums and the median are taken task by task.

    >>> from tfdiag.analysis.step_stats import StepAccumulator
    >>> accumulator = StepAccumulator(segments=4)
    >>> accumulator.add("w.tfdiag", "worker:0", batch)  # doctest: +SKIP
    >>> window_counters(accumulator.counters(), {}, 0, 10**9)  # doctest: +SKIP
    """
    if counters.empty:
        return pd.DataFrame(columns=WINDOW_COLUMNS)
    tasks = counters["task"].to_numpy(dtype=object)
    order = np.argsort(tasks, kind="stable")  # groupby's order: by task, each task's rows as they were
    every_segments, clocks = counters["segments"].tolist(), counters["clock_task"].tolist()
    segments = [every_segments[row] for row in order]
    lengths = np.array([len(times) for times, _ in segments])
    shift = np.repeat([offsets.get(clocks[row], 0) for row in order], lengths)
    times = np.concatenate([times for times, _ in segments]).astype("float64")
    sums = np.concatenate([sums for _, sums in segments])
    first, last_begin, last_end = (times[:, column] - shift for column in range(3))
    length = last_end - first
    inside = np.clip(np.minimum(last_end, stop_ns) - np.maximum(first, start_ns), 0.0, None)
    share = np.where(length > 0, inside / np.where(length > 0, length, 1.0),
                     ((first >= start_ns) & (last_end <= stop_ns)).astype("float64"))
    share = np.minimum(share, 1.0)
    ordered = tasks[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    bounds = np.r_[0, np.cumsum(lengths)][np.r_[starts, len(order)]]
    rows = []
    for task, low, high in zip(ordered[starts], bounds[:-1], bounds[1:]):
        own = slice(low, high)
        records, steps, examples, duration = (sums[own, column] @ share[own] for column in range(4))
        if records <= 0:
            rows.append([task, 0.0, 0.0, np.nan, np.nan, np.nan, 0.0, np.nan, np.nan])
            continue
        taken = share[own] > 0
        window_first = max(float(first[own][taken].min()), start_ns)
        window_last_begin = min(float(last_begin[own][taken].max()), stop_ns)
        per_record = steps / records
        period = (window_last_begin - window_first) / (records - 1) / per_record if records > 1 else np.nan
        median = _weighted_median(times[own][taken, 3], sums[own][taken, 0] * share[own][taken])
        rows.append([task, records, steps, median, duration / records, period, examples, window_first,
                     min(float(last_end[own][taken].max()), stop_ns)])
    return pd.DataFrame(rows, columns=WINDOW_COLUMNS)


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cumulative, cumulative[-1] / 2)])
