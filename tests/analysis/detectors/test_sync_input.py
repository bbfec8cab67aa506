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


def _probe_rounds(run, durations_ms: dict, rounds=6):
    """``allreduce`` records as the callback writes them: one per worker per probe round."""
    for index in range(rounds):
        for worker, ms in durations_ms.items():
            value = ms[index % len(ms)] if isinstance(ms, (list, tuple)) else ms
            run.record("allreduce", task=worker, time_ns=1_700_000_000_000_000_000 + index * 3_000_000_000,
                       duration_ns=int(value * 1e6), bytes=4096)
    return run


def _sync_steps(builder, step_ms=35.0):
    run = builder(strategy="MultiWorkerMirroredStrategy", ps=0)
    for worker in WORKERS:
        run.steps(worker, step_ms=step_ms, input_ms=1.0)
    return run


def test_waiting_in_the_probe_for_a_late_peer_is_not_communication(builder):
    # A busy host: in each probe round one worker is scheduled late, and the other waits
    # for it (68 ms against a 35 ms step); the worker that arrives last takes 2-3 ms.
    run = _probe_rounds(_sync_steps(builder), {"worker:0": [68, 2, 70], "worker:1": [3, 66, 2]})
    report = analyze(run.write())
    assert "communication_bound" not in _warnings(report)


def test_a_slow_network_slows_every_worker_in_the_probe(builder):
    # Both workers take 30 ms in every round, whoever arrives last: the network is slow.
    run = _probe_rounds(_sync_steps(builder), {"worker:0": [30, 34], "worker:1": [31, 29]})
    finding = analyze(run.write()).primary
    assert finding.kind == "communication_bound" and finding.severity.value == "critical"
    assert finding.evidence["last_arrival_allreduce_ms_p25"] == pytest.approx(29.0)
    assert finding.evidence["probe_rounds"] == 6


def test_a_busy_host_stretching_a_few_whole_rounds_is_not_communication(builder):
    # Both workers descheduled through one round in three (132 ms each, arriving together);
    # the other rounds take 2-4 ms: a 35 ms step is not waiting on the network.
    run = _probe_rounds(_sync_steps(builder), {"worker:0": [132, 4, 2], "worker:1": [132, 2, 3]})
    report = analyze(run.write())
    assert "communication_bound" not in _warnings(report)


def test_a_slow_network_with_a_few_quick_rounds_is_still_communication_bound(builder):
    # One quick round in six does not hide a network that slows the other five.
    run = _probe_rounds(_sync_steps(builder), {"worker:0": [2, 30, 31, 32, 30, 33], "worker:1": [3, 31, 30, 30, 34, 31]})
    finding = analyze(run.write()).primary
    assert finding.kind == "communication_bound"
    assert finding.evidence["last_arrival_allreduce_ms_p25"] == pytest.approx(30.0)


def test_last_arrival_time_pairs_rounds_by_order_and_skips_incomplete_ones():
    import pandas as pd

    from tfdiag.analysis.detectors.communication_bound import last_arrival_allreduce_ns

    frame = pd.DataFrame({"task": ["worker:0", "worker:1", "worker:0", "worker:1", "worker:0"],
                          "time_ns": [100, 101, 200, 199, 300],
                          "duration_ns": [33e6, 2e6, 3e6, 4e6, 1e6]})
    assert last_arrival_allreduce_ns(frame) == (2e6, 2)
