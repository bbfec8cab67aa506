"""``LastWords``: the ``exit`` record a process writes as it ends, in real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfdiag.analysis import analyze
from tfdiag.analysis.load import load_run
from tfdiag.sample_jobs.jobs import JobConfig
from tfdiag.sample_jobs.launcher import LocalCluster

JOB = Path(__file__).with_name("last_words_job.py")


def _end(tmp_path, mode: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    done = subprocess.run([sys.executable, str(JOB), str(tmp_path), mode], capture_output=True, text=True, timeout=60)
    return done, load_run(tmp_path).frame("exit").to_dict("records")


def test_an_exception_leaving_the_program_is_recorded_with_the_tasks_it_blames_and_still_printed(tmp_path):
    done, [record] = _end(tmp_path, "raise")
    assert done.returncode == 1
    assert "RuntimeError: Graph execution error" in done.stderr  # Python's own hook still ran after ours
    assert (record["task"], record["reason"], record["error_type"]) == ("worker:0", "exception", "RuntimeError")
    assert record["blamed"] == "worker:1"
    assert "stopped sending heartbeats" in record["message"] and "socket closed" in record["message"]


def test_an_exception_is_announced_before_the_traceback_naming_the_task_to_blame(tmp_path):
    done, _ = _end(tmp_path, "raise")
    line = "tfdiag: worker:1 task_failure: worker:0 ends on RuntimeError, which names worker:1 as failed\n"
    assert done.stderr.count(line) == 1
    assert done.stderr.index(line) < done.stderr.index("Traceback")


def test_with_live_findings_off_nothing_is_announced(tmp_path):
    done, [record] = _end(tmp_path, "raise-quiet")
    assert record["blamed"] == "worker:1"
    assert "tfdiag:" not in done.stderr


def test_the_users_excepthook_is_chained_not_replaced(tmp_path):
    done, [record] = _end(tmp_path, "user-hook")
    assert "user hook saw RuntimeError" in done.stderr
    assert "Traceback" not in done.stderr  # the user's hook replaced Python's; ours did not bring it back
    assert record["reason"] == "exception"


def test_an_exit_with_the_collectors_open_is_recorded_once(tmp_path):
    done, [record] = _end(tmp_path, "exit")
    assert done.returncode == 3
    assert (record["reason"], record["error_type"], record["blamed"]) == ("exit", "", "")


def test_a_task_that_stops_its_collectors_says_nothing_and_restores_the_hook(tmp_path):
    done, records = _end(tmp_path, "stop")
    assert done.returncode == 0 and done.stdout.strip() == "restored"
    assert records == []


@pytest.mark.parametrize("mode", ["raise", "exit"])
def test_a_task_with_an_unwritable_logdir_ends_as_it_would_without_tfdiag(tmp_path, mode):
    logdir = tmp_path / "file"
    logdir.write_text("not a directory")
    done = subprocess.run([sys.executable, str(JOB), str(logdir), mode], capture_output=True, text=True, timeout=60)
    assert done.returncode == {"raise": 1, "exit": 3}[mode]
    if mode == "raise":
        assert "RuntimeError: Graph execution error" in done.stderr


@pytest.mark.cluster
@pytest.mark.parametrize("fault", [signal.SIGSTOP, signal.SIGKILL], ids=["stopped", "killed"])
def test_a_stopped_or_killed_mwms_worker_is_named_the_root_of_the_jobs_end(tmp_path, fault):
    """worker:1 of a MultiWorkerMirroredStrategy ``model.fit`` is stopped (or killed) mid-run;
    TensorFlow aborts worker:0 seconds later. The analysis names worker:1, not worker:0."""
    logdir = tmp_path / "run"
    cluster = LocalCluster(JobConfig("mwms_fit", str(logdir), ps=0, workers=2, steps=100_000))
    try:
        cluster.start()
        _wait_for(lambda: _steps_recorded(logdir, "worker:1") >= 20, READY_TIMEOUT_S)
        os.kill(cluster.tasks["worker:1"].process.pid, fault)
        worker_0 = cluster.tasks["worker:0"].process
        _wait_for(lambda: worker_0.poll() is not None, ABORT_TIMEOUT_S)
        [finding] = [f for f in analyze(logdir).findings if f.kind == "task_failure"]
    finally:
        if fault == signal.SIGSTOP:
            os.kill(cluster.tasks["worker:1"].process.pid, signal.SIGCONT)
        cluster.stop()
    assert finding.severity.value == "critical" and finding.tasks == ("worker:1",), finding.summary
    [victim] = finding.evidence["failed_because_of_it"]
    assert victim["task"] == "worker:0" and victim["blamed"] == ["worker:1"]
    # the process table says which: worker:1's process is stopped, or gone
    said = "is stopped (state T" if fault == signal.SIGSTOP else "is gone and wrote no last words"
    assert said in finding.evidence["root"][0]["state"], finding.evidence["root"][0]["state"]


READY_TIMEOUT_S = 120.0
# TensorFlow's coordination service declares a task unhealthy after missing heartbeats
# (6-10 s here); a killed peer resets its connections at once.
ABORT_TIMEOUT_S = 90.0


def _steps_recorded(logdir: Path, task: str) -> int:
    try:
        return len(load_run(logdir).frame("step").query("task == @task"))
    except Exception:  # noqa: BLE001 - the run is still being created
        return 0


def _wait_for(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s"
        time.sleep(0.5)
