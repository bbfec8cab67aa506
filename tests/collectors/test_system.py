"""System sampler: host counters, NVML through a fake pynvml, and degradation paths."""

from __future__ import annotations

import math
import os
import sys
import time
import types

import pyarrow as pa
import pytest

from tfdiag.collectors import system
from tfdiag.collectors.system import SystemSampler
from tfdiag.store import TaskWriter, log_dir, read_task_file

from .fakes import FakeWriter


class NVMLError(Exception):
    pass


def fake_pynvml(gpus=2, power_fails=False, init_error=None):
    """A stand-in for ``pynvml`` with the calls the sampler makes."""
    calls = {"init": 0, "shutdown": 0}

    def init():
        calls["init"] += 1
        if init_error:
            raise init_error

    def power(handle):
        if power_fails:
            raise NVMLError("Not Supported")
        return 250_000 + handle  # milliwatts

    module = types.SimpleNamespace(
        NVML_CLOCK_SM=1,
        nvmlInit=init,
        nvmlShutdown=lambda: calls.__setitem__("shutdown", calls["shutdown"] + 1),
        nvmlDeviceGetCount=lambda: gpus,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=40 + h, memory=10),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=(h + 1) * 2**30, total=80 * 2**30, free=0),
        nvmlDeviceGetPowerUsage=power,
        nvmlDeviceGetClockInfo=lambda h, kind: 1410.0 if kind == 1 else 0.0,
    )
    return module, calls


def test_host_and_gpu_records(monkeypatch):
    module, calls = fake_pynvml(gpus=2, power_fails=True)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    writer = FakeWriter("worker:0")
    sampler = SystemSampler(writer, "worker:0", interval_s=0.05)
    sampler.sample()
    busy_until = time.process_time() + 0.1  # several clock ticks of CPU between the samples
    while time.process_time() < busy_until:
        pass
    sampler.sample()
    sampler.stop()
    system = writer.records["system"]
    assert len(system) == 2 and system[0]["task"] == "worker:0"
    assert math.isnan(system[0]["cpu_pct"]) and 0 < system[1]["cpu_pct"] <= 100
    assert 0 < system[1]["mem_used_frac"] < 1 and system[1]["net_sent_bytes"] >= system[0]["net_sent_bytes"]
    gpu = writer.records["gpu"]
    assert [(g["index"], g["util_pct"], g["mem_used_bytes"], g["sm_clock_mhz"]) for g in gpu[:2]] == [
        (0, 40.0, 2**30, 1410.0), (1, 41.0, 2**31, 1410.0)]
    assert all(math.isnan(g["power_w"]) for g in gpu)  # NotSupported → NaN, not an error
    assert gpu[0]["tf_mem_peak_bytes"] is None
    assert len(gpu) == 4 and calls == {"init": 1, "shutdown": 1}
    assert "note" not in writer.records


def test_missing_nvml_is_noted_once(monkeypatch):
    module, calls = fake_pynvml(init_error=NVMLError("NVML Shared Library Not Found"))
    monkeypatch.setitem(sys.modules, "pynvml", module)
    writer = FakeWriter("worker:0")
    sampler = SystemSampler(writer, "worker:0", interval_s=0.02).start()
    time.sleep(0.2)
    sampler.stop()
    assert len(writer.records["system"]) >= 3 and calls["init"] == 1
    notes = writer.records["note"]
    assert len(notes) == 1 and "NVML Shared Library Not Found" in notes[0]["message"]


def test_real_pynvml_without_driver_is_noted(monkeypatch):
    writer = FakeWriter("worker:0")
    SystemSampler(writer, "worker:0").sample()
    assert len(writer.records["system"]) == 1
    # Here: NVMLError_LibraryNotFound (no driver); on a GPU host, gpu records instead.
    assert len(writer.records["note"]) + len(writer.records["gpu"]) >= 1


def test_gpu_error_mid_run_stops_gpu_sampling_only(monkeypatch):
    module, _ = fake_pynvml(gpus=1)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    writer = FakeWriter("worker:0")
    sampler = SystemSampler(writer, "worker:0")
    sampler.sample()
    module.nvmlDeviceGetMemoryInfo = None  # a TypeError inside sample(): not an NVMLError
    module.nvmlDeviceGetUtilizationRates = lambda h: 1 / 0
    sampler._nvml.sample = lambda index: 1 / 0
    sampler.sample()
    sampler.sample()
    assert len(writer.records["system"]) == 3 and len(writer.records["gpu"]) == 1
    assert len(writer.records["note"]) == 1


