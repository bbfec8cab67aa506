"""straggler and input_bound under a synchronous strategy, judged by each worker's own time.

Every worker's step lasts as long as the slowest one's; the records' ``compute_ns`` (from
the input element to the worker's own gradients, before the all-reduce) says who computed
longer. Records go through the real store writer (the ``builder`` fixture) and the whole
analysis.
"""

import pytest

from tfdiag.analysis import analyze

WORKERS = ("worker:0", "worker:1")
MS = 1_000_000


def _sync_run(builder, step_ms: float, own: dict, examples: dict | None = None):
    """Steps of ``step_ms`` on both workers; ``own[worker] = (input_ms, compute_ms)``."""
    run = builder(strategy="MultiWorkerMirroredStrategy", ps=0)
    for worker in WORKERS:
        input_ms, compute_ms = own[worker]
        run.steps(worker, step_ms=step_ms, input_ms=input_ms, examples=(examples or {}).get(worker, 32))
        run.allreduce(worker, 2.0, size=4096)
    for kind, record in run.records:
        if kind == "step" and record["step"] > 0:  # the first step of a fit has no stamp
            record["compute_ns"] = int(own[record["task"]][1] * MS)
    return run


def _warnings(report):
    return [f.kind for f in report.findings if f.severity.value in ("warning", "critical")]


def test_a_worker_that_computes_longer_is_named_with_the_step_it_would_allow(builder):
    # mwms_fit with an in-graph sleep of 40 ms on worker 1: both steps 64 ms; worker 1
    # computes 44 ms before the all-reduce, worker 0 4 ms and then waits for it.
    report = analyze(_sync_run(builder, 64.0, {"worker:0": (0.5, 4.0), "worker:1": (0.5, 44.0)}).write())
    finding = report.primary
    assert finding.kind == "straggler" and finding.tasks == ("worker:1",)
    assert finding.severity.value == "critical"
    # Shared: 64 - 44.5 = 19.5 ms; worker 1 computing 4 ms: 19.5 + 4.5 = 24 ms a step.
    assert finding.evidence["shared_ms"] == pytest.approx(19.5)
    assert finding.evidence["waiting_for_it_ms_per_step"] == {"worker:0": pytest.approx(40.0)}  # 44.5 - 4.5
    assert finding.recommendation.predicted_speedup == pytest.approx(64 / 24, rel=0.01)
    assert "input_bound" not in _warnings(report)


def test_a_clean_synchronous_run_with_stamps_has_no_warning(builder):
    report = analyze(_sync_run(builder, 25.0, {"worker:0": (0.6, 4.0), "worker:1": (0.5, 4.3)}).write())
    assert _warnings(report) == []


def test_a_slow_input_is_input_bound_not_a_straggler(builder):
    # Worker 1 waits 40 ms for its element and computes as fast as worker 0: its input, not
    # its compute, gates the step. A prefetch fills the next element over the whole step:
    # the step becomes max(shared 20 + compute 4, input 40 over 1 core) = 40 ms.
    report = analyze(_sync_run(builder, 64.0, {"worker:0": (0.5, 4.0), "worker:1": (40.0, 4.0)}).write())
    assert "straggler" not in [f.kind for f in report.findings]
    finding = report.primary
    assert finding.kind == "input_bound" and finding.tasks == ("worker:1",)
    assert finding.recommendation.predicted_speedup == pytest.approx(64 / 40, rel=0.01)


def test_a_worker_with_larger_batches_is_compared_per_example(builder):
    # A skewed shard: worker 1 reads 3x the examples and computes 3x longer: not slower per example.
    run = _sync_run(builder, 40.0, {"worker:0": (0.5, 5.0), "worker:1": (0.5, 15.0)},
                    examples={"worker:0": 32, "worker:1": 96})
    assert "straggler" not in [f.kind for f in analyze(run.write()).findings]


def _sampled(run, late: dict, throttled_ms: dict | None = None, late_from: int = 0, wakes: dict | None = None):
    """One ``system`` record a second per worker over its steps, each with 10 timed wake-ups
    (``wakes[worker]``) of which ``late[worker]`` came late from second ``late_from`` on (and
    ``throttled_ms[worker]`` of cgroup throttling)."""
    from tests.runs import START_NS

    for worker in WORKERS:
        for second in range(int((run.step_end_ns - START_NS) / 1e9) + 1):
            late_wakes = late[worker] if second >= late_from else 0
            run.record(
                "system", host="h", task=worker, time_ns=START_NS + second * 1_000_000_000, cpu_pct=20.0,
                mem_used_frac=0.5, net_sent_bytes=0, net_recv_bytes=0, disk_read_bytes=0, disk_write_bytes=0,
                wakes=(wakes or {}).get(worker, 10), late_wakes=late_wakes, late_ms=late_wakes * 20.0,
                throttled_ms=(throttled_ms or {}).get(worker, float("nan")))
    return run


