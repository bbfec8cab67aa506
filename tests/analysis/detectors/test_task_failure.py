"""task_failure's prediction: the run at the throughput it had while every worker was up.

Records go through the real store writer (the ``builder`` fixture) and the whole analysis.
"""

import math
import socket

import psutil
import pytest

from tfdiag.analysis import analyze
from tests.runs import MS, START_NS

S = 1000 * MS


def _killed_and_back(builder, alone_ms: float):
    """worker:1 steps 0-1 s, fails at 1 s, is back at 2.5 s and steps 3-5 s; worker:0 steps
    all along, one step every ``alone_ms`` while worker:1 is gone, every 20 ms otherwise."""
    run = builder()
    run.steps("worker:0", count=50, step_ms=19)
    alone = int((2 * S - MS) // (alone_ms * MS))
    run.steps("worker:0", count=alone, step_ms=alone_ms - 1, first_step=50, start_ns=START_NS + S)
    run.steps("worker:0", count=100, step_ms=19, first_step=50 + alone, start_ns=START_NS + 3 * S)
    run.steps("worker:1", count=50, step_ms=19)
    run.steps("worker:1", count=100, step_ms=19, first_step=50, start_ns=START_NS + 3 * S)
    return run.fault("worker:1", "failure", 1000).fault("worker:1", "restart", 2500), alone


def _task_failure(run):
    return next(f for f in analyze(run.write()).findings if f.kind == "task_failure")


def test_a_survivor_that_steps_faster_alone_lowers_what_the_failure_cost(builder):
    # A shared host: worker:0 steps every 11 ms alone against 20 ms beside worker:1. With
    # both up the run made 100 steps/s; from the failure (1 s) to worker:1's second step
    # after its restart (3.02 s) it made worker:0's alone steps and worker:1's warm-up.
    run, alone = _killed_and_back(builder, alone_ms=11)
    finding = _task_failure(run)
    restored = finding.evidence["all_workers_up"]
    assert restored["steps_per_s"] == pytest.approx(100, rel=0.01)
    assert restored["affected_s"] == pytest.approx(2.02, abs=0.01)
    assert restored["steps_while_affected"] == alone + 2
    repaired_s = 5.0 - 2.02 + (alone + 2) / 100
    assert finding.recommendation.predicted_speedup == pytest.approx(5.0 / repaired_s, rel=0.01)
    # Counting worker:1 as half the capacity for its 1.5 s away would predict 5 / 4.25.
    assert finding.recommendation.predicted_speedup < 1.1


def test_workers_on_hosts_of_their_own_cost_their_share_of_the_capacity(builder):
    # worker:0 steps as fast alone: the window model is the capacity model over the time
    # from the failure to worker:1 stepping again (2.02 s at half the capacity).
    run, _ = _killed_and_back(builder, alone_ms=20)
    finding = _task_failure(run)
    assert finding.recommendation.predicted_speedup == pytest.approx(5.0 / (5.0 - 2.02 / 2), rel=0.01)


def test_no_window_with_every_worker_up_falls_back_to_the_capacity_model(builder):
    # worker:1 fails at once and never steps: no window has both workers.
    run = builder().steps("worker:0", count=100, step_ms=19).fault("worker:1", "failure", 0)
    finding = _task_failure(run)
    assert "all_workers_up" not in finding.evidence
    assert finding.recommendation.predicted_speedup == pytest.approx(2.0, rel=0.02)


def test_a_clean_run_has_no_task_failure(builder):
    run = builder().steps("worker:0", count=100, step_ms=19).steps("worker:1", count=100, step_ms=19)
    assert all(f.kind != "task_failure" for f in analyze(run.write()).findings)


def test_two_records_of_one_failure_at_the_same_time_cut_one_life(builder):
    # The coordinator can log a worker's failure twice at once; the lives are the same.
    run, _ = _killed_and_back(builder, alone_ms=20)
    run.fault("worker:1", "failure", 1000)
    assert _task_failure(run).recommendation.predicted_speedup == pytest.approx(5.0 / (5.0 - 2.02 / 2), rel=0.01)


def test_a_worker_killed_after_one_step_and_back_for_a_few_is_a_failure_not_a_straggler(builder):
    # TF1 at 200 steps: worker:1 warms up, steps once, is killed at 0.4 s and restarted at
    # 1.7 s, and steps 3 times (slowly, after its restart) before the run ends. Its records
    # span the run, but it was away for 1.3 s of it: too little presence to judge it.
    run = builder(strategy=None).steps("worker:0", count=100, step_ms=20)
    run.steps("worker:1", count=2, step_ms=150, idle_ms=50)
    run.steps("worker:1", count=3, step_ms=100, first_step=2, start_ns=START_NS + 1800 * MS)
    run.fault("worker:1", "failure", 400).fault("worker:1", "restart", 1700)
    report = analyze(run.write())
    assert report.primary.kind == "task_failure" and report.primary.tasks == ("worker:1",)
    assert "straggler" not in [f.kind for f in report.findings]


def _samples(run, task, pid, from_s, to_s):
    """``system`` records of one process of ``task``, every 0.5 s from ``from_s`` to ``to_s``."""
    for i in range(int((to_s - from_s) / 0.5) + 1):
        run.record("system", host="vm", task=task, time_ns=START_NS + int((from_s + i * 0.5) * S),
                   cpu_pct=50.0, mem_used_frac=0.5, net_sent_bytes=0, net_recv_bytes=0,
                   disk_read_bytes=0, disk_write_bytes=0, pid=pid)


def test_a_restarted_fit_worker_is_named_by_its_new_process(builder):
    # mwms_fit kill-worker=1@50+restart: synchronous steps 0-1 s; worker:1's process is
    # killed, worker:0's fails after it, both come back as new processes at 2.5 s and step
    # from 3 s. No coordinator, no session: only the system samples' pids say so.
    run = builder(strategy="MultiWorkerMirroredStrategy", ps=0, chief=False)
    for task, pids in (("worker:0", (10, 12)), ("worker:1", (11, 13))):
        run.steps(task, count=50, step_ms=19)
        run.steps(task, count=100, step_ms=19, first_step=0, start_ns=START_NS + 3 * S)
        _samples(run, task, pids[0], 0.0, 1.0 if task == "worker:1" else 1.5)
        _samples(run, task, pids[1], 2.5, 5.0)
    finding = _task_failure(run)
    assert finding.tasks == ("worker:1", "worker:0")
    assert [f["recovered_after_s"] for f in finding.evidence["failures"]] == [1.5, 1.0]
    restored = finding.evidence["all_workers_up"]
    assert restored["steps_per_s"] == pytest.approx(100, rel=0.02)  # both workers' step records
    # 5 s run; from the failure (1 s) to the second step after the restart (3.02 s) nothing
    # but the warm-up ran: about 3 s at the all-up throughput.
    assert finding.recommendation.predicted_speedup == pytest.approx(5.0 / 3.0, rel=0.03)


def test_a_fit_worker_with_one_process_has_no_failure(builder):
    run = builder(strategy="MultiWorkerMirroredStrategy", ps=0, chief=False)
    for task, pid in (("worker:0", 10), ("worker:1", 11)):
        run.steps(task, count=100, step_ms=19)
        _samples(run, task, pid, 0.0, 2.0)
    assert "task_failure" not in [f.kind for f in analyze(run.write()).findings]


@pytest.fixture
def dead_process(sleeper):
    """``(pid, start_ns)`` of a real process that has ended: what a killed task's samples name."""
    started_ns = int(psutil.Process(sleeper.pid).create_time() * 1e9)
    sleeper.kill()
    sleeper.wait()
    return sleeper.pid, started_ns


def _tf1_worker_gone(builder, dead_process, worker_1_until_s: float, worker_0_until_s: float,
                     steps_until_s: float = math.inf):
    """TF1: worker:1's process (samples naming the dead process) writes until
    ``worker_1_until_s``, worker:0 (samples naming no process) until ``worker_0_until_s``;
    each steps while it writes, up to ``steps_until_s``."""
    pid, started_ns = dead_process
    run = builder(strategy=None)
    for task, until_s in (("worker:0", worker_0_until_s), ("worker:1", worker_1_until_s)):
        run.steps_until(task, START_NS + int(min(until_s, steps_until_s) * S))
        run.heartbeats(task, until_ms=until_s * 1000, subjects=(task,))
    run.system(socket.gethostname(), "worker:1", cpu_pct=50.0, count=int(worker_1_until_s * 2), every_ms=500.0,
               pid=pid, pid_start_ns=started_ns)
    return run


def test_a_task_whose_process_went_while_the_job_worked_is_named(builder, dead_process):
    finding = _task_failure(_tf1_worker_gone(builder, dead_process, worker_1_until_s=20, worker_0_until_s=40))
    assert finding.title == "worker:1 died without last words" and finding.tasks == ("worker:1",)
    [died] = finding.evidence["died"]  # worker:0 writes on: the job goes on without it ("root": the job's end)
    assert died["task"] == "worker:1" and "is gone" in died["state"]


def test_a_process_that_went_after_the_job_stopped_or_another_failed_is_no_root(builder, dead_process):
    # Every step ended by 20 s; worker:1 beat on to 40 s without one: it went with a hung job.
    hung = _tf1_worker_gone(builder, dead_process, worker_1_until_s=40, worker_0_until_s=40, steps_until_s=20)
    assert all("died without last words" not in f.title for f in analyze(hung.write()).findings)
    # worker:0 failed (its fault record) at 10 s; worker:1 was killed after it.
    after = _tf1_worker_gone(builder, dead_process, worker_1_until_s=20, worker_0_until_s=40).fault(
        "worker:0", "failure", 10_000)
    assert all("died without last words" not in f.title for f in analyze(after.write()).findings)
