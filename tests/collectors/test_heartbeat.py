"""Heartbeats through the real shared writer: first beat, periodic beats, counters, close marker."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from tfdiag.analysis import analyze
from tfdiag.analysis.detectors.stalled import SILENT_STALL_FLOOR_S
from tfdiag.analysis.load import load_run
from tfdiag.collectors import heartbeat, writers
from tfdiag.sample_jobs.jobs import JobConfig
from tfdiag.sample_jobs.launcher import LocalCluster
from tfdiag.tb_plugin.runs import REFRESH_INTERVAL_S

from tests.tb_plugin.test_tb_plugin_routes import PREFIX, client_for, get_json, make_plugin


@pytest.fixture
def fast_beats(monkeypatch):
    monkeypatch.setattr(heartbeat, "HEARTBEAT_EVERY_S", 0.1)


def _beats(logdir):
    return load_run(logdir).frame("heartbeat").sort_values("time_ns", kind="stable")


def test_beats_count_progress_and_end_with_the_close_marker(tmp_path, fast_beats):
    writer = writers.acquire(tmp_path, "chief:0")
    steps = heartbeat.progress(writer)
    worker = heartbeat.progress(writer, "worker:1")
    heartbeat.track_in_flight(writer, lambda: (3, 1234))
    for _ in range(5):
        steps.count += 1
        worker.count += 2
        time.sleep(0.1)
    writers.release(writer)
    beats = _beats(tmp_path)
    own, of_worker = beats[beats["subject"] == "chief:0"], beats[beats["subject"] == "worker:1"]
    assert len(own) >= 4  # the first at once, then every 0.1 s
    assert pd.isna(own["progress"].iloc[0])  # the first beat, as the writer opened: no counter yet
    assert own["progress"].iloc[1:].is_monotonic_increasing and own["progress"].iloc[-1] == 5
    assert of_worker["progress"].iloc[-1] == 10 and of_worker["in_flight"].isna().all()
    assert own["in_flight"].iloc[-1] == 3 and own["oldest_in_flight_ns"].iloc[-1] == 1234
    assert own["closed"].tolist() == [False] * (len(own) - 1) + [True]
    assert of_worker["closed"].iloc[-1]


def test_a_shared_writer_closes_once_with_its_last_collector(tmp_path, fast_beats):
    first = writers.acquire(tmp_path, "worker:0")
    second = writers.acquire(tmp_path, "worker:0")
    assert first is second
    writers.release(first)
    assert not _beats(tmp_path)["closed"].any()
    writers.release(second)
    assert _beats(tmp_path)["closed"].sum() == 1


def test_a_writer_never_released_has_beats_but_no_close_marker(tmp_path, fast_beats):
    writer = writers.acquire(tmp_path, "worker:2")
    time.sleep(0.35)
    writer.flush()
    beats = _beats(tmp_path)
    assert len(beats) >= 3 and not beats["closed"].any()
    assert beats["progress"].isna().all()  # no collector counted anything
    heartbeat.stop(writer, closed=False)
    writer.close()


def test_a_beat_the_thread_listed_before_the_close_never_follows_the_close_marker(tmp_path):
    # The beating thread lists the writers, then is descheduled while the writer closes:
    # its beat, dated after the closing one, would make the close read as a death.
    writer = writers.acquire(tmp_path, "chief:0")
    listed = heartbeat._watched[id(writer)]  # noqa: SLF001 - as the thread's list holds it
    heartbeat.stop(writer)
    heartbeat._beat(listed, closed=False)  # noqa: SLF001 - the thread resuming
    writer.close()
    assert _beats(tmp_path)["closed"].tolist() == [False, True]


def test_a_failing_in_flight_reader_costs_beats_not_the_caller(tmp_path, fast_beats, caplog):
    writer = writers.acquire(tmp_path, "chief:0")
    heartbeat.track_in_flight(writer, lambda: 1 / 0)
    time.sleep(0.25)
    writers.release(writer)
    assert "cannot write a heartbeat" in caplog.text


STALL_JOB = Path(__file__).with_name("stall_job.py")
# A frozen worker's closure was dispatched before it froze, or is the next of the stall
# job's closures it took: one every 0.2 s, after the job's copy of the frozen worker's
# timings, which holds its loop up to stall_job.COPY_TIMEOUT_S (1 s; the closure came
# 1.26 s after the freeze in a run at 3c6f0f4). Two seconds cover that and the rounding.
FROZEN_DISPATCH_S = 2.0


@pytest.mark.alone
@pytest.mark.cluster
def test_a_frozen_worker_is_named_stalled_while_the_job_hangs(tmp_path):
    """SIGSTOPs worker:1 of a live ParameterServerStrategy job; the coordinator's beats and its
    unanswered status checks (a PS worker runs no collector) name it in ``tfdiag analyze``
    within 30 s, and in the TensorBoard tab, with its closure in flight. Worker:0
    keeps progressing (as it does without tfdiag), also through a copy of timings from
    the frozen worker (``stall_job.copy_timings_of``), which once stopped it too."""
    logdir, stop_file = tmp_path / "run", tmp_path / "stop"
    cluster = LocalCluster(JobConfig("ps_ctl", str(logdir), ps=1, workers=2))
    job = frozen = None
    try:
        cluster.start(job_tasks=False)
        job = cluster.start_program("chief", 0, STALL_JOB, [str(logdir), str(stop_file)], stdout=tmp_path / "job.out")
        _wait_for(lambda: (logdir / "ready").exists() or job.process.poll() is not None, READY_TIMEOUT_S)
        assert job.process.poll() is None, job.log.read_text()[-4000:]
        client = client_for(make_plugin(logdir))
        before = get_json(client, PREFIX + "/report?run=.")
        assert "stalled" not in [finding["kind"] for finding in before["findings"]]

        frozen = cluster.tasks["worker:1"].process.pid
        os.kill(frozen, signal.SIGSTOP)
        frozen_ns = time.time_ns()
        (logdir / "copy_timings").write_text("worker:1")
        frozen_at = time.monotonic()
        while not (stalled := [f for f in analyze(logdir).findings if f.kind == "stalled"]):
            assert time.monotonic() - frozen_at < NAMED_WITHIN_S, "no stalled finding"
            time.sleep(1.0)
        print(f"worker:1 named {time.monotonic() - frozen_at:.1f} s after it froze")
        [finding] = stalled
        assert finding.tasks == ("worker:1",), finding.summary
        assert [(s["task"], s["verdict"]) for s in finding.evidence["silent"]] == [("worker:1", "frozen or hung")]
        assert finding.evidence["state"] == "partial" and finding.evidence["progressing"] == ["worker:0"]
        # The closure held in flight is the one worker:1 took as it froze: in flight since about
        # the freeze. (Not the stall floor: named 10.7 s after the freeze, its age read 8.8 s.)
        in_flight, beat_ns = finding.evidence["in_flight"], finding.evidence["latest_heartbeat_ns"]
        assert in_flight["closures"] >= 1
        assert in_flight["oldest_age_s"] >= (beat_ns - frozen_ns) / 1e9 - FROZEN_DISPATCH_S, in_flight
        [state] = finding.evidence["stalled"]
        assert state["stalled_s"] > SILENT_STALL_FLOOR_S
        # The tab re-analyses the live run on refresh and shows the same finding, first.
        time.sleep(REFRESH_INTERVAL_S + 0.5)
        after = get_json(client, PREFIX + "/report?run=.")
        stalled = [f for f in after["findings"] if f["kind"] == "stalled"]
        assert [f["tasks"] for f in stalled] == [["worker:1"]]
    finally:
        if frozen is not None:
            os.kill(frozen, signal.SIGCONT)
        stop_file.write_text("stop")
        if job is not None:
            try:
                job.process.wait(timeout=JOB_EXIT_TIMEOUT_S)
                print("job after SIGCONT:", job.log.read_text()[-2000:], sep="\n")
            except subprocess.TimeoutExpired:
                print("job did not exit within", JOB_EXIT_TIMEOUT_S, "s after SIGCONT: killed")
        cluster.stop()


READY_TIMEOUT_S = 120.0
NAMED_WITHIN_S = 30.0  # a stopped task named within 30 s (issue 31)
JOB_EXIT_TIMEOUT_S = 60.0


def _wait_for(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s"
        time.sleep(0.2)
