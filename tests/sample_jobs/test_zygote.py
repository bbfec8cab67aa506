"""The local cluster's tasks, forked from one process that imported TensorFlow once."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tfdiag.sample_jobs.jobs import JobConfig
from tfdiag.sample_jobs.launcher import LocalCluster
from tfdiag.sample_jobs.zygote import close_shared, shared_pids


def _wait_for(condition, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s"
        time.sleep(0.1)


@pytest.mark.cluster
def test_tasks_are_forked_processes_that_serve_report_their_end_and_stop_with_the_cluster(tmp_path):
    cluster = LocalCluster(JobConfig("ps_ctl", str(tmp_path / "run"), ps=1, workers=1))
    try:
        cluster.start(job_tasks=False)
        ps, worker = cluster.tasks["ps:0"], cluster.tasks["worker:0"]
        zygote = psutil.Process(ps.process.pid).parent()
        assert "tfdiag.sample_jobs.zygote" in zygote.cmdline()
        assert psutil.Process(worker.process.pid).parent().pid == zygote.pid
        assert os.getpgid(ps.process.pid) == ps.process.pid  # a group of its own: the launcher signals groups
        # Each serves its own address, from its own TF_CONFIG, and writes its own log.
        _wait_for(lambda: b"serving at" in ps.log.read_bytes() and b"serving at" in worker.log.read_bytes())
        assert cluster.cluster["ps"][0].encode() in ps.log.read_bytes()
        assert cluster.cluster["worker"][0].encode() in worker.log.read_bytes()
        assert ps.process.poll() is None
        psutil.Process(ps.process.pid).send_signal(signal.SIGKILL)
        _wait_for(lambda: ps.process.poll() is not None, 10)
        assert ps.process.returncode == -signal.SIGKILL  # as subprocess reports a signal
    finally:
        cluster.stop()
    assert worker.process.returncode == -signal.SIGTERM


@pytest.mark.cluster
def test_the_next_cluster_forks_from_the_same_zygote_which_ends_when_closed(tmp_path, monkeypatch):
    def serve_one(name: str) -> int:
        cluster = LocalCluster(JobConfig("ps_ctl", str(tmp_path / name), ps=1, workers=1))
        try:
            cluster.start(job_tasks=False)
            return psutil.Process(cluster.tasks["ps:0"].process.pid).parent().pid
        finally:
            cluster.stop()

    first = serve_one("first")
    assert first in shared_pids() and psutil.Process(first).is_running()
    assert serve_one("second") == first  # TensorFlow imported once for both
    monkeypatch.setenv("TFDIAG_ZYGOTE_TEST", "another environment")  # read at import: another zygote
    other = serve_one("third")
    assert other != first and {first, other} <= shared_pids()
    close_shared()
    assert not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE


def test_a_child_that_catches_sigterm_dies_with_its_parent():
    # A MultiWorkerMirroredStrategy worker catches SIGTERM (TensorFlow's preemption
    # notice) and trains on: the parent's death must kill it, not ask it to stop.
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "from tfdiag.sample_jobs.zygote import die_with\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
        "signal.signal(signal.SIGTERM, lambda *_: None); print(flush=True); time.sleep(120)'], "
        "preexec_fn=die_with(__import__('os').getpid()), stdout=subprocess.PIPE)\n"
        "child.stdout.readline()\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n")], stdout=subprocess.PIPE, text=True)
    try:
        child = psutil.Process(int(parent.stdout.readline()))
        assert child.is_running()
        parent.kill()
        parent.wait()
        _wait_for(lambda: not child.is_running() or child.status() == psutil.STATUS_ZOMBIE, 10)
    finally:
        parent.kill()
