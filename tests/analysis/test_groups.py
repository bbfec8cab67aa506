"""Numpy groups give pandas' groupby numbers: order of the groups, median, quantiles, means, sums."""

import numpy as np
import pandas as pd
import pytest

from tfdiag.analysis.groups import TaskGroups, grouped_rows, mean_of, median_of, quantile, sum_of


def _frames(count=60, seed=0):
    """Small frames of a few tasks, as a live window holds: categorical (categories in no
    particular order, one unused) or plain strings; integer or float values with NaN."""
    rng = np.random.default_rng(seed)
    for trial in range(count):
        rows = int(rng.integers(1, 40))
        tasks = [f"worker:{i}" for i in rng.permutation(4)[: int(rng.integers(1, 4))]]
        names = rng.choice(tasks, rows)
        column = pd.Categorical(names, categories=tasks + ["ps:0"]) if trial % 2 else names
        values = rng.integers(0, 10**9, rows).astype("float64")
        if trial % 3 == 0:
            values[rng.random(rows) < 0.3] = np.nan
        yield pd.DataFrame({"task": column, "value": values})


def test_groups_come_in_groupby_order_with_their_rows():
    for frame in _frames():
        groups = TaskGroups(frame["task"])
        expected = frame.groupby("task", sort=True, observed=True).indices
        assert groups.names == [str(name) for name in expected]
        assert [rows.tolist() for rows in groups.rows] == [rows.tolist() for rows in expected.values()]


@pytest.mark.parametrize("q", [0.25, 0.5, 0.95, 0.99])
def test_quantiles_and_medians_are_pandas_numbers_exactly(q):
    for frame in _frames():
        groups = TaskGroups(frame["task"])
        values = frame["value"].to_numpy()
        grouped = frame.groupby("task", sort=True, observed=True)["value"]
        assert [quantile(values[rows], q) for rows in groups.rows] == pytest.approx(
            grouped.quantile(q).tolist(), rel=0, abs=0, nan_ok=True)
        assert [median_of(values[rows]) for rows in groups.rows] == pytest.approx(
            grouped.median().tolist(), rel=0, abs=0, nan_ok=True)
        assert [mean_of(values[rows]) for rows in groups.rows] == pytest.approx(grouped.mean().tolist(), nan_ok=True)
        assert [sum_of(values[rows]) for rows in groups.rows] == pytest.approx(grouped.sum().tolist())


def test_rows_without_a_group_are_left_out():
    used, rows = grouped_rows(np.array([1, -1, 1, 0]), 3)
    assert used.tolist() == [0, 1] and [r.tolist() for r in rows] == [[3], [0, 2]]
    groups = TaskGroups(pd.Series(pd.Categorical(["worker:0", None, "worker:0"])))
    assert groups.names == ["worker:0"] and groups.rows[0].tolist() == [0, 2]
    assert np.isnan(quantile(np.array([np.nan]), 0.5)) and np.isnan(median_of(np.zeros(0)))
    assert np.isnan(mean_of(np.zeros(0))) and sum_of(np.array([np.nan])) == 0.0
