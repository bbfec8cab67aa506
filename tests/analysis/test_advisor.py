"""The advisor holds predictions to the idle CPU of a host all workers share, then ranks."""

import pytest

from tests.runs import MS, START_NS, scheduled_ahead
from tfdiag.analysis import analyze
from tfdiag.analysis.advisor import cpu_speedup_limit
from tfdiag.analysis.devices import SharedHost
from tfdiag.analysis.load import load_run
from tfdiag.analysis.measurements import measure


# The straggler's repair in ``_straggler_run``: worker:1's 100 steps over its 6.1 s at
# worker:0's 21-ms period, worker:0's 100 as they were (``whatif.speedup_over_run``).
STRAGGLER_REPAIR = (100 + 100 * 61 / 21) / 200


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
    assert limit["unlimited_speedup"] == pytest.approx(STRAGGLER_REPAIR, rel=0.01)


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
    assert finding.recommendation.predicted_speedup == pytest.approx((100 + 100 * 100 / 60) / 200, rel=0.01)
    assert "host_cpu_limit" not in finding.evidence


def _epochs_of_closures(builder, idle_ms, pause_ms):
    """ParameterServerStrategy closures in two epochs of about 1.3 s: 60 of 20 ms on
    worker:0, 22 of 60 ms on worker:1, ``idle_ms`` apart; between them every worker idles
    ``pause_ms`` (``model.fit``'s epoch end). The host's CPU reads 90 %."""
    run = builder()
    start = START_NS
    for epoch in range(2):
        run.steps("worker:0", count=60, step_ms=20, idle_ms=idle_ms, closures=True, first_step=60 * epoch,
                  start_ns=start)
        run.steps("worker:1", count=22, step_ms=60, idle_ms=idle_ms, closures=True, first_step=22 * epoch,
                  start_ns=start)
        start = run.step_end_ns + int(pause_ms * MS)
    return run.system("vm", "chief:0", cpu_pct=90.0, count=60, every_ms=50.0)


def test_pauses_between_closures_are_not_workers_waiting(builder):
    """An epoch end idles the workers 2 s while the coordinator works: 45-49 % of their
    period, but their closures, 2 ms apart, are what fills the host (read whole: a log
    without the job's CPU), so it bounds."""
    finding = analyze(_epochs_of_closures(builder, idle_ms=2, pause_ms=2000).write()).primary
    assert finding.kind == "straggler"
    assert finding.evidence["host_cpu_limit"]["unlimited_speedup"] > 100 / 90
    assert finding.recommendation.predicted_speedup == pytest.approx(100 / 90)


def test_closures_far_apart_are_workers_waiting_whatever_the_pauses(builder):
    findings = analyze(_epochs_of_closures(builder, idle_ms=40, pause_ms=2000).write()).findings
    assert {"straggler", "coordinator_bound"} <= {f.kind for f in findings}
    assert all("host_cpu_limit" not in f.evidence for f in findings)
    assert max(f.recommendation.predicted_speedup for f in findings) > 100 / 90


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
    # The whole host read alone allows nothing on a saturated host.
    assert cpu_speedup_limit(SharedHost("vm", cpu_pct=100.0, samples=10)) == pytest.approx(1.0)
    # The job uses 25 % of it, other programs 75 %: it could get 25 + 37.5.
    assert cpu_speedup_limit(SharedHost("vm", cpu_pct=100.0, samples=10, job_cpu_pct=25.0)) == pytest.approx(2.5)
    # The job alone on the host: its bound is the idle CPU, as before.
    assert cpu_speedup_limit(SharedHost("vm", cpu_pct=80.0, samples=10, job_cpu_pct=80.0)) == pytest.approx(1.25)


def _job_cpu(run, task, pid, proc_cpu_pct, job_cpu_pct):
    """Gives ``task``'s system samples the job's CPU fields the sampler writes."""
    run.records = [(kind, dict(record, pid=pid, cpu_count=2, proc_cpu_pct=proc_cpu_pct, job_cpu_pct=job_cpu_pct,
                               job_processes=1))
                   if kind == "system" and record["task"] == task else (kind, record) for kind, record in run.records]
    return run


def test_old_logs_without_the_jobs_cpu_are_held_to_the_whole_host(builder):
    host = measure(load_run(_straggler_run(builder).system("vm", "chief:0", cpu_pct=100.0, count=40).write())).shared_host
    assert host.job_cpu_pct is None and cpu_speedup_limit(host) == pytest.approx(1.0)


def test_all_tasks_on_one_busy_host_the_coordinator_counts_its_servers(builder):
    """ParameterServerStrategy on one host: the coordinator's sampler counts the servers it
    found by their ports (job 60 % of the host, itself 5 %); other programs use 40 %."""
    run = _job_cpu(_straggler_run(builder).system("vm", "chief:0", cpu_pct=100.0, count=40), "chief:0", 11, 5.0, 60.0)
    finding = analyze(run.write()).primary
    assert finding.kind == "straggler"
    limit = (60 + 40 / 2) / 60
    assert finding.recommendation.predicted_speedup == pytest.approx(limit)
    assert finding.evidence["host_cpu_limit"]["job_cpu_pct"] == 60.0
    assert finding.evidence["host_cpu_limit"]["max_speedup"] == pytest.approx(limit, abs=1e-3)


