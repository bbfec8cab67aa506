"""Per-worker step breakdown: input, compute, communication, synchronisation wait, idle."""

from __future__ import annotations

import pandas as pd

from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.ps_traffic import ps_traffic

COMPONENTS = ("input", "compute", "communication", "sync_wait", "idle")


def step_components(measured: Measurements) -> pd.DataFrame:
    """Mean time per step in each component, per worker (ns).

    - ``input``: measured wait in ``next(iterator)``;
    - ``communication``: asynchronous (ps) training: the ps-traffic model
      (``whatif.ps_communication_ns``) when placement and bandwidth were captured;
      synchronous training: the fastest worker's all-reduce time;
    - ``sync_wait``: synchronous training only: how much longer this worker's all-reduce
      took than the fastest one's, i.e. waiting for slower peers;
    - ``compute``: the rest of the step;
    - ``idle``: step period minus step duration (dispatch gaps, coordinator waits).

    Columns: ``task`` and ``<component>_ns`` for each of ``COMPONENTS``.
    """
    workers = measured.workers
    table = pd.DataFrame({"task": workers["task"]})
    if workers.empty:
        return table.assign(**{f"{name}_ns": pd.Series(dtype=float) for name in COMPONENTS})
    duration = workers["mean_ns"].astype(float)
    table["input_ns"] = duration * workers["input_wait_frac"].astype(float)
    communication = pd.Series(0.0, index=workers.index)
    sync_wait = pd.Series(0.0, index=workers.index)
    allreduce = measured.run.frame("allreduce")
    if measured.synchronous and not allreduce.empty:
        per_task = allreduce.assign(task=allreduce["task"].astype(str)).groupby("task")["duration_ns"].median()
        reduce = workers["task"].map(per_task).fillna(0.0).astype(float)
        communication = pd.Series(float(per_task.min()), index=workers.index).where(reduce > 0, 0.0)
        sync_wait = reduce - communication
    elif not measured.synchronous:
        traffic = ps_traffic(measured)
        if traffic is not None:
            communication = pd.Series(traffic.communication_ns(), index=workers.index)
    available = (duration - table["input_ns"]).clip(lower=0)
    table["communication_ns"] = communication.clip(upper=available)
    table["sync_wait_ns"] = sync_wait.clip(upper=available - table["communication_ns"])
    table["compute_ns"] = (available - table["communication_ns"] - table["sync_wait_ns"]).clip(lower=0)
    table["idle_ns"] = (workers["period_ns"].astype(float) - duration).clip(lower=0)
    return table[["task"] + [f"{name}_ns" for name in COMPONENTS]]
