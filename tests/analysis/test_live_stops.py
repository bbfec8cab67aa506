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


def test_a_task_that_missed_a_beat_is_named_stopped_or_dead_by_its_process(sleeper):
    stops = _stops(sleeper)
    missed = int((10 + MISSED_BEAT_S + 0.5) * S)
    assert stops.judge(missed) == {}  # late, but its process runs
    sleeper.send_signal(signal.SIGSTOP)
    try:
        while psutil.Process(sleeper.pid).status() != psutil.STATUS_STOPPED:
            time.sleep(0.01)
        assert stops.judge(int((10 + MISSED_BEAT_S - 1) * S)) == {}  # not late yet: not asked
        [(key, title)] = stops.judge(missed).items()
    finally:
        sleeper.send_signal(signal.SIGCONT)
    assert key == ("stalled", "worker:1") and f"pid {sleeper.pid}" in title and "is stopped" in title
    sleeper.kill()
    sleeper.wait()
    [(key, title)] = stops.judge(missed).items()
    assert key == ("task_failure", "worker:1") and "died without last words" in title
    # still the process's verdict, not a second one, once the beats are lost for good
    assert list(stops.judge(int((10 + SILENT_AFTER_S + 1) * S))) == [("task_failure", "worker:1")]


def test_a_process_on_another_host_is_not_asked(sleeper):
    stops = _stops(sleeper, host="another-host")
    sleeper.kill()
    sleeper.wait()
    assert stops.judge(int((10 + MISSED_BEAT_S + 0.5) * S)) == {}
