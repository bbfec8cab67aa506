"""``closure_gaps``: a PS worker's time between closures, the coordinator's loop, and what the
detectors that read them conclude and predict."""

import pandas as pd
import pytest

from tests.runs import EXAMPLES_PER_STEP, MS, START_NS, scheduled_ahead
from tfdiag.analysis import analyze
from tfdiag.analysis.breakdown import step_table
from tfdiag.analysis.closure_gaps import JobPace, closure_gaps, coordinator_loop_ns, job_pace
from tfdiag.analysis.load import load_run
from tfdiag.analysis.measurements import measure


def _loop_paced(builder, loop_ms, run_ms, count=120, tail_ms=5.0, handover_ms=2.0):
    """A coordinator whose loop calls ``schedule()`` every ``loop_ms``; each closure goes to
    the worker free first (``run_ms``: per worker), starts ``handover_ms`` after the later
    of its dispatch and that worker's previous result, and its result comes ``tail_ms``
    after its end."""
    run = builder()
    free = {worker: float(START_NS) for worker in run_ms}
    for closure in range(count):
        dispatch = START_NS + closure * loop_ms * MS
        worker = min(free, key=lambda w: (free[w], w))
        begin = int(max(dispatch, free[worker]) + handover_ms * MS)
        end = begin + int(run_ms[worker] * MS)
        free[worker] = end + tail_ms * MS
        run.record("step", task=worker, step=closure, begin_ns=begin, end_ns=end, input_wait_ns=0,
                   examples=EXAMPLES_PER_STEP, clock_task=worker)
        run.record("closure", worker=worker, closure_id=closure, dispatch_ns=int(dispatch),
                   result_ns=int(free[worker]), ok=True, error="")
    return run


def _links(run, ps1_ms):
    for src in ("chief:0", "worker:0", "worker:1"):
        run.rpc(src, "ps:0", 0.4).rpc(src, "ps:1", ps1_ms)
    return run


def test_the_gap_splits_into_tail_loop_wait_and_handover(builder):
    # The loop schedules every 80 ms; each worker runs 30 ms closures, so it waits for the loop.
    loaded = load_run(_loop_paced(builder, 80, {"worker:0": 30, "worker:1": 30}).write())
    gaps = closure_gaps(step_table(loaded.frame("step"), {}), loaded.frame("closure")).set_index("task")
    # Every second closure: 160 ms apart, 130 ms idle: 5 tail, 123 waiting for schedule(), 2 handover.
    assert gaps.loc["worker:0", ["idle_ns", "loop_wait_ns"]].tolist() == pytest.approx([130 * MS, 123 * MS], rel=1e-5)
    assert gaps.loc["worker:0", "own_ns"] == pytest.approx(37 * MS, rel=1e-5)
    assert coordinator_loop_ns(loaded.frame("closure")) == pytest.approx(80 * MS)
    # A loop that schedules the whole run up front is never waited for.
    ahead = load_run(scheduled_ahead(_loop_paced(builder, 80, {"worker:0": 30, "worker:1": 30})).write())
    assert coordinator_loop_ns(ahead.frame("closure")) == 0.0


def test_a_loop_gated_by_round_trips_to_a_slow_ps_is_the_links(builder):
    # model.fit behind a slow link: the loop makes three 25 ms round trips to ps:1 per closure.
    findings = analyze(_links(_loop_paced(builder, 80, {"worker:0": 30, "worker:1": 30}), 25.0).write()).findings
    assert "coordinator_bound" not in [f.kind for f in findings]
    link = findings[0]
    assert link.kind == "slow_link" and link.tasks == ("ps:1",)
    assert link.evidence["coordinator_loop_round_trips"] == 3
    # The loop: 80 - 3 x 24.6 = 6.2 ms; the workers: 37 - 24.6 in the step - 5 in the tail,
    # 7.4 ms each, 3.7 ms a step together: the loop's 6.2 ms sets the pace.
    assert link.recommendation.predicted_speedup == pytest.approx(80 / 6.2, rel=0.03)


def test_a_loop_gated_by_its_own_work_is_the_coordinators(builder):
    # The same loop on fast links: its 80 ms per closure are its own.
    findings = analyze(_links(_loop_paced(builder, 80, {"worker:0": 30, "worker:1": 30}), 0.5).write()).findings
    assert [f.kind for f in findings] == ["coordinator_bound"]
    finding = findings[0]
    assert finding.evidence["slow_ps_in_loop_ms_per_step"] == {"worker:0": 0.0, "worker:1": 0.0}
    # Ten steps per closure: the loop's 80 ms once per 10 steps; each worker 300 ms of steps
    # and 7 ms between closures, two of them: 15.35 ms a step against 80.
    assert finding.recommendation.predicted_speedup == pytest.approx(80 / 15.35, rel=0.03)


