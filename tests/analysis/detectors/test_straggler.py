"""``straggler``: workers compared per example, over the time they all ran, with enough steps."""

import numpy as np
import pandas as pd
import pytest

from tests.runs import MS, START_NS
from tfdiag.analysis import analyze
from tfdiag.analysis.detectors import straggler
from tfdiag.analysis.findings import Severity
from tfdiag.analysis.load import RunLoader
from tfdiag.analysis.step_stats import StepAccumulator
from tfdiag.analysis.step_windows import window_counters


def _kinds(report):
    return [finding.kind for finding in report.findings]


@pytest.mark.parametrize("values", [
    [3.0, 1.0, 2.0], [5.0, 5.0, 1.0, 9.0], [2.0, 7.0, 7.0, 1.0, 4.0, 4.0], [1.0, np.nan, 3.0], [np.nan, 1.0, 2.0, 8.0],
    [np.nan, np.nan, 1.0], list(np.random.default_rng(7).integers(0, 20, 101).astype(float)),
])
def test_typical_of_others_is_the_median_of_the_values_less_each_one(values):
    # every worker's median of the others from one sort (1,024 workers: 1,024 medians otherwise)
    array = np.array(values)
    expected = [np.median(np.delete(array, i)) if not np.isnan(np.delete(array, i)).any() else np.nan
                for i in range(len(array))]
    np.testing.assert_array_equal(straggler.typical_of_others(pd.Series(array)).to_numpy(), expected)


def test_larger_batches_from_a_skewed_shard_are_shard_imbalance_not_a_straggler(builder):
    # worker:1's batches are 3x larger and its steps 3x longer: the same time per example.
    run = builder()
    run.steps("worker:0", count=120, step_ms=13, examples=1024).steps("worker:1", count=40, step_ms=39, examples=3072)
    report = analyze(run.write())
    assert report.primary.kind == "shard_imbalance" and report.primary.tasks == ("worker:1",)
    assert "straggler" not in _kinds(report)


def test_smaller_batches_dearer_per_example_but_shorter_steps_are_no_straggler(builder):
    # ps_fit shard-skew=1:3: a step's fixed cost makes worker:0's 512-example steps (20 ms)
    # twice as dear per example as worker:1's 1536-example steps (32 ms).
    run = builder()
    run.steps("worker:0", count=120, step_ms=20, examples=512).steps("worker:1", count=75, step_ms=32, examples=1536)
    report = analyze(run.write())
    assert "straggler" not in _kinds(report)
    assert report.primary.kind == "shard_imbalance" and report.primary.tasks == ("worker:1",)


def test_a_worker_slower_per_example_is_a_straggler_whatever_its_batch(builder):
    # 3x the examples per step but 6x the step time: twice as slow per example.
    run = builder()
    run.steps("worker:0", count=120, step_ms=13, examples=1024).steps("worker:1", count=20, step_ms=78, examples=3072)
    straggler = next(f for f in analyze(run.write()).findings if f.kind == "straggler")
    assert straggler.tasks == ("worker:1",)
    assert straggler.evidence["compared"] == "per example"
    # Its period, 79 ms for 3072 examples, against 14 ms for 1024 (42 ms for 3072).
    assert straggler.evidence["slowdown"]["worker:1"] == pytest.approx(79 / 42, rel=0.01)


def test_a_late_joiner_is_compared_over_the_time_both_ran(builder):
    # A TF1 non-chief waits for the chief: worker:0 steps alone at 12 ms for 200 steps, then
    # both step at 20 ms for 60 steps while they share the CPU.
    run = builder(strategy=None)
    run.steps("worker:0", count=200, step_ms=12, idle_ms=0.5)
    joined = run.step_end_ns + MS
    run.steps("worker:0", count=60, step_ms=20, idle_ms=0.5, first_step=200, start_ns=joined)
    run.steps("worker:1", count=60, step_ms=20, idle_ms=0.5, start_ns=joined)
    assert "straggler" not in _kinds(analyze(run.write()))


