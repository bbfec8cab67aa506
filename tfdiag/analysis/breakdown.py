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
    """
    if steps.empty:
        columns = ["task", "step", "begin_ns", "end_ns", "duration_ns", "input_wait_ns", "period_ns", "examples"]
        return pd.DataFrame({name: pd.Series(dtype="float64") for name in columns}).astype({"task": "object"})
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
    table["period_ns"] = table.groupby("task", sort=False, observed=True)["begin_ns"].diff()
    return table


def worker_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Per-worker summary of a ``step_table``: one row per worker.

    Columns: ``task``, ``steps``, ``p50_ns``, ``p95_ns``, ``mean_ns`` (step duration),
    ``period_ns`` (median time between step starts), ``input_wait_frac``, ``examples``,
    ``active_ns`` (first begin to last end).
    """
    if steps.empty:
        return pd.DataFrame(
            columns=["task", "steps", "p50_ns", "p95_ns", "mean_ns", "period_ns", "input_wait_frac", "examples", "active_ns"]
        )
    grouped = steps.groupby("task", sort=True, observed=True)
    table = pd.DataFrame(
        {
            "steps": grouped.size(),
            "p50_ns": grouped["duration_ns"].median(),
            "p95_ns": grouped["duration_ns"].quantile(0.95),
            "mean_ns": grouped["duration_ns"].mean(),
            "period_ns": grouped["period_ns"].median(),
            "input_wait_frac": grouped["input_wait_ns"].sum() / grouped["duration_ns"].sum().clip(lower=1),
            "examples": grouped["examples"].sum(),
            "active_ns": grouped["end_ns"].max() - grouped["begin_ns"].min(),
        }
    ).reset_index()
    table["task"] = table["task"].astype(str)
    # A worker with a single step has no period; its duration is the best stand-in.
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
