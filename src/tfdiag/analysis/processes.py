"""Whether a task that left no last words still has a process: asked of this host's process table.

A task killed without warning (``SIGKILL``, the OOM killer, a crash in native code) and a
task frozen by ``SIGSTOP`` leave the same logs: they just end. Where other tasks write
on, their records date the silence (``stalled``); where every task went at once (the one
process of a ``MirroredStrategy`` job) nothing else is left to say so. The process table
is: each task's ``system`` samples name its process (host, pid and the process's start
time), and where the analysis runs on that host, ``psutil`` tells a process that is gone
(its pid free, or another process's) from one that is stopped (state ``T``).

Unlike the rest of the analysis this reads the present, not the logs, and the present
is read first: a ``ProcessTable`` is taken before the files are (``RunLoader``, the live
screen), so a process it finds gone wrote everything it ever would before the read. Asked
after the read, a task that closed its collectors and exited in between would read as
killed. Only tasks that neither closed their collectors nor wrote an exit record are
asked about, and only on the host their samples name; samples without a start time (logs
written before it was recorded) and processes started after the table are not. A task
whose process runs or cannot be read is not listed.

Example:
    >>> import pandas as pd
    >>> system = pd.DataFrame({"task": ["worker:0"], "host": ["elsewhere"], "pid": [1], "time_ns": [10**18],
    ...                        "pid_start_ns": [10**18]})
    >>> ended_processes(system, exited=set(), closed=set(), table=ProcessTable.take())  # another host's: not asked
    {}
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from typing import Iterable

import pandas as pd
import psutil

GONE, STOPPED = "gone", "stopped"
# A process's start time is read from the kernel's ticks since boot plus the boot time,
# which psutil reads in whole seconds: one process read twice may differ by a second.
SAME_START_NS = 1_000_000_000
_COLUMNS = ["task", "host", "pid", "pid_start_ns", "time_ns"]
_STOPPED_STATES = {psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP}
_GONE_STATES = {psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD}
_RUNNING = "running"  # any state but gone or stopped: what a comparison of two tables tells apart


@dataclass(frozen=True)
class ProcessTable:
    """This host's processes as one moment found them (``take``): each pid's start time and state.

    Example:
        >>> import os
        >>> table = ProcessTable.take([os.getpid()])
        >>> table.state(os.getpid(), int(psutil.Process().create_time() * 1e9)) is None  # running
        True
    """

    host: str
    taken_ns: int
    found: dict[int, tuple[float | None, str | None]]  # pid -> (start, s since the epoch; state); None: unreadable
    asked: frozenset[int] | None = None  # the pids asked about; None: every process of the host

    @classmethod
    def take(cls, pids: Iterable[int] | None = None) -> ProcessTable:
        """The table now: of every process (``pids`` None), or of ``pids`` only; one that asks
        about no process where the process table cannot be listed."""
        taken_ns = time.time_ns()
        if pids is None:
            try:
                found = {process.pid: (process.info["create_time"], process.info["status"])
                         for process in psutil.process_iter(["create_time", "status"])}
            except (psutil.Error, OSError):
                return cls(socket.gethostname(), taken_ns, {}, frozenset())
            return cls(socket.gethostname(), taken_ns, found)
        asked = frozenset(pid for pid in pids if pid > 0)
        return cls(socket.gethostname(), taken_ns, {pid: found for pid in asked if (found := _read(pid))}, asked)

    def state(self, pid: int, started_ns: int) -> str | None:
        """``GONE``, ``STOPPED`` or None (running, not readable, or not asked) for process
        ``pid`` started at ``started_ns``; None for a pid no process can have (a damaged log),
        and for one the table lacks that may have started after it was taken."""
        if pid <= 0 or (self.asked is not None and pid not in self.asked):
            return None
        if pid not in self.found:
            return None if started_ns > self.taken_ns - SAME_START_NS else GONE
        holder_started_s, status = self.found[pid]
        if status in _GONE_STATES:
            return GONE
        if holder_started_s is None or status is None:
            return None
        if abs(holder_started_s * 1e9 - started_ns) > SAME_START_NS:  # the pid is another process's now
            return GONE
        return STOPPED if status in _STOPPED_STATES else None

    def states(self, pids: Iterable[int]) -> dict[int, tuple[float | None, str]]:
        """What a later table must match for ``pids`` to read the same: each one's start and
        whether it is gone, stopped or running (a running process's state flips all the time)."""
        return {pid: (self.found[pid][0], _summary(self.found[pid][1])) if pid in self.found else (None, GONE)
                for pid in pids}


@dataclass(frozen=True)
class ProcessEnd:
    """A task's last process (``pid`` on ``host``, last sampled at ``last_seen_ns``, its
    own clock) found ``GONE`` or ``STOPPED``."""

    task: str
    host: str
    pid: int
    state: str
    last_seen_ns: int

    def describe(self) -> str:
        """One clause for a report: what the process table says of the task's process."""
        where = f"its process (pid {self.pid} on {self.host})"
        if self.state == GONE:
            return f"{where} is gone and wrote no last words: killed (SIGKILL, the OOM killer) or crashed"
        return f"{where} is stopped (state T: SIGSTOP, Ctrl-Z, a debugger)"


def ended_processes(system: pd.DataFrame, exited: set[str], closed: set[str],
                    table: ProcessTable) -> dict[str, ProcessEnd]:
    """Task -> ``ProcessEnd`` for each task whose last sampled process on ``table``'s host
    ``table`` finds gone or stopped, leaving out the tasks in ``exited`` (they wrote last
    words) and ``closed`` (they closed their collectors)."""
    if system.empty or not set(_COLUMNS) <= set(system.columns):
        return {}
    sampled = system[_COLUMNS].dropna()
    last = sampled.sort_values("time_ns").groupby(sampled["task"].astype(str), observed=True).tail(1)
    ended = {}
    for row in last.itertuples():
        task = str(row.task)
        if row.host != table.host or task in exited or task in closed:
            continue
        state = table.state(int(row.pid), int(row.pid_start_ns))
        if state is not None:
            ended[task] = ProcessEnd(task, table.host, int(row.pid), state, int(row.time_ns))
    return ended


def _read(pid: int) -> tuple[float | None, str | None] | None:
    """Process ``pid``'s start and state; None if there is none; (None, None) if unreadable."""
    try:
        process = psutil.Process(pid)
        return process.create_time(), process.status()
    except psutil.NoSuchProcess:
        return None
    except (psutil.AccessDenied, OSError, ValueError, OverflowError):
        return None, None


def _summary(status: str | None) -> str:
    return GONE if status in _GONE_STATES else STOPPED if status in _STOPPED_STATES else _RUNNING
