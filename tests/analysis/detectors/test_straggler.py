"""``straggler``: workers compared per example, over the time they all ran, with enough steps."""

import pytest

from tests.runs import MS, START_NS
from tfdiag.analysis import analyze


def _kinds(report):
    return [finding.kind for finding in report.findings]


def test_larger_batches_from_a_skewed_shard_are_shard_imbalance_not_a_straggler(builder):
    # worker:1's batches are 3x larger and its steps 3x longer: the same time per example.
    run = builder()
    run.steps("worker:0", count=120, step_ms=13, examples=1024).steps("worker:1", count=40, step_ms=39, examples=3072)
    report = analyze(run.write())
    assert report.primary.kind == "shard_imbalance" and report.primary.tasks == ("worker:1",)
    assert "straggler" not in _kinds(report)


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
    run.records.append(("session", dict(task="worker:1", begin_ns=START_NS - 30_000 * MS, ready_ns=START_NS)))
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


def test_a_worker_with_few_long_closures_over_the_whole_run_is_judged(builder):
    # Asynchronous: worker:1 ran 4 closures of 1 s over the 4 s worker:0 took for 200 steps.
    run = builder(strategy=None)
    run.steps("worker:0", count=200, step_ms=20)
    run.steps("worker:1", count=4, step_ms=1000)
    finding = next(f for f in analyze(run.write()).findings if f.kind == "straggler")
    assert finding.tasks == ("worker:1",)
