"""``coordinator_bound``: the idle time between closures, less the slow ps's round trips and pauses."""

import pytest

from tests.runs import MS, START_NS, scheduled_ahead
from tfdiag.analysis import analyze
from tfdiag.analysis.breakdown import step_table
from tfdiag.analysis.closure_gaps import closure_gaps
from tfdiag.analysis.load import RunLoader, load_run
from tfdiag.analysis.step_stats import StepAccumulator


def _gaps(path):
    loaded = load_run(path)
    return closure_gaps(step_table(loaded.frame("step"), {}), loaded.frame("closure")).set_index("task")


def _one_step_closures(builder, ps1_ms, tail_ms, idle_ms=30, ps0_ms=0.4):
    """4 ms closures ``idle_ms`` apart; each result ``tail_ms`` after its closure's end."""
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, count=150, step_ms=4, idle_ms=idle_ms, closures=True)
        run.rpc(worker, "ps:0", ps0_ms).rpc(worker, "ps:1", ps1_ms)
    ends = {(r["task"], r["step"]): r["end_ns"] for kind, r in run.records if kind == "step"}
    run.records = [(kind, dict(r, result_ns=ends[(r["worker"], r["closure_id"])] + int(tail_ms * MS))
                    if kind == "closure" else r) for kind, r in run.records]
    return run


def test_a_long_tail_on_fast_links_is_the_coordinators(builder):
    # ps_ctl with one step per closure on a busy host: 24-28 ms from a closure's end to its
    # result, ps round trips of about 1 ms; ten steps per closure measured 2.6-3.1x.
    finding = analyze(_one_step_closures(builder, ps1_ms=0.5, tail_ms=26).write()).primary
    assert finding.kind == "coordinator_bound"
    assert finding.evidence["closure_tail_ms"] == {"worker:0": 26.0, "worker:1": 26.0}
    # 30 ms idle less two 0.5 ms round trips to the slowest ps, of a 34 ms period.
    assert finding.evidence["idle_frac"]["worker:0"] == pytest.approx(29 / 34, abs=0.01)


@pytest.mark.parametrize("kernel_bytes, coordinators", [(4_800_000, False), (560_000, True)])
def test_a_large_models_tail_is_its_updates_not_the_coordinators(builder, kernel_bytes, coordinators):
    # ps_ctl with one step per closure: behind 4.8 MB on ps:0 the tail (87-161 ms) held the
    # last step's updates, and ten steps per closure measured 0.69-1.03x; with its clean
    # 0.56 MB model the 24-28 ms tails were the coordinator's round (2.63x measured).
    run = _one_step_closures(builder, ps1_ms=0.5, tail_ms=26).placement("kernel:0", "ps:0", kernel_bytes)
    findings = {f.kind: f for f in analyze(run.write()).findings}
    assert ("coordinator_bound" in findings) is coordinators
    if coordinators:
        assert findings["coordinator_bound"].evidence["ps_update_in_tail_ms_per_step"] == {"worker:0": 0.0,
                                                                                           "worker:1": 0.0}


def test_two_round_trips_to_a_slow_ps_in_the_tail_are_not_the_coordinators(builder):
    # Behind a 13 ms link the tail holds two round trips (the 8 ms proxy runs: 22-27 ms).
    findings = analyze(_one_step_closures(builder, ps1_ms=13.0, tail_ms=26).write()).findings
    assert "coordinator_bound" not in [f.kind for f in findings]
    assert findings[0].kind == "slow_link"


@pytest.mark.parametrize("ps1_ms, idle_ms, saved_ms", [(2.0, 30, 30), (13.0, 60, 60 - 2 * 13)])
def test_fewer_closures_save_the_tails_round_trips_unless_a_link_is_slow(builder, ps1_ms, idle_ms, saved_ms):
    # Two round trips to the slowest ps in each closure's tail: on fast links (2 ms) they
    # are the closure's round, paid once per ten steps with ten steps per closure; behind
    # a slow link (13 ms) they are ``slow_link``'s.
    run = _one_step_closures(builder, ps1_ms=ps1_ms, tail_ms=idle_ms - 4, idle_ms=idle_ms, ps0_ms=min(ps1_ms, 2.0))
    [finding] = [f for f in analyze(scheduled_ahead(run).write()).findings if f.kind == "coordinator_bound"]
    period = 4 + idle_ms
    assert finding.recommendation.predicted_speedup == pytest.approx(period / (period - 0.9 * saved_ms), rel=0.01)


