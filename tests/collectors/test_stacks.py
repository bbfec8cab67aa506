"""``StackDumps`` in a real process: stacks when stuck, and on the signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tfdiag.store.paths import stacks_path

JOB = Path(__file__).with_name("stacks_job.py")


def _wait_for(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s"
        time.sleep(0.1)


def _dumps(path: Path) -> list[str]:
    return path.read_text().split("--- tfdiag: ")[1:] if path.exists() else []


def test_a_stuck_task_writes_where_it_waits_once_and_again_on_the_signal(tmp_path):
    path = stacks_path(tmp_path, "worker:0")
    job = subprocess.Popen([sys.executable, str(JOB), str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().strip() == "blocked"
        _wait_for(lambda: len(_dumps(path)) == 1)
        [stuck] = _dumps(path)
        assert stuck.startswith("stacks of worker:0 (no progress for 1 s)")
        assert "in stuck_in_a_collective" in stuck  # where the training thread waits, named
        time.sleep(1.0)
        assert len(_dumps(path)) == 1  # once per stall
        os.kill(job.pid, signal.SIGUSR1)
        _wait_for(lambda: path.read_text().count("in stuck_in_a_collective") == 2)  # from the handler itself
        assert job.poll() is None  # the signal did not end it (its default would)
    finally:
        job.kill()
        job.wait()