def test_a_stopped_worker_is_named_with_the_step_it_would_allow(builder):
    # mwms_fit with worker 1 stopped 40 ms of every 100 ms: computes as fast as worker 0
    # between stops, but its sampler wakes late 3 times in 10 (30 % of the time stopped).
    run = _sampled(_sync_run(builder, 60.0, {"worker:0": (0.5, 5.0), "worker:1": (0.5, 5.5)}),
                   {"worker:0": 0, "worker:1": 3})
    report = analyze(run.write())
    finding = report.primary
    assert finding.kind == "straggler" and finding.tasks == ("worker:1",)
    assert finding.severity.value == "warning"
    assert finding.evidence["stopped_share"] == {"worker:0": 0.0, "worker:1": 0.3}
    # Every step stands still while worker 1 is stopped: 60 ms x (1 - 0.3) = 42 ms.
    assert finding.evidence["predicted_step_ms"] == pytest.approx(42.0, rel=0.01)
    assert finding.evidence["waiting_for_it_ms_per_step"] == {"worker:0": pytest.approx(18.0, abs=0.1)}
    assert finding.recommendation.predicted_speedup == pytest.approx(60 / 42, rel=0.01)


def test_a_stopped_worker_is_judged_however_few_times_it_woke(builder):
    # A process wakes less often the longer it is stopped: worker 1, stopped about 40 % of
    # the time, woke 7 times a second, 42 times over the run's 6 s, 3 of them late.
    run = _sampled(_sync_run(builder, 60.0, {"worker:0": (0.5, 5.0), "worker:1": (0.5, 5.0)}),
                   {"worker:0": 0, "worker:1": 3}, wakes={"worker:1": 7})
    finding = analyze(run.write()).primary
    assert finding.kind == "straggler" and finding.tasks == ("worker:1",)
    assert finding.evidence["late_wakes"]["worker:1"] == "18/42"


def test_a_worker_stopped_from_mid_run_is_named_over_the_run_s_last_part(builder):
    # 100 steps of 61 ms (6.1 s); worker 1 stopped 40 % of the time from its fifth second
    # on: 8 late wake-ups of 60 over the run, under the bar; 8 of 20 over its last half.
    # Its stall lands in both workers' input wait (22 ms a step, 37 %): less 0.4 of the last
    # half's steps (0.2 of the run's), not input bound; less the whole run's 0.13, it would be.
    run = _sync_run(builder, 60.0, {"worker:0": (22.0, 5.0), "worker:1": (22.0, 5.0)})
    run = _sampled(run, {"worker:0": 0, "worker:1": 4}, late_from=5)
    report = analyze(run.write())
    finding = report.primary
    assert finding.kind == "straggler" and finding.tasks == ("worker:1",)
    assert "over the run's last 50%" in finding.title and finding.evidence["judged_last_share"] == 0.5
    # Over the last half 60 ms steps, 36 ms without the stops; s = 1.67 there, 1 / (0.5 + 0.5 / s) over the run.
    assert finding.evidence["predicted_speedup_over_it"] == pytest.approx(60 / 36, rel=0.02)
    assert finding.recommendation.predicted_speedup == pytest.approx(1 / (0.5 + 0.5 * 36 / 60), rel=0.02)
    assert "input_bound" not in _warnings(report)


def _probed(run, stopped: dict, probes: int = 20):
    """``job_process`` readings a second by each worker of the other: ``probes`` probes of its
    state, ``stopped[worker]`` of them finding it stopped (the first reading only dates the next)."""
    from tests.runs import START_NS

    for prober, probed in (WORKERS, WORKERS[::-1]):
        for second in range(int((run.step_end_ns - START_NS) / 1e9) + 1):
            first = second == 0
            run.record("job_process", host="h", task=probed, time_ns=START_NS + second * 1_000_000_000, pid=7,
                       run_ms=float("nan"), runq_wait_ms=float("nan"), throttled_ms=float("nan"),
                       probes=0 if first else probes, stopped_probes=0 if first else stopped[probed], clock_task=prober)
    return run


def test_a_stopped_worker_is_predicted_from_its_peers_probes_where_they_see_more(builder):
    # gen_fit with worker 1 stopped 16 ms of every 41 (39 % of the time): its wake-ups came
    # late only where a stop outlasted their deadline by 10 ms, 2 in 10; its peer's probes,
    # at random times, found it stopped 8 times in 20.
    run = _sampled(_sync_run(builder, 60.0, {"worker:0": (0.5, 5.0), "worker:1": (0.5, 5.0)}),
                   {"worker:0": 0, "worker:1": 2})
    finding = analyze(_probed(run, {"worker:0": 0, "worker:1": 8}).write()).primary
    assert finding.kind == "straggler" and finding.tasks == ("worker:1",)
    assert finding.evidence["stopped_share"] == {"worker:0": 0.0, "worker:1": 0.4}
    assert finding.evidence["stopped_share_from"] == {"worker:0": "own sampler", "worker:1": "probes"}
    assert "probes of its state found it stopped" in finding.summary
    # 60 ms x (1 - 0.4) = 36 ms a step without the stops (the late wake-ups said 48 ms).
    assert finding.recommendation.predicted_speedup == pytest.approx(60 / 36, rel=0.01)


