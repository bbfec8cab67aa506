"""``live_stops.Stops``: a task that missed a heartbeat is named from its process at once —
real processes, stopped and killed, named by the samples a task writes."""

from __future__ import annotations

import signal
import socket
import subprocess
import time

import psutil
import pyarrow as pa

from tfdiag.analysis.live_stops import MISSED_BEAT_S, SILENT_AFTER_S, Stops

S = 10**9
BEAT_S = 5


def _stops(process: subprocess.Popen, host: str | None = None) -> Stops:
    """The chief's screen, worker:1 beating every 5 s to 10 s, its samples naming ``process``."""
    stops = Stops(own_task="chief:0")
    stops.fold("heartbeat", pa.RecordBatch.from_pylist([
        {"task": task, "time_ns": at * S, "subject": None, "progress": None, "closed": False}
        for task in ("chief:0", "worker:1") for at in range(0, 11, BEAT_S)]))
    stops.fold("system", pa.RecordBatch.from_pylist([
        {"task": "worker:1", "host": host or socket.gethostname(), "pid": process.pid, "time_ns": 9 * S,
         "pid_start_ns": int(psutil.Process(process.pid).create_time() * S)}]))
    return stops


def _judge(stops: Stops, now_ns: int) -> dict:
    """What the screen's update and judgement at ``now_ns`` find: the process table is taken before the read."""
    stops.before_read(now_ns)
    return stops.judge(now_ns)


def test_a_task_that_missed_a_beat_is_named_stopped_or_dead_by_its_process(sleeper):
    stops = _stops(sleeper)
    missed = int((10 + MISSED_BEAT_S + 0.5) * S)
    assert _judge(stops, missed) == {}  # late, but its process runs
    sleeper.send_signal(signal.SIGSTOP)
    try:
        while psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED:
            time.sleep(0.01)
        assert _judge(stops, int((10 + MISSED_BEAT_S - 1) * S)) == {}  # not late yet: not asked
        [(key, title)] = _judge(stops, missed).items()
    finally:
        sleeper.send_signal(signal.SIGCONT)
    assert key == ("stalled", "worker:1") and f"pid {sleeper.pid}" in title and "is stopped" in title
    sleeper.kill()
    sleeper.wait()
    [(key, title)] = _judge(stops, missed).items()
    assert key == ("task_failure", "worker:1") and "died without last words" in title
    # still the process's verdict, not a second one, once the beats are lost for good
    assert list(_judge(stops, int((10 + SILENT_AFTER_S + 1) * S))) == [("task_failure", "worker:1")]


def test_a_task_that_closed_and_went_during_the_read_is_not_called_dead(sleeper):
    """The table is taken before the records are read: a task whose last beat (its clean
    close) is read after it exited is closed, not killed."""
    stops = _stops(sleeper)
    missed = int((10 + MISSED_BEAT_S + 0.5) * S)
    stops.before_read(missed)
    sleeper.kill()  # ... it writes its close and exits while the screen reads
    sleeper.wait()
    assert stops.judge(missed) == {}  # the table found it running
    stops.fold("heartbeat", pa.RecordBatch.from_pylist([
        {"task": "worker:1", "time_ns": 11 * S, "subject": None, "progress": None, "closed": True}]))
    assert _judge(stops, missed) == {}


def test_a_process_on_another_host_is_not_asked(sleeper):
    stops = _stops(sleeper, host="another-host")
    sleeper.kill()
    sleeper.wait()
    assert _judge(stops, int((10 + MISSED_BEAT_S + 0.5) * S)) == {}
