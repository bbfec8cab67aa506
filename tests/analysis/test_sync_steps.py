"""Per-worker own times of synchronous steps, and the step they predict."""

from __future__ import annotations

import doctest

import pandas as pd
import pytest

from tfdiag.analysis import sync_steps
from tfdiag.analysis.sync_steps import own_times, shared_ns, speedup_with_own, stopped_shares


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


S = 1_000_000_000


def _system(task, late, throttled_ms=None, start_s=0):
    """One sample a second from ``start_s``, 10 wake-ups each, ``late[i]`` of them late."""
    return pd.DataFrame({"task": task, "time_ns": [(start_s + i) * S for i in range(len(late))], "wakes": 10,
                         "late_wakes": late, "late_ms": [20.0 * n for n in late],
                         "throttled_ms": throttled_ms or [float("nan")] * len(late)})


def test_only_the_samples_taken_while_the_worker_stepped_count():
    # Stepping from 2 s to 5 s: the samples at 3, 4 and 5 s count (each covers the second
    # before it); the start-up's late wake-ups (tracing, the cluster's start) do not.
    system = _system("worker:0", [0, 9, 9, 2, 3, 4, 9, 9])
    steps = pd.DataFrame({"task": ["worker:0"] * 2, "begin_ns": [2 * S, 3 * S], "end_ns": [3 * S, 5 * S]})
    row = stopped_shares(system, steps).iloc[0]
    assert (row["wakes"], row["late_wakes"], row["span_ns"]) == (30, 9, 3 * S)
    assert row["stopped_share"] == pytest.approx(0.3)


def test_the_sample_after_the_last_step_holds_the_last_steps_wake_ups():
    # Stepping from 0 to 4.5 s; the sampler's last sample, at its stop (4.6 s), covers 4 to
    # 4.6 s: a worker stopped over the run's last second shows there, and only there.
    system = _system("worker:0", [0, 0, 0, 0, 0]).assign(wakes=[0, 10, 10, 10, 10])
    last = pd.DataFrame({"task": ["worker:0"], "time_ns": [int(4.6 * S)], "wakes": [4], "late_wakes": [3],
                         "late_ms": [400.0], "throttled_ms": [float("nan")]})
    steps = pd.DataFrame({"task": ["worker:0"], "begin_ns": [0], "end_ns": [int(4.5 * S)]})
    row = stopped_shares(pd.concat([system, last], ignore_index=True), steps).iloc[0]
    assert (row["wakes"], row["late_wakes"], row["span_ns"]) == (44, 3, int(4.6 * S))


def test_cgroup_throttling_counts_where_it_exceeds_the_late_wake_ups():
    system = _system("worker:1", [0, 1, 1, 1], throttled_ms=[0.0, 400.0, 400.0, 400.0])
    steps = pd.DataFrame({"task": ["worker:1"], "begin_ns": [0], "end_ns": [3 * S]})
    assert stopped_shares(system, steps)["stopped_share"].tolist() == [pytest.approx(0.4)]


@pytest.mark.parametrize("columns", [{}, {"wakes": None, "late_wakes": None, "late_ms": None, "throttled_ms": None}])
def test_a_log_without_wake_up_counts_gives_an_empty_table(columns):
    # Written before the counts: no such columns, or (read with today's schema) nulls.
    system = pd.DataFrame({"task": ["worker:0"] * 2, "time_ns": [S, 2 * S], "cpu_pct": [50.0] * 2,
                           **{name: [value] * 2 for name, value in columns.items()}})
    steps = pd.DataFrame({"task": ["worker:0"], "begin_ns": [0], "end_ns": [3 * S]})
    assert stopped_shares(system, steps).empty