def test_unwritable_logdir_is_survived(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    writer = TaskWriter(blocker, "worker:0", flush_interval_s=0.01)
    sampler = SystemSampler(writer, "worker:0", interval_s=0.01).start()
    time.sleep(0.1)
    sampler.stop()
    writer.close()
    assert sampler.samples >= 3 and writer.dropped_records > 0


def test_records_round_trip_through_the_store(tmp_path, monkeypatch):
    module, _ = fake_pynvml(gpus=1)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    writer = TaskWriter(tmp_path, "worker:0")
    sampler = SystemSampler(writer, "worker:0")
    sampler.sample()
    sampler.sample()
    writer.close()
    batches = read_task_file(log_dir(tmp_path) / "worker-0.tfdiag").batches
    gpu = pa.Table.from_batches(batches["gpu"]).to_pandas()
    assert gpu["power_w"].tolist() == [250.0, 250.0] and "tf_mem_peak_bytes" in gpu.columns
    assert pa.Table.from_batches(batches["system"]).num_rows == 2


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801 - pynvml's name
    pass


def test_a_gpu_lost_mid_run_is_noted_once_and_host_sampling_goes_on(monkeypatch):
    module, calls = fake_pynvml(gpus=2)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    writer = FakeWriter("worker:0")
    sampler = SystemSampler(writer, "worker:0")
    sampler.sample()

    def lost(*args):
        raise NVMLError_GpuIsLost("GPU is lost")

    for name in ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetPowerUsage",
                 "nvmlDeviceGetClockInfo"):
        setattr(module, name, lost)
    for _ in range(3):
        sampler.sample()
    assert len(writer.records["system"]) == 4 and len(writer.records["gpu"]) == 2  # the first sample's
    notes = writer.records["note"]
    assert len(notes) == 1 and "GPU is lost" in notes[0]["message"]
    assert calls["shutdown"] == 1


def test_an_nvml_init_error_of_any_type_is_noted_once(monkeypatch):
    module, _ = fake_pynvml(init_error=OSError("libnvidia-ml.so.1: cannot open shared object file"))
    monkeypatch.setitem(sys.modules, "pynvml", module)
    writer = FakeWriter("worker:0")
    sampler = SystemSampler(writer, "worker:0")
    for _ in range(3):
        sampler.sample()
    assert len(writer.records["system"]) == 3 and "gpu" not in writer.records
    assert len(writer.records["note"]) == 1 and "libnvidia-ml.so.1" in writer.records["note"][0]["message"]


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


def test_the_jobs_cpu_counts_its_tasks_on_this_host_and_nothing_else():
    """Two processes burn BURN_S of CPU each; only the one on a cluster port is the job's."""
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


def test_a_sampler_held_to_a_cgroups_cpu_quota_counts_the_kernels_throttled_time():
    # A real CFS quota (benchmarks/faults.py: 5 ms of CPU in every 50 ms) on a child that
    # spins while its sampler runs: the kernel throttles it most of each period, and the
    # samples after the move count that time (the first one after it cannot: NaN).
    import json
    import subprocess

    from benchmarks import faults

    child = subprocess.Popen([sys.executable, "-m", "tests.collectors.stopped_sampler", "3", "spin"],
                             stdout=subprocess.PIPE, text=True)
    try:
        child.stdout.readline()
        quota = faults.cgroup_quota(child.pid, on_ms=5, off_ms=45)
    except OSError as error:
        child.kill()
        child.wait()
        pytest.skip(f"no writable cgroup with the cpu controller here: {error}")
    with quota:
        assert system.cgroup_cpu_stat(child.pid) == str(quota.cgroup / "cpu.stat")
        output = child.communicate(timeout=60)[0]
    throttled_ms = [json.loads(line)["throttled_ms"] for line in output.splitlines()]
    counted = [value for value in throttled_ms if not math.isnan(value)]
    assert len(counted) >= 2
    assert sum(counted) >= 0.5 * 500 * (len(counted) - 1)


