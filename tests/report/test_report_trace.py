"""The Chrome trace / Perfetto export."""

from __future__ import annotations

import json

import pytest

from tfdiag.analysis import analyze
from tfdiag.report import render_chrome_trace


def _process_names(trace):
    return {
        event["pid"]: event["args"]["name"]
        for event in trace["traceEvents"]
        if event["ph"] == "M" and event["name"] == "process_name"
    }


def test_one_track_per_task_and_one_slice_per_step(synthetic_run):
    report = analyze(synthetic_run(workers=3, steps=40))
    trace = render_chrome_trace(report)
    json.dumps(trace, allow_nan=False)  # serialisable as strict JSON
    names = _process_names(trace)
    assert sorted(names.values()) == sorted(report.run["tasks"])
    assert len(set(names)) == len(names)
    steps = [event for event in trace["traceEvents"] if event["ph"] == "X" and event["cat"] == "step"]
    assert len(steps) == 3 * 40
    worker_pids = {pid for pid, name in names.items() if name.startswith("worker:")}
    assert {event["pid"] for event in steps} == worker_pids
    # No input wait recorded: no input slices.
    assert not [event for event in trace["traceEvents"] if event.get("cat") == "input"]


def test_times_are_microseconds_from_run_start(synthetic_run):
    report = analyze(synthetic_run(workers=2, steps=10, step_ms=20.0))
    steps = [event for event in render_chrome_trace(report)["traceEvents"] if event.get("cat") == "step"]
    assert min(event["ts"] for event in steps) == 0
    assert all(abs(event["dur"] - 20_000) < 1 for event in steps)


def test_input_wait_is_a_child_slice(synthetic_run):
    report = analyze(synthetic_run(workers=2, steps=10, input_wait_ms=5.0))
    events = render_chrome_trace(report)["traceEvents"]
    steps = [event for event in events if event.get("cat") == "step"]
    waits = [event for event in events if event.get("cat") == "input"]
    assert len(waits) == len(steps) == 20
    by_start = {(event["pid"], event["ts"]): event for event in steps}
    for wait in waits:
        parent = by_start[(wait["pid"], wait["ts"])]
        assert wait["tid"] == parent["tid"]
        assert abs(wait["dur"] - 5_000) < 1 and wait["dur"] <= parent["dur"]


def test_closure_rpc_and_fault_tracks(tmp_path):
    from tests.runs import RunBuilder

    run = RunBuilder(tmp_path / "run").steps("worker:0", count=5, closures=True).steps("worker:1", count=5)
    run.rpc("chief:0", "ps:0", 0.5, count=3).fault("worker:1", "failure", 10).fault("worker:1", "recovery", 60)
    trace = render_chrome_trace(analyze(run.write()))
    events = trace["traceEvents"]
    threads = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    pids = {e["args"]["name"]: e["pid"] for e in events if e["name"] == "process_name"}
    assert (pids["worker:0"], "closures (coordinator clock)") in threads
    assert (pids["chief:0"], "rpc probes") in threads
    assert (pids["worker:1"], "faults") in threads
    assert len([e for e in events if e.get("cat") == "closure"]) == 5
    rpc = [e for e in events if e.get("cat") == "rpc"]
    assert len(rpc) == 3 and rpc[0]["name"] == "rpc → ps:0" and rpc[0]["dur"] == pytest.approx(500, rel=0.2)
    assert [e["name"] for e in events if e.get("cat") == "fault"] == ["failure", "recovery"]
