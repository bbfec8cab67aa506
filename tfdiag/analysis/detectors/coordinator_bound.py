"""``coordinator_bound``: ParameterServerStrategy workers idle, waiting for the coordinator.

A worker's idle time between two closures has two parts. From its closure's end to the
result reaching the coordinator (the *tail*) the worker still finishes its variable
updates on the parameter servers and sends its result back: ps round trips and the
host, not the coordinator. From that result to the worker starting its next closure it
waits for the coordinator: for the user's loop to schedule one when the queue is empty,
then for the coordinator's dispatch thread and the call that starts it. Only that second
part is the coordinator's (``coordinator_wait``): on a busy host the tail grows with
every late thread (a tutorial-style loop on two busy cores: a 7 ms tail and a 3.5 ms
wait per 19 ms period, and ten steps per closure measured 0.70x), behind a slow ps it
is the slow round trips (``slow_link``).

A wait far longer than the worker's usual one (an epoch's end in ``model.fit``, a
checkpoint, an evaluation, ``coordinator.join()``) is a *pause*: the coordinator waited
for something else, and more steps per closure would not remove it, so pauses are
counted apart. And the coordinator serves every worker alike, so no worker's share is
taken larger than the least idle worker's (the rest is that worker's own loss: a CPU
quota stops the worker, and its next closure waits to start: ``straggler``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.whatif import predicted_speedup

KIND = "coordinator_bound"

# Share of a worker's step period spent waiting for the coordinator. Every closure costs
# the coordinator Python dispatch and a call to start it; when workers wait for that 40 %
# of their time or more, that fixed cost rivals the work itself.
WARNING_IDLE_FRACTION = 0.4
CRITICAL_IDLE_FRACTION = 0.7
# The change advised: run this many steps inside each scheduled function.
STEPS_PER_CLOSURE = 10
# A wait is a pause (not the per-closure dispatch cost) when it is this many times the
# worker's median wait and at least PAUSE_MIN_NS: ps_fit's epoch ends waited 360-645 ms
# against a median of 3-4 ms (docs/findings.md, ``coordinator_bound``).
PAUSE_FACTOR = 10.0
PAUSE_MIN_NS = 50_000_000


def coordinator_waits(steps: pd.DataFrame, closures: pd.DataFrame | None) -> pd.DataFrame:
    """Per worker, what it waited for the coordinator between closures, per training step.

    Pairs each step record with its closure (``(task, step) == (worker, closure_id)``) and,
    for every closure but a worker's first, takes the time from the previous closure's
    result on the coordinator to this closure's start on the worker (never more than the
    idle time between the two, never less than 0). Columns: ``task``, ``wait_ns`` (mean
    over closures, pauses left out, per training step), ``tail_ns`` (median from a
    closure's end to its result), ``pauses``, ``pause_ns`` (their total), ``closures``.
    Empty when no step pairs with a closure.

    >>> import pandas as pd
    >>> steps = pd.DataFrame({"task": ["worker:0"] * 3, "step": [0, 1, 2], "begin_ns": [0, 30, 60],
    ...                       "end_ns": [10, 40, 70], "steps": [1, 1, 1]})
    >>> closures = pd.DataFrame({"worker": ["worker:0"] * 3, "closure_id": [0, 1, 2], "result_ns": [22, 52, 82]})
    >>> coordinator_waits(steps, closures)[["task", "wait_ns", "tail_ns"]].to_dict("records")
    [{'task': 'worker:0', 'wait_ns': 8.0, 'tail_ns': 12.0}]
    """
    columns = ["task", "wait_ns", "tail_ns", "pauses", "pause_ns", "closures"]
    if steps.empty or closures is None or closures.empty:
        return pd.DataFrame(columns=columns)
    paired = steps[["task", "step", "begin_ns", "end_ns", "steps"]].astype({"task": str}).merge(
        closures[["worker", "closure_id", "result_ns"]].astype({"worker": str}),
        left_on=["task", "step"], right_on=["worker", "closure_id"])
    rows = []
    for task, own in paired.astype({"begin_ns": float, "end_ns": float, "result_ns": float}).groupby("task"):
        own = own.sort_values("begin_ns")
        idle = own["begin_ns"] - own["end_ns"].shift()
        wait = np.minimum((own["begin_ns"] - own["result_ns"].shift()).clip(lower=0.0), idle.clip(lower=0.0)).iloc[1:]
        if wait.empty:
            continue
        pause = wait > np.maximum(PAUSE_FACTOR * float(wait.median()), PAUSE_MIN_NS)
        per_step = float(own["steps"].mean()) if own["steps"].mean() >= 1 else 1.0
        rows.append({
            "task": task, "wait_ns": float(wait[~pause].mean()) / per_step,
            "tail_ns": float((own["result_ns"] - own["end_ns"]).clip(lower=0.0).median()),
            "pauses": int(pause.sum()), "pause_ns": float(wait[pause].sum()), "closures": len(own),
        })
    return pd.DataFrame(rows, columns=columns)


def detect(measured: Measurements) -> list[Finding]:
    workers = measured.workers
    if workers.empty or measured.synchronous or measured.closures is None or measured.closures.empty:
        return []
    waits = coordinator_waits(measured.steps, measured.closures).set_index("task")
    if waits.empty:
        return []
    workers = workers[workers["task"].isin(waits.index)]
    wait = workers["task"].map(waits["wait_ns"])
    # The coordinator serves every worker alike: a worker that waits longer than the least
    # waiting one loses the difference on its own (a CPU quota, a busy host: ``straggler``).
    gap = np.minimum(wait.clip(upper=float(wait.min())), (workers["period_ns"] - workers["mean_ns"]).clip(lower=0.0))
    idle = (gap / workers["period_ns"]).to_numpy()
    typical = float(np.median(idle))
    if typical < WARNING_IDLE_FRACTION:
        return []
    # With k steps per closure the coordinator's wait is paid once per k steps.
    new_period_saving = gap * (1 - 1 / STEPS_PER_CLOSURE)
    speedup = predicted_speedup(workers, workers["mean_ns"] - new_period_saving, synchronous=False)
    return [
        Finding(
            kind="coordinator_bound",
            severity=Severity.CRITICAL if typical >= CRITICAL_IDLE_FRACTION else Severity.WARNING,
            title=f"Workers wait for the coordinator {typical:.0%} of the time between closures",
            summary=(
                f"Each closure runs {float(workers['mean_ns'].median()) / 1e6:.1f} ms, but a worker starts its next one "
                f"{float(gap.median()) / 1e6:.1f} ms after the coordinator has the previous result: the coordinator "
                "cannot dispatch fast enough."
            ),
            tasks=tuple(workers["task"]),
            evidence={
                "idle_frac": {row.task: round(float(idle[i]), 3) for i, row in enumerate(workers.itertuples())},
                "coordinator_wait_ms_per_step": {task: round(float(row.wait_ns) / 1e6, 2) for task, row in waits.iterrows()},
                "closure_tail_ms": {task: round(float(row.tail_ns) / 1e6, 2) for task, row in waits.iterrows()},
                "pauses": {task: {"count": int(row.pauses), "total_s": round(float(row.pause_ns) / 1e9, 3)}
                           for task, row in waits.iterrows() if row.pauses},
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
