"""Run-queue wait from schedstat (collectors/run_queue.py), read from this very process's /proc."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time

import pytest

from tfdiag.collectors.run_queue import BusiestOther, RunQueueWaits, thread_schedstats

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")


def _burn(seconds: float) -> None:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


def test_every_thread_of_this_process_is_read_and_its_cpu_time_counted():
    ready, done = threading.Event(), threading.Event()
    thread = threading.Thread(target=lambda: (ready.set(), done.wait()), daemon=True)
    thread.start()
    ready.wait()
    try:
        stats = thread_schedstats(os.getpid())
        assert threading.get_native_id() in stats and thread.native_id in stats
    finally:
        done.set()
        thread.join()
    waits = RunQueueWaits()
    assert waits.take([os.getpid()]) == {}  # the first reading is the base
    _burn(0.2)
    [(ran_ms, waited_ms)] = waits.take([os.getpid()]).values()
    # 200 ms of this thread's CPU, as the kernel's scheduler clock counts it, plus the rest of the process's.
    assert 190.0 <= ran_ms <= 1000.0 and waited_ms >= 0.0


def test_a_gone_process_is_left_out():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    waits = RunQueueWaits()
    waits.take([process.pid, os.getpid()])
    assert set(waits.take([process.pid, os.getpid()])) == {os.getpid()}


def test_the_busiest_other_process_is_named_from_the_second_scan_and_only_on_a_busy_host():
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        # Every other process on the host counted as the job's: a shared test host has busier ones.
        job = [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and int(pid) != hog.pid]
        busiest = BusiestOther(cores=os.cpu_count())
        assert busiest.take(others_pct=0.0, job_pids=job, wall_s=time.monotonic())[0] is None  # quiet: no scan
        assert busiest.take(others_pct=100.0, job_pids=job, wall_s=time.monotonic())[0] is None  # the base
        time.sleep(0.5)
        pid, name, cpu_pct = busiest.take(others_pct=100.0, job_pids=job, wall_s=time.monotonic())
        assert pid == hog.pid and name.startswith("python") and cpu_pct > 10.0 / os.cpu_count()
        pid, _, _ = busiest.take(others_pct=100.0, job_pids=[*job, hog.pid], wall_s=time.monotonic() + 0.5)
        assert pid != hog.pid  # a job process is never the hog
    finally:
        hog.kill()
        hog.wait()
    assert math.isnan(BusiestOther(cores=2).take(math.nan, [], 0.0)[2])
