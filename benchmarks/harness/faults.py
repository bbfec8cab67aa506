"""Faults made from outside a running job: a CPU quota, a stall, a slow link to a ps.

* :class:`cpu_quota` — a container-style CPU quota: ``SIGSTOP`` for ``off_ms``, then
  ``SIGCONT`` for ``on_ms``, over and over, to a process and its children, from a thread
  of the caller's. Stopping it (or leaving its ``with`` block, or the interpreter exiting)
  always sends a last ``SIGCONT``: no process is left stopped.
* :class:`cgroup_quota` — the kernel's own CPU limit, as a container runtime sets it: the
  process and its children in a new cgroup with a CFS bandwidth quota (``cpu.max`` on
  cgroup v2, ``cpu.cfs_quota_us`` on v1). Needs a writable cgroup hierarchy with the
  ``cpu`` controller (root here); the process is moved back and the cgroup removed on stop.
* :class:`stall` — ``SIGSTOP`` until released (the same guarantee).
* :func:`kill` — ``SIGKILL`` to a process and its children (``SIGCONT`` first: none is left stopped).
* :func:`on_task` — either of them on one task of a local cluster, once it started.
* a delaying TCP proxy in front of a ps: the launcher's ``slow-ps=I:MS`` injection
  (``tfdiag.sample_jobs.launcher`` starts ``tfdiag.sample_jobs.proxy`` and rewrites ps I's
  address); :func:`slow_ps` spells that injection for a ``JobConfig``.

Example:
    >>> with cpu_quota(pid, on_ms=20, off_ms=30):  # doctest: +SKIP
    ...     cluster.wait()
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
from pathlib import Path

import psutil

from tfdiag.sample_jobs.inject import SlowPs


def slow_ps(ps: int, rtt_ms: float) -> str:
    """The ``JobConfig.inject`` entry that puts ``rtt_ms`` of round-trip latency in front of ps ``ps``."""
    return SlowPs(ps, float(rtt_ms)).spec


def on_task(task: str, fault, *args):
    """For a local cluster (``LocalCluster``): a function of the started cluster that
    makes ``fault(pid, *args)`` on ``task``'s process (``runner.run_user_job``'s
    ``while_running``), e.g. ``on_task("worker:1", cpu_quota, 20, 30)``."""
    def make(cluster):
        return fault(cluster.tasks[task].process.pid, *args)

    return make


def parse_quota(spec: str | None) -> tuple[int, float, float] | None:
    """``"I:ON_MS:OFF_MS"`` (a command line's ``--cpu-quota``) as ``(I, ON_MS, OFF_MS)``; None for None."""
    if not spec:
        return None
    try:
        worker, on_ms, off_ms = spec.split(":")
        return int(worker), float(on_ms), float(off_ms)
    except ValueError:
        raise ValueError(f"a CPU quota is I:ON_MS:OFF_MS (e.g. 1:20:30). Received: {spec!r}") from None


def worker_quota(worker: int, on_ms: float, off_ms: float, by: str = "signals"):
    """``on_task`` for a CPU quota on worker ``worker``: ``by="signals"`` (:class:`cpu_quota`)
    or ``"cgroup"`` (:class:`cgroup_quota`)."""
    quotas = {"signals": cpu_quota, "cgroup": cgroup_quota}
    if by not in quotas:
        raise ValueError(f"a CPU quota is made by one of {sorted(quotas)}. Received: by={by!r}")
    return on_task(f"worker:{worker}", quotas[by], on_ms, off_ms)


def _family(pid: int) -> list[int]:
    """``pid`` and its descendants now (gone processes are left out)."""
    try:
        parent = psutil.Process(pid)
        return [parent.pid, *(child.pid for child in parent.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def cpu_seconds(pid: int) -> float:
    """The CPU time ``pid`` and its descendants have used so far (gone processes left out)."""
    total = 0.0
    for member in _family(pid):
        with contextlib.suppress(psutil.NoSuchProcess):
            times = psutil.Process(member).cpu_times()
            total += times.user + times.system
    return total


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def kill(pid: int) -> None:
    """Kills ``pid`` and its children now (``SIGCONT`` first, so a stopped one is not left behind)."""
    family = _family(pid)
    _signal_all(family, signal.SIGCONT)
    _signal_all(family, signal.SIGKILL)


class _Stopper:
    """What both faults share: a set of stopped pids, and a SIGCONT that always runs."""

    def __init__(self, pid: int):
        self.pid = pid
        self._stopped: set[int] = set()
        self._lock = threading.Lock()

    def _stop(self) -> None:
        with self._lock:
            pids = _family(self.pid)
            self._stopped.update(pids)
            _signal_all(pids, signal.SIGSTOP)

    def _resume(self) -> None:
        with self._lock:
            _signal_all(sorted(self._stopped | set(_family(self.pid))), signal.SIGCONT)
            self._stopped.clear()


class cpu_quota(_Stopper):  # noqa: N801 — used like a function: ``with cpu_quota(pid, 20, 30):``
    """Lets ``pid`` (and its children) run ``on_ms`` out of every ``on_ms + off_ms``."""

    def __init__(self, pid: int, on_ms: float, off_ms: float):
        if on_ms <= 0 or off_ms <= 0:
            raise ValueError(f"cpu_quota needs on_ms and off_ms > 0. Received: on_ms={on_ms!r}, off_ms={off_ms!r}")
        super().__init__(pid)
        self.on_s, self.off_s = on_ms / 1e3, off_ms / 1e3
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._cycle, name=f"cpu-quota-{pid}", daemon=True)
        atexit.register(self.stop)
        self._thread.start()

    def _cycle(self) -> None:
        try:
            while not self._done.is_set():
                self._stop()
                if self._done.wait(self.off_s):
                    break
                self._resume()
                self._done.wait(self.on_s)
        finally:
            self._resume()

    def stop(self) -> None:
        """Ends the quota; the process runs freely once this returns."""
        self._done.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        self._resume()

    def __enter__(self) -> "cpu_quota":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _cpu_cgroup(pid: int | str = "self") -> tuple[Path, str]:
    """The directory of ``pid``'s cgroup that holds the ``cpu`` controller, and the cgroup version
    ("v1" or "v2"); ``OSError`` when there is none."""
    mounts = [line.split() for line in Path("/proc/self/mounts").read_text().splitlines()]
    memberships = [line.split(":", 2) for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines()]
    for mount in (m for m in mounts if len(m) > 3 and m[2] == "cgroup" and "cpu" in m[3].split(",")):
        path = next((p for _, controllers, p in memberships if "cpu" in controllers.split(",")), None)
        if path is not None:
            return Path(mount[1], path.lstrip("/")), "v1"
    for mount in (m for m in mounts if len(m) > 3 and m[2] == "cgroup2"):
        path = next((p for hierarchy, _, p in memberships if hierarchy == "0"), None)
        if path is not None and "cpu" in Path(mount[1], "cgroup.controllers").read_text().split():
            return Path(mount[1], path.lstrip("/")), "v2"
    raise OSError(f"no cgroup with the cpu controller for process {pid}")


class cgroup_quota:  # noqa: N801 — used like a function, as cpu_quota
    """Holds ``pid`` (and its children) to ``on_ms`` of CPU in every ``on_ms + off_ms``, by a
    CFS bandwidth quota on a new cgroup beside the caller's (``OSError`` where none can be made).

    Unlike :class:`cpu_quota` the limit is CPU time, not wall time: a process with several busy
    threads spends its quota sooner and is throttled for the rest of the period.
    """

    def __init__(self, pid: int, on_ms: float, off_ms: float):
        if on_ms <= 0 or off_ms <= 0:
            raise ValueError(f"cgroup_quota needs on_ms and off_ms > 0. Received: on_ms={on_ms!r}, off_ms={off_ms!r}")
        self._hold(pid, round(on_ms * 1e3), round((on_ms + off_ms) * 1e3))

    @classmethod
    def of_cores(cls, pid: int, cores: float, period_ms: float = 100.0) -> "cgroup_quota":
        """Holds ``pid`` to ``cores`` of CPU (more than one where its threads use several),
        its quota renewed every ``period_ms`` as a container's CPU limit is."""
        if cores <= 0 or period_ms <= 0:
            raise ValueError(f"cgroup_quota needs cores and period_ms > 0. Received: {cores!r}, {period_ms!r}")
        quota = cls.__new__(cls)
        quota._hold(pid, max(1000, round(cores * period_ms * 1e3)), round(period_ms * 1e3))  # the kernel's 1-ms floor
        return quota

    def _hold(self, pid: int, quota_us: int, period_us: int) -> None:
        parent, version = _cpu_cgroup()
        self._parent = parent
        self.cgroup = parent / f"tfdiag-quota-{pid}"
        self.cgroup.mkdir(exist_ok=True)
        try:
            if version == "v2":
                (self.cgroup / "cpu.max").write_text(f"{quota_us} {period_us}")
            else:
                (self.cgroup / "cpu.cfs_period_us").write_text(str(period_us))
                (self.cgroup / "cpu.cfs_quota_us").write_text(str(quota_us))
            for member in _family(pid):
                with contextlib.suppress(ProcessLookupError):
                    (self.cgroup / "cgroup.procs").write_text(str(member))
        except OSError:
            self.stop()
            raise
        atexit.register(self.stop)

    def throttled_s(self) -> float:
        """Seconds the kernel has held the processes back so far."""
        for line in (self.cgroup / "cpu.stat").read_text().splitlines():
            name, value = line.split()
            if name == "throttled_usec":
                return int(value) / 1e6
            if name == "throttled_time":
                return int(value) / 1e9
        return 0.0

    def stop(self) -> None:
        """Moves the processes back to the caller's cgroup and removes the quota's."""
        if not self.cgroup.is_dir():
            return
        for member in (self.cgroup / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError, OSError):
                (self._parent / "cgroup.procs").write_text(member)
        with contextlib.suppress(OSError):
            self.cgroup.rmdir()

    def __enter__(self) -> "cgroup_quota":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class stall(_Stopper):  # noqa: N801
    """Stops ``pid`` (and its children) until :meth:`release` (or the end of its ``with`` block)."""

    def __init__(self, pid: int):
        super().__init__(pid)
        atexit.register(self.release)
        self._stop()

    def release(self) -> None:
        """Lets the process run again."""
        self._resume()

    def __enter__(self) -> "stall":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
