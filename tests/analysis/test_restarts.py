"""restart_faults: TF1 tasks that started a new session without closing the last one."""

import pandas as pd

from tfdiag.analysis.faults import fault_table
from tfdiag.analysis.restarts import restart_faults

S = 1_000_000_000


def _sessions(*begins_s, task="worker:1"):
    return pd.DataFrame({"task": [task] * len(begins_s), "begin_ns": [int(b * S) for b in begins_s],
                         "ready_ns": [int((b + 0.5) * S) for b in begins_s]})


def _beats(times_s, closed_at=None, task="worker:1"):
    return pd.DataFrame({"task": [task] * len(times_s), "time_ns": [int(t * S) for t in times_s],
                         "closed": [t == closed_at for t in times_s]})


def test_a_worker_killed_before_its_first_step_and_restarted_is_a_recovered_failure():
    # Killed while waiting for the chief: one heartbeat (at open), no step, no clean close;
    # a new session 23 s later.
    faults = restart_faults(_sessions(10.0, 33.0), _beats([10.0, 33.0, 38.0, 43.0], closed_at=43.0))
    # Last seen when its session became ready (10.5 s), after its only beat.
    assert faults[["kind", "time_ns"]].values.tolist() == [["failure", int(10.5 * S)], ["restart", 33 * S]]
    [failure] = fault_table(faults).query("kind == 'failure'").itertuples()
    assert failure.task == "worker:1" and failure.recovered_after_s == 22.5


def test_the_failure_is_dated_by_the_last_beat_of_the_earlier_process():
    faults = restart_faults(_sessions(10.0, 40.0), _beats([10.0, 15.0, 20.0, 40.0]))
    assert faults["time_ns"].tolist() == [20 * S, 40 * S]


def test_a_step_after_the_last_beat_dates_the_failure_later():
    steps = pd.DataFrame({"task": ["worker:1", "worker:1", "worker:1"], "end_ns": [18 * S, 23 * S, 45 * S]})
    faults = restart_faults(_sessions(10.0, 40.0), _beats([10.0, 15.0, 20.0, 40.0]), steps)
    assert faults["time_ns"].tolist() == [23 * S, 40 * S]  # the later life's step at 45 s is not the earlier's


def test_a_task_that_closed_cleanly_before_its_next_session_did_not_fail():
    # A second MonitoredTrainingSession in the same job after the first closed normally.
    assert restart_faults(_sessions(10.0, 40.0), _beats([10.0, 15.0, 20.0, 40.0], closed_at=20.0)).empty


def test_one_session_per_task_or_no_heartbeats_at_all():
    # A process's heartbeats come at or after its session's start (the hook stamps it first).
    two_tasks = pd.concat([_sessions(10.0, task="worker:0"), _sessions(12.0)])
    assert restart_faults(two_tasks, _beats([12.0, 20.0])).empty
    no_beats = restart_faults(_sessions(10.0, 40.0), pd.DataFrame())
    assert no_beats["time_ns"].tolist() == [int(10.5 * S), 40 * S]  # dated by the first session's readiness


def test_a_worker_killed_before_its_session_was_ready_left_heartbeats_before_its_first_session():
    # The hook began at 10 s (a heartbeat at open, another at 15 s) and the process died
    # while its session waited for the chief: no session record. The restarted process's
    # session starts at 23 s.
    faults = restart_faults(_sessions(23.0), _beats([10.0, 15.0, 23.0, 28.0], closed_at=28.0))
    assert faults[["kind", "time_ns"]].values.tolist() == [["failure", 15 * S], ["restart", 23 * S]]
    assert "before its first session was ready" in faults["message"].iloc[0]


def test_heartbeats_before_the_first_session_that_closed_cleanly_are_no_failure():
    # A record_placement(logdir=...) call opened and closed the task's writer before the session.
    assert restart_faults(_sessions(23.0), _beats([10.0, 11.0, 23.0], closed_at=11.0)).empty


def _samples(*lives, task="worker:1", host="vm"):
    """System samples of ``task``: one (pid, [times]) per process."""
    rows = [(task, host, pid, int(t * S)) for pid, times in lives for t in times]
    return pd.DataFrame(rows, columns=["task", "host", "pid", "time_ns"])


def test_a_fit_worker_killed_and_restarted_is_a_new_process_without_a_clean_close():
    # mwms_fit kill-worker=1@50+restart: no session records; process 100 sampled until 12 s,
    # its steps ran to 12.4 s, and process 200 sampled from 18 s (its first step after).
    steps = pd.DataFrame({"task": ["worker:1"] * 3, "end_ns": [11 * S, int(12.4 * S), 19 * S]})
    system = _samples((100, [10.0, 11.0, 12.0]), (200, [18.0, 19.0, 20.0]))
    faults = restart_faults(pd.DataFrame(), _beats([10.0, 18.0, 20.5], closed_at=20.5), steps, system)
    assert faults[["task", "kind", "time_ns"]].values.tolist() == [
        ["worker:1", "failure", int(12.4 * S)], ["worker:1", "restart", 18 * S]]
    assert "new process (pid 200 on vm)" in faults["message"].iloc[0]


def test_a_new_process_after_a_clean_close_or_side_by_side_is_no_restart():
    closed_first = _beats([10.0, 12.5, 18.0], closed_at=12.5)  # the first process closed normally
    assert restart_faults(pd.DataFrame(), closed_first, None, _samples((100, [10.0, 12.0]), (200, [18.0]))).empty
    side_by_side = _samples((100, [10.0, 12.0, 14.0]), (200, [11.0, 13.0]))  # two processes claim one task
    assert restart_faults(pd.DataFrame(), _beats([10.0]), None, side_by_side).empty
    one_each = pd.concat([_samples((100, [10.0, 12.0]), task="worker:0"), _samples((200, [10.5, 12.5]))])
    assert restart_faults(pd.DataFrame(), _beats([10.0]), None, one_each).empty


def test_a_task_with_sessions_is_read_by_its_sessions_alone():
    # A TF1 worker restarted: its sessions say so; its samples' new pid is the same restart.
    system = _samples((100, [10.0, 12.0]), (200, [40.5, 41.0]))
    faults = restart_faults(_sessions(10.0, 40.0), _beats([10.0, 15.0, 20.0, 40.0]), None, system)
    assert faults["kind"].tolist() == ["failure", "restart"] and faults["time_ns"].tolist() == [20 * S, 40 * S]
