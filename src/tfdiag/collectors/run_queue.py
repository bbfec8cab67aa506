"""Whether a job process got the CPU it asked for: its threads' run-queue wait, and the
busiest process on the host outside the job.

The kernel's ``/proc/<pid>/task/<tid>/schedstat`` holds, per thread, the time it ran on a
CPU (field 1, ns) and the time it spent runnable, waiting on a run queue (field 2, ns). A
process's demand over a sample is the two summed over its threads; the wait's share of it
says how much of the CPU it wanted its neighbours had instead (``docs/findings.md``,
``host_contention``). A stopped process (``SIGSTOP``, a CPU quota's throttling) is not
runnable, so a stop is not counted as wait: what tells a starved worker from a stopped one.
``/proc/<pid>/schedstat`` alone is the main thread's, so every thread is read, one file
each (TensorFlow runs tens of threads a process), with the per-thread counts of the
previous sample kept: a thread that ended since is left out of both sides, one that began
counts from zero.

The busiest other process is found only while the host's CPU outside the job is at least
``SCAN_OTHERS_CORES`` of a core (a scan reads one ``/proc/<pid>/stat`` per process on the
host), and is known from the second such scan on (its CPU is a difference of two scans).

``JobProcessReads`` puts them on the sampler's cadence: the schedstat readings and a
watched process's cgroup throttled time every ``READ_EVERY_SAMPLES`` samples, a scan
every ``SCAN_EVERY_SAMPLES``, and each sample's probe of whether a watched process was
stopped (``job_processes.JobProcesses.stopped``) counted up to the next reading. The
sampler's last sample, at its stop, is a reading whatever its turn.
"""

from __future__ import annotations

import math
import os

from tfdiag.collectors.cgroup_throttling import ThrottledTime

# Scan the host's processes for the busiest one outside the job while its other programs
# use at least this share of one core between two samples: a neighbour that takes less
# cannot starve a worker for long, and a quiet host then costs no scan at all.
SCAN_OTHERS_CORES = 0.25
# The counts read are cumulative, so a wait share over a run is the same from fewer reads,
# each the difference since the previous one; a reading costs one file per thread (40-80
# in a TensorFlow process), a scan one per process on the host: 3-4 ms a sample on a ps_ctl
# coordinator, 0.36 % of a core at a sample every 2 s, where the whole sampler may take
# 0.2 % (src/tfdiag/collectors/budget.py, benchmarks/system_sample_cost.py: the sample itself 1.7 ms,
# a reading of two workers 1.8 ms, a scan 2.8 ms). So the job processes are read every
# READ_EVERY_SAMPLES-th sample (every 4 s at the default 2 s: ps_ctl's 600 steps, 12-25 s
# of stepping, still get 3 or more readings) and the host scanned every
# SCAN_EVERY_SAMPLES-th (12 s), on odd turns, where no reading falls: about 3.1 ms a sample.
READ_EVERY_SAMPLES = 2
SCAN_EVERY_SAMPLES = 6
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 512)
    except OSError:
        return None
    finally:
        os.close(fd)


def thread_schedstats(pid: int | str = "self") -> dict[int, tuple[int, int]]:
    """Per thread of ``pid``: ``(ran_ns, waited_ns)`` so far, from its ``schedstat``; empty
    when the process is gone or the kernel has no schedstat (``CONFIG_SCHED_INFO``).

    >>> stats = thread_schedstats()
    >>> all(ran >= 0 and waited >= 0 for ran, waited in stats.values())
    True
    """
    base = f"/proc/{pid}/task"
    try:
        tids = os.listdir(base)
    except OSError:
        return {}
    stats = {}
    for tid in tids:
        text = _read(f"{base}/{tid}/schedstat")
        if text:
            fields = text.split()
            if len(fields) >= 2:
                stats[int(tid)] = (int(fields[0]), int(fields[1]))
    return stats


class RunQueueWaits:
    """Per process: the time its threads ran and waited on a run queue since the previous ``take``."""

    def __init__(self):
        self._last: dict[int, dict[int, tuple[int, int]]] = {}  # pid -> tid -> (ran_ns, waited_ns)

    def take(self, pids) -> dict[int, tuple[float, float]]:
        """``{pid: (ran_ms, waited_ms)}`` since the previous call, for each pid of ``pids``
        read then too (a pid's first call gives none); a process gone or unreadable is left out."""
        taken, seen = {}, {}
        for pid in pids:
            now = thread_schedstats(pid)
            if not now:
                continue
            seen[pid] = now
            before = self._last.get(pid)
            if before is None:
                continue
            ran = waited = 0
            for tid, (ran_ns, waited_ns) in now.items():
                ran0, waited0 = before.get(tid, (0, 0))
                ran += max(ran_ns - ran0, 0)
                waited += max(waited_ns - waited0, 0)
            taken[pid] = (ran / 1e6, waited / 1e6)
        self._last = seen
        return taken


def _process_ticks(pid: str) -> tuple[str, int] | None:
    """``(name, utime + stime ticks)`` of one process from ``/proc/<pid>/stat``."""
    text = _read(f"/proc/{pid}/stat")
    if not text:
        return None
    open_paren, close_paren = text.find(b"("), text.rfind(b")")
    fields = text[close_paren + 2:].split()
    if open_paren < 0 or len(fields) < 13:
        return None
    return text[open_paren + 1:close_paren].decode(errors="replace"), int(fields[11]) + int(fields[12])


