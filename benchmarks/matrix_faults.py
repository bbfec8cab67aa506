"""Faults planted from outside a job's processes (temporary: ``benchmarks/faults.py`` replaces it).

``cpu_quota`` starves one task of CPU the way an overcommitted host does: the task's
process group is stopped (SIGSTOP) for ``off_ms`` and let run (SIGCONT) for ``on_ms``, over
and over, until the context ends. Nothing inside the job knows: no sleep in its graph, no
flag, so a detector sees only what a slow host shows.

Example:
    >>> import subprocess, sys
    >>> child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"],
    ...                          start_new_session=True)
    >>> with cpu_quota(child.pid, on_ms=20, off_ms=20):
    ...     code = child.wait()
    >>> code
    0
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading


def _signal(pid: int, sig: int) -> bool:
    """Signals ``pid``'s process group (the launcher starts each task as its own
    session), or the process alone; False once it is gone."""
    try:
        os.killpg(os.getpgid(pid), sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        os.kill(pid, sig)
    return True


@contextlib.contextmanager
def cpu_quota(pid: int, on_ms: float, off_ms: float):
    """Lets ``pid`` run ``on_ms`` out of every ``on_ms + off_ms`` while the context lasts.

    The process is always left running (SIGCONT) when the context ends, whatever happened.
    """
    stop = threading.Event()

    def duty_cycle() -> None:
        while not stop.is_set():
            if not _signal(pid, signal.SIGSTOP):
                return
            stop.wait(off_ms / 1000)
            if not _signal(pid, signal.SIGCONT):
                return
            stop.wait(on_ms / 1000)

    thread = threading.Thread(target=duty_cycle, name=f"cpu-quota-{pid}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        _signal(pid, signal.SIGCONT)
