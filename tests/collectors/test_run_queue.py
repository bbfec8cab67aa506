"""Run-queue wait from schedstat (src/tfdiag/collectors/run_queue.py), read from this very process's /proc."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time

import pytest

from tfdiag.collectors.run_queue import (READ_EVERY_SAMPLES, SCAN_EVERY_SAMPLES, BusiestOther, JobProcessReads,
                                         RunQueueWaits, thread_schedstats)

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


@pytest.mark.alone
def test_the_busiest_other_process_is_named_from_the_second_scan_and_only_on_a_busy_host():
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        # Every other process on the host counted as the job's: a shared test host has busier ones.
        job = [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and int(pid) != hog.pid]
        busiest = BusiestOther(cores=os.cpu_count())
        assert busiest.take(others_pct=0.0, job_pids=job, wall_s=time.monotonic())[0] is None  # quiet: no scan
        # Listed again just before the base scan: a busy shared host starts processes meanwhile.
        job = [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and int(pid) != hog.pid]
        assert busiest.take(others_pct=100.0, job_pids=job, wall_s=time.monotonic())[0] is None  # the base
        time.sleep(0.5)
        pid, name, cpu_pct = busiest.take(others_pct=100.0, job_pids=job, wall_s=time.monotonic())
        # Its share is what the scheduler left it: on the shared host at load 13, 3 % of 2 cores.
        assert pid == hog.pid and name.startswith("python") and cpu_pct > 0.0
        pid, _, _ = busiest.take(others_pct=100.0, job_pids=[*job, hog.pid], wall_s=time.monotonic() + 0.5)
        assert pid != hog.pid  # a job process is never the hog
    finally:
        hog.kill()
        hog.wait()
    assert math.isnan(BusiestOther(cores=2).take(math.nan, [], 0.0)[2])


def test_job_processes_are_read_every_few_samples_and_their_stops_counted_in_between():
    """Workers only (a ps's figures are used by nothing); a reading covers the samples since the
    previous one; a worker's first reading primes its counts; the host scanned on other samples."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        reads = JobProcessReads(cores=2)
        others = {child.pid: "worker:1", os.getppid(): "ps:0"}
        n = READ_EVERY_SAMPLES
        taken = [reads.take(os.getpid(), others, {child.pid: turn in (n + 1, n + 2), os.getppid(): False}, 0.0,
                            float(turn)) for turn in range(2 * n + 1)]
    finally:
        child.kill()
        child.wait()
    rows = {turn: rows for turn, (_, _, rows) in enumerate(taken) if rows}
    assert list(rows) == [0, n, 2 * n]  # turn 0 primes: a row without figures dates the span
    assert [(row["task"], row["pid"], row["probes"], row["stopped_probes"]) for turn in rows for row in rows[turn]] \
        == [("worker:1", child.pid, 0, 0), ("worker:1", child.pid, n, 0), ("worker:1", child.pid, n, 2)]
    assert math.isnan(rows[0][0]["run_ms"])
    assert all(row["run_ms"] >= 0.0 and row["runq_wait_ms"] >= 0.0 for row in rows[n] + rows[2 * n])
    own = [turn for turn, ((ran, _), _, _) in enumerate(taken) if not math.isnan(ran)]
    assert own == [n, 2 * n]
    # A scan and a reading never share a sample.
    turns = range(2 * READ_EVERY_SAMPLES * SCAN_EVERY_SAMPLES)
    assert not any(t % READ_EVERY_SAMPLES == 0 and t % SCAN_EVERY_SAMPLES == SCAN_EVERY_SAMPLES // 2 for t in turns)


def test_the_samplers_last_sample_is_a_reading_whatever_its_turn():
    """The probes counted since the previous reading are written at the sampler's stop, not lost."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        reads = JobProcessReads(cores=2)
        others = {child.pid: "worker:1"}
        reads.take(os.getpid(), others, {child.pid: False}, 0.0, 0.0)  # turn 0: primes
        reads.probed({child.pid: True})  # a wake-up's probe found it stopped
        (own, _, off_turn) = reads.take(os.getpid(), others, {child.pid: True}, 0.0, 1.0)
        (own_last, _, last) = reads.take(os.getpid(), others, {child.pid: True}, 0.0, 2.0, reading=True)
    finally:
        child.kill()
        child.wait()
    assert off_turn == []  # turn 1 is no reading's
    assert math.isnan(own[0]) and not math.isnan(own_last[0])
    assert [(row["probes"], row["stopped_probes"]) for row in last] == [(3, 3)]
