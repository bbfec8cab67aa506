"""Heartbeats through the real shared writer: first beat, periodic beats, counters, close marker."""

from __future__ import annotations

import time

import pandas as pd
import pytest

from tfdiag.analysis.load import load_run
from tfdiag.collectors import heartbeat, writers


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


def test_a_failing_in_flight_reader_costs_beats_not_the_caller(tmp_path, fast_beats, caplog):
    writer = writers.acquire(tmp_path, "chief:0")
    heartbeat.track_in_flight(writer, lambda: 1 / 0)
    time.sleep(0.25)
    writers.release(writer)
    assert "cannot write a heartbeat" in caplog.text
