"""A window's step timing read from the segments is the records' own where segments are records."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tfdiag.analysis.step_stats import StepAccumulator
from tfdiag.analysis.step_windows import WINDOW_COLUMNS, window_counters
from tfdiag.events import KINDS

OFFSET_NS = 7_000  # worker:1's clock runs this far ahead of the reference


def _records(task: str, step_ns: int, count: int, shift_ns: int = 0) -> list[dict]:
    return [dict(task=task, step=i, begin_ns=i * 1_000 + shift_ns, end_ns=i * 1_000 + step_ns + shift_ns,
                 input_wait_ns=0, examples=8, steps=1, clock_task=task) for i in range(count)]


@pytest.fixture
def counters():
    """Two workers, worker:1 folded first and on a clock of its own; one record a segment."""
    accumulator = StepAccumulator(segments=4096)
    schema = KINDS["step"].arrow_schema()
    for task, step_ns, shift_ns in (("worker:1", 600, OFFSET_NS), ("worker:0", 300, 0)):
        batch = pa.RecordBatch.from_pylist(_records(task, step_ns, 50, shift_ns), schema=schema)
        accumulator.add(f"{task}.tfdiag", task, batch)
    return accumulator.counters()


def test_a_window_counts_the_records_inside_it_and_a_share_of_those_across_its_edges(counters):
    window = window_counters(counters, {"worker:1": OFFSET_NS}, 10_000.0, 20_150.0).set_index("task")
    assert list(window.index) == ["worker:0", "worker:1"]  # by task, whatever order they were folded in
    # worker:0: records at 10,000 ... 20,000 (300 ns each); the one at 20,000 is half inside.
    assert window.loc["worker:0", "records"] == pytest.approx(10.5)
    assert window.loc["worker:0", "examples"] == pytest.approx(8 * 10.5)
    assert window.loc["worker:0", "p50_ns"] == 300
    assert window.loc["worker:0", "period_ns"] == pytest.approx((20_000 - 10_000) / 9.5)
    # worker:1, on the reference clock: records at 10,000 ... 20,000 of 600 ns; the last a quarter inside.
    assert window.loc["worker:1", "records"] == pytest.approx(10.25)
    assert window.loc["worker:1", "mean_ns"] == pytest.approx(600)
    assert window.loc["worker:1", "last_end_ns"] == 20_150.0


def test_a_task_with_no_record_in_the_window_has_no_timing(counters):
    window = window_counters(counters, {}, 200_000.0, 300_000.0)
    assert list(window.columns) == WINDOW_COLUMNS
    assert window["records"].tolist() == [0.0, 0.0] and window["p50_ns"].isna().all()


def test_no_counters_no_rows():
    assert window_counters(StepAccumulator().counters(), {}, 0.0, 1.0).empty
