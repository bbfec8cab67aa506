"""System sampler: host CPU, memory, network and disk (psutil); GPUs through NVML.

A daemon thread samples every ``interval_s`` (default ``SAMPLE_EVERY_S``, 2 s) and appends one ``system``
record for the host and one ``gpu`` record per GPU. CPU load is computed from
``psutil.cpu_times()`` deltas kept in the sampler object, not with
``psutil.cpu_percent()``, whose state is a module global shared with anything else in
the process (and whose first call returns a meaningless 0.0).

Besides the host's CPU, each sample carries the job's own: ``proc_cpu_pct``, this
process, and ``job_cpu_pct``, the job's processes on this host (``job_processes``). Both
are shares of the whole host, like ``cpu_pct``, so the analysis can tell the job's CPU
from other programs' (``docs/findings.md``, "The advisor"). The disks' counters are
summed over the host's storage devices (``/sys/block``, checked once per device name)
from psutil's per-disk counters: what ``psutil.disk_io_counters()`` sums, without its
check of every device at every call.

GPUs come from NVML (``pynvml``, package ``nvidia-ml-py``): utilization, memory, power
and SM clock per device. No library, no driver or no GPU is recorded once as a
``note`` and the sampler carries on with the host. A field NVML cannot read on a
device (power on some boards) is NaN; a device none of whose fields can be read any
more (``NVMLError_GPUIsLost``, a driver unloaded) ends GPU sampling with one ``note``,
as does any other error while sampling. TensorFlow's own peak GPU memory
(``tf.config.experimental.get_memory_info``) goes into ``tf_mem_peak_bytes`` when
TensorFlow is loaded and sees GPUs.

Whether this process ran when it wanted to (where asked: ``wake_s``): between samples
the thread takes timed wake-ups (``stopped_processes``), and ``stop`` waits for the one in
progress (at most ``1.5 * wake_s``); at each it also probes whether the job's other
workers on this host are stopped (``JobProcessReads.probed``: a stop duty cycle from
outside shows in a few probes a second where one a sample would miss it); each sample also
carries the time the process's cgroup was throttled
(``cgroup_throttling``). And whether the job's processes got the CPU they asked for
(``run_queue``): every few samples (``run_queue.JobProcessReads``) a sample carries this
process's run-queue wait since the previous such sample (``run_ms``, ``runq_wait_ms``), or
the busiest process outside the job (``hog_*``), and writes a ``job_process`` record per
worker process it counts with the same figures, its cgroup's throttled time and how often
it was found stopped.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import sys
import threading
import time

from tfdiag.collectors import identity
from tfdiag.collectors.budget import LEDGER, charged
from tfdiag.collectors.cgroup_throttling import ThrottledTime
from tfdiag.collectors.job_processes import JobProcesses
from tfdiag.collectors.run_queue import JobProcessReads
from tfdiag.collectors.stopped_processes import PROBE_WAKE_S, WAKE_S, WakeTimer  # paces: for its callers
from tfdiag.errors import InvalidOptionError

logger = logging.getLogger("tfdiag")

# Seconds between samples. The analysis reads samples as sums and means over windows of
# 20 s and more (CPU shares, late wake-ups, throttled time, bytes moved), and a sample's
# cost is mostly fixed (docs/benchmarks.md, "Collector overhead"), so fewer samples cost
# less and lose nothing it reads. A synchronous worker's timed wake-ups (``WAKE_S``) are
# counted between samples whatever the interval.
SAMPLE_EVERY_S = 2.0


class StorageDisks:
    """The bytes read and written so far by the host's storage devices, as
    ``psutil.disk_io_counters()`` sums them: over the disks that ``/sys/block`` lists
    (no partitions), each name checked once instead of at every call.
    """

    def __init__(self, psutil):
        self._psutil = psutil
        self._storage: dict[str, bool] = {}

    def read_write_bytes(self) -> tuple[int, int] | None:
        """``(read, written)`` bytes; ``None`` where the host has no disk counters."""
        disks = self._psutil.disk_io_counters(perdisk=True)
        if not disks:
            return None
        read = written = 0
        for name, counters in disks.items():
            storage = self._storage.get(name)
            if storage is None:
                storage = self._storage[name] = os.path.exists(f"/sys/block/{name.replace('/', '!')}")
            if storage:
                read += counters.read_bytes
                written += counters.write_bytes
        return read, written


class _Nvml:
    """The NVML calls the sampler makes; ``None`` from ``open`` when NVML is unusable."""

    def __init__(self, pynvml, handles):
        self.pynvml = pynvml
        self.handles = handles

    @classmethod
    def open(cls):
        """``(nvml, None)`` or ``(None, reason)``."""
        try:
            import pynvml
        except ImportError as error:
            return None, f"nvidia-ml-py is not installed ({error})"
        except Exception as error:  # noqa: BLE001 - a broken installation
            return None, f"nvidia-ml-py cannot be imported ({type(error).__name__}: {error})"
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as error:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
            return None, f"NVML unavailable ({type(error).__name__}: {error})"
        if not handles:
            return None, "NVML sees no GPU"
        return cls(pynvml, handles), None

    def sample(self, index: int) -> dict:
        """One device's readings; a field NVML cannot read is NaN (or None). Raises the
        last error when no field could be read (a GPU lost, a driver gone)."""
        nv, handle = self.pynvml, self.handles[index]
        errors = []

        def read(fn, default=math.nan):
            try:
                return fn()
            except Exception as error:  # noqa: BLE001 - NVMLError_NotSupported and friends
                errors.append(error)
                return default

        memory = read(lambda: nv.nvmlDeviceGetMemoryInfo(handle), None)
        values = {
            "util_pct": float(read(lambda: nv.nvmlDeviceGetUtilizationRates(handle).gpu)),
            "mem_used_bytes": int(memory.used) if memory is not None else None,
            "mem_total_bytes": int(memory.total) if memory is not None else None,
            "power_w": float(read(lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0)),
            "sm_clock_mhz": float(read(lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM))),
        }
        if len(errors) == 4:  # every call failed
            raise errors[-1]
        return values

    def close(self) -> None:
        try:
            self.pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def tf_gpu_peaks() -> dict[int, int]:
    """TensorFlow's peak memory per visible GPU index, when TensorFlow is loaded and has GPUs."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return {}
    peaks = {}
    try:
        gpus = tf.config.list_physical_devices("GPU")
    except Exception:  # noqa: BLE001
        return {}
    for i in range(len(gpus)):
        try:
            peaks[i] = int(tf.config.experimental.get_memory_info(f"GPU:{i}")["peak"])
        except Exception:  # noqa: BLE001 - e.g. a GPU TensorFlow has not initialised
            pass
    return peaks


