"""Fault capture from the coordinator's log lines (the exact TF 2.21 formats)."""

from __future__ import annotations

import logging

import pytest

from tfdiag.collectors.faults import FaultCapture, parse_fault

from .fakes import FakeWriter


@pytest.mark.parametrize(
    "line, expected",
    [
        ("Worker /job:worker/replica:0/task:1 failed with UnavailableError():Socket closed", ("failure", "worker:1")),
        ("[Worker 1] Putting back a closure after it failed.", ("retry", "worker:1")),
        ("Worker /job:worker/replica:0/task:1 has been recovered.", ("recovery", "worker:1")),
        ("Parameter server failure detected at PS task 0", ("failure", "ps:0")),
        ("Cluster successfully recovered.", ("recovery", "")),
        ("Waiting for all global closures to be finished.", None),
    ],
)
def test_parse_fault(line, expected):
    assert parse_fault(line) == expected


@pytest.fixture
def tf_logger():
    log = logging.getLogger("tfdiag-test-tensorflow")
    log.setLevel(logging.WARNING)
    log.propagate = False
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Keep()
    log.addHandler(handler)
    yield log, seen
    log.removeHandler(handler)


def test_capture_records_failure_retries_and_one_recovery_and_keeps_output(tf_logger):
    log, seen = tf_logger
    writer = FakeWriter()
    capture = FaultCapture(writer, logger_name=log.name).install()
    assert log.level == logging.INFO
    log.error("Worker %s failed with %r:%s", "/job:worker/replica:0/task:1", OSError("x"), "x")
    log.error("Worker %s failed with %r:%s", "/job:worker/replica:0/task:1", OSError("x"), "x")  # 2nd closure
    log.info("[Worker %d] Putting back a closure after it failed.", 1)
    log.info("Cluster now being recovered.")
    log.info("Cluster successfully recovered.")
    log.info("Worker %s has been recovered.", "/job:worker/replica:0/task:1")
    capture.uninstall()
    assert log.level == logging.WARNING
    faults = writer.records["fault"]
    assert [(f["kind"], f["task"]) for f in faults] == [("failure", "worker:1"), ("retry", "worker:1"),
                                                         ("recovery", "worker:1")]
    assert faults[0]["time_ns"] <= faults[2]["time_ns"]
    # The user still sees only what the WARNING level let through.
    assert len(seen) == 2 and all("failed with" in line for line in seen)
    log.info("Worker %s failed with %r:%s", "/job:worker/replica:0/task:0", OSError(), "")
    assert len(writer.records["fault"]) == 3  # uninstalled: nothing more recorded


def test_capture_survives_a_broken_writer(tf_logger):
    log, _ = tf_logger

    class Broken(FakeWriter):
        def append(self, kind, /, **values):
            raise OSError("disk full")

    capture = FaultCapture(Broken(), logger_name=log.name).install()
    log.error("Worker %s failed with %r:%s", "/job:worker/replica:0/task:1", OSError(), "")  # must not raise
    log.error("Worker %s failed with %r:%s", "/job:worker/replica:0/task:0", OSError(), "")
    capture.uninstall()
