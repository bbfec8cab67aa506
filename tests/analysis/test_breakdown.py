"""Step and worker tables: warm-up steps, multi-step records, periods without sorting."""

import pandas as pd
import pytest

from tfdiag.analysis.breakdown import closure_tail_ns, step_table, worker_table

MS = 1_000_000


def _records(task, durations_ms, gap_ms=1.0, steps=None, shuffle=False):
    rows, begin = [], 0
    for i, duration in enumerate(durations_ms):
        rows.append({"task": task, "step": i, "begin_ns": begin, "end_ns": begin + int(duration * MS),
                     "input_wait_ns": int(duration * MS) // 4, "examples": 32, "clock_task": task,
                     "steps": steps})
        begin += int((duration + gap_ms) * MS)
    frame = pd.DataFrame(rows)
    return frame.sample(frac=1, random_state=0) if shuffle else frame


def test_warmup_step_is_left_out_of_timing_but_counted():
    table = worker_table(step_table(_records("worker:0", [500, 10, 10, 10, 10]), {}))
    [row] = table.itertuples()
    assert row.steps == 5 and row.examples == 160
    assert row.mean_ns == pytest.approx(10 * MS)
    assert row.period_ns == pytest.approx(11 * MS)
    assert row.input_wait_frac == pytest.approx(0.25)


def test_period_does_not_depend_on_row_order():
    ordered = worker_table(step_table(_records("worker:0", [50] + [10] * 20), {}))
    shuffled = worker_table(step_table(_records("worker:0", [50] + [10] * 20, shuffle=True), {}))
    assert shuffled["period_ns"].iloc[0] == pytest.approx(ordered["period_ns"].iloc[0])


def test_a_record_of_ten_steps_is_timed_per_step():
    table = step_table(_records("worker:0", [100, 100, 100], gap_ms=10, steps=10), {})
    assert table["duration_ns"].tolist() == [10 * MS] * 3
    [row] = worker_table(table).itertuples()
    assert row.steps == 30
    assert row.period_ns == pytest.approx(11 * MS)


def test_closure_tail_is_the_median_from_a_closures_end_to_its_result():
    steps = pd.DataFrame({"task": ["worker:0", "worker:0", "worker:0", "worker:1"], "step": [0, 1, 2, 0],
                          "end_ns": [100, 200, 300, 100]})
    closures = pd.DataFrame({"worker": ["worker:0", "worker:0", "worker:0", "worker:1", ""],
                             "closure_id": [0, 1, 2, 0, 3], "result_ns": [110, 230, 320, 90, 500]})
    tail = closure_tail_ns(steps, closures)
    # worker:0: tails 10, 30, 20 -> 20; worker:1's result "before" its end (clock skew) is 0;
    # the failed closure (no worker, no step) pairs with nothing.
    assert tail.to_dict() == {"worker:0": 20.0, "worker:1": 0.0}
    assert closure_tail_ns(steps.iloc[:0], closures).empty
