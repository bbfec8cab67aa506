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
from tfdiag.sample_jobs.launcher import LocalCluster, pick_free_ports


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
    "starting": ([], None),
    # A kill that never comes makes the chief report its progress (step 0 once warmed up).
    "training": (["--inject", "kill-worker=1@1000000"], _training),
    # Worker 1 killed at step 5 and being started again.
    "recovering": (["--inject", "kill-worker=1@5+restart"], _recovering),
}
# Every task is stopped within this long of the signal: SIGTERM, then SIGKILL after the
# launcher's STOP_GRACE_S (5 s), plus the time a loaded 2-core host takes to reap.
STOP_WITHIN_S = 10.0


def descendants(process):
    with contextlib.suppress(psutil.Error):
        return {child.pid: child for child in process.children(recursive=True)}
    return {}


@pytest.mark.cluster
@pytest.mark.parametrize("state", list(STATES))
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_stops_every_task(tmp_path, sig, state, record_property):
    extra, reached = STATES[state]
    logdir = tmp_path / "run"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tfdiag.sample_jobs", "ps_ctl", "--steps", "1000000", "--logdir", str(logdir), *extra],
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
