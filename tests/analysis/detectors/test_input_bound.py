"""input_bound's prediction: a parallel map spreads a step's input over its host's cores.

Records go through the real store writer (the ``builder`` fixture) and the whole analysis.
"""

import pytest

from tfdiag.analysis import analyze
from tests.runs import MS, START_NS


def _input_bound_run(builder):
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=30, input_ms=20)
    return run


def _samples(run, task, cpu_count, host="h", count=20):
    """System samples of a lightly loaded host (20 % CPU) that know its cores."""
    for i in range(count):
        run.record("system", host=host, task=task, time_ns=START_NS + i * 100 * MS, cpu_pct=20.0,
                   mem_used_frac=0.5, net_sent_bytes=0, net_recv_bytes=0, disk_read_bytes=0,
                   disk_write_bytes=0, cpu_count=cpu_count)
    return run


def _input_bound(run):
    report = analyze(run.write())
    assert report.primary.kind == "input_bound"
    return report.primary


def test_each_worker_spreads_its_input_over_its_own_hosts_cores(builder):
    # 20 ms of input over 2 cores is 10 ms, no more than the 10 ms of compute: a step then
    # costs 10 ms and the period goes from 31 ms to 11 ms.
    run = _input_bound_run(builder)
    for worker in ("worker:0", "worker:1"):
        _samples(run, worker, cpu_count=2)
    finding = _input_bound(run)
    assert finding.evidence["map_parallelism"] == {"worker:0": 2, "worker:1": 2}
    assert finding.recommendation.predicted_speedup == pytest.approx(31 / 11, rel=0.01)


def test_workers_that_sample_nothing_take_the_cores_of_the_host_they_share(builder):
    # ParameterServerStrategy workers run no tfdiag code: only the chief samples, on the
    # host the workers' loopback addresses name. 4 cores: the 20 ms of input take 5 ms, the
    # compute's 10 ms is the step.
    run = _samples(_input_bound_run(builder), "chief:0", cpu_count=4)
    finding = _input_bound(run)
    assert finding.evidence["map_parallelism"] == {"worker:0": 4, "worker:1": 4}
    assert finding.recommendation.predicted_speedup == pytest.approx(31 / 11, rel=0.01)


def test_unknown_cores_predict_the_prefetch_overlap_alone(builder):
    # No system samples: one core, so input and compute overlap and the 20 ms input is the step.
    finding = _input_bound(_input_bound_run(builder))
    assert finding.evidence["map_parallelism"] == {"worker:0": 1, "worker:1": 1}
    assert finding.recommendation.predicted_speedup == pytest.approx(31 / 21, rel=0.01)


def test_a_clean_run_on_a_sampled_host_is_not_input_bound(builder):
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=30, input_ms=1)
        _samples(run, worker, cpu_count=2)
    assert all(f.kind != "input_bound" for f in analyze(run.write()).findings)


def test_a_wait_whose_fix_gains_under_a_tenth_is_info(builder):
    # A quarter of each 4 ms step waiting for input, but 40 ms between steps (a loop that
    # hands out one step at a time): overlapping the 1 ms saves under 3 % of the period.
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=4, input_ms=1, idle_ms=40)
        _samples(run, worker, cpu_count=2)
    (finding,) = [f for f in analyze(run.write()).findings if f.kind == "input_bound"]
    assert finding.recommendation.predicted_speedup < 1.1
    assert finding.severity.value == "info"