def test_a_late_joiner_slower_while_both_ran_is_a_straggler(builder):
    run = builder(strategy=None)
    run.steps("worker:0", count=200, step_ms=12, idle_ms=0.5)
    joined = run.step_end_ns + MS
    run.steps("worker:0", count=60, step_ms=20, idle_ms=0.5, first_step=200, start_ns=joined)
    run.steps("worker:1", count=30, step_ms=40, idle_ms=0.5, start_ns=joined)
    # worker:1's session waited 30 s for the chief (DiagnosticsHook's session record).
    run.record("session", task="worker:1", begin_ns=START_NS - 30_000 * MS, ready_ns=START_NS)
    straggler = next(f for f in analyze(run.write()).findings if f.kind == "straggler")
    assert straggler.tasks == ("worker:1",)
    assert straggler.evidence["chief_wait_s"] == {"worker:1": 30.0}
    assert straggler.evidence["step_time_ms_p50"] == {"worker:0": 20.0, "worker:1": 40.0}
    assert straggler.evidence["overlap_s"] == pytest.approx(30 * 40.5 / 1000, rel=0.05)


def test_a_worker_with_only_its_first_steps_is_not_judged(builder):
    # A worker that joined for its warm-up step and two more: 10-100x the others, by warm-up alone.
    run = builder(strategy=None)
    run.steps("worker:0", count=200, step_ms=20)
    run.steps("worker:1", count=3, step_ms=400, start_ns=START_NS + 3000 * MS)
    assert "straggler" not in _kinds(analyze(run.write()))


def test_a_worker_slow_from_mid_run_is_named_over_the_run_s_last_part(builder):
    # worker:1 steps as worker:0 for 3 s of 4.2, then takes 60-ms steps: 1.2x less often
    # over the whole run (under the bar), 1.6x over its last half.
    run = builder(strategy=None)
    run.steps("worker:0", count=200, step_ms=20)
    run.steps("worker:1", count=143, step_ms=20)
    run.steps("worker:1", count=20, step_ms=60, first_step=143, start_ns=START_NS + 143 * 21 * MS)
    finding = next(f for f in analyze(run.write()).findings if f.kind == "straggler")
    assert finding.tasks == ("worker:1",) and finding.title.endswith("(over the run's last 50%)")
    assert 1.0 < finding.recommendation.predicted_speedup < finding.evidence["predicted_speedup_over_it"]


def test_a_straggler_over_the_run_s_last_part_whose_fix_gains_little_there_is_info(builder):
    # Asynchronous, four workers: worker:3 steps as the others for 3 s of 4.2, then takes
    # 40-ms steps, 2x less often over the last half, but the job's other three workers carry
    # the throughput: fixing it gains under 1.1x there (trial 1351: 34 steps against 47).
    run = builder(strategy=None)
    for worker in ("worker:0", "worker:1", "worker:2"):
        run.steps(worker, count=200, step_ms=20)
    run.steps("worker:3", count=143, step_ms=20)
    run.steps("worker:3", count=30, step_ms=40, first_step=143, start_ns=START_NS + 143 * 21 * MS)
    finding = next(f for f in analyze(run.write()).findings if f.kind == "straggler")
    assert finding.title.endswith("(over the run's last 50%)")
    assert finding.evidence["predicted_speedup_over_it"] < straggler.MIN_PART_WARNING_SPEEDUP
    assert finding.severity == Severity.INFO


def test_a_worker_that_ended_early_in_the_run_s_last_part_is_not_judged_over_it(builder):
    # worker:1's last 6 steps before it failed at 3.1 s of 4.2 were 3x slow: 1.3x less often
    # than worker:0 over the second it stepped in the run's last half, under half of it; the
    # last quarter has none of its steps. Its last steps before a failure are no straggler.
    run = builder(strategy=None)
    run.steps("worker:0", count=200, step_ms=20)
    run.steps("worker:1", count=130, step_ms=20)
    run.steps("worker:1", count=6, step_ms=60, first_step=130, start_ns=START_NS + 130 * 21 * MS)
    assert "straggler" not in _kinds(analyze(run.write()))