class SystemSampler:
    """Samples this host (and its GPUs) on a background thread.

    Args:
        writer: the task's ``TaskWriter``.
        task: the task name written in each ``system`` record.
        interval_s: seconds between samples.
        gpus: sample GPUs through NVML (``False``: host only).
        cluster: the cluster spec (``{job: [address, ...]}``) whose local tasks count as
            the job's CPU; ``None``: from ``TF_CONFIG``.
        wake_s: mean seconds between the timed wake-ups that tell whether this process
            ran when it wanted to, and whether the job's other workers on this host are
            stopped (``WAKE_S``); ``None``: none (the wake-up fields are null, the other
            workers probed once a sample). Each wake-up costs 90-150 µs of CPU on the
            2-core test host, up to 300 µs loaded, and about 50 µs more a worker it
            probes (``benchmarks/micro.py collector_cost --only wake``), so only the tasks
            whose stops or whose workers' stops show nowhere else take them: a worker of a synchronous
            multi-worker job ten a second (``DiagnosticsCallback``); a ParameterServerStrategy
            coordinator (its workers run no collector) and a TF1 worker (``DiagnosticsHook``)
            two a second (``PROBE_WAKE_S``).

    ``paused``, a function, may be replaced (a benchmark's A/B phases): while it returns
    true the thread takes no samples and no timed wake-ups, only a wait to the next sample.

    Example:
        >>> sampler = SystemSampler(writer, "worker:0").start()  # doctest: +SKIP
        >>> sampler.stop()  # doctest: +SKIP
    """

    def __init__(self, writer, task: str, interval_s: float = SAMPLE_EVERY_S, gpus: bool = True,
                 cluster: dict | None = None, wake_s: float | None = None):
        if interval_s is None or interval_s <= 0:
            raise InvalidOptionError(f"Invalid value for argument `system_interval_s`. Expected > 0. Received: {interval_s!r}")
        self.writer = writer
        self.task = task
        self.interval_s = float(interval_s)
        self.host = socket.gethostname()
        self.samples = 0
        self._gpus = gpus
        self._nvml: _Nvml | None = None
        self._nvml_tried = False
        self._last_cpu = None
        self._cluster = cluster
        self._job: JobProcesses | None = None
        self._disks: StorageDisks | None = None
        self.paused = lambda: False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed = False
        self._wakes = WakeTimer(wake_s) if wake_s else None
        self._throttled = ThrottledTime()
        self._reads: JobProcessReads | None = None
        self._probed: list[int] = []  # the pids each timed wake-up probes
        self._probes_failed = False
        self._started: tuple[int, int | None] | None = None  # (pid, its start, ns; None: unreadable), once a process

    def start(self) -> "SystemSampler":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tfdiag-system", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None

    def _run(self) -> None:
        # The thread's CPU (samples, waits) is charged to ``system`` once per turn of the loop:
        # one clock read a wake-up instead of a ``charged`` block's two.
        charged_ns = time.thread_time_ns()
        if not self.paused():
            self._sample()  # primes the CPU counters
        next_sample = time.monotonic() + self.interval_s
        while not self._stop.is_set():
            until_sample = max(next_sample - time.monotonic(), 0.0)
            if self._wakes and not self.paused() and until_sample > 0:
                self._wakes.sleep(until_sample)
                if self._stop.is_set():
                    break
                self._probe_workers()
            elif self._stop.wait(until_sample):
                break
            if time.monotonic() >= next_sample:
                if not self.paused():
                    self._sample()
                if self._failed:
                    break
                next_sample = time.monotonic() + self.interval_s
            now_ns = time.thread_time_ns()
            LEDGER.charge("system", now_ns - charged_ns)
            charged_ns = now_ns
        if self.samples and not self._failed and not self.paused():
            self._sample(last=True)
        if self._job is not None:
            self._job.close()  # the probes' files: opened by this thread, closed by it
        LEDGER.charge("system", time.thread_time_ns() - charged_ns)

    def _probe_workers(self) -> None:
        """At a timed wake-up, whether each of the job's other workers on this host is stopped
        (``JobProcessReads.probed``): a probe at each wake-up where a sample takes one. An
        error ends the probes, never the sampler."""
        if self._reads is None or self._job is None or self._probes_failed:
            return
        try:
            self._reads.probed(self._job.probe_states(self._probed))
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            self._probes_failed = True
            self._note(f"tfdiag: probes of the job's workers' states stopped after an error: {error!r}")

    def sample(self) -> None:
        """Takes one sample now, charging its CPU to ``system`` (the thread's own samples
        are charged by its loop). Never raises."""
        with charged("system"):
            self._sample()

    def _sample(self, last: bool = False) -> None:
        """One sample; ``last``: the one at ``stop``, which also reads the job's processes
        (``JobProcessReads.take``), so what was counted since the previous sample and reading
        (wake-ups, probes, CPU) is written, not lost with the thread."""
        try:
            self._sample_host(last)
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            self._failed = True
            self._note(f"tfdiag: system sampler stopped after an error: {error!r}")
            return
        if self._gpus:
            self._sample_gpus()
        self.samples += 1

    def _process_start_ns(self, psutil, pid: int) -> int | None:
        """When this process started (read once: a forked child reads its own); None where
        the platform will not say (the analysis then never asks about the process)."""
        if self._started is None or self._started[0] != pid:
            try:
                self._started = (pid, int(psutil.Process(pid).create_time() * 1e9))
            except (psutil.Error, OSError):
                self._started = (pid, None)
        return self._started[1]

    def _cpu_pct(self, psutil) -> float:
        times = psutil.cpu_times()
        busy = sum(times) - getattr(times, "idle", 0.0) - getattr(times, "iowait", 0.0)
        total = sum(times)
        last, self._last_cpu = self._last_cpu, (busy, total)
        if last is None or total <= last[1]:
            return math.nan
        # iowait, counted as idle, can decrease (proc(5)): busy then seems to grow by more
        # than the total, so the share is clamped to [0, 100].
        return min(100.0, 100.0 * max(0.0, busy - last[0]) / (total - last[1]))

    def _sample_host(self, last: bool) -> None:
        import psutil

        cpu = self._cpu_pct(psutil)
        if self._job is None:
            self._job = JobProcesses(identity.resolve_cluster() if self._cluster is None else self._cluster, psutil)
        own, job, processes = self._job.cpu_pct()
        now_ns, own_pid, others = time.time_ns(), os.getpid(), self._job.others()
        if self._reads is None:
            self._reads = JobProcessReads(self._job.cores)
        self._probed = self._reads.watched(others)  # the wake-ups' probes until the next sample
        (own_run_ms, own_wait_ms), (hog_pid, hog_name, hog_pct), job_rows = self._reads.take(
            own_pid, others, self._job.stopped(), cpu - job, time.monotonic(), reading=last)
        wakes, late_wakes, late_ms = self._wakes.take() if self._wakes else (None, None, None)
        throttled_ms = self._throttled.take()
        net = psutil.net_io_counters()
        if self._disks is None:
            self._disks = StorageDisks(psutil)
        try:
            disk = self._disks.read_write_bytes()
        except Exception:  # noqa: BLE001 - containers without /proc/diskstats
            disk = None
        self.writer.append(
            "system", host=self.host, task=self.task, time_ns=now_ns, cpu_pct=cpu,
            mem_used_frac=psutil.virtual_memory().percent / 100.0,
            net_sent_bytes=int(net.bytes_sent) if net else 0, net_recv_bytes=int(net.bytes_recv) if net else 0,
            disk_read_bytes=disk[0] if disk else 0, disk_write_bytes=disk[1] if disk else 0,
            cpu_count=self._job.cores, pid=os.getpid(), proc_cpu_pct=own, job_cpu_pct=job, job_processes=processes,
            wakes=wakes, late_wakes=late_wakes, late_ms=late_ms, throttled_ms=throttled_ms,
            run_ms=own_run_ms, runq_wait_ms=own_wait_ms,
            hog_pid=hog_pid, hog_name=hog_name, hog_cpu_pct=hog_pct,
            pid_start_ns=self._process_start_ns(psutil, own_pid),
        )
        for row in job_rows:
            self.writer.append("job_process", host=self.host, time_ns=now_ns, **row)

    def _sample_gpus(self) -> None:
        if not self._nvml_tried:
            self._nvml_tried = True
            self._nvml, reason = _Nvml.open()
            if self._nvml is None:
                self._note(f"tfdiag: no GPU metrics on {self.host}: {reason}", level="info")
                return
        if self._nvml is None:
            return
        try:
            now = time.time_ns()
            peaks = tf_gpu_peaks()
            for index in range(len(self._nvml.handles)):
                values = self._nvml.sample(index)
                self.writer.append("gpu", host=self.host, index=index, time_ns=now,
                                   tf_mem_peak_bytes=peaks.get(index), **values)
        except Exception as error:  # noqa: BLE001
            self._note(f"tfdiag: GPU sampling on {self.host} stopped after an error: {error!r}")
            self._nvml.close()
            self._nvml = None

    def _note(self, message: str, level: str = "warning") -> None:
        (logger.info if level == "info" else logger.warning)("%s", message)
        try:
            self.writer.append("note", task=self.task, time_ns=time.time_ns(), level=level, message=message)
        except Exception:  # noqa: BLE001
            pass