def test_a_malformed_proc_cgroup_line_is_skipped(monkeypatch, tmp_path):
    proc, root = tmp_path / "cgroup", tmp_path / "sys-fs-cgroup"
    stat = root / "cpu,cpuacct" / "job1" / "cpu.stat"
    stat.parent.mkdir(parents=True)
    stat.write_text("nr_throttled 0\nthrottled_time 0\n")
    monkeypatch.setattr(system, "CGROUP_ROOT", str(root))
    real_open = open

    def open_proc_as(path, *args, **kwargs):
        return real_open(proc if path == "/proc/7/cgroup" else path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", open_proc_as)
    proc.write_text("garbage without colons\n1:cpu\n")
    assert system.cgroup_cpu_stat(7) is None
    proc.write_text("garbage without colons\n4:cpu,cpuacct:/job1\n1:cpu\n")  # the well-formed line still counts
    assert system.cgroup_cpu_stat(7) == str(stat)


def test_throttled_time_is_read_from_cgroup_v1_and_v2(tmp_path):
    v2, v1, none = tmp_path / "v2", tmp_path / "v1", tmp_path / "none"
    v2.write_text("usage_usec 100\nnr_throttled 3\nthrottled_usec 2500\n")
    v1.write_text("nr_periods 10\nnr_throttled 3\nthrottled_time 2500000\n")
    none.write_text("usage_usec 100\n")
    assert system.throttled_usec(str(v2)) == system.throttled_usec(str(v1)) == 2500.0
    assert math.isnan(system.throttled_usec(str(none)))
    assert math.isnan(system.throttled_usec(str(tmp_path / "missing")))


def test_only_a_sampler_asked_to_times_its_wake_ups():
    writer = FakeWriter("worker:0")
    sampler = SystemSampler(writer, "worker:0", interval_s=0.1, gpus=False, cluster={}).start()
    time.sleep(0.35)
    sampler.stop()
    untimed = writer.records["system"]
    assert len(untimed) >= 2 and all(s["wakes"] is None and s["late_wakes"] is None for s in untimed)
    writer = FakeWriter("worker:0")
    sampler = SystemSampler(writer, "worker:0", interval_s=0.1, gpus=False, cluster={}, wake_s=0.02).start()
    time.sleep(0.35)
    sampler.stop()
    assert sum(s["wakes"] for s in writer.records["system"][1:]) >= 5


def test_the_disk_counters_are_psutils_sum_over_storage_devices():
    import psutil

    from tfdiag.collectors.system import StorageDisks

    if not psutil.disk_io_counters(perdisk=True):
        pytest.skip("no disk counters here (/proc/diskstats): the sampler writes 0")
    disks = StorageDisks(psutil)
    for _ in range(3):
        before, ours, after = psutil.disk_io_counters(), disks.read_write_bytes(), psutil.disk_io_counters()
        assert before.read_bytes <= ours[0] <= after.read_bytes
        assert before.write_bytes <= ours[1] <= after.write_bytes


def test_a_paused_sampler_takes_no_samples_and_no_wake_ups():
    writer = FakeWriter("worker:0")
    sampler = SystemSampler(writer, "worker:0", interval_s=0.1, gpus=False, cluster={}, wake_s=0.02)
    paused = True
    sampler.paused = lambda: paused
    sampler.start()
    time.sleep(0.35)
    assert writer.records["system"] == [] and sampler._wakes.take()[0] == 0  # noqa: SLF001
    paused = False
    time.sleep(0.35)
    sampler.stop()
    assert len(writer.records["system"]) >= 2 and sum(s["wakes"] for s in writer.records["system"]) >= 5


def test_the_threads_wake_ups_are_charged_to_system():
    from tfdiag.collectors.budget import LEDGER

    sampler = SystemSampler(FakeWriter("worker:0"), "worker:0", interval_s=3600, gpus=False, cluster={}, wake_s=0.01)
    sampler.start()
    time.sleep(0.3)  # past the first sample: from here on only wake-ups
    before, wakes = LEDGER.snapshot()["system"], sampler._wakes._wakes  # noqa: SLF001
    time.sleep(0.3)
    charged_ns, woke = LEDGER.snapshot()["system"] - before, sampler._wakes._wakes - wakes  # noqa: SLF001
    sampler.stop()
    assert woke >= 5 and charged_ns > 0