def test_a_throttled_worker_is_named_from_its_cgroup(builder):
    # A cgroup v2 quota: worker 1 throttled 500 ms of every second; its wake-ups not counted late.
    run = _sampled(_sync_run(builder, 60.0, {"worker:0": (0.5, 5.0), "worker:1": (0.5, 5.0)}),
                   {"worker:0": 0, "worker:1": 0}, throttled_ms={"worker:0": 0.0, "worker:1": 500.0})
    finding = analyze(run.write()).primary
    assert finding.kind == "straggler" and finding.tasks == ("worker:1",)
    assert finding.severity.value == "critical"  # 60 ms steps, 30 ms without the throttling
    assert finding.recommendation.predicted_speedup == pytest.approx(2.0, rel=0.01)


def test_a_clean_run_with_punctual_samplers_has_no_warning(builder):
    run = _sampled(_sync_run(builder, 25.0, {"worker:0": (0.5, 4.0), "worker:1": (0.5, 4.2)}),
                   {"worker:0": 0, "worker:1": 1})
    assert _warnings(analyze(run.write())) == []


def test_a_host_loaded_for_every_worker_alike_names_none(builder):
    # Load 20 on 2 cores: every process wakes late often, one a little more than the other.
    run = _sampled(_sync_run(builder, 60.0, {"worker:0": (0.5, 5.0), "worker:1": (0.5, 5.0)}),
                   {"worker:0": 3, "worker:1": 4})
    assert "straggler" not in [f.kind for f in analyze(run.write()).findings]


def test_one_slow_input_is_named_and_the_others_are_shown_waiting_for_it(builder):
    # Worker 1 waits 40 ms for its element; worker 0 has its element at once and waits for
    # worker 1 in the all-reduce: 44 - 4.5 = 39.5 ms a step, shown, not named.
    report = analyze(_sync_run(builder, 64.0, {"worker:0": (0.5, 4.0), "worker:1": (40.0, 4.0)}).write())
    finding = next(f for f in report.findings if f.kind == "input_bound")
    assert finding.tasks == ("worker:1",)
    assert finding.evidence["waiting_for_peers_ms_per_step"] == {"worker:0": pytest.approx(39.5)}
    assert "worker:0 39.5 ms a step" in finding.summary


def test_every_slow_input_is_named_and_none_shown_waiting(builder):
    report = analyze(_sync_run(builder, 64.0, {"worker:0": (40.0, 4.0), "worker:1": (39.0, 4.0)}).write())
    finding = next(f for f in report.findings if f.kind == "input_bound")
    assert finding.tasks == WORKERS and "waiting_for_peers_ms_per_step" not in finding.evidence


def test_the_stall_of_a_stopped_worker_in_every_input_wait_is_not_input_bound(builder):
    # A dataset of unknown cardinality hands out an element only after every worker says it
    # has one, so while worker 1 is stopped (40 % of the time) both workers wait for their
    # element: 30 ms of each 64 ms step. Left out, the stall leaves 4.4 ms of input wait.
    run = _sampled(_sync_run(builder, 64.0, {"worker:0": (30.0, 4.0), "worker:1": (30.0, 4.0)}),
                   {"worker:0": 0, "worker:1": 4})
    report = analyze(run.write())
    assert "input_bound" not in _warnings(report)
    finding = report.primary
    assert finding.kind == "straggler" and finding.tasks == ("worker:1",)
    # Every step stands still while it is stopped: 64 x (1 - 0.4) = 38.4 ms, 25.6 ms less.
    assert finding.evidence["waiting_for_it_ms_per_step"] == {"worker:0": pytest.approx(25.6, abs=0.1)}


def test_a_slow_input_beside_a_briefly_stopped_peer_is_still_input_bound(builder):
    # Worker 0 waits 40 ms of its 64 ms step for input; worker 1 was stopped 10 % of the
    # time. Only that 10 % is left out of worker 0's wait: it stays input bound.
    run = _sampled(_sync_run(builder, 64.0, {"worker:0": (40.0, 4.0), "worker:1": (0.5, 4.0)}),
                   {"worker:0": 0, "worker:1": 1})
    finding = next(f for f in analyze(run.write()).findings if f.kind == "input_bound")
    assert finding.tasks == ("worker:0",) and finding.severity.value == "critical"
    assert finding.evidence["stall_share_left_out"] == pytest.approx(0.1)
    assert finding.evidence["input_wait_frac"]["worker:0"] == pytest.approx(40 / 64 - 0.1, abs=0.01)
