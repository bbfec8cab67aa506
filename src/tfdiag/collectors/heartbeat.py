"""Liveness of every task: ``heartbeat`` records, so a hung run can be told from a finished one.

One daemon thread per process (the *heartbeat thread*) writes, every
``HEARTBEAT_EVERY_S``, into each open task writer one ``heartbeat`` row per progress
subject: the task itself, and for the instrumented coordinator every worker whose
closures it counts. A collector feeds it through a :class:`Progress` counter, bumped on
its own thread with a single int store (``progress.count += 1``); the coordinator also
hands it a function that reports the closures in flight and the oldest one's dispatch
time, read on the heartbeat thread. ``writers`` starts the beats when a task's writer
opens (a first row at once) and, when its last collector releases it normally, writes a
final row with ``closed`` true: the clean-close marker.

Cost: a few rows per task per 5 s (one per subject: 1 + workers on the coordinator),
about 60 bytes each, written by the writer's own background flush; nothing on the
training thread beyond the counter store. The thread charges its beats to ``heartbeat``
in the cost ledger (``budget``): under 1 µs per closure of ps_ctl, 0.001 % of a core. A process that is killed or frozen (SIGSTOP)
writes nothing more; the analysis (``stalled`` in ``docs/findings.md``) then reads its
state from the other tasks' rows.

>>> from tfdiag.collectors import writers
>>> writer = writers.acquire(logdir, "worker:0")  # doctest: +SKIP
>>> steps = progress(writer)  # doctest: +SKIP
>>> steps.count += 1  # on every step  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from tfdiag.collectors.budget import charged
from tfdiag.events import HEARTBEAT_EVERY_S

logger = logging.getLogger("tfdiag")

InFlight = Callable[[], tuple[int, "int | None"]]  # () -> (closures in flight, oldest dispatch time_ns)


class Progress:
    """A count of completed steps or closures, bumped by its collector: ``progress.count += 1``."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class _Watched:
    __slots__ = ("writer", "subjects", "in_flight")

    def __init__(self, writer) -> None:
        self.writer = writer
        self.subjects: dict[str, Progress] = {}
        self.in_flight: InFlight | None = None


_lock = threading.Lock()
_watched: dict[int, _Watched] = {}  # id(writer) -> its subjects
_wake = threading.Condition(_lock)
_thread: threading.Thread | None = None


def start(writer) -> None:
    """Beats for ``writer`` from now on, the first at once (``writers.acquire`` calls it)."""
    global _thread
    with _lock:
        watched = _watched.setdefault(id(writer), _Watched(writer))
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="tfdiag-heartbeat", daemon=True)
            _thread.start()
        else:
            _wake.notify()  # the running thread restarts its wait (HEARTBEAT_EVERY_S may have changed)
    _beat(watched, closed=False)


def progress(writer, subject: str | None = None) -> Progress:
    """The progress counter of ``subject`` (default: the writer's task) in ``writer``'s beats."""
    subject = subject or writer.task
    with _lock:
        watched = _watched.setdefault(id(writer), _Watched(writer))
        return watched.subjects.setdefault(subject, Progress())


def track_in_flight(writer, in_flight: InFlight) -> None:
    """``in_flight()`` is read at every beat and written on the writer's own row."""
    with _lock:
        _watched.setdefault(id(writer), _Watched(writer)).in_flight = in_flight


def stop(writer, closed: bool = True) -> None:
    """A last beat (``closed`` marks a normal close), then no more for ``writer``."""
    with _lock:
        watched = _watched.pop(id(writer), None)
    if watched is not None:
        _beat(watched, closed=closed)


def _run() -> None:
    global _thread
    while True:
        with _lock:
            _wake.wait(HEARTBEAT_EVERY_S)
            if not _watched:
                _thread = None
                return
            watched = list(_watched.values())
        with charged("heartbeat"):
            for entry in watched:
                _beat(entry, closed=False)


def _beat(watched: _Watched, closed: bool) -> None:
    """One row per subject; the in-flight closures go on the writer's own row. Never raises."""
    writer = watched.writer
    try:
        now = time.time_ns()
        in_flight, oldest = watched.in_flight() if watched.in_flight is not None else (None, None)
        with _lock:
            if not closed and _watched.get(id(writer)) is not watched:
                # Stopped since the beating thread listed it: the closing beat, dated after
                # ``now``, stays the last (a later-dated open beat would read as a death).
                return
            subjects = dict(watched.subjects)
        own = subjects.get(writer.task)
        writer.append("heartbeat", task=writer.task, time_ns=now, subject=writer.task,
                      progress=None if own is None else own.count, in_flight=in_flight,
                      oldest_in_flight_ns=oldest, closed=closed)
        for subject, counter in sorted(subjects.items()):
            if subject != writer.task:
                writer.append("heartbeat", task=writer.task, time_ns=now, subject=subject, progress=counter.count,
                              in_flight=None, oldest_in_flight_ns=None, closed=closed)
    except Exception as error:  # noqa: BLE001 - a collector never breaks training
        logger.warning("tfdiag: cannot write a heartbeat for %s (%r).", getattr(writer, "task", "?"), error)
