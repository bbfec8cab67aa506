"""The streaming step statistics give the exact path's findings and numbers.

Each run is analysed twice: with the default row cap (these runs stay under it, so every
row is kept: the exact path) and with a cap of a few rows (counters, histograms and a
sample by step number). Counts, sums and means must be equal, percentiles within
``PERCENTILE_RELATIVE_ERROR``, and the findings the same.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from tfdiag.analysis import analyze
from tfdiag.analysis.load import RunLoader
from tfdiag.analysis.step_stats import (
    _BUCKETS,
    PERCENTILE_RELATIVE_ERROR,
    StepAccumulator,
    bucket_of,
    dense_histogram_quantiles,
    histogram_quantile,
    histogram_quantiles,
)
from tfdiag.events import KINDS

SMALL_CAP = dict(sampled_rows=16, recent_rows=8)
# The report rounds milliseconds to 3 decimals: allow that on top of the sketch's error.
ROUNDING_MS = 0.0015


def _both(path):
    exact_loader, streamed_loader = RunLoader(path), RunLoader(path, StepAccumulator(**SMALL_CAP))
    exact, streamed = exact_loader.refresh(), streamed_loader.refresh()
    assert not exact.step_counters["sampled"].any() and streamed.step_counters["sampled"].all()
    assert len(streamed.frame("step")) < len(exact.frame("step"))
    return analyze(exact).to_dict(), analyze(streamed).to_dict()


def _close(exact, streamed, relative):
    if exact is None or streamed is None:
        return exact == streamed
    return math.isclose(streamed, exact, rel_tol=relative, abs_tol=ROUNDING_MS)


def _assert_same(exact: dict, streamed: dict) -> None:
    assert [(f["kind"], f["severity"], f["tasks"]) for f in streamed["findings"]] == \
        [(f["kind"], f["severity"], f["tasks"]) for f in exact["findings"]]
    for mine, theirs in zip(streamed["findings"], exact["findings"]):
        assert _close(theirs["recommendation"]["predicted_speedup"], mine["recommendation"]["predicted_speedup"], 0.02)
    assert streamed["summary"]["steps"] == exact["summary"]["steps"]
    assert _close(exact["summary"]["examples_per_s"], streamed["summary"]["examples_per_s"], 1e-9)
    assert _close(exact["summary"]["step_time_ms"], streamed["summary"]["step_time_ms"], PERCENTILE_RELATIVE_ERROR)
    assert [w["task"] for w in streamed["workers"]] == [w["task"] for w in exact["workers"]]
    for mine, theirs in zip(streamed["workers"], exact["workers"]):
        assert (mine["steps"], mine["examples"]) == (theirs["steps"], theirs["examples"])
        assert _close(theirs["step_time_ms"]["mean"], mine["step_time_ms"]["mean"], 1e-9)
        assert _close(theirs["input_wait_frac"], mine["input_wait_frac"], 1e-9)
        for name in ("p50", "p95"):
            assert _close(theirs["step_time_ms"][name], mine["step_time_ms"][name], PERCENTILE_RELATIVE_ERROR), name
        for name, value in theirs["breakdown_ms"].items():
            assert _close(value, mine["breakdown_ms"][name], 1e-6), name


SCENARIOS = {
    "clean": lambda b: b(strategy="MultiWorkerMirroredStrategy", ps=0)
    .steps("worker:0", count=300, jitter_ms=2).steps("worker:1", count=300, jitter_ms=2),
    "straggler": lambda b: b(strategy="MultiWorkerMirroredStrategy", ps=0)
    .steps("worker:0", count=300, jitter_ms=2).steps("worker:1", count=300, step_ms=55, jitter_ms=3),
    "input_bound": lambda b: b().steps("worker:0", count=300, input_ms=14, jitter_ms=1)
    .steps("worker:1", count=300, input_ms=15, jitter_ms=1).rpc("worker:0", "ps:0", 0.3).rpc("worker:1", "ps:0", 0.3),
    "idle_between_steps": lambda b: b().steps("worker:0", count=300, closures=True)
    .steps("worker:1", count=120, idle_ms=40, closures=True).rpc("chief:0", "worker:0", 0.2, offset_ms=3)
    .rpc("chief:0", "worker:1", 0.2, offset_ms=-5),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_capped_rows_give_the_exact_findings_and_numbers(builder, name):
    path = SCENARIOS[name](builder).write(by_task=True, frame_records=25)
    exact, streamed = _both(path)
    _assert_same(exact, streamed)


def test_straggler_scenario_is_found_by_both_paths(builder):
    """The comparison above is not vacuous: the straggler run has a straggler finding."""
    exact, streamed = _both(SCENARIOS["straggler"](builder).write(by_task=True, frame_records=25))
    assert "straggler" in [f["kind"] for f in exact["findings"]]
    assert "straggler" in [f["kind"] for f in streamed["findings"]]


def test_the_sample_keeps_the_same_step_numbers_on_every_worker(builder):
    path = (builder(strategy="MultiWorkerMirroredStrategy", ps=0).steps("worker:0", count=500)
            .steps("worker:1", count=500, step_ms=30).write(by_task=True, frame_records=40))
    rows = RunLoader(path, StepAccumulator(sampled_rows=32, recent_rows=4)).refresh().frame("step")
    kept = {task: set(group["step"]) for task, group in rows.groupby("task", observed=True)}
    assert kept["worker:0"] == kept["worker:1"]
    # The sample, the recent rows (whole frames: at most one of 40 rows here) and the warm-up.
    assert len(kept["worker:0"]) <= 32 + 40 + 1 and {0, 499} <= kept["worker:0"]


def test_a_refresh_folds_only_the_new_records_into_the_same_counters(builder, tmp_path):
    """Growing a run and refreshing gives what one read of the grown run gives."""
    run = builder().steps("worker:0", count=200, jitter_ms=3)
    path = run.write(by_task=True, frame_records=30)
    loader = RunLoader(path, StepAccumulator(**SMALL_CAP))
    loader.refresh()
    run.steps("worker:0", count=150, first_step=200, start_ns=run.step_end_ns + 10**6, jitter_ms=3)
    run.grow(frame_records=30)
    again = loader.refresh().step_counters
    once = RunLoader(path, StepAccumulator(**SMALL_CAP)).refresh().step_counters
    columns = ["task", "rows", "steps", "examples", "duration_sum", "wait_sum", "first_begin_ns", "last_end_ns"]
    assert again[columns].to_dict("records") == once[columns].to_dict("records")
    assert int(again["rows"].iloc[0]) == 350
    assert np.array_equal(again["histogram"].iloc[0], once["histogram"].iloc[0])


@pytest.mark.parametrize("seed", range(3))
def test_histogram_percentiles_are_within_the_stated_error(seed):
    rng = np.random.default_rng(seed)
    values = np.concatenate([rng.gamma(16.0, 1.25e6, 5000), rng.uniform(1e3, 1e9, 50)]).astype("int64")
    counts = np.bincount(bucket_of(values))
    for q in (0.5, 0.95, 0.99):
        exact = float(np.quantile(values, q))
        assert abs(histogram_quantile(counts, q) - exact) <= PERCENTILE_RELATIVE_ERROR * exact


def test_many_histograms_read_at_once_give_each_one_s_percentiles_exactly():
    """``histogram_quantiles`` (a wide run's links and workers at once) is ``histogram_quantile``
    bit for bit: empty histograms, all-zero durations and one-value histograms among them."""
    rng = np.random.default_rng(7)
    buckets, counts, bounds, dense = [], [], [0], []
    for size in [0, 1, 2, 5, 40, 300] * 20:
        values = rng.lognormal(13, rng.uniform(0.1, 2.0), size).astype("int64")
        if rng.random() < 0.1:
            values[:] = 0
        listed, counted = np.unique(bucket_of(values), return_counts=True)
        buckets.append(listed), counts.append(counted), bounds.append(bounds[-1] + len(listed))
        dense.append(np.bincount(bucket_of(values), minlength=_BUCKETS))
    qs = (0.0, 0.25, 0.5, 0.95, 0.99, 1.0)
    read = histogram_quantiles(np.concatenate(buckets), np.concatenate(counts), np.array(bounds), qs)
    expected = np.array([[histogram_quantile(row, q) for q in qs] for row in dense])
    np.testing.assert_array_equal(read, expected)  # NaN where empty, equal elsewhere
    positive = np.stack([row for row in dense if not row[0]])  # from its first counted bucket on, as worker_table
    first = int(np.flatnonzero(positive.any(axis=0))[0])
    np.testing.assert_array_equal(dense_histogram_quantiles(positive[:, first:], qs, first),
                                  expected[[not row[0] for row in dense]])


def test_records_of_several_tasks_in_one_batch_are_kept_apart():
    schema = KINDS["step"].arrow_schema()
    batch = pa.RecordBatch.from_pylist(
        [dict(task=f"worker:{i % 2}", step=i // 2, begin_ns=i * 10, end_ns=i * 10 + 5 + i % 2, input_wait_ns=1,
              examples=4, clock_task="chief:0") for i in range(40)], schema=schema)
    accumulator = StepAccumulator()
    accumulator.add("chief-0.tfdiag", "chief:0", batch)
    counters = accumulator.counters().set_index("task")
    assert counters.loc["worker:0", "rows"] == counters.loc["worker:1", "rows"] == 20
    assert counters.loc["worker:1", "duration_sum"] == 20 * 6


@pytest.mark.parametrize("tasks", [["ab", "ab"], ["a", "bab"], ["ab", None]], ids=["same", "joined-alike", "null"])
def test_a_batch_is_one_task_only_when_every_row_names_it(tasks):
    schema = KINDS["step"].arrow_schema()
    rows = [dict(task=task, step=i, begin_ns=i * 10, end_ns=i * 10 + 5, clock_task="c") for i, task in enumerate(tasks)]
    batch = pa.RecordBatch.from_pylist([dict(task="x", step=9, begin_ns=0, end_ns=1, clock_task="c")] + rows,
                                       schema=schema).slice(1)  # a slice: its strings start past offset 0
    accumulator = StepAccumulator()
    accumulator.add("f.tfdiag", "chief:0", batch)
    counted = accumulator.counters().groupby("task")["rows"].sum().to_dict()
    assert counted == {task or "": 1 for task in tasks} if len(set(tasks)) > 1 else counted == {tasks[0]: 2}


def test_the_longest_gap_between_steps_is_exact_when_rows_are_sampled(builder):
    """A pause (a checkpoint) between two steps that the sample leaves out is still measured."""
    run = builder().steps("worker:0", count=300, step_ms=20, idle_ms=1)
    run.steps("worker:1", count=150, step_ms=20, idle_ms=1)
    paused_from = run.step_end_ns + 2_500 * 10**6
    run.steps("worker:1", count=151, step_ms=20, idle_ms=1, first_step=150, start_ns=paused_from)
    run.step_begins.pop("worker:1")
    path = run.write(by_task=True, frame_records=25)
    counters = RunLoader(path, StepAccumulator(**SMALL_CAP)).refresh().step_counters.set_index("task")
    rows = RunLoader(path).refresh().frame("step")
    exact = {task: group["end_ns"].sort_values().diff().iloc[2:].max() for task, group in rows.groupby("task", observed=True)}
    assert counters.loc["worker:1", "longest_gap_ns"] == exact["worker:1"] > 2_500 * 10**6
    assert counters.loc["worker:0", "longest_gap_ns"] == exact["worker:0"]