def test_epoch_end_pauses_are_not_the_per_closure_cost(builder):
    # model.fit's epoch ends: every 40th closure starts 500 ms late (joins, callbacks, a new
    # iterator); otherwise 4 ms apart. More steps per closure removes only the 4 ms.
    run = builder()
    epoch_ns = 40 * 24 * MS + 500 * MS
    for worker in ("worker:0", "worker:1"):
        for epoch in range(5):
            run.steps(worker, count=40, step_ms=20, idle_ms=4, closures=True, first_step=40 * epoch,
                      start_ns=START_NS + epoch * epoch_ns)
    assert "coordinator_bound" not in [f.kind for f in analyze(run.write()).findings]
    gaps = _gaps(run.path)
    assert gaps.loc["worker:0", "pauses"] == 4
    assert gaps.loc["worker:0", "idle_ns"] == pytest.approx(4 * MS, rel=1e-3)
    assert gaps.loc["worker:0", "pause_ns"] == pytest.approx(4 * 504 * MS, rel=1e-3)


def test_gaps_are_per_training_step_when_a_closure_runs_several(builder):
    run = builder()
    run.steps("worker:0", count=20, step_ms=40, idle_ms=11, closures=True)
    run.records = [(kind, dict(r, steps=10) if kind == "step" else r) for kind, r in run.records]
    # 11 ms between closures, 10 after each result, over the 10 steps of each closure.
    gaps = _gaps(run.write())
    assert gaps.loc["worker:0", "idle_ns"] == pytest.approx(1.1 * MS, rel=1e-3)
    assert gaps.loc["worker:0", "wait_ns"] == pytest.approx(1.0 * MS, rel=1e-3)


def test_a_sampled_run_counts_only_the_gaps_between_consecutive_closures(builder):
    # Past the cap a worker's step rows are a sample (step_stats); a gap from one kept row
    # to the next spans closures left out, and is not idle time. Two workers take turns at
    # the closure queue: 4 ms closures 8 ms apart on each.
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, count=400, step_ms=4, idle_ms=8)
    begins = sorted((r["begin_ns"], r["task"], r["step"]) for kind, r in run.records if kind == "step")
    ids = {(task, step): closure for closure, (_, task, step) in enumerate(begins)}
    run.records = [(kind, dict(r, step=ids[(r["task"], r["step"])])) for kind, r in run.records]
    run.records += [("closure", dict(worker=r["task"], closure_id=r["step"], dispatch_ns=r["begin_ns"] - MS,
                                     result_ns=r["end_ns"] + MS, ok=True, error="")) for _, r in list(run.records)]
    path = run.write(by_task=True, frame_records=50)
    exact = RunLoader(path).refresh()
    sampled = RunLoader(path, StepAccumulator(sampled_rows=16, recent_rows=8, segments=8)).refresh()
    assert len(sampled.frame("step")) < len(exact.frame("step")) // 4
    for loaded in (exact, sampled):
        gaps = closure_gaps(step_table(loaded.frame("step"), {}), loaded.frame("closure")).set_index("task")
        assert gaps["idle_ns"].tolist() == pytest.approx([8 * MS, 8 * MS], rel=1e-3)
    # 8 ms idle of a 12 ms period, less the tail's round trips: no more than two thirds.
    idle = [next(f for f in analyze(loaded).findings if f.kind == "coordinator_bound").evidence["idle_frac"]
            for loaded in (exact, sampled)]
    assert idle[0] == idle[1]


@pytest.mark.parametrize("starved_idle_ms, expected", [(8, 8 / 12), (40, 8 / 12)])
def test_the_idle_share_is_judged_on_the_workers_without_a_loss_of_their_own(builder, starved_idle_ms, expected):
    # worker:0 idles 8 ms between 4 ms closures; worker:1 the same, or 40 ms when a CPU quota
    # stops it between closures. The coordinator's round (8 ms) is the same share of worker:0's
    # period either way; worker:1's own loss is the straggler's.
    run = builder()
    run.steps("worker:0", count=300, step_ms=4, idle_ms=8, closures=True)
    run.steps("worker:1", count=300 * 12 // (4 + starved_idle_ms), step_ms=4, idle_ms=starved_idle_ms, closures=True)
    findings = analyze(run.write()).findings
    finding = next(f for f in findings if f.kind == "coordinator_bound")
    assert finding.evidence["idle_frac"]["worker:0"] == pytest.approx(expected, abs=0.01)
    assert finding.title == f"Workers idle {expected:.0%} of the time between closures"
    assert ("straggler" in [f.kind for f in findings]) == (starved_idle_ms > 8)
