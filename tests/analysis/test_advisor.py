"""The advisor holds predictions to the idle CPU of a host all workers share, then ranks."""

import pytest

from tfdiag.analysis import analyze
from tfdiag.analysis.advisor import cpu_speedup_limit
from tfdiag.analysis.devices import SharedHost
from tfdiag.analysis.load import load_run
from tfdiag.analysis.measurements import measure


def _straggler_run(builder, **kwargs):
    run = builder(**kwargs)
    # 100 steps of ~21 ms and ~61 ms from START_NS: about 6 s of training.
    return run.steps("worker:0", step_ms=20).steps("worker:1", step_ms=60)


def test_prediction_held_to_the_idle_cpu_of_a_shared_host(builder):
    # ParameterServerStrategy workers run no tfdiag code: their loopback addresses place
    # them on the host of the chief's sampler.
    run = _straggler_run(builder).system("vm", "chief:0", cpu_pct=80.0, count=40)
    finding = analyze(run.write()).primary
    assert finding.kind == "straggler"
    assert finding.recommendation.predicted_speedup == pytest.approx(1.25)
    limit = finding.evidence["host_cpu_limit"]
    assert limit["host"] == "vm" and limit["cpu_pct"] == 80.0
    assert limit["unlimited_speedup"] == pytest.approx((2 / 21) / (1 / 21 + 1 / 61), rel=0.01)


def test_no_limit_when_the_workers_have_hosts_of_their_own(builder):
    run = _straggler_run(builder, strategy="MultiWorkerMirroredStrategy", ps=0)
    run.system("host-a", "worker:0", cpu_pct=95.0).system("host-b", "worker:1", cpu_pct=95.0)
    finding = analyze(run.write()).primary
    assert finding.recommendation.predicted_speedup == pytest.approx(61 / 21, rel=0.01)
    assert "host_cpu_limit" not in finding.evidence


def test_no_limit_on_a_gpu_host_or_with_remote_workers(builder):
    gpu_run = _straggler_run(builder).system("vm", "chief:0", cpu_pct=90.0).gpu("vm", 0, util_pct=50.0)
    assert measure(load_run(gpu_run.write())).shared_host is None
    remote = _straggler_run(builder).system("vm", "chief:0", cpu_pct=90.0)
    remote.cluster["worker"] = ["10.0.0.2:2222", "10.0.0.3:2222"]
    assert measure(load_run(remote.write())).shared_host is None


def test_samples_outside_the_training_window_do_not_count(builder):
    run = _straggler_run(builder).system("vm", "chief:0", cpu_pct=50.0, count=40)
    # Busy samples an hour later (the job exited long before) must not move the mean.
    run.records += [("system", dict(record, time_ns=record["time_ns"] + 3600 * 10**9, cpu_pct=100.0))
                    for kind, record in list(run.records) if kind == "system"]
    host = measure(load_run(run.write())).shared_host
    # The first sample, taken when the warm-up steps began, is outside the window too.
    assert host.host == "vm" and host.cpu_pct == pytest.approx(50.0) and host.samples == 39


def test_equal_limits_rank_by_the_prediction_before_the_limit(builder):
    # Input wait on both workers and a straggler: both gains exceed the 1.1x the host allows.
    run = builder()
    run.steps("worker:0", step_ms=30, input_ms=20).steps("worker:1", step_ms=90, input_ms=20)
    run.system("vm", "chief:0", cpu_pct=91.0, count=60)
    findings = analyze(run.write()).findings
    assert [f.recommendation.predicted_speedup for f in findings[:2]] == pytest.approx([100 / 91] * 2)
    unlimited = [f.evidence["host_cpu_limit"]["unlimited_speedup"] for f in findings[:2]]
    assert unlimited == sorted(unlimited, reverse=True)


def test_a_busy_host_does_not_limit_a_job_whose_workers_wait(builder):
    """Whole-host CPU at 90 % while the workers idle 2/3 of their period: the CPU is the
    neighbours'; a faster link or fewer closures still speed the job up."""
    run = builder()
    run.steps("worker:0", step_ms=20, idle_ms=40).steps("worker:1", step_ms=60, idle_ms=40)
    run.system("vm", "chief:0", cpu_pct=90.0, count=40)
    finding = analyze(run.write()).primary
    assert finding.kind == "straggler"
    assert finding.recommendation.predicted_speedup == pytest.approx((2 / 60) / (1 / 60 + 1 / 100), rel=0.01)
    assert "host_cpu_limit" not in finding.evidence


def test_a_busy_host_still_limits_a_job_whose_workers_compute(builder):
    run = _straggler_run(builder).system("vm", "chief:0", cpu_pct=100.0, count=40)
    finding = analyze(run.write()).primary
    assert finding.recommendation.predicted_speedup == pytest.approx(1.0)
    assert finding.evidence["host_cpu_limit"]["cpu_pct"] == 100.0


def test_a_critical_finding_without_prediction_ranks_before_every_prediction(builder):
    from tfdiag.analysis.advisor import advise
    from tfdiag.analysis.findings import Finding, Recommendation, Severity

    def finding(kind, severity, speedup):
        return Finding(kind=kind, severity=severity, title=kind, summary="", tasks=("worker:1",), evidence={},
                       recommendation=Recommendation(action="", change="", predicted_speedup=speedup))

    measured = measure(load_run(_straggler_run(builder).write()))
    stalled = finding("stalled", Severity.CRITICAL, None)
    unknown = finding("input_bound", Severity.WARNING, None)
    straggler = finding("straggler", Severity.CRITICAL, 3.0)
    ranked = advise([unknown, straggler, stalled], measured)
    assert [f.kind for f in ranked] == ["stalled", "straggler", "input_bound"]


def test_the_jobs_own_cpu_share_loosens_the_bound_on_a_host_others_keep_busy():
    saturated = SharedHost("vm", cpu_pct=100.0, samples=10)
    # The whole host read alone allows nothing on a saturated host.
    assert cpu_speedup_limit(saturated) == pytest.approx(1.0)
    # The job uses 25 % of it, other programs 75 %: it could get 25 + 37.5.
    assert cpu_speedup_limit(saturated, job_cpu_pct=25.0) == pytest.approx(2.5)
    # The job alone on the host: its bound is the idle CPU, as before.
    assert cpu_speedup_limit(SharedHost("vm", cpu_pct=80.0, samples=10), job_cpu_pct=80.0) == pytest.approx(1.25)
