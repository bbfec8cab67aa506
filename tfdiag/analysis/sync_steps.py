"""Synchronous steps from each worker's own time: who holds the all-reduce up, and by how much.

Under a synchronous strategy (MultiWorkerMirroredStrategy) every worker's step lasts as
long as the slowest worker's: the cross-worker reduction of the gradients waits for the
last worker to produce its own. The step records of ``model.fit`` carry, per worker and
step, ``input_wait_ns`` (from the train function's start to its input element) and
``compute_ns`` (from the element to this worker's own gradients, stamped in-graph before
the reduction: ``collectors/step_input.py``). A worker's *own time* is their sum; the rest
of its step is the reduction, the update and the step's overhead, plus, on every worker
but the slowest, the wait for the slowest. So, in the mean::

    step = max over workers of own time + shared

where ``shared`` is the step less the own time of the worker that gates it (the largest).
A change that alters some workers' own times gives the step ``shared`` plus the new
largest own time. Measured on ``mwms_fit`` (2 workers, 200 steps, load average 2.5)
with an in-graph sleep of 40 ms on worker 1: own times 4.8 and 45.1 ms, steps of
64.4 ms on both; worker 0 spent the remaining 59.7 ms waiting for worker 1 and in the
shared part, worker 1 the remaining 19.3 ms in the shared part alone (predicted without
the sleep: 19.3 + 5.3 ms, a step 2.6x shorter); the clean run's steps took 25.9 ms (own
5.3 and 5.5 ms, shared 20.4 ms; 2.5x shorter).

Means, not medians, make the prediction: throughput is total time over steps. Only the
records with a ``compute_ns`` count (the first step of a ``fit``, and every step of a
collector without the stamp, have none).

Example:
    >>> import pandas as pd
    >>> steps = pd.DataFrame({"task": ["worker:0", "worker:1"] * 2, "begin_ns": [0, 0, 70, 70],
    ...                       "end_ns": [64, 64, 134, 134], "input_wait_ns": [1, 1, 1, 1],
    ...                       "compute_ns": [4, 44, 4, 44], "examples": [8] * 4})
    >>> own = own_times(steps)
    >>> own[["task", "own_ns", "step_ns"]].values.tolist()
    [['worker:0', 5.0, 64.0], ['worker:1', 45.0, 64.0]]
    >>> step_with_own(own, pd.Series([5.0, 5.0], index=own.index))
    24.0
"""

from __future__ import annotations

import pandas as pd

OWN_COLUMNS = ["task", "records", "step_ns", "input_ns", "compute_ns", "own_ns", "compute_p50_ns",
               "examples_per_step"]


def own_times(steps: pd.DataFrame) -> pd.DataFrame:
    """Per worker, over its step records with a ``compute_ns`` (``step`` records as logged).

    Columns: ``task``, ``records``, the means ``step_ns`` (duration), ``input_ns``,
    ``compute_ns`` and ``own_ns`` (their sum), ``compute_p50_ns`` (median compute) and
    ``examples_per_step``. Empty when no record has a ``compute_ns``.
    """
    if steps.empty or "compute_ns" not in steps:
        return pd.DataFrame(columns=OWN_COLUMNS)
    stamped = steps[steps["compute_ns"].notna()]
    if stamped.empty:
        return pd.DataFrame(columns=OWN_COLUMNS)
    frame = pd.DataFrame({
        "task": stamped["task"].astype(str).to_numpy(),
        "step_ns": (stamped["end_ns"] - stamped["begin_ns"]).astype("float64").to_numpy(),
        "input_ns": stamped["input_wait_ns"].fillna(0).astype("float64").to_numpy(),
        "compute_ns": stamped["compute_ns"].astype("float64").to_numpy(),
        "examples": stamped["examples"].fillna(0).astype("float64").to_numpy(),
    })
    grouped = frame.groupby("task", sort=True)
    table = grouped[["step_ns", "input_ns", "compute_ns"]].mean()
    table["own_ns"] = table["input_ns"] + table["compute_ns"]
    table["compute_p50_ns"] = grouped["compute_ns"].median()
    table["examples_per_step"] = grouped["examples"].mean()
    table["records"] = grouped.size()
    return table.reset_index()[OWN_COLUMNS]


def shared_ns(own: pd.DataFrame) -> float:
    """The part of the mean synchronous step that is no worker's own time: the step less the
    largest own time (the reduction, the update and the step's overhead)."""
    return max(float(own["step_ns"].max() - own["own_ns"].max()), 0.0)


def step_with_own(own: pd.DataFrame, new_own_ns: pd.Series) -> float:
    """The mean synchronous step when each worker's own time becomes ``new_own_ns`` (indexed
    like ``own``): the shared part plus the largest new own time."""
    return shared_ns(own) + float(new_own_ns.max())


def speedup_with_own(own: pd.DataFrame, new_own_ns: pd.Series) -> float:
    """Throughput ratio of the synchronous job when each worker's own time becomes ``new_own_ns``."""
    return float(own["step_ns"].max()) / max(step_with_own(own, new_own_ns), 1.0)
