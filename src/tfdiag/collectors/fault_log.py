"""Faults from TensorFlow's own log: task failures, re-scheduled closures, recoveries.

``ClusterCoordinator`` logs what happens to the cluster on the ``tensorflow`` logger
(``tensorflow/python/distribute/coordinator/cluster_coordinator.py``, TF 2.21)::

    Worker /job:worker/replica:0/task:1 failed with UnavailableError(...)   (error)
    [Worker 1] Putting back a closure after it failed.                        (info)
    Worker /job:worker/replica:0/task:1 has been recovered.                  (info)
    Cluster successfully recovered.                                           (info)
    Parameter server failure detected at PS task 0                            (info)

:class:`FaultCapture` installs a ``logging.Filter`` on that logger which turns these
lines (read by ``tf_internals.parse_fault``) into ``fault`` records. Most of them are
INFO, which the ``tensorflow`` logger drops by default (WARNING); the capture lowers the
logger to INFO and its filter then passes on only what the old level let through, so
the user sees exactly the output they saw before. ``uninstall`` restores the level.
"""

from __future__ import annotations

import logging

from tfdiag.collectors.tf_internals import parse_fault

logger = logging.getLogger("tfdiag")

TF_LOGGER = "tensorflow"
MAX_MESSAGE_CHARS = 500


class _FaultFilter(logging.Filter):
    def __init__(self, capture: "FaultCapture", pass_level: int):
        super().__init__("")
        self.capture = capture
        self.pass_level = pass_level

    def filter(self, record: logging.LogRecord) -> bool:
        self.capture.observe(record)
        return record.levelno >= self.pass_level


class FaultCapture:
    """Writes a ``fault`` record for each failure, retry and recovery TensorFlow logs.

    A worker that fails is recorded once per failure (the coordinator logs it once per
    closure that hit it); its next "has been recovered" line is its ``recovery``.
    "Cluster successfully recovered." becomes a ``recovery`` of every task still failed.

    Args:
        writer: the coordinator's ``TaskWriter``.
        logger_name: the logger to watch (``tensorflow``).
    """

    def __init__(self, writer, logger_name: str = TF_LOGGER):
        self.writer = writer
        self.logger_name = logger_name
        self.records = 0
        self._failed: set[str] = set()
        self._filter: _FaultFilter | None = None
        self._old_level: int | None = None
        self._broken = False

    def recovering(self) -> bool:
        """Whether a task has failed and not recovered yet."""
        return bool(self._failed)

    def install(self) -> "FaultCapture":
        """Starts watching the logger. Never raises (a failure is logged once)."""
        if self._filter is not None:
            return self
        try:
            target = logging.getLogger(self.logger_name)
            effective = target.getEffectiveLevel()
            self._filter = _FaultFilter(self, pass_level=effective)
            target.addFilter(self._filter)
            if effective > logging.INFO:
                self._old_level = target.level
                target.setLevel(logging.INFO)
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            logger.warning("tfdiag: cannot watch the %s logger for faults (%r).", self.logger_name, error)
        return self

    def uninstall(self) -> None:
        """Stops watching and restores the logger's level."""
        if self._filter is None:
            return
        target = logging.getLogger(self.logger_name)
        target.removeFilter(self._filter)
        if self._old_level is not None and target.level == logging.INFO:
            target.setLevel(self._old_level)
        self._filter = None
        self._old_level = None

    def observe(self, record: logging.LogRecord) -> None:
        """Turns one log record into a ``fault`` record if it is about a fault."""
        if self._broken:
            return
        try:
            message = record.getMessage()
            parsed = parse_fault(message)
            if parsed is None:
                return
            kind, task = parsed
            tasks = [task]
            if kind == "failure":
                if task in self._failed:
                    return
                self._failed.add(task)
            elif kind == "recovery":
                if task:
                    if task not in self._failed:
                        return  # already recorded by "Cluster successfully recovered."
                    self._failed.discard(task)
                else:
                    tasks = sorted(self._failed)
                    self._failed.clear()
            for name in tasks:
                self.writer.append("fault", task=name, time_ns=int(record.created * 1e9), kind=kind,
                                   message=message.splitlines()[0][:MAX_MESSAGE_CHARS])
                self.records += 1
        except Exception as error:  # noqa: BLE001 - never let logging raise
            self._broken = True
            logger.warning("tfdiag: fault capture stopped after an error: %r", error)