def test_a_slow_worker_on_a_loop_gated_job_gains_nothing(builder):
    # worker:1 takes 100 ms a closure, but the loop hands one out every 80 ms to whichever
    # worker is free: repairing it cannot make the job faster than the loop.
    run = _links(_loop_paced(builder, 80, {"worker:0": 30, "worker:1": 100}), 0.5)
    straggler = next(f for f in analyze(run.write()).findings if f.kind == "straggler")
    assert straggler.tasks == ("worker:1",)
    assert straggler.recommendation.predicted_speedup == pytest.approx(1.0, abs=0.02)
    assert job_pace(measure(load_run(run.path))).limit() == pytest.approx(1.0, abs=0.02)


def test_a_clean_frame_has_no_warning(builder):
    # A loop that schedules ahead; 20 ms closures 2 ms apart on fast links.
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, count=150, step_ms=20, idle_ms=2, closures=True)
    findings = analyze(_links(scheduled_ahead(run), 0.5).write()).findings
    assert [f.kind for f in findings if f.severity.value != "info"] == []


def _epochs_scheduled_ahead(builder, tail_ms, epoch_end_ms, epochs=5, per_epoch=40):
    """``model.fit`` on fast links: each epoch's closures scheduled at once when it starts,
    ``epoch_end_ms`` after the previous epoch's last result; 20 ms closures whose result
    comes ``tail_ms`` after their end, each started 4 ms after its worker's previous result."""
    run = builder()
    start = START_NS
    for epoch in range(epochs):
        ends = []
        for worker in ("worker:0", "worker:1"):
            run.steps(worker, count=per_epoch, step_ms=20, idle_ms=tail_ms + 4, closures=True,
                      first_step=per_epoch * epoch, start_ns=start)
            ends.append(run.step_end_ns)
        dispatch = start - MS
        run.records = [(kind, dict(r, dispatch_ns=dispatch, result_ns=r["result_ns"] - MS + int(tail_ms * MS))
                        if kind == "closure" and r["closure_id"] >= per_epoch * epoch and r["dispatch_ns"] > dispatch
                        else r) for kind, r in run.records]
        start = max(ends) + int((tail_ms + epoch_end_ms) * MS)
    return _links(run, 0.5)


@pytest.mark.parametrize("tail_ms", [5, 50])
def test_waits_for_a_loop_that_runs_ahead_are_pauses(builder, tail_ms):
    # model.fit schedules each epoch ahead; its first closures wait 300 ms for the epoch end.
    # Behind 50 ms tails (ps_fit's hot-ps block: 50-57 ms at load average 5) that is under
    # PAUSE_FACTOR times the usual 54 ms idle, and still no per-closure wait for the loop.
    loaded = load_run(_epochs_scheduled_ahead(builder, tail_ms, epoch_end_ms=300).write())
    closures = loaded.frame("closure")
    gaps = closure_gaps(step_table(loaded.frame("step"), {}), closures).set_index("task")
    assert coordinator_loop_ns(closures) == 0.0
    assert gaps.loc["worker:0", "pauses"] == 4
    assert gaps.loc["worker:0", ["idle_ns", "loop_wait_ns"]].tolist() == pytest.approx([(tail_ms + 4) * MS, 0.0])
    assert gaps.loc["worker:0", "pause_ns"] == pytest.approx(4 * (tail_ms + 300) * MS, rel=1e-3)


def test_the_pace_keeps_the_fixed_time_and_holds_to_the_loop():
    pace = JobPace(pd.Series({"worker:0": 40.0, "worker:1": 40.0}), loop_ns=10.0, steps=100, fixed_ns=2000.0)
    # 100 steps at 20 plus 2000 fixed; workers twice as fast: 100 x 10 (the loop) + 2000.
    assert pace.speedup(own_ns=pace.own_ns / 2) == pytest.approx(4000 / 3000)
    assert pace.speedup(own_ns=pace.own_ns / 4) == pytest.approx(4000 / 3000)
    assert pace.limit() == pytest.approx(4000 / 3000)


def test_a_worker_that_never_stepped_is_restored_at_the_others_pace_with_the_start_kept(builder):
    # worker:1 fails at once and never steps; worker:0 runs 100 closures of 20 ms, 2 ms apart,
    # all scheduled 1 s before the first started (the job's start).
    run = builder().steps("worker:0", count=100, step_ms=20, idle_ms=2, closures=True).fault("worker:1", "failure", 0)
    run.records = [(kind, dict(r, dispatch_ns=START_NS - 1000 * MS) if kind == "closure" else r) for kind, r in run.records]
    finding = next(f for f in analyze(run.write()).findings if f.kind == "task_failure")
    # 100 steps at 22 ms after 1 s of start; with worker:1 at the same pace, at 11 ms: the
    # capacity model (half the workers for the whole run) would say 2x.
    assert finding.recommendation.predicted_speedup == pytest.approx((1000 + 2200) / (1000 + 1100), rel=0.02)
