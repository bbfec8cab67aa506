"""``processes``: the process table asked about tasks that left no last words — real
processes, stopped and killed, and a real one-process ``mirrored`` job."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from tfdiag.analysis import analyze
from tfdiag.analysis.job_status import FAILED, HUNG, job_status
from tfdiag.analysis.load import load_run
from tfdiag.analysis.processes import GONE, SAME_START_NS, STOPPED, ProcessTable, ended_processes
from tfdiag.sample_jobs.jobs import JobConfig
from tfdiag.sample_jobs.launcher import LocalCluster


def _samples(process: subprocess.Popen | None = None, pid: int | None = None, started_ns: int | None = None,
             host: str | None = None, task: str = "worker:0") -> pd.DataFrame:
    """One ``system`` sample naming a process (``process``'s own start time by default)."""
    pid = process.pid if process is not None else pid
    if started_ns is None:
        started_ns = int(psutil.Process(pid).create_time() * 1e9)
    return pd.DataFrame({"task": [task], "host": [host or socket.gethostname()], "pid": [pid],
                         "pid_start_ns": [started_ns], "time_ns": [time.time_ns()]})


def test_a_running_process_is_not_listed_a_stopped_one_is(sleeper):
    samples = _samples(sleeper)
    assert ended_processes(samples, set(), set(), ProcessTable.take()) == {}
    os.kill(sleeper.pid, signal.SIGSTOP)
    try:
        _until(lambda: psutil.Process(sleeper.pid).status() == psutil.STATUS_STOPPED)
        [end] = ended_processes(samples, set(), set(), ProcessTable.take()).values()
    finally:
        os.kill(sleeper.pid, signal.SIGCONT)
    assert (end.task, end.pid, end.state) == ("worker:0", sleeper.pid, STOPPED)
    assert "is stopped" in end.describe()


def test_a_killed_process_is_gone_reaped_or_not(sleeper):
    samples = _samples(sleeper)
    sleeper.kill()
    _until(lambda: psutil.Process(sleeper.pid).status() == psutil.STATUS_ZOMBIE)  # not reaped yet
    assert ended_processes(samples, set(), set(), ProcessTable.take())["worker:0"].state == GONE
    sleeper.wait()
    assert ended_processes(samples, set(), set(), ProcessTable.take())["worker:0"].state == GONE


def test_a_pid_held_by_a_later_process_is_gone():
    mine = psutil.Process()
    earlier = int(mine.create_time() * 1e9) - 10**10  # the task's process started 10 s before this one
    [end] = ended_processes(_samples(pid=mine.pid, started_ns=earlier), set(), set(), ProcessTable.take()).values()
    assert end.state == GONE


def test_only_tasks_without_last_words_on_this_host_with_a_start_time_are_asked(sleeper):
    samples = _samples(sleeper)
    sleeper.kill()
    sleeper.wait()
    assert ended_processes(samples, exited={"worker:0"}, closed=set(), table=ProcessTable.take()) == {}
    assert ended_processes(samples, exited=set(), closed={"worker:0"}, table=ProcessTable.take()) == {}
    assert ended_processes(samples.assign(host="another-host"), set(), set(), ProcessTable.take()) == {}
    before_the_column = samples.assign(pid_start_ns=None)  # logs written before the start time was
    assert ended_processes(before_the_column, set(), set(), ProcessTable.take()) == {}


def test_the_table_is_the_one_taken_before_the_read(sleeper):
    """A process that ends after the table was taken (a task that closes and exits while its
    file is read) is judged by the table: running, not killed; a later table finds it gone."""
    samples = _samples(sleeper)
    before = ProcessTable.take()
    sleeper.kill()
    sleeper.wait()
    assert ended_processes(samples, set(), set(), before) == {}
    assert ended_processes(samples, set(), set(), ProcessTable.take())["worker:0"].state == GONE
    asked = ProcessTable.take([sleeper.pid])  # a table of a few pids says nothing of the others
    assert ended_processes(samples, set(), set(), asked)["worker:0"].state == GONE
    assert ended_processes(_samples(pid=os.getpid()), set(), set(), asked) == {}


def test_a_process_started_after_the_table_is_not_asked_about():
    table = ProcessTable.take()
    later = _samples(pid=2**62, started_ns=table.taken_ns)  # no table taken before it started can hold it
    assert ended_processes(later, set(), set(), table) == {}
    earlier = later.assign(pid_start_ns=table.taken_ns - 2 * SAME_START_NS)
    assert ended_processes(earlier, set(), set(), table)["worker:0"].state == GONE


def test_a_damaged_pid_is_not_asked_about():
    samples = _samples(pid=os.getpid())
    for pid in (-5, 0):  # psutil raises on a negative pid, and pid 0 is never a task's
        assert ended_processes(samples.assign(pid=pid), set(), set(), ProcessTable.take()) == {}
    [end] = ended_processes(samples.assign(pid=2**62), set(), set(), ProcessTable.take()).values()  # past any pid: no such process
    assert end.state == GONE


@pytest.mark.cluster
@pytest.mark.parametrize("fault", [signal.SIGSTOP, signal.SIGKILL], ids=["stopped", "killed"])
def test_a_one_process_mirrored_job_stopped_or_killed_is_named(tmp_path, fault):
    """Nothing of the job is left to write: the process table names worker:0 and the job's state."""
    logdir = tmp_path / "run"
    cluster = LocalCluster(JobConfig("mirrored", str(logdir), ps=0, workers=1, steps=100_000))
    try:
        cluster.start()
        # two heartbeats (a lone beat is no rhythm to judge by: ``stalled``), a sample naming the process
        _until(lambda: _rows(logdir, "heartbeat") >= 2 and _rows(logdir, "system") >= 1, READY_TIMEOUT_S)
        os.kill(cluster.tasks["worker:0"].process.pid, fault)
        time.sleep(0.5)
        report = analyze(logdir)
        status = job_status(report, load_run(logdir), time.time_ns())
    finally:
        if fault == signal.SIGSTOP:
            os.kill(cluster.tasks["worker:0"].process.pid, signal.SIGCONT)
        cluster.stop()
    [finding] = [f for f in report.findings if f.severity.value == "critical"]
    assert finding.tasks == ("worker:0",), finding.title
    if fault == signal.SIGKILL:
        assert finding.kind == "task_failure" and finding.title == "worker:0 died without last words"
        assert "is gone" in finding.evidence["root"][0]["state"] and status.state == FAILED
    else:
        assert finding.kind == "stalled" and finding.evidence["state"] == "every_task_stopped"
        assert finding.evidence["stopped_processes"][0]["task"] == "worker:0" and status.state == HUNG


READY_TIMEOUT_S = 120.0


def _rows(logdir: Path, kind: str) -> int:
    try:
        return len(load_run(logdir).frame(kind))
    except Exception:  # noqa: BLE001 - the run is still being created
        return 0


def _until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s"
        time.sleep(0.05)


def test_a_process_table_that_cannot_be_listed_asks_about_no_process(monkeypatch):
    """A host whose process table cannot be read (no /proc, a sandbox): no task is judged by it."""
    def denied(*args, **kwargs):
        raise psutil.AccessDenied()

    monkeypatch.setattr(psutil, "process_iter", denied)
    table = ProcessTable.take()
    assert table.asked == frozenset() and table.state(2**62, 0) is None