class BusiestOther:
    """The process outside the job that used the most CPU between two scans."""

    def __init__(self, cores: int):
        self._cores = max(int(cores), 1)
        self._last: dict[str, int] | None = None
        self._last_wall: float | None = None

    def take(self, others_pct: float, job_pids, wall_s: float) -> tuple[int | None, str | None, float]:
        """``(pid, name, cpu_pct)`` of the busiest process outside ``job_pids`` since the
        previous scan (percent of all the host's cores), scanning only while ``others_pct``
        (the host's CPU less the job's, percent of all cores) reaches ``SCAN_OTHERS_CORES``;
        ``(None, None, NaN)`` without a scan or a previous one."""
        if math.isnan(others_pct) or others_pct * self._cores / 100.0 < SCAN_OTHERS_CORES:
            self._last = None
            return None, None, math.nan
        try:
            pids = [name for name in os.listdir("/proc") if name.isdigit()]
        except OSError:
            return None, None, math.nan
        skip = {str(pid) for pid in job_pids}
        ticks, names = {}, {}
        for pid in pids:
            if pid in skip:
                continue
            read = _process_ticks(pid)
            if read is not None:
                names[pid], ticks[pid] = read
        last, last_wall = self._last, self._last_wall
        self._last, self._last_wall = ticks, wall_s
        if last is None or last_wall is None or wall_s <= last_wall:
            return None, None, math.nan
        used = {pid: spent - last[pid] for pid, spent in ticks.items() if pid in last}
        if not used:
            return None, None, math.nan
        busiest = max(used, key=used.__getitem__)
        share = 100.0 * used[busiest] / _CLOCK_TICKS / (wall_s - last_wall) / self._cores
        return int(busiest), names[busiest], share


def _watched(task: str) -> bool:
    """Whether a job process's figures are kept: a worker's. Only workers are judged
    (``straggler``, ``host_contention``); a ps's wait or stops are read by nothing."""
    return task.startswith("worker:")


class JobProcessReads:
    """What a sampler reads of its job's processes, on its cadence (module docstring).

    ``take`` once per sample, with the pids of the job's other processes (each with its
    task) and whether each was stopped at this sample (``probed`` counts the probes of a
    sampler's timed wake-ups between samples too); it returns this process's
    ``(run_ms, runq_wait_ms)`` (NaN between readings), the busiest other process
    ``(pid, name, cpu_pct)`` and, at a reading, a ``job_process`` row per watched process
    (``_watched``): its run and wait, its cgroup's throttled time and its stopped probes
    since the previous reading (NaN and 0 at its first, which only dates the next one's span).
    """

    def __init__(self, cores: int):
        self._waits = RunQueueWaits()
        self._hog = BusiestOther(cores)
        self._throttled: dict[int, ThrottledTime] = {}
        self._probes: dict[int, list[int]] = {}  # pid -> [probes, stopped probes] since the last reading
        self._turn = -1

    @staticmethod
    def watched(others: dict[int, str]) -> list[int]:
        """The pids of ``others`` whose figures are kept (``_watched``)."""
        return [pid for pid, task in others.items() if _watched(task)]

    def probed(self, stopped: dict[int, bool]) -> None:
        """Counts one probe of the state of each watched process in ``stopped`` (pid -> was it
        stopped): between samples, a sampler's timed wake-ups probe them too."""
        for pid, is_stopped in stopped.items():
            counts = self._probes.setdefault(pid, [0, 0])
            counts[0] += 1
            counts[1] += int(is_stopped)

    def take(self, own_pid: int, others: dict[int, str], stopped: dict[int, bool], others_pct: float,
             wall_s: float, reading: bool = False) -> tuple[tuple[float, float], tuple, list[dict]]:
        """One sample's figures: this process's run and wait, the busiest other process,
        and the watched processes' rows; the last two only on their turns (``reading``: a
        reading whatever the turn, the sampler's last)."""
        self._turn += 1
        watched = {pid: task for pid, task in others.items() if _watched(task)}
        self.probed({pid: stopped[pid] for pid in watched if pid in stopped})
        hog = (None, None, math.nan)
        if self._turn % SCAN_EVERY_SAMPLES == SCAN_EVERY_SAMPLES // 2:
            hog = self._hog.take(others_pct, [own_pid, *others], wall_s)
        if self._turn % READ_EVERY_SAMPLES and not reading:
            return (math.nan, math.nan), hog, []
        waits = self._waits.take([own_pid, *watched])
        rows = []
        for pid, task in watched.items():
            if pid not in self._throttled:
                self._throttled[pid] = ThrottledTime(pid)  # its first reading primes the counts,
                self._probes.pop(pid, None)  # and its row (no figures) dates the start of the next one's span
                rows.append({"task": task, "pid": pid, "run_ms": math.nan, "runq_wait_ms": math.nan,
                             "throttled_ms": math.nan, "probes": 0, "stopped_probes": 0})
                continue
            throttled_ms = self._throttled[pid].take()
            probes, stopped_probes = self._probes.pop(pid, (0, 0))
            if pid in waits:
                rows.append({"task": task, "pid": pid, "run_ms": waits[pid][0], "runq_wait_ms": waits[pid][1],
                             "throttled_ms": throttled_ms, "probes": probes, "stopped_probes": stopped_probes})
        for pid in set(self._throttled) - set(watched):  # ended
            self._throttled.pop(pid)
            self._probes.pop(pid, None)
        return waits.get(own_pid, (math.nan, math.nan)), hog, rows
