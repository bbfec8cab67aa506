"""System sampler: host counters, NVML through a fake pynvml, and degradation paths."""

from __future__ import annotations

import math
import os
import sys
import time
import types

import psutil
import pyarrow as pa
import pytest

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
    assert system[0]["pid"] == os.getpid()  # the process, named with its start for the analysis's process check
    assert abs(system[0]["pid_start_ns"] - psutil.Process().create_time() * 1e9) <= 1e9
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


def test_a_process_start_the_platform_will_not_give_is_left_null(monkeypatch):
    def denied(self):
        raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(psutil.Process, "create_time", denied)
    writer = FakeWriter("worker:0")
    sampler = SystemSampler(writer, "worker:0", interval_s=0.05, gpus=False)
    sampler.sample()
    sampler.sample()
    sampler.stop()
    assert [row["pid_start_ns"] for row in writer.records["system"]] == [None, None]  # sampling went on
    assert "note" not in writer.records


def test_unwritable_logdir_is_survived(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    writer = TaskWriter(blocker, "worker:0", flush_interval_s=0.01)
    sampler = SystemSampler(writer, "worker:0", interval_s=0.01).start()
    deadline = time.monotonic() + 10.0  # three samples, however loaded the host (a fixed 0.1 s missed them at load 12)
    while sampler.samples < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
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


def test_a_stopped_sampler_writes_what_it_counted_since_its_previous_sample():
    """A stop between two samples takes a last one: the wake-ups since the previous sample (a
    job's last seconds, where a fault may have begun) are written, not lost with the thread."""
    writer = FakeWriter("worker:0")
    sampler = SystemSampler(writer, "worker:0", interval_s=3600, gpus=False, cluster={}, wake_s=0.02).start()
    time.sleep(0.4)
    sampler.stop()
    first, last = writer.records["system"]
    assert first["wakes"] == 0 and last["wakes"] >= 5
    assert 0.3e9 <= last["time_ns"] - first["time_ns"] < 3600e9
