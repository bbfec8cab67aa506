"""Whether a task that left no last words still has a process: asked of this host's process table.

A task killed without warning (``SIGKILL``, the OOM killer, a crash in native code) and a
task frozen by ``SIGSTOP`` leave the same logs: they just end. Where other tasks write
on, their records date the silence (``stalled``); where every task went at once (the one
process of a ``MirroredStrategy`` job) nothing else is left to say so. The process table
is: each task's ``system`` samples name its process (host, pid and the process's start
time), and where the analysis runs on that host, ``psutil`` tells a process that is gone
(its pid free, or another process's) from one that is stopped (state ``T``).

Unlike the rest of the analysis this reads the present, not the logs; it is asked only
about tasks that neither closed their collectors nor wrote an exit record, and only on
the host their samples name; samples without a start time (logs written before it was
recorded) are not asked about. A task whose process runs or cannot be read is not listed.

Example:
    >>> import pandas as pd
    >>> system = pd.DataFrame({"task": ["worker:0"], "host": ["elsewhere"], "pid": [1], "time_ns": [10**18],
    ...                        "pid_start_ns": [10**18]})
    >>> ended_processes(system, exited=set(), closed=set(), host="here")  # another host's process: not asked
    {}
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import pandas as pd
import psutil

GONE, STOPPED = "gone", "stopped"
# A process's start time is read from the kernel's ticks since boot plus the boot time,
# which psutil reads in whole seconds: one process read twice may differ by a second.
SAME_START_NS = 1_000_000_000
_COLUMNS = ["task", "host", "pid", "pid_start_ns", "time_ns"]
_STOPPED_STATES = {psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP}
_GONE_STATES = {psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD}


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
                    host: str | None = None) -> dict[str, ProcessEnd]:
    """Task -> ``ProcessEnd`` for each task whose last sampled process on ``host`` (this
    one by default) is gone or stopped, leaving out the tasks in ``exited`` (they wrote
    last words) and ``closed`` (they closed their collectors)."""
    if system.empty or not set(_COLUMNS) <= set(system.columns):
        return {}
    host = host or socket.gethostname()
    sampled = system[_COLUMNS].dropna()
    last = sampled.sort_values("time_ns").groupby(sampled["task"].astype(str), observed=True).tail(1)
    ended = {}
    for row in last.itertuples():
        task = str(row.task)
        if row.host != host or task in exited or task in closed:
            continue
        state = process_state(int(row.pid), int(row.pid_start_ns))
        if state is not None:
            ended[task] = ProcessEnd(task, host, int(row.pid), state, int(row.time_ns))
    return ended


def process_state(pid: int, started_ns: int) -> str | None:
    """``GONE``, ``STOPPED`` or None (running, or not readable) for process ``pid`` of this
    host, started at ``started_ns``; None for a pid no process can have (a damaged log)."""
    if pid <= 0:
        return None
    try:
        process = psutil.Process(pid)
        holder_started_ns = process.create_time() * 1e9
        status = process.status()
    except psutil.NoSuchProcess:
        return GONE
    except (psutil.AccessDenied, OSError, ValueError, OverflowError):
        return None
    if abs(holder_started_ns - started_ns) > SAME_START_NS:  # the pid is another process's now
        return GONE
    if status in _GONE_STATES:
        return GONE
    return STOPPED if status in _STOPPED_STATES else None