def test_workers_that_count_only_themselves_add_up(builder):
    """MultiWorkerMirroredStrategy workers on one host with no cluster spec to find each
    other by: each counts its own process, and the job is their sum (not the mean)."""
    run = _straggler_run(builder, strategy="MultiWorkerMirroredStrategy", ps=0, chief=False)
    run.system("vm", "worker:0", cpu_pct=100.0, count=40).system("vm", "worker:1", cpu_pct=100.0, count=40)
    run = _job_cpu(_job_cpu(run, "worker:0", 21, 30.0, 30.0), "worker:1", 22, 40.0, 40.0)
    host = measure(load_run(run.write())).shared_host
    assert host.host == "vm" and host.job_cpu_pct == pytest.approx(70.0)


def test_tasks_of_one_process_are_counted_once(builder):
    """Two samplers in one process (same pid) report the same process: counted once; a
    sampler that found the whole job by its ports counts more and is taken."""
    def host_of(worker_1_job_cpu_pct):
        run = _straggler_run(builder, strategy="MultiWorkerMirroredStrategy", ps=0, chief=False)
        run.system("vm", "worker:0", cpu_pct=90.0, count=40).system("vm", "worker:1", cpu_pct=90.0, count=40)
        run = _job_cpu(_job_cpu(run, "worker:0", 5, 35.0, 35.0), "worker:1", 5, 35.0, worker_1_job_cpu_pct)
        return measure(load_run(run.write())).shared_host

    assert host_of(35.0).job_cpu_pct == pytest.approx(35.0)
    assert host_of(80.0).job_cpu_pct == pytest.approx(80.0)


def test_one_task_per_host_has_no_shared_bound_even_with_the_jobs_cpu(builder):
    run = _straggler_run(builder, strategy="MultiWorkerMirroredStrategy", ps=0, chief=False)
    run.system("host-a", "worker:0", cpu_pct=100.0, count=40).system("host-b", "worker:1", cpu_pct=100.0, count=40)
    run = _job_cpu(_job_cpu(run, "worker:0", 5, 95.0, 95.0), "worker:1", 5, 95.0, 95.0)
    finding = analyze(run.write()).primary
    assert finding.recommendation.predicted_speedup == pytest.approx(61 / 21, rel=0.01)
    assert "host_cpu_limit" not in finding.evidence


def test_a_foreign_cpu_hog_does_not_hold_the_job_to_the_saturated_host(builder):
    """A host at 100 % where the job uses 20 %: the whole-host reading allowed nothing;
    the job's own share allows (20 + 80 / 2) / 20 = 3x, above the 1.95x straggler repair."""
    run = _job_cpu(_straggler_run(builder).system("vm", "chief:0", cpu_pct=100.0, count=40), "chief:0", 11, 2.0, 20.0)
    finding = analyze(run.write()).primary
    assert finding.recommendation.predicted_speedup == pytest.approx(STRAGGLER_REPAIR, rel=0.01)
    assert "host_cpu_limit" not in finding.evidence


def test_a_job_alone_on_a_busy_host_is_held_to_the_idle_cpu(builder):
    """The job is all the host's load (85 %): the bound is the idle CPU, as the whole-host reading."""
    run = _job_cpu(_straggler_run(builder).system("vm", "chief:0", cpu_pct=85.0, count=40), "chief:0", 11, 5.0, 85.0)
    finding = analyze(run.write()).primary
    assert finding.recommendation.predicted_speedup == pytest.approx(100 / 85)


def test_with_the_jobs_cpu_a_job_whose_workers_wait_is_held_to_its_share(builder):
    """Closures 40 ms apart (scheduled ahead), the host at 90 % of which the job 85 %: the job fills the host,
    so repairing the straggler is held to (85 + 10 + 5 / 2) / 85; more steps per closure
    takes the closures' own work off every step and is not held."""
    run = builder()
    run.steps("worker:0", step_ms=20, idle_ms=40, closures=True).steps("worker:1", step_ms=60, idle_ms=40, closures=True)
    run = _job_cpu(scheduled_ahead(run).system("vm", "chief:0", cpu_pct=90.0, count=40), "chief:0", 11, 10.0, 85.0)
    findings = {f.kind: f for f in analyze(run.write()).findings}
    limit = (85 + 10 + 5 / 2) / 85
    straggler, coordinator = findings["straggler"], findings["coordinator_bound"]
    assert straggler.evidence["host_cpu_limit"]["unlimited_speedup"] > limit
    assert straggler.recommendation.predicted_speedup == pytest.approx(limit)
    assert coordinator.recommendation.predicted_speedup > 1.5 and "host_cpu_limit" not in coordinator.evidence
