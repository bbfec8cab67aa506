"""``tfdiag watch``: follows a run until it closes (0), fails or goes silent (1), or hangs (3)."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from tests.runs import RunBuilder
from tfdiag.cli import main
from tfdiag.watch import watch

UNHEALTHY = "Collective ops is aborted by: The following tasks are unhealthy:\n/job:worker/replica:0/task:1"


def _run(tmp_path) -> RunBuilder:
    run = RunBuilder(tmp_path / "run", strategy="MultiWorkerMirroredStrategy", workers=2, ps=0, chief=False)
    return run.steps("worker:0").steps("worker:1")


def test_a_watch_started_before_its_run_waits_for_it(tmp_path):
    """The run appears after the watch started (its records' times are the builder's, long
    past: a live run is followed in the cluster test below)."""
    run, views, path = _run(tmp_path), [], tmp_path / "appears"
    watcher = threading.Thread(target=lambda: views.append(watch(str(path), views.append, interval_s=0.1)))
    watcher.start()
    run.heartbeats("worker:0", until_ms=2_000, closed=True).heartbeats("worker:1", until_ms=2_000, closed=True)
    run.write(by_task=True).rename(path)  # whole, at once
    watcher.join(30)
    *shown, status = views
    assert status.state == "closed" and not watcher.is_alive()
    assert "waiting for the run to appear" in shown[0]
    assert [p["steps"] for p in status.progress] == [100, 100]
    assert "worker:0  100 steps" in shown[-1]


@pytest.mark.parametrize("ending, state, code", [
    ("exit", "failed", 1), ("nothing", "silent", 1), ("stall", "hung", 3)])
def test_the_exit_status_says_how_the_job_ended(tmp_path, capsys, ending, state, code):
    run = _run(tmp_path)
    if ending == "exit":
        run.exit("worker:0", 3_000.0, message=UNHEALTHY, blamed=("worker:1",))
    if ending == "stall":  # both workers beat on for a minute after their last step
        run.heartbeats("worker:0", until_ms=60_000, subjects=("worker:0",))
        run.heartbeats("worker:1", until_ms=60_000, subjects=("worker:1",))
    else:
        run.heartbeats("worker:0", until_ms=2_000).heartbeats("worker:1", until_ms=2_000)
    run.write(by_task=True)
    assert main(["watch", str(run.path), "--interval", "0.1"]) == code
    out, err = capsys.readouterr()
    assert out.startswith(f"tfdiag watch {run.path}: {state} (")
    assert f"tfdiag watch: {state}:" in err


def test_a_watch_that_times_out_on_a_running_job_exits_0(tmp_path, capsys):
    assert main(["watch", str(tmp_path / "not-yet"), "--interval", "0.1", "--timeout", "0.3"]) == 0
    assert "waiting for the run to appear" in capsys.readouterr().out


@pytest.mark.cluster
def test_watch_follows_a_live_sample_job_to_its_clean_close(tmp_path):
    logdir = tmp_path / "run"
    job = subprocess.Popen([sys.executable, "-m", "tfdiag.cli", "sample", "ps_ctl", "--ps", "1", "--workers", "2",
                            "--steps", "300", "--logdir", str(logdir)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    try:
        watched = subprocess.run([sys.executable, "-m", "tfdiag.cli", "watch", str(logdir), "--interval", "1",
                                  "--timeout", "180"], capture_output=True, text=True, timeout=240)
    finally:
        job.wait(60)
    assert watched.returncode == 0, watched.stderr
    assert ": running (" in watched.stdout and ": closed (" in watched.stdout
    assert "worker:0" in watched.stdout and "worker:1" in watched.stdout
