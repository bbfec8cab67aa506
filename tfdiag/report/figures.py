"""Plotly figures of a Report, shared by the HTML report and the TensorBoard tab.

Each function takes a ``Report`` and returns a ``plotly.graph_objects.Figure``; callers
serialise it (``figure.to_plotly_json()``) or embed it. Unit conversion to ms happens here.
"""

from __future__ import annotations

import plotly.graph_objects as go

from tfdiag.analysis.result import Report

# Charts of long runs are downsampled to at most this many points per worker; plotly in
# a browser stays responsive up to a few tens of thousands of points in total.
MAX_POINTS_PER_SERIES = 2000


def step_time_over_run(report: Report) -> go.Figure:
    """Step time (ms) of every worker against seconds since the run's first step."""
    figure = go.Figure()
    steps = report.steps
    if not steps.empty:
        start_ns = steps["begin_ns"].min()
        for task, rows in steps.groupby("task", sort=True):
            every = max(1, len(rows) // MAX_POINTS_PER_SERIES)
            rows = rows.iloc[::every]
            figure.add_trace(
                go.Scattergl(
                    x=(rows["begin_ns"] - start_ns) / 1e9,
                    y=rows["duration_ns"] / 1e6,
                    mode="lines",
                    name=str(task),
                )
            )
    figure.update_layout(
        title="Step time per worker",
        xaxis_title="time since first step (s)",
        yaxis_title="step time (ms)",
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return figure


def worker_step_times(report: Report) -> go.Figure:
    """Median and 95th-percentile step time (ms) of every worker, side by side."""
    tasks = [str(worker["task"]) for worker in report.workers]
    figure = go.Figure()
    for key, label in (("p50", "median"), ("p95", "95th percentile")):
        figure.add_trace(
            go.Bar(x=tasks, y=[worker["step_time_ms"][key] for worker in report.workers], name=label)
        )
    figure.update_layout(
        title="Step time by worker",
        xaxis_title="worker",
        yaxis_title="step time (ms)",
        barmode="group",
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return figure


def input_wait_by_worker(report: Report) -> go.Figure:
    """Share of step time (%) each worker spends waiting for its input pipeline."""
    tasks = [str(worker["task"]) for worker in report.workers]
    figure = go.Figure(
        go.Bar(x=tasks, y=[100 * (worker.get("input_wait_frac") or 0.0) for worker in report.workers], name="input wait")
    )
    figure.update_layout(
        title="Input wait by worker",
        xaxis_title="worker",
        yaxis_title="input wait (% of step time)",
        yaxis_range=[0, 100],
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
    )
    return figure


# The figures of a report, in the order the HTML report shows them.
REPORT_FIGURES = (step_time_over_run, worker_step_times, input_wait_by_worker)
