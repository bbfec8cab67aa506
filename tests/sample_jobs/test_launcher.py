"""The local-cluster launcher: free ports, the tasks' program, and no orphans after Ctrl-C."""

from __future__ import annotations

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


@pytest.mark.cluster
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_stops_every_task(tmp_path, sig):
    logdir = tmp_path / "run"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tfdiag.sample_jobs", "ps_ctl", "--steps", "1000000", "--logdir", str(logdir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(processes_mentioning(str(logdir))) < 6:  # the launcher and its 5 tasks
            assert time.monotonic() < deadline, "the cluster did not start"
            assert launcher.poll() is None, launcher.communicate()
            time.sleep(0.2)
        time.sleep(1.0)
        launcher.send_signal(sig)
        _, stderr = launcher.communicate(timeout=30)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 130, stderr
    assert "interrupted" in stderr
    time.sleep(0.5)
    assert processes_mentioning(str(logdir)) == []
