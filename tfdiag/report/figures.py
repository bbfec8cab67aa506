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
