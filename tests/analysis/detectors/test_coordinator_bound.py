"""``coordinator_bound``: only the wait after a closure's result is the coordinator's."""

import pytest

from tests.runs import MS, START_NS
from tfdiag.analysis import analyze
from tfdiag.analysis.breakdown import step_table
from tfdiag.analysis.detectors.coordinator_bound import coordinator_waits
from tfdiag.analysis.load import load_run


def _waits(path):
    loaded = load_run(path)
    return coordinator_waits(step_table(loaded.frame("step"), {}), loaded.frame("closure")).set_index("task")


def _with_tails(run, tail_ms):
    """The run's closures with each result ``tail_ms`` after its closure's end (``tail_ms``:
    one value, or a function of the closure id)."""
    tail_of = tail_ms if callable(tail_ms) else (lambda closure_id: tail_ms)
    ends = {(r["task"], r["step"]): r["end_ns"] for kind, r in run.records if kind == "step"}
    run.records = [(kind, dict(r, result_ns=ends[(r["worker"], r["closure_id"])] + int(tail_of(r["closure_id"]) * MS))
                    if kind == "closure" else r) for kind, r in run.records]
    return run


def test_a_long_tail_on_a_busy_host_is_not_the_coordinators(builder):
    # The tutorial-style loop on two busy cores: 4 ms closures, a result 7 ms after each
    # closure's end and the next closure 3.5 ms after that (75 % idle, 24 % waiting for
    # the coordinator). Ten steps per closure measured 0.70x there.
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, count=150, step_ms=4, idle_ms=10.5, closures=True)
    report = analyze(_with_tails(run, 7.0).write())
    assert "coordinator_bound" not in [f.kind for f in report.findings]


def test_a_coordinator_slow_to_dispatch_is_coordinator_bound(builder):
    # The same closures and idle time, but the results are back in 1 ms: 9.5 ms of each
    # 14.5 ms period the workers wait for the coordinator.
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, count=150, step_ms=4, idle_ms=10.5, closures=True)
    finding = analyze(run.write()).primary
    assert finding.kind == "coordinator_bound"
    assert finding.evidence["idle_frac"]["worker:0"] == pytest.approx(9.5 / 14.5, abs=0.01)


def test_epoch_end_pauses_are_not_the_per_closure_dispatch_cost(builder):
    # model.fit's epoch ends: every 40th closure waits 500 ms (joins, callbacks, a new
    # iterator); the rest wait 3 ms. More steps per closure removes only the 3 ms.
    run = builder()
    epoch_ns = 40 * 24 * MS + 500 * MS
    for worker in ("worker:0", "worker:1"):
        for epoch in range(5):
            run.steps(worker, count=40, step_ms=20, idle_ms=4, closures=True, first_step=40 * epoch,
                      start_ns=START_NS + epoch * epoch_ns)
    report = analyze(run.write())
    assert "coordinator_bound" not in [f.kind for f in report.findings]
    waits = _waits(run.path)
    assert waits.loc["worker:0", "pauses"] == 4
    assert waits.loc["worker:0", "wait_ns"] == pytest.approx(3 * MS, rel=1e-3)
    assert waits.loc["worker:0", "pause_ns"] == pytest.approx(4 * 503 * MS, rel=1e-3)


def test_waits_are_per_training_step_when_a_closure_runs_several(builder):
    run = builder()
    run.steps("worker:0", count=20, step_ms=40, idle_ms=11, closures=True)
    run.records = [(kind, dict(r, steps=10) if kind == "step" else r) for kind, r in run.records]
    # 10 ms after each result, over the 10 steps of each closure.
    assert _waits(run.write()).loc["worker:0", "wait_ns"] == pytest.approx(1 * MS, rel=1e-3)
