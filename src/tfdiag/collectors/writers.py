"""One ``TaskWriter`` per (run directory, task) in a process, shared by the collectors.

Two writers on one task file would each append frames through their own file handle;
sharing one (reference-counted) keeps every frame whole and in order. Each open writer
also carries its task's ``heartbeat`` rows (``heartbeat``): the first when it opens, one
every ``heartbeat.HEARTBEAT_EVERY_S`` (a few rows per task per 5 s), and the clean-close
marker when its last collector releases it. The flush threads' CPU time is charged to
``writer`` in the cost ledger (``budget``).
"""

from __future__ import annotations

import os
import threading

from tfdiag.collectors import heartbeat
from tfdiag.collectors.budget import LEDGER
from tfdiag.store import TaskWriter

_lock = threading.Lock()
_writers: dict[tuple[str, str], list] = {}  # key -> [writer, references]
_closed_flush_cpu_ns = 0  # the flush threads' CPU of the writers closed so far


def flush_cpu_ns() -> int:
    """CPU ns the flush threads of this process's writers have taken, closed ones included."""
    with _lock:
        return _closed_flush_cpu_ns + sum(entry[0].flush_cpu_ns for entry in _writers.values())


LEDGER.add_source("writer", flush_cpu_ns)


def _key(logdir, task: str) -> tuple[str, str]:
    return os.path.abspath(os.fspath(logdir)), task


def acquire(logdir, task: str) -> TaskWriter:
    """The process's writer of ``task`` in ``logdir``, opened on first use."""
    key = _key(logdir, task)
    with _lock:
        entry = _writers.get(key)
        opened = entry is None or entry[0].closed
        if opened:
            entry = _writers[key] = [TaskWriter(logdir, task), 0]
        entry[1] += 1
    if opened:
        heartbeat.start(entry[0])
    return entry[0]


def release(writer: TaskWriter) -> None:
    """Drops one reference; the last one writes the clean-close heartbeat and closes (flushes) the writer."""
    global _closed_flush_cpu_ns
    with _lock:
        for key, entry in list(_writers.items()):
            if entry[0] is writer:
                entry[1] -= 1
                if entry[1] > 0:
                    writer.flush()
                    return
                del _writers[key]
                break
    heartbeat.stop(writer, closed=True)
    writer.close()
    with _lock:
        _closed_flush_cpu_ns += writer.flush_cpu_ns
