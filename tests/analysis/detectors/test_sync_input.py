"""input_bound and communication_bound under a synchronous strategy with one slow input pipeline.

Records go through the real store writer (the ``builder`` fixture) and the whole analysis.
"""

import pytest

from tfdiag.analysis import analyze

WORKERS = ("worker:0", "worker:1")


def _sync_run(builder, input_ms: dict, step_ms=50.0, allreduce_ms=3.0):
    run = builder(strategy="MultiWorkerMirroredStrategy", ps=0)
    for worker in WORKERS:
        run.steps(worker, step_ms=step_ms, input_ms=input_ms.get(worker, 0.5)).allreduce(worker, allreduce_ms, size=4096)
    return run


def _warnings(report):
    return [f.kind for f in report.findings if f.severity.value in ("warning", "critical")]


def test_clean_synchronous_run_has_no_warning(builder):
    report = analyze(_sync_run(builder, {}, step_ms=20).write())
    assert _warnings(report) == []


def test_one_late_input_gates_every_worker_and_is_named(builder):
    # worker:1 waits 40 ms for its element; worker:0 waits for worker:1 in the all-reduce,
    # which the probe all-reduce also shows (42 ms of a 50 ms step).
    report = analyze(_sync_run(builder, {"worker:1": 40.0}, allreduce_ms=42.0).write())
    assert "communication_bound" not in _warnings(report)
    finding = report.primary
    assert finding.kind == "input_bound" and finding.tasks == ("worker:1",)
    assert "gates every synchronous step" in finding.title
    # Shared compute+collective is worker:1's 10 ms; prefetching overlaps it with its 40 ms
    # of input: the synchronous period goes from 51 ms to 41 ms.
    assert finding.recommendation.predicted_speedup == pytest.approx(51 / 41, rel=0.01)


def test_slow_all_reduce_with_balanced_input_is_still_communication_bound(builder):
    report = analyze(_sync_run(builder, {"worker:0": 2.0, "worker:1": 2.0}, step_ms=40, allreduce_ms=30).write())
    assert report.primary.kind == "communication_bound"
    assert report.primary.evidence["late_input_ms_per_step"] == 0.0


def test_late_input_explains_only_its_share_of_a_slow_all_reduce(builder):
    # 8 ms of late input cannot explain a 40 ms all-reduce in a 50 ms step: 32 ms remain.
    report = analyze(_sync_run(builder, {"worker:1": 8.0}, allreduce_ms=40.0).write())
    finding = next(f for f in report.findings if f.kind == "communication_bound")
    assert finding.evidence["late_input_ms_per_step"] == pytest.approx(7.5, abs=0.1)
    assert "input_bound" not in _warnings(report)  # 8 ms of 50 is under the 20 % threshold
