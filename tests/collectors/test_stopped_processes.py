"""Timed wake-ups (src/tfdiag/collectors/stopped_processes.py): a stopped process wakes late."""

from __future__ import annotations

import os
import sys
import time

from tfdiag.collectors.stopped_processes import WakeTimer
from tfdiag.events import LATE_WAKE_S


def test_a_wake_up_late_by_late_wake_s_counts_as_late():
    timer = WakeTimer(wake_s=0.05)
    timer.woke(asked_s=0.05, slept_s=0.05 + LATE_WAKE_S * 0.9)
    timer.woke(asked_s=0.05, slept_s=0.05 + LATE_WAKE_S)
    assert timer.take()[:2] == (2, 1)
    assert timer.take() == (0, 0, 0.0)


def _wake_counts(lines: str) -> tuple[int, int]:
    import json

    samples = [json.loads(line) for line in lines.splitlines() if line.startswith("{")]
    return sum(s["wakes"] for s in samples), sum(s["late_wakes"] for s in samples)


def test_a_process_stopped_40_ms_in_100_wakes_late_where_a_running_one_does_not():
    # Two real children run a sampler; one is stopped (SIGSTOP) 40 ms of every 100 ms, as a
    # CPU quota would. Its wake-ups come late in about 40 % x (1 - 10/40) = 30 % of cases
    # (24-27 % of about 90 in 2.5 s at load 2), the running one's in none.
    import signal
    import subprocess

    command = [sys.executable, "-m", "tests.collectors.stopped_sampler", "4"]
    stopped, running = (subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2))
    try:
        for child in (stopped, running):
            child.stdout.readline()  # its first sample: the sampler runs
        deadline = time.monotonic() + 3.5
        while time.monotonic() < deadline and stopped.poll() is None:
            os.kill(stopped.pid, signal.SIGSTOP)
            time.sleep(0.04)
            os.kill(stopped.pid, signal.SIGCONT)
            time.sleep(0.06)
    finally:
        os.kill(stopped.pid, signal.SIGCONT)
    outputs = [child.communicate(timeout=30)[0] for child in (stopped, running)]  # the samples after the first
    (stopped_wakes, stopped_late), (running_wakes, running_late) = map(_wake_counts, outputs)
    assert stopped_wakes >= 100 and running_wakes >= 100
    assert stopped_late / stopped_wakes >= 0.15
    assert running_late / running_wakes <= 0.5 * stopped_late / stopped_wakes
