"""``coordinator_bound``: ParameterServerStrategy workers idle, waiting for the coordinator.

Every closure costs a fixed round: the coordinator's dispatch thread starts it on the
worker, and after its last timestamp the result travels back and is handled on the
coordinator before that thread starts the next one. On a busy host each of those
threads waits for a core, which makes the round longer, not less the coordinator's:
``ps_ctl`` with one step per closure idled 77 % between closures at load 17-22 (a
24-28 ms median from a closure's end to its result, 1.7-4.8 ms from the result to the
next closure), and ten steps per closure measured 2.63x. Three parts of the idle time
are not that round, and are left out (the split is ``closure_gaps``'):

- after a closure's last timestamp the worker still waits for its variable updates on
  the parameter servers: ``TAIL_PS_ROUND_TRIPS`` round trips to the slowest ps (its
  fastest probe), at most the tail, once per closure (``ps_round_trip_ms_per_step``): a
  slow link is ``slow_link``'s; where a ps holds ``UPDATE_IN_TAIL_BYTES`` or more, the
  rest of the tail is those updates, which every step pays, more steps per closure or
  not (``ps_update_in_tail_ms_per_step``): the ps's work, ``ps_hotspot`` or
  ``communication_bound``'s;
- the wait for the coordinator's loop (``schedule()`` after the previous result) holds
  the loop's own round trips to a slow ps (``model.fit`` makes them between closures):
  their share of the loop's time is the link's (ps_fit behind 26.7 ms: 94 % of an 83.5 ms
  loop, the idle share 60 % with them and 9 % without);
- a wait far longer than the worker's usual one (``model.fit``'s epoch ends, a
  checkpoint, an evaluation, ``coordinator.join()``) is a *pause*: more steps per
  closure would not remove it, so pauses are counted apart (ps_fit's epoch ends: 360-645
  ms every 40 closures against 13-14 ms otherwise).

And the coordinator serves every worker alike, so no worker's share is taken larger than
the least idle worker's (the rest is that worker's own loss: a CPU quota stops the
worker, and its next closure waits to start: ``straggler``), and the share is judged on
the workers without such a loss (periods within ``OWN_LOSS_RATIO`` of the shortest).
The prediction goes through the job's pace (``closure_gaps.JobPace``): each worker's own
time between closures and the loop's time paid once per ``STEPS_PER_CLOSURE`` steps.
Without a slow link the tail's round trips count in that time: they are the closure's
round too (the tutorial-style loop with worker 1 under a CPU quota: 1.57x predicted
without them, 1.90x with them, 2.30x measured).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfdiag.analysis.closure_gaps import TAIL_PS_ROUND_TRIPS, JobPace, loop_link_saving
from tfdiag.analysis.detectors.ps_hotspot import MIN_VARIABLE_BYTES
from tfdiag.analysis.detectors.slow_link import slow_ps
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.groups import TaskGroups, mean_of, median_of
from tfdiag.analysis.measurements import Measurements
from tfdiag.events import STEPS_PER_CLOSURE

KIND = "coordinator_bound"

# Share of a worker's step period (pauses left out) spent idle between closures. Every
# closure costs the coordinator Python dispatch and a round for its result; when workers
# idle 40 % of their time or more, that fixed cost rivals the work itself.
WARNING_IDLE_FRACTION = 0.4
CRITICAL_IDLE_FRACTION = 0.7
# A worker whose period (pauses left out) is this many times the shortest loses time of its
# own between closures (``straggler``'s threshold by period): the tutorial-style loop with
# worker 1 under a CPU quota idled 53 % (worker 0) and 23 % (worker 1, a closure every
# 28 ms against 12 ms) with the same coordinator round, and ten steps per closure measured
# 1.51x against 1.26x for lifting the quota.
OWN_LOSS_RATIO = 1.25
# A closure's tail holds its last step's variable updates on the ps. Where a ps holds at
# least this many bytes (ps_hotspot's floor: below it, moving bytes costs too little to
# matter), that update is the tail, a cost of every step, not the coordinator's round:
# ps_ctl with 4.8 MB on ps:0 and one step per closure had 87-161 ms tails, and ten steps
# per closure measured 0.69x, 0.75x and 1.03x (2.43-2.69x predicted; each step's run grew
# from 41-68 ms to 116-300 ms), where its 0.56 MB clean model's 24-28 ms tails were the
# round (2.63x measured).
UPDATE_IN_TAIL_BYTES = MIN_VARIABLE_BYTES


def ps_round_trip_in_gap_ns(measured: Measurements, workers: pd.DataFrame, gaps: pd.DataFrame) -> pd.Series:
    """Per worker (indexed like ``workers``), the ps round trips each step waits for between
    closures: the closure's tail, at most ``TAIL_PS_ROUND_TRIPS`` round trips to the
    slowest ps (its fastest probe from that worker, else from any source), divided by the
    steps per closure."""
    links = measured.link_latency
    to_ps = links[links["dst"].astype(str).str.startswith("ps:")] if not links.empty else links
    if to_ps.empty:
        return pd.Series(0.0, index=workers.index)
    src, dst = to_ps["src"].astype(str).to_numpy(), to_ps["dst"].astype(str).to_numpy()
    rtt_min = to_ps["rtt_min_ns"].to_numpy("float64")
    slowest_any = float(pd.Series({ps: median_of(rtt_min[dst == ps]) for ps in set(dst)}).max())
    slowest_from = {}  # worker -> its round trip to its slowest ps
    for task in set(src):
        own = rtt_min[src == task]
        if not np.isnan(own).all():
            slowest_from[task] = float(np.nanmax(own))
    round_trip = workers["task"].map(slowest_from).fillna(slowest_any)
    tail = workers["task"].map(gaps["tail_ns"]).fillna(0.0)
    return np.minimum(tail, TAIL_PS_ROUND_TRIPS * round_trip) / _steps_per_closure(measured, workers)


def update_in_tail_ns(measured: Measurements, workers: pd.DataFrame, gaps: pd.DataFrame,
                      in_gap: pd.Series) -> pd.Series:
    """Per worker (indexed like ``workers``), each step's share of its closure's tail past
    the ps round trips (``in_gap``, per step) where a ps holds at least
    ``UPDATE_IN_TAIL_BYTES``: the last step's variable updates, a cost of every step (0
    where the variables are smaller or their placement was not recorded)."""
    load = measured.ps_load
    if load.empty or float(load["bytes"].max()) < UPDATE_IN_TAIL_BYTES:
        return pd.Series(0.0, index=workers.index)
    tail = workers["task"].map(gaps["tail_ns"]).fillna(0.0) / _steps_per_closure(measured, workers)
    return (tail - in_gap).clip(lower=0.0)


def _steps_per_closure(measured: Measurements, workers: pd.DataFrame) -> pd.Series:
    """Per worker (indexed like ``workers``), its mean training steps per closure, at least 1."""
    groups = TaskGroups(measured.steps["task"])
    covered = measured.steps["steps"].to_numpy()
    per_closure = {task: mean_of(covered[rows]) for task, rows in zip(groups.names, groups.rows)}
    return workers["task"].map(per_closure).fillna(1.0).clip(lower=1.0)


def loop_link_share(measured: Measurements, pace: JobPace) -> float:
    """The share of the coordinator's loop time that is round trips to a slow ps (0 without
    one, or where the loop did not set the pace): the largest over the slow ps."""
    if pace.loop_ns <= 0:
        return 0.0
    per_closure = pace.loop_ns * pace.steps_per_closure
    savings = [loop_link_saving(measured.link_latency, per_closure, ps, peers)[1]
               for ps, (_, peers) in slow_ps(measured.link_latency).items()]
    return min(max(savings, default=0.0) / per_closure, 1.0)


def detect(measured: Measurements) -> list[Finding]:
    workers = measured.workers
    if workers.empty or measured.synchronous or measured.closures is None or measured.closures.empty:
        return []
    gaps = measured.gaps.set_index("task")
    pace = measured.pace
    if gaps.empty or pace is None:
        return []
    workers = workers[workers["task"].isin(gaps.index)]
    in_gap = ps_round_trip_in_gap_ns(measured, workers, gaps)
    # The loop's round trips to a slow ps are the link's: its share of the loop's time is
    # taken out of each worker's wait for the loop.
    in_loop = workers["task"].map(gaps["loop_wait_ns"]) * loop_link_share(measured, pace)
    # A large model's last updates fill the rest of the tail: the ps's work, every step.
    in_update = update_in_tail_ns(measured, workers, gaps, in_gap)
    gap = (workers["task"].map(gaps["idle_ns"]) - in_gap - in_loop - in_update).clip(lower=0.0)
    # The coordinator serves every worker alike: a worker idle longer than the least idle
    # one loses the difference on its own (a CPU quota, a busy host: ``straggler``).
    gap = gap.clip(upper=float(gap.min()))
    # The share of a period without pauses: those stay whatever a closure runs.
    period = workers["mean_ns"] + workers["task"].map(gaps["idle_ns"])
    idle = (gap / period).to_numpy()
    # Judged on the workers that lose no time of their own: a starved worker's long period
    # holds the same coordinator round as a small share.
    typical = float(np.median(idle[(period <= OWN_LOSS_RATIO * float(period.min())).to_numpy()]))
    if typical < WARNING_IDLE_FRACTION:
        return []
    # With k steps per closure the coordinator's round, and its loop, are paid once per k
    # steps: each worker's own time between closures (its wait for the loop is the loop's).
    # Without a slow link the tail's round trips are the closure's round too, paid once
    # per closure: fewer closures pay them less often.
    round_gap = gap if slow_ps(measured.link_latency) else (gap + in_gap).clip(upper=float((gap + in_gap).min()))
    gap_of = pd.Series(round_gap.to_numpy(), index=workers["task"].astype(str)).reindex(gaps.index).fillna(0.0)
    saving = np.minimum(gap_of, gaps["own_ns"] - gaps["run_ns"])
    own = gaps["own_ns"] - saving * (1 - 1 / STEPS_PER_CLOSURE)
    speedup = pace.speedup(own, pace.loop_ns / STEPS_PER_CLOSURE)
    return [
        Finding(
            kind="coordinator_bound",
            severity=Severity.CRITICAL if typical >= CRITICAL_IDLE_FRACTION else Severity.WARNING,
            title=f"Workers idle {typical:.0%} of the time between closures",
            summary=(
                f"Each closure runs {float(workers['mean_ns'].median()) / 1e6:.1f} ms per step, and a worker waits "
                f"{float(gap.median()) / 1e6:.1f} ms per step between closures: the coordinator cannot dispatch "
                "and collect closures fast enough."
            ),
            tasks=tuple(workers["task"]),
            evidence={
                "idle_frac": {row.task: round(float(idle[i]), 3) for i, row in enumerate(workers.itertuples())},
                "ps_round_trip_ms_per_step": {row.task: round(float(in_gap[row.Index]) / 1e6, 2) for row in workers.itertuples()},
                "closure_tail_ms": {task: round(float(row.tail_ns) / 1e6, 2) for task, row in gaps.iterrows()},
                "after_result_ms_per_step": {task: round(float(row.wait_ns) / 1e6, 2) for task, row in gaps.iterrows()},
                "loop_wait_ms_per_step": {task: round(float(row.loop_wait_ns) / 1e6, 2) for task, row in gaps.iterrows()},
                "slow_ps_in_loop_ms_per_step": {row.task: round(float(in_loop[row.Index]) / 1e6, 2) for row in workers.itertuples()},
                "ps_update_in_tail_ms_per_step": {row.task: round(float(in_update[row.Index]) / 1e6, 2)
                                                  for row in workers.itertuples()},
                "pauses": {task: {"count": int(row.pauses), "total_s": round(float(row.pause_ns) / 1e9, 3)}
                           for task, row in gaps.iterrows() if row.pauses},
                "closure_ms_median": round(float(workers["mean_ns"].median()) / 1e6, 2),
                "period_ms_median": round(float(workers["period_ns"].median()) / 1e6, 2),
                "steps_per_closure": STEPS_PER_CLOSURE,  # the change's parameter
            },
            recommendation=Recommendation(
                action=f"Do more work per closure: run {STEPS_PER_CLOSURE} steps inside each scheduled tf.function.",
                change=(
                    f"@tf.function\ndef train_steps(iterator):\n    for _ in tf.range({STEPS_PER_CLOSURE}): train_step(next(iterator))"
                    f"  # model.fit: steps_per_execution={STEPS_PER_CLOSURE}"
                ),
                predicted_speedup=speedup,
            ),
        )
    ]
