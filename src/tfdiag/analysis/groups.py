"""Rows grouped by task (or any key), and the statistics taken per group, with numpy.

A pandas ``groupby`` costs a fixed fraction of a millisecond per call whatever the rows:
on a live window of a few hundred rows, the analysis's groupbys, one per statistic, per
table and per detector, were most of an evaluation (``docs/benchmarks.md``, "Where an
evaluation's CPU goes"). Here one stable sort groups a table once, and each statistic is
a numpy call on a group's rows, whose cost grows with the rows rather than with the
calls. The statistics leave NaN out as pandas does; medians and
quantiles are exactly ``groupby(...).median()``'s and ``.quantile(q)``'s (the same
interpolation), means and sums are numpy's float64 sums (pandas' compensated sum can
differ in the last bits of non-integer values; the analysis sums integers).

Example:
    >>> groups = TaskGroups(pd.Series(["worker:1", "worker:0", "worker:1"]))
    >>> values = np.array([30.0, 10.0, 50.0])
    >>> {task: median_of(values[rows]) for task, rows in zip(groups.names, groups.rows)}
    {'worker:0': 10.0, 'worker:1': 40.0}
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


class TaskGroups:
    """A table's rows grouped by task, for numpy statistics per task.

    ``names`` are the tasks in the order a sorting ``groupby`` gives (a categorical's
    category order, else sorted), rows without a task left out; ``rows[i]`` holds the
    positions of task ``names[i]``'s rows, in table order. One stable sort replaces a
    pandas groupby per statistic, whose fixed cost is most of a live window's analysis
    (a few hundred rows) and which a large table sorts or hashes anyway.

    >>> groups = TaskGroups(pd.Series(["worker:1", "worker:0", "worker:1"]))
    >>> groups.names, [rows.tolist() for rows in groups.rows]
    (['worker:0', 'worker:1'], [[1], [0, 2]])
    """

    def __init__(self, tasks: pd.Series):
        codes, names = codes_of(tasks)
        used, self.rows = grouped_rows(codes, len(names))
        self.names = [str(names[code]) for code in used]


def codes_of(column: pd.Series) -> tuple[np.ndarray, list]:
    """A column's codes (-1: null) and its values, in the order a sorting ``groupby``
    gives them (a categorical's category order, else sorted): a list, each value read
    in one call (a pandas index reads one value in microseconds: 1,024 tasks, many times)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(), column.cat.categories.tolist()
    codes, values = pd.factorize(column, sort=True)
    return codes, values.tolist()


def value_of_group(column: pd.Series, values: dict[str, int], default: int = 0) -> np.ndarray:
    """Each row's value of its group (``values`` by the group's name as a string, else
    ``default``, also for a null): one lookup per group, not per row.

    >>> value_of_group(pd.Series(pd.Categorical(["worker:0", None, "ps:0"])), {"ps:0": 7}).tolist()
    [0, 0, 7]
    """
    codes, names = codes_of(column)
    return np.array([values.get(str(name), default) for name in names] + [default], "int64")[codes]


def stepping_spans(steps: pd.DataFrame) -> tuple[dict[str, int], dict[str, int]]:
    """Each task's first step begin and last step end (``begin_ns``, ``end_ns``), by name:
    grouped by the task column's codes, not by a string per row (a million step rows).

    >>> stepping_spans(pd.DataFrame({"task": ["w:1", "w:0", "w:1"], "begin_ns": [5, 1, 2], "end_ns": [6, 3, 4]}))
    ({'w:0': 1, 'w:1': 2}, {'w:0': 3, 'w:1': 6})
    """
    codes, names = codes_of(steps["task"])
    known = codes >= 0
    by_code = codes[known]
    first = pd.Series(steps["begin_ns"].to_numpy()[known]).groupby(by_code).min()
    last = pd.Series(steps["end_ns"].to_numpy()[known]).groupby(by_code).max()
    return ({str(names[code]): value for code, value in first.items()},
            {str(names[code]): value for code, value in last.items()})


def grouped_rows(codes: np.ndarray, groups: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """For group codes in ``[0, groups)`` (-1: no group): the codes that occur, in order,
    and the positions of each one's rows, in table order.

    >>> used, rows = grouped_rows(np.array([2, 0, 2, -1]), 3)
    >>> used.tolist(), [positions.tolist() for positions in rows]
    ([0, 2], [[1], [0, 2]])
    """
    order = np.argsort(codes, kind="stable")
    order = order[codes[order] >= 0]
    bounds = np.searchsorted(codes[order], np.arange(groups + 1))
    used = np.flatnonzero(bounds[1:] > bounds[:-1])
    return used, [order[bounds[code]:bounds[code + 1]] for code in used]


def quantile(values: np.ndarray, q: float) -> float:
    """The ``q`` quantile of ``values`` (NaN left out; NaN if none), interpolated between
    the two nearest ranks as a pandas ``groupby(...).quantile(q)`` computes it.

    >>> quantile(np.array([10.0, 20.0, 30.0, np.nan]), 0.25)
    15.0
    """
    return sorted_quantile(np.sort(values[~np.isnan(values)]) if values.dtype.kind == "f" else np.sort(values), q)


def sorted_quantile(ordered: np.ndarray, q: float) -> float:
    """``quantile`` of values already sorted, with no NaN among them.

    >>> sorted_quantile(np.array([10, 20, 30]), 0.25)
    15.0
    """
    if len(ordered) == 0:
        return math.nan
    position = q * (len(ordered) - 1)
    low, fraction = int(position), position % 1
    if fraction == 0:
        return float(ordered[low])
    return float(ordered[low] + (ordered[low + 1] - ordered[low]) * fraction)


def median_of(values: np.ndarray) -> float:
    """The median of ``values``, NaN left out (NaN if none), as pandas computes it."""
    values = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    return float(np.median(values)) if len(values) else math.nan


def mean_of(values: np.ndarray) -> float:
    """The mean of ``values``, NaN left out (NaN if none)."""
    values = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    return float(values.sum(dtype="float64")) / len(values) if len(values) else math.nan


def sum_of(values: np.ndarray) -> float:
    """The sum of ``values`` in float64, NaN left out (0 if none)."""
    values = values[~np.isnan(values)] if values.dtype.kind == "f" else values
    return float(values.sum(dtype="float64"))
