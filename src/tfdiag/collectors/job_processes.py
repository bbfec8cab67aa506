"""The job's processes on this host and their CPU: this process and every process listening
on a port of the cluster spec whose address is this host.

A ParameterServerStrategy coordinator's workers and ps run no tfdiag code, so they are
found by their ports. The ports are mapped to processes with ``psutil.net_connections``
(about 10 ms of CPU) at the first sample, and again at most every ``RESCAN_S`` while a
local cluster port has no process or a counted process has ended (a restarted task); each
sample then reads one ``cpu_times`` per other process (about 25 µs of CPU each), and this
process's own from ``time.process_time`` (no file to read). A process of another user
that the sampler may not inspect is left out.
"""

from __future__ import annotations

import math
import os
import socket
import time

from tfdiag.events import LOOPBACK_HOSTS, split_address, task_name

# psutil's names of /proc/<pid>/stat's states "T" (stopped by a signal) and "t" (by a tracer),
# and the letters themselves.
_STOPPED_STATES = ("stopped", "tracing-stop")
_STOPPED_LETTERS = b"Tt"

# Seconds between two searches for the cluster's processes while one is missing or has
# ended: a restarted task is counted again within this, at ~10 ms of CPU a search.
RESCAN_S = 30.0


def local_cluster_ports(cluster: dict, local_names: set[str]) -> set[int]:
    """The ports of the cluster addresses that name this host (a loopback address, this
    host's name, or one of its interface addresses).

    >>> sorted(local_cluster_ports({"worker": ["127.0.0.1:2222", "10.0.0.9:2222"], "ps": ["[::1]:2223"]}, set()))
    [2222, 2223]
    """
    return set(local_cluster_tasks(cluster, local_names))


def local_cluster_tasks(cluster: dict, local_names: set[str]) -> dict[int, str]:
    """``local_cluster_ports``' ports, each with the task its address is.

    >>> local_cluster_tasks({"worker": ["127.0.0.1:2222", "127.0.0.1:2224"], "ps": ["10.0.0.9:2223"]}, set())
    {2222: 'worker:0', 2224: 'worker:1'}
    """
    tasks = {}
    for job, addresses in cluster.items():
        for index, address in enumerate(addresses):
            host, port = split_address(address)
            if port.isdigit() and (host in LOOPBACK_HOSTS or host in local_names):
                tasks[int(port)] = task_name(job, index)
    return tasks


