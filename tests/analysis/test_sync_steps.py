"""Per-worker own times of synchronous steps, and the step they predict."""

from __future__ import annotations

import doctest

import pandas as pd
import pytest

from tfdiag.analysis import sync_steps
from tfdiag.analysis.sync_steps import own_times, shared_ns, speedup_with_own


def test_the_docstring_examples_hold():
    assert doctest.testmod(sync_steps).failed == 0


def _steps(compute: dict, input_ns=1.0, step_ns=64.0):
    rows = []
    for step in range(3):
        for task, value in compute.items():
            rows.append(dict(task=task, step=step, begin_ns=100.0 * step, end_ns=100.0 * step + step_ns,
                             input_wait_ns=input_ns, compute_ns=None if step == 0 else value, examples=8))
    return pd.DataFrame(rows)


def test_records_without_a_compute_stamp_do_not_count():
    own = own_times(_steps({"worker:0": 4.0, "worker:1": 44.0}))
    assert own["records"].tolist() == [2, 2]
    assert own["own_ns"].tolist() == [5.0, 45.0]


def test_no_stamp_at_all_gives_an_empty_table():
    assert own_times(_steps({"worker:0": None, "worker:1": None})).empty
    assert own_times(_steps({"worker:0": 4.0}).drop(columns="compute_ns")).empty


def test_the_step_keeps_its_shared_part_when_the_slowest_own_time_shrinks():
    own = own_times(_steps({"worker:0": 4.0, "worker:1": 44.0}))
    assert shared_ns(own) == 19.0
    # Worker 1 as fast as worker 0: 19 + 5 = 24 of 64.
    assert speedup_with_own(own, pd.Series([5.0, 5.0], index=own.index)) == pytest.approx(64 / 24)
    # Only the fast worker faster: the step does not move.
    assert speedup_with_own(own, pd.Series([1.0, 45.0], index=own.index)) == pytest.approx(1.0)
