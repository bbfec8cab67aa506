"""``coordinator_bound``: ParameterServerStrategy workers idle, waiting for the coordinator.

Every closure costs a fixed round: the coordinator's dispatch thread starts it on the
worker, and after its last timestamp the result travels back and is handled on the
coordinator before that thread starts the next one. On a busy host each of those
threads waits for a core, which makes the round longer, not less the coordinator's:
``ps_ctl`` with one step per closure idled 77 % between closures at load 17-22 (a
24-28 ms median from a closure's end to its result, 1.7-4.8 ms from the result to the
next closure), and ten steps per closure measured 2.63x. Two parts of the idle time are
not that round, and are left out:

- after a closure's last timestamp the worker still waits for its variable updates on
  the parameter servers: ``TAIL_PS_ROUND_TRIPS`` round trips to the slowest ps (its
  fastest probe), at most the tail, once per closure (``ps_round_trip_ms_per_step``): a
  slow link is ``slow_link``'s;
- a wait far longer than the worker's usual one (``model.fit``'s epoch ends, a
  checkpoint, an evaluation, ``coordinator.join()``) is a *pause*: more steps per
  closure would not remove it, so pauses are counted apart (ps_fit's epoch ends: 360-645
  ms every 40 closures against 13-14 ms otherwise).

And the coordinator serves every worker alike, so no worker's share is taken larger than
the least idle worker's (the rest is that worker's own loss: a CPU quota stops the
worker, and its next closure waits to start: ``straggler``), and the share is judged on
the workers without such a loss (periods within ``OWN_LOSS_RATIO`` of the shortest).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.groups import TaskGroups, codes_of, grouped_rows, mean_of, median_of
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.whatif import predicted_speedup

KIND = "coordinator_bound"

# Share of a worker's step period (pauses left out) spent idle between closures. Every
# closure costs the coordinator Python dispatch and a round for its result; when workers
# idle 40 % of their time or more, that fixed cost rivals the work itself.
WARNING_IDLE_FRACTION = 0.4
CRITICAL_IDLE_FRACTION = 0.7
# Round trips to the slowest ps a closure's tail holds: behind a delaying proxy the tail
# was two of them in every run (the tutorial-style loop at 25 ms: 53-59 ms tails at 27-29
# ms round trips, at 8 ms: 22-27 ms at 12-15 ms; ps_ctl at 25 ms: 52-58 ms at 28-32 ms).
TAIL_PS_ROUND_TRIPS = 2
# A worker whose period (pauses left out) is this many times the shortest loses time of its
# own between closures (``straggler``'s threshold by period): the tutorial-style loop with
# worker 1 under a CPU quota idled 53 % (worker 0) and 23 % (worker 1, a closure every
# 28 ms against 12 ms) with the same coordinator round, and ten steps per closure measured
# 1.51x against 1.26x for lifting the quota.
OWN_LOSS_RATIO = 1.25
# The change advised: run this many steps inside each scheduled function.
STEPS_PER_CLOSURE = 10
# An idle time between closures is a pause (not the per-closure cost) when it is this many
# times the worker's median and at least PAUSE_MIN_NS: ps_fit's epoch ends idled 360-645
# ms against a median of 13-14 ms (docs/findings.md, ``coordinator_bound``).
PAUSE_FACTOR = 10.0
PAUSE_MIN_NS = 50_000_000


def closure_gaps(steps: pd.DataFrame, closures: pd.DataFrame | None) -> pd.DataFrame:
    """Per worker, its idle time between closures, per training step, pauses left out.

    Pairs each step record with its closure (``(task, step) == (worker, closure_id)``) and,
    for every closure whose previous closure on the same worker (by the closure records)
    has a step record too, takes the time from that closure's end to this one's start:
    a long run's step rows are a sample (``step_stats``), and a gap across closures left
    out of it is not idle time (the tutorial-style loop under a CPU quota, 1055 closures
    on worker:0 of which 650 rows kept: 15.7 ms "idle" per closure of a 12.8 ms period,
    coordinator_bound predicted 14x). Columns: ``task``, ``idle_ns`` (mean, pauses left
    out, per training step), ``tail_ns`` (median from a closure's end to its result on the
    coordinator), ``wait_ns`` (mean from the previous result to the start, pauses left
    out, per training step), ``pauses``, ``pause_ns`` (their total), ``closures``. Empty
    when no step pairs with a closure.

    >>> import pandas as pd
    >>> steps = pd.DataFrame({"task": ["worker:0"] * 3, "step": [0, 1, 2], "begin_ns": [0, 30, 60],
    ...                       "end_ns": [10, 40, 70], "steps": [1, 1, 1]})
    >>> closures = pd.DataFrame({"worker": ["worker:0"] * 3, "closure_id": [0, 1, 2], "result_ns": [22, 52, 82]})
    >>> closure_gaps(steps, closures)[["task", "idle_ns", "tail_ns", "wait_ns"]].to_dict("records")
    [{'task': 'worker:0', 'idle_ns': 20.0, 'tail_ns': 12.0, 'wait_ns': 8.0}]
    """
    columns = ["task", "idle_ns", "tail_ns", "wait_ns", "pauses", "pause_ns", "closures"]
    if steps.empty or closures is None or closures.empty:
        return pd.DataFrame(columns=columns)
    begin, end, covered = (steps[name].to_numpy("float64") for name in ("begin_ns", "end_ns", "steps"))
    result = closures["result_ns"].to_numpy("float64")
    rows = []
    for task, (step_rows, closure_rows, places) in sorted(_paired(steps, closures).items()):
        order = np.argsort(places, kind="stable")  # the pairs of one worker in closure order
        step_rows, closure_rows, places = step_rows[order], closure_rows[order], places[order]
        own_begin, own_end, own_result = begin[step_rows], end[step_rows], result[closure_rows]
        follows = np.diff(places) == 1  # consecutive closures of the worker, both with a step row
        idle = np.clip(own_begin[1:] - own_end[:-1], 0.0, None)[follows]
        if not len(idle):
            continue
        wait = np.minimum(np.clip(own_begin[1:] - own_result[:-1], 0.0, None)[follows], idle)
        pause = idle > np.maximum(PAUSE_FACTOR * median_of(idle), PAUSE_MIN_NS)
        per_step = max(mean_of(covered[step_rows]), 1.0)
        rows.append({
            "task": task, "idle_ns": mean_of(idle[~pause]) / per_step,
            "tail_ns": median_of(np.clip(own_result - own_end, 0.0, None)),
            "wait_ns": mean_of(wait[~pause]) / per_step,
            "pauses": int(pause.sum()), "pause_ns": float(idle[pause].sum()), "closures": len(step_rows),
        })
    return pd.DataFrame(rows, columns=columns)


def _paired(steps: pd.DataFrame, closures: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per worker, the positions of its step rows, of their closures' rows and each closure's
    place among the worker's closures by id, pair by pair (``(task, step) == (worker,
    closure_id)``), in the steps' order."""
    step_codes, step_tasks = codes_of(steps["task"])
    closure_codes, workers = codes_of(closures["worker"])
    worker_task = pd.Index([str(task) for task in step_tasks]).get_indexer([str(worker) for worker in workers])
    closure_task = np.append(worker_task, -1)[closure_codes]  # a closure without a worker (code -1): none
    ids, step_numbers = closures["closure_id"].to_numpy(), steps["step"].to_numpy()
    pairs = {}
    for code, own_closures in zip(*grouped_rows(closure_task, len(step_tasks))):
        own_steps = np.flatnonzero(step_codes == code)
        by_id = own_closures[np.argsort(ids[own_closures], kind="stable")]
        low, high = (np.searchsorted(ids[by_id], step_numbers[own_steps], side) for side in ("left", "right"))
        matches = high - low
        if matches.sum():
            starts = np.repeat(low - np.cumsum(matches) + matches, matches) + np.arange(matches.sum())
            pairs[str(step_tasks[code])] = (np.repeat(own_steps, matches), by_id[starts], starts)
    return pairs


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
    groups = TaskGroups(measured.steps["task"])
    covered = measured.steps["steps"].to_numpy()
    per_closure = {task: mean_of(covered[rows]) for task, rows in zip(groups.names, groups.rows)}
    steps_per_closure = workers["task"].map(per_closure).fillna(1.0)
    return np.minimum(tail, TAIL_PS_ROUND_TRIPS * round_trip) / steps_per_closure.clip(lower=1.0)


def detect(measured: Measurements) -> list[Finding]:
    workers = measured.workers
    if workers.empty or measured.synchronous or measured.closures is None or measured.closures.empty:
        return []
    gaps = closure_gaps(measured.steps, measured.closures).set_index("task")
    if gaps.empty:
        return []
    workers = workers[workers["task"].isin(gaps.index)]
    in_gap = ps_round_trip_in_gap_ns(measured, workers, gaps)
    gap = (workers["task"].map(gaps["idle_ns"]) - in_gap).clip(lower=0.0)
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
    # With k steps per closure the coordinator's wait is paid once per k steps.
    new_period_saving = gap * (1 - 1 / STEPS_PER_CLOSURE)
    speedup = predicted_speedup(workers, workers["mean_ns"] - new_period_saving, synchronous=False)
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