class JobProcesses:
    """The CPU time of this job's processes on this host: this process and those
    listening on the cluster's local ports.

    ``cpu_pct()`` returns ``(own, job, processes)``: this process's and the job's CPU
    since the previous call as percent of all the host's cores (NaN on the first call),
    and how many processes the job's figure counts.
    """

    def __init__(self, cluster: dict, psutil):
        self._psutil = psutil
        self._cores = psutil.cpu_count() or 1
        names = {socket.gethostname()}
        try:
            names |= {a.address.split("%")[0] for addrs in psutil.net_if_addrs().values() for a in addrs}
        except Exception:  # noqa: BLE001 - no interface list: loopback and the host name still count
            pass
        self._task_of_port = local_cluster_tasks(cluster, names)
        self._ports = set(self._task_of_port)
        self._task_of: dict[int, str] = {}  # pid -> the cluster task listening there
        self._own_pid = os.getpid()
        self._others: dict[int, object] = {}  # pid -> psutil.Process
        self._last: dict[int, float] = {}  # pid -> CPU seconds at the previous call
        self._stopped: dict[int, bool] = {}  # pid -> stopped (``T``/``t``) at the previous call
        self._state_files: dict[int, int] = {}  # pid -> its /proc/<pid>/stat, open for ``probe_states``
        self._last_wall: float | None = None
        self._next_scan = 0.0

    @property
    def cores(self) -> int:
        return self._cores

    def others(self) -> dict[int, str]:
        """The job's other processes counted now, each with its cluster task."""
        return {pid: self._task_of.get(pid, "") for pid in self._others}

    def _scan(self, now: float) -> None:
        self._next_scan = now + RESCAN_S
        if not self._ports:
            return
        try:
            listeners = {c.laddr.port: c.pid for c in self._psutil.net_connections("tcp")
                         if c.status == self._psutil.CONN_LISTEN and c.laddr and c.laddr.port in self._ports}
        except Exception:  # noqa: BLE001 - AccessDenied (macOS), no /proc: this process only
            return
        complete = set(listeners) == self._ports and None not in listeners.values()
        for port, pid in listeners.items():
            if pid is not None and pid != self._own_pid:
                self._task_of[pid] = self._task_of_port[port]
        for pid in set(listeners.values()) - {None, self._own_pid} - set(self._others):
            try:
                self._others[pid] = self._psutil.Process(pid)
            except Exception:  # noqa: BLE001 - ended meanwhile, or not ours to read
                complete = False
        if complete:
            self._next_scan = math.inf  # until a counted process ends

    def _cpu_seconds(self) -> dict[int, float]:
        # This process's from the kernel's clock (no /proc file to read and parse), the others' from psutil.
        seconds = {self._own_pid: time.process_time()}
        for pid, process in list(self._others.items()):
            try:
                with process.oneshot():  # the state from the same read of /proc/<pid>/stat as the times
                    times, state = process.cpu_times(), process.status()
            except Exception:  # noqa: BLE001 - NoSuchProcess: a task ended (restarted: search again)
                self._others.pop(pid, None)
                self._task_of.pop(pid, None)
                self._stopped.pop(pid, None)
                self._close_state(pid)
                self._next_scan = min(self._next_scan, time.monotonic())
                continue
            seconds[pid] = times.user + times.system
            self._stopped[pid] = state in _STOPPED_STATES
        return seconds

    def probe_states(self, pids) -> dict[int, bool]:
        """Whether each of ``pids`` (the job's other processes) is stopped now (``SIGSTOP``, a
        tracer): one ``pread`` of its ``/proc/<pid>/stat``, kept open, each (about 4 µs of CPU
        where psutil's ``status()`` opens and parses it in 20); a process that ended, or
        whose state cannot be read (no ``/proc``), is left out (``cpu_pct`` counts it gone)."""
        stopped = {}
        for pid in pids:
            try:
                stopped[pid] = self._state(pid) in _STOPPED_LETTERS
            except (OSError, ValueError, IndexError):  # ended (ESRCH), no /proc, not a counted process
                self._close_state(pid)
        return stopped

    def _state(self, pid: int) -> int:
        """The state letter of ``/proc/<pid>/stat`` (the field after the command's closing
        parenthesis), from the file opened at the first probe of a counted process."""
        fd = self._state_files.get(pid)
        if fd is None:
            if pid not in self._others:
                raise ValueError(f"{pid} is not a counted process")
            fd = self._state_files[pid] = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
        head = os.pread(fd, 64, 0)  # "pid (comm) S ...": a command is at most 15 bytes
        return head[head.rindex(b")") + 2]

    def _close_state(self, pid: int) -> None:
        fd = self._state_files.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        """Closes the probes' open files."""
        for pid in list(self._state_files):
            self._close_state(pid)

    def stopped(self) -> dict[int, bool]:
        """Per other job process read at the last ``cpu_pct``: whether it was stopped then
        (``SIGSTOP``, a tracer): a probe of its state, free with its CPU times."""
        return {pid: self._stopped[pid] for pid in self._others if pid in self._stopped}

    def cpu_pct(self) -> tuple[float, float, int]:
        now = time.monotonic()
        if now >= self._next_scan:
            self._scan(now)
        seconds = self._cpu_seconds()
        last, self._last = self._last, seconds
        last_wall, self._last_wall = self._last_wall, now
        if last_wall is None or now <= last_wall:
            return math.nan, math.nan, len(seconds)
        capacity = (now - last_wall) * self._cores / 100.0
        used = {pid: max(0.0, spent - last[pid]) for pid, spent in seconds.items() if pid in last}
        own = used.get(self._own_pid, math.nan) / capacity
        return own, sum(used.values()) / capacity, len(used)
