"""Per-step and per-worker timing: the measurements every detector starts from."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfdiag.analysis.align import to_reference_clock


def step_table(steps: pd.DataFrame, offsets: dict[str, int]) -> pd.DataFrame:
    """One row per step on the reference clock, with its duration and the idle gap before it.

    Before (as logged)::

        task      step  begin_ns  end_ns  input_wait_ns  examples  clock_task
        worker:0  1     1000      1500    100            32        worker:0
        worker:0  2     1600      2100    100            32        worker:0

    After::

        task      step  begin_ns  end_ns  duration_ns  input_wait_ns  period_ns  examples
        worker:0  1     1000      1500    500          100            NaN        32
        worker:0  2     1600      2100    500          100            600        32

    ``period_ns`` is the time from the previous step's begin on the same worker, so
    ``period_ns - duration_ns`` of the previous step is the worker's idle time.
    ``warmup`` marks each worker's first step, which includes tracing and graph setup.
    """
    if steps.empty:
        columns = ["task", "step", "begin_ns", "end_ns", "duration_ns", "input_wait_ns", "period_ns", "examples"]
        empty = pd.DataFrame({name: pd.Series(dtype="float64") for name in columns})
        return empty.astype({"task": "object"}).assign(warmup=pd.Series(dtype=bool))
    table = pd.DataFrame(
        {
            "task": steps["task"].astype("category"),
            "step": steps["step"],
            "begin_ns": to_reference_clock(steps["begin_ns"], steps["clock_task"], offsets),
            "end_ns": to_reference_clock(steps["end_ns"], steps["clock_task"], offsets),
            "input_wait_ns": steps["input_wait_ns"].fillna(0).astype("int64"),
            "examples": steps["examples"].fillna(0).astype("int64"),
        }
    )
    table = table.sort_values(["task", "begin_ns"], kind="stable").reset_index(drop=True)
    table["duration_ns"] = table["end_ns"] - table["begin_ns"]
    grouped = table.groupby("task", sort=False, observed=True)
    table["period_ns"] = grouped["begin_ns"].diff()
    table["warmup"] = grouped.cumcount() == 0
    return table


def worker_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Per-worker summary of a ``step_table``: one row per worker.

    Columns: ``task``, ``steps``, ``p50_ns``, ``p95_ns``, ``mean_ns`` (step duration),
    ``period_ns`` (mean time between step starts), ``input_wait_frac``, ``examples``,
    ``active_ns`` (first begin to last end). Timing leaves out each worker's warm-up step
    unless it is the worker's only one; ``steps`` and ``examples`` count every step.
    """
    if steps.empty:
        return pd.DataFrame(
            columns=["task", "steps", "p50_ns", "p95_ns", "mean_ns", "period_ns", "input_wait_frac", "examples", "active_ns"]
        )
    counts = steps.groupby("task", observed=True)["step"].transform("size")
    timed = steps[~steps["warmup"] | (counts == 1)]
    grouped = steps.groupby("task", sort=True, observed=True)
    timing = timed.groupby("task", sort=True, observed=True)
    # The warm-up step's period is its gap to the second step: keep it out as well.
    periods = steps[steps.groupby("task", observed=True).cumcount() >= 2].groupby("task", observed=True)["period_ns"]
    table = pd.DataFrame(
        {
            "steps": grouped.size(),
            "p50_ns": timing["duration_ns"].median(),
            "p95_ns": timing["duration_ns"].quantile(0.95),
            "mean_ns": timing["duration_ns"].mean(),
            "period_ns": periods.mean(),
            "input_wait_frac": timing["input_wait_ns"].sum() / timing["duration_ns"].sum().clip(lower=1),
            "examples": grouped["examples"].sum(),
            "active_ns": grouped["end_ns"].max() - grouped["begin_ns"].min(),
        }
    ).reset_index()
    table["task"] = table["task"].astype(str)
    # A worker with one or two steps has no period; its duration is the best stand-in.
    table["period_ns"] = table["period_ns"].fillna(table["mean_ns"])
    return table


def run_throughput(steps: pd.DataFrame) -> tuple[float | None, float | None]:
    """(median step time in ms, examples per second over the whole run) of a ``step_table``."""
    if steps.empty:
        return None, None
    span_ns = int(steps["end_ns"].max() - steps["begin_ns"].min())
    step_ms = float(np.median(steps["duration_ns"])) / 1e6
    examples_per_s = float(steps["examples"].sum()) / (span_ns / 1e9) if span_ns > 0 else None
    return step_ms, examples_per_s
