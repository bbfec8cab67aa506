"""The time the kernel throttled this process's cgroup (its CPU quota's own count).

Where the process's cgroup has the ``cpu`` controller, each sample carries the delta of its
throttled time (v2 ``throttled_usec``, v1 ``throttled_time``). The cgroup is looked up at
every sample (20-40 µs): a process can be moved into a quota's cgroup while it runs, and
a cgroup made since the previous sample counted only since.
"""

from __future__ import annotations

import math
import os
import time

CGROUP_ROOT = "/sys/fs/cgroup"


def cgroup_cpu_stat(pid: int | str = "self") -> str | None:
    """The ``cpu.stat`` of the process's cgroup that has the ``cpu`` controller: on cgroup v1
    (or a hybrid host) the ``cpu`` hierarchy's, else the v2 one's; ``None`` when there is none."""
    try:
        with open(f"/proc/{pid}/cgroup") as lines:
            # hierarchy:controllers:path; anything else (a damaged or foreign file) is skipped
            memberships = [parts for parts in (line.rstrip("\n").split(":", 2) for line in lines) if len(parts) == 3]
    except OSError:
        return None
    candidates = [os.path.join(CGROUP_ROOT, directory, path.lstrip("/"), "cpu.stat")
                  for _, controllers, path in memberships if "cpu" in controllers.split(",")
                  for directory in (controllers, "cpu", "cpu,cpuacct")]
    candidates += [os.path.join(CGROUP_ROOT, path.lstrip("/"), "cpu.stat")
                   for hierarchy, controllers, path in memberships if hierarchy == "0" and not controllers]
    return next((stat for stat in candidates if os.path.isfile(stat)), None)


def throttled_usec(stat_path: str) -> float:
    """The cgroup's throttled time so far, µs: v2's ``throttled_usec``, v1's ``throttled_time``
    (ns); NaN when the file has neither (v2 without the cpu controller) or cannot be read."""
    try:
        with open(stat_path) as stat:
            for line in stat:
                if line.startswith("throttled_usec "):
                    return float(line.split()[1])
                if line.startswith("throttled_time "):
                    return float(line.split()[1]) / 1e3
    except (OSError, ValueError):
        pass
    return math.nan


class ThrottledTime:
    """The cgroup's throttled time since the previous ``take``: this process's, or ``pid``'s
    (a job process the sampler watches, ``run_queue.JobProcessReads``)."""

    def __init__(self, pid: int | str = "self"):
        self._pid = pid
        self._taken_ns = time.time_ns()
        self._stat = cgroup_cpu_stat(pid)
        self._last = throttled_usec(self._stat) if self._stat else math.nan

    def take(self) -> float:
        """Milliseconds throttled since the previous call; NaN without a ``cpu`` cgroup, or
        when the process moved since to a cgroup older than that call (its counts are not
        comparable). A cgroup made since (a quota a running process is moved into) counted
        all it holds since the previous call: its whole throttled time."""
        stat = cgroup_cpu_stat(self._pid)
        throttled = throttled_usec(stat) if stat else math.nan
        if stat == self._stat:
            throttled_ms = (throttled - self._last) / 1e3
        else:
            throttled_ms = throttled / 1e3 if stat and _made_after(stat, self._taken_ns) else math.nan
        self._stat, self._last, self._taken_ns = stat, throttled, time.time_ns()
        return throttled_ms


def _made_after(stat_path: str, time_ns: int) -> bool:
    """Whether the cgroup of ``stat_path`` was made after ``time_ns`` (its directory's ctime:
    set when it is made, and not by writes to its files)."""
    try:
        return os.stat(os.path.dirname(stat_path)).st_ctime_ns > time_ns
    except OSError:
        return False
