"""The job's processes on this host (src/tfdiag/collectors/job_processes.py), counted by a real sampler."""

from __future__ import annotations

import math
import os
import sys
import time

from tfdiag.collectors import run_queue
from tfdiag.collectors.job_processes import JobProcesses, local_cluster_ports
from tfdiag.collectors.system import SystemSampler

from .fakes import FakeWriter


def test_only_addresses_of_this_host_give_ports():
    cluster = {"worker": ["localhost:2222", "[::1]:2223", "myhost:2224", "10.0.0.9:2225", "nohost"]}
    assert local_cluster_ports(cluster, {"myhost"}) == {2222, 2223, 2224}


# A task of the job as the sampler sees it: a process listening on a port. It burns
# BURN_S of CPU when told to (a line on stdin) and answers when done.
TASK_SCRIPT = """
import socket, sys, time
server = socket.socket()
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen()
print(server.getsockname()[1], flush=True)
for line in sys.stdin:
    until = time.process_time() + float(line)
    while time.process_time() < until:
        pass
    print("done", flush=True)
"""
BURN_S = 0.3


class _Task:
    def __init__(self, port=0):
        import subprocess

        self.process = subprocess.Popen([sys.executable, "-c", TASK_SCRIPT, str(port)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        self.port = int(self.process.stdout.readline())

    def burn(self, seconds):
        self.process.stdin.write(f"{seconds}\n")
        self.process.stdin.flush()

    def wait(self):
        assert self.process.stdout.readline().strip() == "done"

    def close(self):
        self.process.kill()
        self.process.wait()


def _sampled_cpu_seconds(sampler, action):
    """CPU seconds (own, job) the sampler counts across ``action``, and its records."""
    import psutil

    writer = sampler.writer
    before = time.monotonic()
    sampler.sample()
    middle = time.monotonic()
    action()
    after_begin = time.monotonic()
    sampler.sample()
    after_end = time.monotonic()
    record = writer.records["system"][-1]
    cores = psutil.cpu_count()
    assert record["cpu_count"] == cores
    # The sampler's own wall interval lies between these two.
    shortest, longest = after_begin - middle, after_end - before
    seconds = [(record[field] / 100 * cores * shortest, record[field] / 100 * cores * longest)
               for field in ("proc_cpu_pct", "job_cpu_pct")]
    return seconds, record


def test_the_jobs_cpu_counts_its_tasks_on_this_host_and_nothing_else(monkeypatch):
    """Two processes burn BURN_S of CPU each; only the one on a cluster port is the job's."""
    monkeypatch.setattr(run_queue, "READ_EVERY_SAMPLES", 1)  # the job processes read at every sample
    task, foreign = _Task(), _Task()
    try:
        cluster = {"chief": ["127.0.0.1:1"], "worker": [f"localhost:{task.port}", "10.255.0.9:2222"]}
        sampler = SystemSampler(FakeWriter("chief:0"), "chief:0", gpus=False, cluster=cluster)

        def burn_both():
            task.burn(BURN_S), foreign.burn(BURN_S)
            task.wait(), foreign.wait()

        ((own_low, own_high), (job_low, job_high)), record = _sampled_cpu_seconds(sampler, burn_both)
    finally:
        task.close(), foreign.close()
    assert record["pid"] == os.getpid() and record["job_processes"] == 2
    # Its threads' run-queue figures (schedstat), the task's in a job_process record of its own.
    assert record["run_ms"] >= 0.0 and record["runq_wait_ms"] >= 0.0
    [first, other] = sampler.writer.records["job_process"]  # the first only dates the second's span
    assert math.isnan(first["run_ms"]) and first["probes"] == 0
    assert other["task"] == "worker:0" and other["pid"] == task.process.pid
    assert BURN_S * 1e3 * 0.9 <= other["run_ms"] <= BURN_S * 1e3 * 1.2 and other["runq_wait_ms"] >= 0.0
    # Held by nothing: read once since the previous reading and running; no quota or its cgroup's count.
    assert (other["probes"], other["stopped_probes"]) == (1, 0)
    assert not other["throttled_ms"] > 0.0
    # The task's burn, plus this process's own share; not the foreign process's.
    assert job_low - own_high <= BURN_S * 1.2 and job_high - own_low >= BURN_S * 0.9
    assert job_high <= BURN_S * 1.2 + own_high < 2 * BURN_S


def test_a_restarted_task_is_counted_again():
    task = _Task()
    cluster = {"worker": [f"127.0.0.1:{task.port}"]}
    sampler = SystemSampler(FakeWriter("chief:0"), "chief:0", gpus=False, cluster=cluster)
    sampler.sample()
    sampler.sample()
    assert sampler.writer.records["system"][-1]["job_processes"] == 2
    task.close()
    sampler.sample()  # notices the process ended
    assert sampler.writer.records["system"][-1]["job_processes"] == 1
    restarted = _Task(task.port)  # a new process on the same port, as a restarted server
    try:
        sampler.sample()  # finds it
        sampler.sample()  # counts it from the previous sample
        assert sampler.writer.records["system"][-1]["job_processes"] == 2
    finally:
        restarted.close()


def test_without_a_cluster_the_job_is_this_process(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    writer = FakeWriter("worker:0")
    sampler = SystemSampler(writer, "worker:0", gpus=False)
    sampler.sample()
    busy_until = time.process_time() + 0.1
    while time.process_time() < busy_until:
        pass
    sampler.sample()
    first, second = writer.records["system"]
    assert math.isnan(first["job_cpu_pct"]) and math.isnan(first["proc_cpu_pct"])
    assert second["job_processes"] == 1 and second["job_cpu_pct"] == second["proc_cpu_pct"] > 0


def test_a_stopped_task_is_seen_stopped_with_its_cpu_times():
    import psutil
    import signal

    task = _Task()
    try:
        job = JobProcesses({"worker": [f"127.0.0.1:{task.port}"]}, psutil)
        job.cpu_pct()
        assert job.stopped() == {task.process.pid: False}
        task.process.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while psutil.Process(task.process.pid).status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.01)
        job.cpu_pct()
        assert job.stopped() == {task.process.pid: True}
        task.process.send_signal(signal.SIGCONT)
    finally:
        task.close()


def test_a_probe_reads_a_counted_process_state_until_it_ends():
    import psutil
    import signal

    task = _Task()
    job = JobProcesses({"worker": [f"127.0.0.1:{task.port}"]}, psutil)
    try:
        job.cpu_pct()
        pid = task.process.pid
        assert job.probe_states([pid, os.getpid()]) == {pid: False}, "only counted processes are probed"
        task.process.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while not job.probe_states([pid])[pid] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert job.probe_states([pid]) == {pid: True}
        task.process.send_signal(signal.SIGCONT)
    finally:
        task.close()
    assert job.probe_states([pid]) == {}, "an ended process is left out"
    assert job.probe_states([pid]) == {}
    job.close()


def test_a_sampler_that_wakes_probes_its_workers_states_between_samples():
    # A worker stopped for half of every 200 ms from outside: one probe a sample would see a
    # few; the sampler's timed wake-ups (every 20 ms here) probe it between samples too and
    # find it stopped about half the time.
    import signal

    task = _Task()
    writer = FakeWriter("chief:0")
    sampler = SystemSampler(writer, "chief:0", interval_s=0.5, gpus=False,
                            cluster={"worker": [f"127.0.0.1:{task.port}"]}, wake_s=0.02).start()
    try:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            task.process.send_signal(signal.SIGSTOP)
            time.sleep(0.1)
            task.process.send_signal(signal.SIGCONT)
            time.sleep(0.1)
    finally:
        sampler.stop()
        task.close()
    rows = writer.records["job_process"]
    probes, stopped = sum(row["probes"] for row in rows), sum(row["stopped_probes"] for row in rows)
    assert probes >= 40, "tens of probes a second, not one a sample"
    assert 0.3 <= stopped / probes <= 0.7


def test_a_failing_probe_of_the_workers_ends_the_probes_not_the_sampler(monkeypatch):
    def fail(self, pids):
        raise OSError("no /proc")

    monkeypatch.setattr(JobProcesses, "probe_states", fail)
    task = _Task()
    writer = FakeWriter("chief:0")
    sampler = SystemSampler(writer, "chief:0", interval_s=0.2, gpus=False,
                            cluster={"worker": [f"127.0.0.1:{task.port}"]}, wake_s=0.02).start()
    try:
        time.sleep(1.0)
    finally:
        sampler.stop()
        task.close()
    notes = [note["message"] for note in writer.records["note"]]
    assert len(notes) == 1 and "probes of the job's workers' states stopped" in notes[0]
    assert len(writer.records["system"]) >= 4, "the sampler samples on"
