"""The local-cluster launcher: free ports, the tasks' program, and no orphans after Ctrl-C."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tfdiag.sample_jobs.jobs import JobConfig
from tfdiag.sample_jobs.launcher import STOP_GRACE_S, LocalCluster, pick_free_ports


def test_pick_free_ports_are_distinct():
    ports = pick_free_ports(5)
    assert len(set(ports)) == 5 and all(port > 0 for port in ports)


# Prints what a task was given: its TF_CONFIG and the JobConfig after --config.
ECHO_TASK = ("import json, os, sys; "
             "print(json.dumps({'tf_config': json.loads(os.environ['TF_CONFIG']), 'argv': sys.argv[1:]}))")


def test_tasks_run_the_given_program_with_their_config(tmp_path):
    config = JobConfig("mwms_fit", str(tmp_path), workers=2, extra={"pairs": 3})
    with LocalCluster(config, task_command=[sys.executable, "-c", ECHO_TASK]) as cluster:
        assert cluster.wait(timeout_s=60) == 0
    echoed = {task: json.loads(info.log.read_text()) for task, info in cluster.tasks.items()}
    assert sorted(echoed) == ["worker:0", "worker:1"]
    for task, seen in echoed.items():
        assert seen["argv"][0] == "--config" and JobConfig.from_json(seen["argv"][1]) == config
        assert f"{seen['tf_config']['task']['type']}:{seen['tf_config']['task']['index']}" == task
        assert seen["tf_config"]["cluster"] == cluster.cluster


# A task that ignores SIGTERM, as a process stuck in a long C++ call can.
STUBBORN_TASK = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(120)"


def start_stubborn(tmp_path):
    config = JobConfig("ps_ctl", str(tmp_path), ps=1, workers=1)
    cluster = LocalCluster(config, task_command=[sys.executable, "-c", STUBBORN_TASK])
    cluster.start()
    deadline = time.monotonic() + 60
    while not all(b"up" in task.log.read_bytes() for task in cluster.tasks.values()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return cluster


def test_an_interrupted_cluster_starts_nothing(tmp_path):
    cluster = LocalCluster(JobConfig("ps_ctl", str(tmp_path)), task_command=[sys.executable, "-c", STUBBORN_TASK])
    cluster.interrupt(signal.SIGINT)
    cluster.start()
    assert cluster.tasks == {} and cluster.wait() == 130


def test_stop_kills_what_ignores_sigterm_after_the_grace_period(tmp_path):
    cluster = start_stubborn(tmp_path)
    began = time.monotonic()
    cluster.stop()
    assert STOP_GRACE_S <= time.monotonic() - began < STOP_GRACE_S + 5
    assert all(task.process.returncode == -signal.SIGKILL for task in cluster.tasks.values())
    cluster._spawn("worker", 0)  # noqa: SLF001 - a restart that comes due after stop()
    assert all(task.process.returncode is not None for task in cluster.tasks.values())


def test_a_second_interrupt_kills_at_once(tmp_path):
    cluster = start_stubborn(tmp_path)
    cluster.interrupt(signal.SIGINT)
    cluster.interrupt(signal.SIGINT)
    began = time.monotonic()
    cluster.stop()
    assert time.monotonic() - began < STOP_GRACE_S / 2
    assert all(task.process.returncode == -signal.SIGKILL for task in cluster.tasks.values())


def processes_mentioning(text):
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            if any(text in part for part in process.info["cmdline"] or ()):
                found.append(process)
        except psutil.Error:
            pass
    return found


# How to bring the launcher to each state before it is signalled: extra arguments, and
# the condition (on the run directory) that says the state is reached.
def _training(logdir):
    return (logdir / "tasks" / "progress").exists()


def _recovering(logdir):
    log = logdir / "tasks" / "worker-1.log"
    return log.exists() and b"restarted after kill-worker" in log.read_bytes()


STATES = {
    # Signalled as soon as the launcher has started its first child.
    "starting": ("ps_ctl", [], None),
    # A kill that never comes makes the chief report its progress (step 0 once warmed up).
    "training": ("ps_ctl", ["--inject", "kill-worker=1@1000000"], _training),
    # Worker 1 killed at step 5 and being started again. tf1_session: under
    # ParameterServerStrategy a kill sometimes fails the whole job (1 of 30 ps_ctl runs:
    # TensorFlow 2.21's coordinator takes a derived CancelledError for a user error), and
    # then there is nothing left to interrupt.
    "recovering": ("tf1_session", ["--inject", "kill-worker=1@5+restart"], _recovering),
}
# Every task is stopped within this long of the signal: SIGTERM, then SIGKILL after the
# launcher's STOP_GRACE_S (5 s), plus the time a loaded 2-core host takes to reap.
STOP_WITHIN_S = 10.0


def descendants(process):
    with contextlib.suppress(psutil.Error):
        return {child.pid: child for child in process.children(recursive=True)}
    return {}


# Both signals go through one handler (the launcher's ``_signals_stop``): each is sent while
# the cluster starts, and each later state is interrupted by one of them.
INTERRUPTS = [(signal.SIGINT, "starting"), (signal.SIGTERM, "starting"), (signal.SIGTERM, "training"),
              (signal.SIGINT, "recovering")]


@pytest.mark.cluster
@pytest.mark.parametrize("sig, state", INTERRUPTS, ids=[f"{sig.name}-{state}" for sig, state in INTERRUPTS])
def test_interrupt_stops_every_task(tmp_path, sig, state, record_property):
    job, extra, reached = STATES[state]
    logdir = tmp_path / "run"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tfdiag.sample_jobs", job, "--steps", "1000000", "--logdir", str(logdir), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    parent = psutil.Process(launcher.pid)
    seen = {}
    try:
        deadline = time.monotonic() + 120
        while not seen if reached is None else not reached(logdir):
            assert time.monotonic() < deadline, f"the cluster did not reach {state}"
            assert launcher.poll() is None, launcher.communicate()
            seen.update(descendants(parent))
            time.sleep(0.01 if reached is None else 0.1)
        seen.update(descendants(parent))
        signalled = time.monotonic()
        launcher.send_signal(sig)
        _, stderr = launcher.communicate(timeout=30)
        stopped_s = time.monotonic() - signalled
        record_property("stop_s", round(stopped_s, 2))  # in --junitxml reports
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 130, stderr
    assert "interrupted" in stderr
    assert stopped_s < STOP_WITHIN_S, stderr
    alive = [p for p in seen.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == [], stderr
    assert processes_mentioning(str(logdir)) == []