def test_a_worker_with_few_long_closures_over_the_whole_run_is_judged(builder):
    # Asynchronous: worker:1 ran 4 closures of 1 s over the 4 s worker:0 took for 200 steps.
    run = builder(strategy=None)
    run.steps("worker:0", count=200, step_ms=20)
    run.steps("worker:1", count=4, step_ms=1000)
    finding = next(f for f in analyze(run.write()).findings if f.kind == "straggler")
    assert finding.tasks == ("worker:1",)


def test_a_worker_present_most_of_the_run_with_few_closures_after_a_long_warm_up_is_judged(builder):
    # A starved worker (a CPU quota) takes 800 ms to warm up, then runs 4 closures of 150 ms:
    # its timed records cover under half of worker:0's time, but it was there for most of it.
    run = builder(strategy=None)
    run.steps("worker:0", count=100, step_ms=20)
    run.steps("worker:1", count=1, step_ms=800)
    run.steps("worker:1", count=4, step_ms=150, idle_ms=50, first_step=1, start_ns=START_NS + 850 * MS)
    finding = next(f for f in analyze(run.write()).findings if f.kind == "straggler")
    assert finding.tasks == ("worker:1",)


# Long runs keep a sample of their rows (step_stats): a cap of a few rows and a few
# segments forces that path on these small runs.
SAMPLED = dict(sampled_rows=16, recent_rows=8, segments=8)


