"""A mid-run onset is one of progress: the fault starts once the job has done a share of its
steps, read from the run's own records while they are written (``benchmarks/trial_run.py``,
``benchmarks/harness/progress.py``)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
import time

import pytest

from benchmarks.harness import faults
from benchmarks.harness.progress import Progress, training_span
from benchmarks.trial_judge import judge
from benchmarks.trial_run import _after_onset, _cgroup_held, describe_onset
from benchmarks.trial_space import JOB_DEFS, Trial
from tests.runs import RunBuilder

MS = 1_000_000


def _trial(job="gen_fit", onset="mid", task="worker:1") -> Trial:
    return Trial(7, job, "stop-duty", task, 2.0, None, onset, 0, False, False)


def _grow(run: RunBuilder, workers, chunks: int, per_chunk: int, every_s: float, stop=None, progress=None):
    """Grows ``run`` as a job writes: every ``every_s`` each worker's next ``per_chunk`` steps
    (5 ms each, ending now), appended to its file; ``progress`` gets the steps written."""
    for chunk in range(chunks):
        if stop is not None and stop.is_set():
            return
        now = time.time_ns()
        for worker in workers:
            run.steps(worker, count=per_chunk, step_ms=5.0, idle_ms=1.0, first_step=chunk * per_chunk,
                      start_ns=now - per_chunk * 6 * MS)
        run.grow()
        if progress is not None:
            progress.append((chunk + 1) * per_chunk)
        time.sleep(every_s)


def test_progress_reads_only_what_the_files_gained_counting_steps_and_closures(tmp_path):
    run = RunBuilder(tmp_path / "run", workers=2)
    run.steps("worker:0", count=30, closures=True).steps("worker:1", count=10, closures=True, steps_per_record=4)
    run.write(by_task=True)
    progress = Progress(run.path).poll()
    assert progress.steps == {"worker:0": 30, "worker:1": 40} and progress.closures == 40
    # Asynchronous: the workers' steps add up; a closure of 10 steps counts 10.
    assert progress.job_steps(False) == 70 and progress.job_steps(False, closure_steps=10) == 400
    assert progress.job_steps(True) == 40  # synchronous: each worker ran the job's every step
    run.steps("worker:0", count=20, first_step=30, closures=True).grow()
    assert progress.poll().steps == {"worker:0": 50, "worker:1": 40} and progress.closures == 60
    assert progress.poll().steps["worker:0"] == 50  # nothing new: nothing counted twice


def test_a_mid_run_onset_starts_the_fault_once_a_third_of_the_steps_are_recorded(tmp_path):
    # gen_fit: both workers run every one of its 150 steps; the fault is due after 50.
    trial = _trial()
    assert trial.spec.synchronous and trial.spec.onset_steps == 50
    run = RunBuilder(tmp_path / "run", strategy="MultiWorkerMirroredStrategy", workers=2, ps=0, chief=False)
    written, started, onset = [], [], {}
    grower = threading.Thread(target=_grow, args=(run, ("worker:0", "worker:1"), 15, 10, 0.15),
                              kwargs={"progress": written})
    with _after_onset(trial, run.path, onset, lambda: started.append(written[-1]) or "handle", lambda _: None):
        grower.start()
        grower.join()
    assert started, onset
    # Started after a third of the steps were recorded, well before the last of them.
    assert 50 <= started[0] < 150 and onset["by"] == "progress" and 50 <= onset["onset_step"] < 150
    described = describe_onset(onset, run.path, trial.task, trial.fault)
    assert described["over"] == "worker:1" and described["before_end_s"] > 0 and described["after_start_s"] > 0
    assert 0 < described["steps_after"] <= 100
    result = {"runs": {"fault": {"findings": [], "examples_per_s": 1.0, "onset": described}}, "load1": [1.0], "cores": 2}
    verdict = judge(trial.to_dict(), result)
    assert not verdict["never_ran"] and verdict["recalled"] is False  # it ran: not found is a miss


def test_a_cgroup_hold_starts_at_the_onset_with_a_quota_of_the_cpu_used_before_it(tmp_path):
    trial = dataclasses.replace(_trial(), holder="cgroup", strength=2.0)
    run = RunBuilder(tmp_path / "run", strategy="MultiWorkerMirroredStrategy", workers=2, ps=0, chief=False)
    worker = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # one core while it may
    onset = {}
    try:
        try:
            faults.cgroup_quota.of_cores(worker.pid, 1.0).stop()
        except OSError as error:
            pytest.skip(f"no writable cgroup with the cpu controller here: {error}")
        with _cgroup_held(trial, run.path, onset, worker.pid):
            _grow(run, ("worker:0", "worker:1"), 15, 10, 0.25)
    finally:
        worker.kill()
        worker.wait()
    # The meter ran from the job's start: the quota came at the onset, half the core used before it.
    assert onset["by"] == "progress" and 50 <= onset["onset_step"] < 150
    assert 0.5 <= onset["demand_cores"] <= 1.1 and onset["quota_cores"] == pytest.approx(onset["demand_cores"] / 2, abs=1e-3)
    assert onset["throttled_s"] > 0


def test_a_job_that_ends_before_its_onset_never_starts_the_fault_and_the_judge_says_so(tmp_path):
    # tf1_feed: the workers share its 1500 steps; 200 of them end the run before step 500.
    trial = _trial("tf1_feed", task="worker:0")
    assert not trial.spec.synchronous and trial.spec.onset_steps == 500
    run = RunBuilder(tmp_path / "run", workers=2, ps=2, chief=False)
    started, onset = [], {}
    with _after_onset(trial, run.path, onset, lambda: started.append(1), lambda _: None):
        _grow(run, ("worker:0", "worker:1"), 5, 20, 0.1)
    assert not started and onset["onset_time_ns"] is None and onset["rule"] == "0.333 of 1500 steps"
    described = describe_onset(onset, run.path, trial.task, trial.fault)
    assert described["training_last_ns"] == training_span(run.path, "worker:0").last_ns
    result = {"runs": {"fault": {"findings": [], "examples_per_s": 1.0, "onset": described}}, "load1": [1.0], "cores": 2}
    verdict = judge(trial.to_dict(), result)
    assert verdict["never_ran"] and verdict["recalled"] is None and verdict["located"] is None


def test_a_start_onset_starts_the_fault_at_once(tmp_path):
    started, onset = [], {}
    with _after_onset(_trial(onset="start"), tmp_path / "run", onset, lambda: started.append(1), lambda _: None):
        assert started == [1] and onset["by"] == "start" and onset["onset_time_ns"] is not None


def test_every_job_reaches_its_onset_inside_its_run():
    for job in JOB_DEFS.values():
        assert 0 < job.onset_steps < job.steps


def test_an_onset_is_read_against_the_planted_workers_training_but_a_stop_against_the_jobs(tmp_path):
    # worker:1 stepped for 1 s, worker:0 for 3 s; the onset came at 2 s.
    run = RunBuilder(tmp_path / "run", workers=2)
    now = time.time_ns()
    run.steps("worker:0", count=100, step_ms=29.0, start_ns=now).steps("worker:1", count=50, step_ms=19.0, start_ns=now)
    run.write(by_task=True)
    onset = {"rule": "0.333 of 400 steps", "target_step": 134, "by": "progress", "onset_step": 140,
             "onset_time_ns": now + 2 * 10**9}
    duty = describe_onset(onset, run.path, "worker:1", "stop-duty")
    assert duty["over"] == "worker:1" and duty["before_end_s"] < 0 and duty["steps_after"] == 0
    stop = describe_onset(onset, run.path, "worker:1", "stop")  # a stop ends its worker's steps itself
    assert stop["over"] == "job" and stop["before_end_s"] > 0 and stop["steps_after"] > 0
    proxy = describe_onset(onset, run.path, "ps:0", "proxy")
    assert proxy["over"] == "job" and proxy["before_end_s"] == stop["before_end_s"]
    verdicts = [judge(_trial().to_dict() | {"fault": fault}, {"runs": {"fault": {"findings": [], "examples_per_s": 1.0,
                                                                                 "onset": described}},
                                                                "load1": [1.0], "cores": 2})
                for fault, described in (("stop-duty", duty), ("stop", stop))]
    assert [v["never_ran"] for v in verdicts] == [True, False]
