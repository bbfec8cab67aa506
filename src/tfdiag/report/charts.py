"""What every figure of ``figures`` shares: its helpers, so that every view reads the same.

Conventions:

- Unit conversion (ns → ms or s, bytes → MB) and unit labels happen in the figures only,
  never in the analysis.
- Time axes are seconds since the run's first step (the manifest's start time, or the
  first sample, when the run has no steps), on the reference clock.
- Every time series is downsampled to a bounded number of points (``downsample``:
  the minimum and maximum of each bucket, so spikes survive); a figure holds at most
  about ``MAX_POINTS_PER_FIGURE`` points however large the run.
- A figure without data is an empty chart with an annotation saying what is missing
  (``layout.meta.empty`` is true), never an error.
- Names from the run (tasks, hosts, variables) are HTML-escaped, control characters
  escaped too (``label``): plotly renders trace names, tick labels and hover text as a
  subset of HTML.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from tfdiag.analysis.result import Report
from tfdiag.report.safe_text import printable

# One series never holds more than this many points; plotly in a browser stays
# responsive up to a few tens of thousands of points per chart (SVG traces slow down
# past ~10^4 points, which is why series switch to WebGL above SVG_MAX_POINTS).
MAX_POINTS_PER_SERIES = 2000
# All series of one figure together hold about this many points at most: a 64-worker
# run gets ~300 points per worker instead of 2,000.
MAX_POINTS_PER_FIGURE = 20_000
# A series shorter than this is drawn as SVG (go.Scatter), which works without WebGL
# (headless browsers, remote desktops); longer ones use go.Scattergl.
SVG_MAX_POINTS = 5_000
# Fewer points than this per series would make a line meaningless.
MIN_POINTS_PER_SERIES = 50

MARGIN = {"l": 70, "r": 20, "t": 60, "b": 60}


def label(text: Any) -> str:
    """``text`` as plotly shows it literally, control characters escaped: ``label("<b>w</b>") == "&lt;b&gt;w&lt;/b&gt;"``."""
    return html.escape(printable(text), quote=False)


def is_empty(figure: go.Figure) -> bool:
    """Whether ``figure`` was drawn without data (it holds only an explanatory annotation)."""
    meta = figure.layout.meta
    return bool(isinstance(meta, dict) and meta.get("empty"))


def downsample(x: np.ndarray, y: np.ndarray, max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` points of the series (x ascending): each bucket's min and max.

    Keeping both extremes of every bucket keeps the spikes a straggler or a slow link
    makes, which a plain stride would drop. NaNs in ``y`` are never chosen over numbers.

    >>> x = np.arange(10); y = np.array([0, 9, 0, 0, 0, 0, 0, 0, 7, 0])
    >>> downsample(x, y, 4)[1].tolist()
    [0.0, 9.0, 0.0, 7.0]
    """
    x, y = np.asarray(x), np.asarray(y, dtype=float)
    n = len(y)
    if n <= max_points:
        return x, y
    buckets = max(1, max_points // 2)
    size = -(-n // buckets)
    buckets = -(-n // size)
    padded = np.full(buckets * size, np.nan)
    padded[:n] = np.where(np.isnan(y), np.nan, y)
    rows = padded.reshape(buckets, size)
    filled = np.where(np.isnan(rows), np.inf, rows)
    low = np.argmin(filled, axis=1)
    high = np.argmax(np.where(np.isnan(rows), -np.inf, rows), axis=1)
    base = np.arange(buckets) * size
    keep = np.unique(np.concatenate([base + low, base + high]))
    keep = keep[keep < n]
    return x[keep], y[keep]


def points_per_series(series: int) -> int:
    return int(max(MIN_POINTS_PER_SERIES, min(MAX_POINTS_PER_SERIES, MAX_POINTS_PER_FIGURE // max(series, 1))))


def line_trace(x, y, name: str, **kwargs) -> dict:
    """A line or marker trace (a dict: ``Figure.add_traces`` takes hundreds of them fast):
    SVG when short (works without WebGL), WebGL when long."""
    return {"type": "scatter" if len(x) <= SVG_MAX_POINTS else "scattergl", "x": x, "y": y, "name": name, **kwargs}


def subplot_axes(row: int) -> dict:
    """The axes of subplot ``row`` of a one-column ``make_subplots`` figure."""
    suffix = "" if row == 1 else str(row)
    return {"xaxis": f"x{suffix}", "yaxis": f"y{suffix}"}


def styled(figure: go.Figure, title: str, xaxis_title: str | None = None, yaxis_title: str | None = None, **layout) -> go.Figure:
    """The common look; axis titles here only for single-plot figures (subplots set their own)."""
    figure.update_layout(title=title, template="plotly_white", margin=MARGIN, meta={"empty": False}, **layout)
    if xaxis_title is not None:
        figure.update_layout(xaxis_title=xaxis_title)
    if yaxis_title is not None:
        figure.update_layout(yaxis_title=yaxis_title)
    return figure


def empty_figure(title: str, message: str) -> go.Figure:
    """A chart without data that says why (``layout.meta.empty`` is true)."""
    return empty_chart(go.Figure(), title, message)


def empty_chart(figure: go.Figure, title: str, message: str) -> go.Figure:
    """An empty chart that says why it is empty."""
    figure.update_layout(
        title=title,
        template="plotly_white",
        margin=MARGIN,
        meta={"empty": True, "message": message},
        xaxis={"visible": False},
        yaxis={"visible": False},
        annotations=[{
            "text": label(message), "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5,
            "font": {"size": 14, "color": "#757575"},
        }],
    )
    return figure


def time_origin(report: Report, fallback_ns: int | None = None) -> tuple[int, str]:
    """(origin in ns, x-axis title) of every time axis: the first step, else the run's start."""
    steps = report.steps
    if not steps.empty and "begin_ns" in steps:
        return int(steps["begin_ns"].min()), "time since first step (s)"
    start = report.run.get("start_time_ns")
    if start:
        return int(start), "time since run start (s)"
    return int(fallback_ns or 0), "time since first sample (s)"


def seconds_since(times_ns: pd.Series, origin_ns: int) -> np.ndarray:
    # Subtract in int64: nanoseconds since 1970 do not fit a float64 exactly.
    return (times_ns.to_numpy(dtype="int64") - origin_ns) / 1e9


def timeline_of(report: Report, name: str) -> pd.DataFrame:
    frame = report.timelines.get(name) if report.timelines else None
    return frame if frame is not None else pd.DataFrame()


def task_labels(values) -> list[str]:
    return [label(value) for value in values]


def shortened(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def palette_colour(number: int) -> str:
    return _PALETTE[number % len(_PALETTE)]