def _late_joiner(builder, joiner_ms):
    """worker:0 steps alone at 12 ms, then both step while they share the CPU (worker:0 at
    20 ms, worker:1 at ``joiner_ms``)."""
    run = builder(strategy=None)
    run.steps("worker:0", count=400, step_ms=12, idle_ms=0.5, jitter_ms=0.25)
    joined = run.step_end_ns + MS
    run.steps("worker:0", count=120, step_ms=20, idle_ms=0.5, first_step=400, start_ns=joined, jitter_ms=0.25)
    run.steps("worker:1", count=120 * 20 // joiner_ms, step_ms=joiner_ms, idle_ms=0.5, start_ns=joined, jitter_ms=0.25)
    return run.write(by_task=True, frame_records=50)


def _early_leaver(builder, leaver_ms):
    """Both step while they share the CPU (worker:0 at 20 ms, worker:1 at ``leaver_ms``),
    then worker:1 is done and worker:0 steps alone at 12 ms."""
    run = builder(strategy=None)
    run.steps("worker:1", count=120 * 20 // leaver_ms, step_ms=leaver_ms, idle_ms=0.5, jitter_ms=0.25)
    run.steps("worker:0", count=120, step_ms=20, idle_ms=0.5, jitter_ms=0.25)
    run.steps("worker:0", count=400, step_ms=12, idle_ms=0.5, first_step=120, start_ns=run.step_end_ns + MS,
              jitter_ms=0.25)
    return run.write(by_task=True, frame_records=50)


def _both_paths(path):
    """(unsampled, sampled) analyses of one run; the second must really be sampled."""
    exact = RunLoader(path).refresh()
    sampled = RunLoader(path, StepAccumulator(**SAMPLED)).refresh()
    assert not exact.step_counters["sampled"].any() and sampled.step_counters["sampled"].all()
    return analyze(exact), analyze(sampled)


@pytest.mark.parametrize("make", [_late_joiner, _early_leaver])
def test_a_sampled_run_is_compared_over_the_overlap_as_the_unsampled_one(builder, make):
    # Both workers step at 20 ms while both run: no straggler, however long worker:0 ran alone.
    for report in _both_paths(make(builder, 20)):
        assert "straggler" not in _kinds(report)
    # worker:1 at 30 ms while both ran: the straggler, the same on both paths.
    exact, sampled = (next(f for f in report.findings if f.kind == "straggler")
                      for report in _both_paths(make(builder, 30)))
    assert exact.tasks == sampled.tasks == ("worker:1",)
    assert exact.severity == sampled.severity
    assert sampled.evidence["overlap_s"] == pytest.approx(exact.evidence["overlap_s"], rel=0.02)
    for name in ("step_time_ms_p50", "step_period_ms", "slowdown"):
        for task, value in exact.evidence[name].items():
            assert sampled.evidence[name][task] == pytest.approx(value, rel=0.05), (name, task)
    assert sampled.recommendation.predicted_speedup == pytest.approx(exact.recommendation.predicted_speedup,
                                                                     rel=0.02)


def test_window_counters_are_exact_for_the_segments_inside_the_window(builder):
    run = builder(strategy=None).steps("worker:0", count=500, step_ms=10, idle_ms=0, jitter_ms=1)
    path = run.write(by_task=True, frame_records=37)
    counters = RunLoader(path, StepAccumulator(**SAMPLED)).refresh().step_counters
    rows = RunLoader(path).refresh().frame("step")
    # Records 100 to 299 by time; with 500 records in 8 segments of 64, the window's edges
    # fall inside two segments, each counted by the share of its time inside.
    start, stop = int(rows["begin_ns"].iloc[100]), int(rows["end_ns"].iloc[299])
    window = window_counters(counters, {}, start, stop).iloc[0]
    assert window["records"] == pytest.approx(200, abs=1)
    assert window["steps"] == pytest.approx(200, abs=1)
    exact = rows.iloc[100:300]
    assert window["mean_ns"] == pytest.approx(float((exact["end_ns"] - exact["begin_ns"]).mean()), rel=0.01)
    assert window["period_ns"] == pytest.approx(float(exact["begin_ns"].diff().mean()), rel=0.01)
    # The whole run: every segment inside, counts and sums exact.
    whole = window_counters(counters, {}, 0, 2**62).iloc[0]
    assert (whole["records"], whole["steps"], whole["examples"]) == (500, 500, 500 * 32)


def test_a_worker_given_closures_all_run_that_finished_two_is_judged_by_its_pace(builder):
    # ParameterServerStrategy: both workers get their first closure at once; worker:1 (starved)
    # starts it 3.3 s later and finishes 2 closures of 10 steps by the end of the 4 s run.
    run = builder().steps("worker:0", count=20, step_ms=190, idle_ms=10, closures=True)
    run.steps("worker:1", count=2, step_ms=300, idle_ms=40, closures=True, start_ns=START_NS + 3300 * MS)
    run.record("closure", worker="worker:1", closure_id=99, dispatch_ns=START_NS, result_ns=START_NS + 3300 * MS,
               ok=True, error="")
    finding = next(f for f in analyze(run.write()).findings if f.kind == "straggler")
    assert finding.tasks == ("worker:1",) and finding.severity.value == "critical"
    # 4 s with work, 2 records: its period is 2 s a record against worker:0's 200 ms.
    assert finding.evidence["step_period_ms"]["worker:1"] == pytest.approx(1970, rel=0.02)


def test_a_worker_that_failed_and_never_came_back_is_not_judged_by_its_pace(builder):
    # The run above, but worker:1 finished its 2 closures and failed (no restart in the run):
    # it finished little because it was gone, which is task_failure's.
    run = builder().steps("worker:0", count=20, step_ms=190, idle_ms=10, closures=True)
    run.steps("worker:1", count=2, step_ms=300, idle_ms=40, closures=True, start_ns=START_NS + 3300 * MS)
    run.record("closure", worker="worker:1", closure_id=99, dispatch_ns=START_NS, result_ns=START_NS + 3300 * MS,
               ok=True, error="")
    run.fault("worker:1", "failure", 3950)
    kinds = _kinds(analyze(run.write()))
    assert "straggler" not in kinds and "task_failure" in kinds
    # Come back before the end (a restart record), it is judged by its pace again.
    run.fault("worker:1", "restart", 3990)
    assert "straggler" in _kinds(analyze(run.write()))


def test_a_worker_away_between_a_failure_and_its_restart_is_judged_on_the_time_it_was_up(builder):
    # Both workers start a step every 20 ms; worker:1 is away from 1 s to 3 s (killed, restarted).
    def run(with_faults):
        made = builder().steps("worker:0", count=250, step_ms=18, idle_ms=2)
        made.steps("worker:1", count=50, step_ms=18, idle_ms=2)
        made.steps("worker:1", count=100, step_ms=18, idle_ms=2, first_step=50, start_ns=START_NS + 3000 * MS)
        return made.fault("worker:1", "failure", 1000).fault("worker:1", "restart", 3000) if with_faults else made

    # Without the fault records the gap is the worker's own: a step every 34 ms over its span.
    assert "straggler" in _kinds(analyze(run(False).write()))
    kinds = _kinds(analyze(run(True).write()))
    assert "straggler" not in kinds and "task_failure" in kinds


def _starved_by(builder, idle_ms: float, hosts: tuple[str, ...], **columns):
    """worker:1 idles ``idle_ms`` between 20-ms steps (worker:0 does not), each worker's sampler on ``hosts``."""
    run = builder()
    run.steps("worker:0", count=100, step_ms=20).steps("worker:1", count=70, step_ms=20, idle_ms=idle_ms)
    for worker, host in zip(("worker:0", "worker:1"), hosts):
        run.system(host, worker, cpu_pct=95.0, count=40, **columns)
    return run


@pytest.mark.parametrize("schedstat", [False, True])
def test_a_worker_sharing_a_quiet_host_is_judged_at_the_normal_threshold(builder, schedstat):
    # 1.33x less often (a CPU quota, a stop duty cycle): a straggler on a host of its own, and
    # beside its peer on one host too, where nothing says its neighbours starved it (equal
    # run-queue wait shares, or none recorded).
    columns = dict(run_ms=80.0, runq_wait_ms=8.0, job_cpu_pct=95.0) if schedstat else {}
    for hosts in (("host-a", "host-b"), ("vm", "vm")):
        report = analyze(_starved_by(builder, 8.0, hosts, **columns).write())
        assert [f.tasks for f in report.findings if f.kind == "straggler"] == [("worker:1",)]
        assert "host_contention" not in _kinds(report)


def test_a_slower_median_of_few_widely_spread_steps_is_noise_not_a_straggler(builder):
    # 20 steps each, worker:1's median 1.3x worker:0's: apart by under three standard errors
    # where each worker's steps spread over 60 ms (noise), by many where they do not (slow).
    def run(jitter_ms):
        made = builder().steps("worker:0", count=20, step_ms=70 - 1.5 * jitter_ms, jitter_ms=jitter_ms)
        return made.steps("worker:1", count=20, step_ms=92 - 1.5 * jitter_ms, jitter_ms=jitter_ms)

    assert "straggler" not in _kinds(analyze(run(20.0).write()))
    steady = next(f for f in analyze(run(0.0).write()).findings if f.kind == "straggler")
    assert steady.tasks == ("worker:1",) and steady.evidence["slowdown"]["worker:1"] == pytest.approx(1.31, abs=0.01)


def _held_run(builder, held: dict[str, float], *, workers=2, late_steps=0, throttled=False):
    """An asynchronous run whose worker:0 steps 8 s (10 ms steps 10 ms apart) and, with
    ``late_steps``, worker:1 only that many steps at its end (a TF1 worker that waited for the
    chief); a sampler's readings of each worker find it held ``held[task]`` of the time
    (stopped by a signal, or with ``throttled`` by its cgroup's quota)."""
    run = builder(workers=workers)
    run.steps("worker:0", count=400, step_ms=10, idle_ms=10)
    if late_steps:
        run.steps("worker:1", count=late_steps, step_ms=10, idle_ms=10, start_ns=START_NS + (400 - late_steps) * 20 * MS)
    for pid, task in enumerate(["worker:0", "worker:1"][:workers]):
        share = held.get(task, 0.0)
        run.job_process("vm", task, 100 + pid, 0.02, count=81, throttled_share=share if throttled else 0.0,
                        stopped_share=0.0 if throttled else share, probes=10)
    return run


def test_a_worker_held_from_outside_whose_peer_stepped_only_the_last_seconds_is_a_straggler(builder):
    # tf1_feed (trial 2354): worker:1 waited 30 s for the chief, so its 20 steps cannot show
    # that worker:0, stopped 40 % of the time, steps less often.
    report = analyze(_held_run(builder, {"worker:0": 0.4}, late_steps=20).write())
    [finding] = [f for f in report.findings if f.kind == "straggler"]
    assert finding.tasks == ("worker:0",) and finding.evidence["held_share"] == {"worker:0": 0.4, "worker:1": 0.0}
    assert finding.evidence["slowdown"] == {"worker:0": pytest.approx(1 / 0.6, abs=0.01)}
    # its 400 steps 1/0.6 as fast, worker:1's 20 as they were
    assert finding.recommendation.predicted_speedup == pytest.approx((400 / 0.6 + 20) / 420, rel=0.01)


def test_a_lone_worker_throttled_by_its_cgroup_is_a_straggler_by_its_hold(builder):
    report = analyze(_held_run(builder, {"worker:0": 0.3}, workers=1, throttled=True).write())
    [finding] = [f for f in report.findings if f.kind == "straggler"]
    assert finding.tasks == ("worker:0",) and finding.evidence["throttled_share"] == {"worker:0": 0.3}
    assert finding.severity == Severity.WARNING
    assert finding.recommendation.predicted_speedup == pytest.approx(1 / 0.7, rel=0.01)


@pytest.mark.parametrize("held", [{"worker:0": 0.1}, {"worker:0": 0.4, "worker:1": 0.4}])
def test_a_hold_that_explains_under_a_quarter_or_that_holds_every_worker_alike_names_no_one(builder, held):
    # 0.1 explains 1.11x, under WARNING_SLOWDOWN; a quota on the whole job is no straggler's.
    report = analyze(_held_run(builder, held, late_steps=20).write())
    assert "straggler" not in _kinds(report)


def test_an_asynchronous_stragglers_prediction_counts_a_late_peer_only_for_the_steps_it_took(builder):
    # tf1_feed: worker:1 waited for the chief and stepped only the run's last 30 steps beside
    # worker:0's 300, whose steps take 30 ms to its 10 (10 ms apart each). Over the steps
    # compared both step throughout; over the run worker:0 took nearly all of them.
    run = builder()
    run.steps("worker:0", count=300, step_ms=30, idle_ms=10)
    run.steps("worker:1", count=30, step_ms=10, idle_ms=10, start_ns=START_NS + 270 * 40 * MS)
    [finding] = [f for f in analyze(run.write()).findings if f.kind == "straggler"]
    assert finding.tasks == ("worker:0",)
    # worker:0 at worker:1's 20-ms period: 2x its 300 steps, worker:1's 30 as they were
    # (the rates added would say (1/20 + 1/20) / (1/40 + 1/20) = 1.33x)
    assert finding.recommendation.predicted_speedup == pytest.approx((300 * 2 + 30) / 330, rel=0.02)


@pytest.mark.parametrize("held", [0.0, 0.4])
def test_a_worker_slower_for_its_input_is_input_bounds_unless_held_from_outside(builder, held):
    # tf1_feed with 24 ms of input a batch on worker:0 (trial 2420): its 38 ms steps wait
    # 25 ms for input, against 12 ms steps waiting 1 ms on worker:1. A stopped worker's stops
    # land in its input wait too: held, it stays a straggler.
    run = builder()
    run.steps("worker:0", count=200, step_ms=38, input_ms=25).steps("worker:1", count=600, step_ms=12, input_ms=1)
    run.job_process("vm", "worker:0", 100, 0.02, count=81, stopped_share=held, probes=10)
    run.job_process("vm", "worker:1", 101, 0.02, count=81, probes=10)
    report = analyze(run.write())
    assert [f.tasks for f in report.findings if f.kind == "input_bound"] == [("worker:0",)]
    assert ("straggler" in _kinds(report)) == bool(held)


def test_a_worker_slower_to_compute_with_its_peers_share_of_input_wait_is_a_straggler(builder):
    run = builder()
    run.steps("worker:0", count=200, step_ms=36, input_ms=9).steps("worker:1", count=600, step_ms=12, input_ms=3)
    [finding] = [f for f in analyze(run.write()).findings if f.kind == "straggler"]
    assert finding.tasks == ("worker:0",)
