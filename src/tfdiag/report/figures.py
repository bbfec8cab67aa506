"""Plotly figures of a Report, shared by the HTML report and the TensorBoard tab.

Each figure is a function ``Report -> plotly.graph_objects.Figure``; ``VIEWS`` groups
them in sections under the name the tab asks for (``/figure?name=...``), ``FIGURES``
maps each name to its function in that order, the order both show them. This is the
only list of figures: the tab's frontend reads it from the ``/figures`` route. Callers
serialise a figure (``plotly.io.to_json``) or embed it (``Figure.to_html``). Derived
values (rates from counters) come from ``tfdiag.analysis``; here they are only drawn.
Every figure follows the conventions of ``charts`` (units, time axes, bounded points,
empty charts, escaped names); a new family of figures belongs in a module of its own.

Example:
    >>> from tfdiag.analysis import analyze
    >>> figure = FIGURES["step_breakdown"](analyze("logs/run1"))  # doctest: +SKIP
    >>> is_empty(figure)  # doctest: +SKIP
    False
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tfdiag.analysis.findings import Severity
from tfdiag.analysis.rates import network_rate
from tfdiag.analysis.result import Report
from tfdiag.report.charts import (
    downsample,
    empty_chart,
    empty_figure,
    is_empty,
    label,
    line_trace,
    palette_colour,
    points_per_series,
    seconds_since,
    shortened,
    styled,
    subplot_axes,
    task_labels,
    time_origin,
    timeline_of,
)

# The step components of ``workers[].breakdown_ms`` (tfdiag.analysis.components), with colours.
BREAKDOWN_COMPONENTS = (
    ("input", "input wait", "#ef6c00"),
    ("compute", "compute", "#1e88e5"),
    ("communication", "communication", "#8e24aa"),
    ("sync_wait", "synchronisation wait", "#e53935"),
    ("idle", "idle", "#9e9e9e"),
)
FAULT_STYLES = {  # fault kind -> (marker symbol, colour)
    "failure": ("x", "#d32f2f"),
    "retry": ("diamond", "#f57c00"),
    "recovery": ("circle", "#2e7d32"),
    "restart": ("triangle-up", "#1565c0"),
}
SEVERITY_COLOURS = {"warning": "#f57c00", "critical": "#d32f2f"}
# Above this many links the latency-over-time chart shows one series per destination.
MAX_LINK_SERIES = 16
# Above this many workers the step-time chart shows the spread over every worker (median,
# p95 and slowest step of each moment) and a line only for the workers a finding names:
# a thousand lines are neither readable nor quick to draw.
MAX_STEP_SERIES = 16
SPREAD_QUANTILES = (("median", 0.5), ("p95", 0.95), ("slowest", 1.0))


def step_breakdown(report: Report) -> go.Figure:
    """Mean time per step (ms) of every worker, stacked by component (input, compute, ...)."""
    title = "Step breakdown per worker"
    figure = go.Figure()
    workers = [worker for worker in report.workers if worker.get("breakdown_ms")]
    if not workers:
        return empty_chart(figure, title, "no step records")
    tasks = task_labels(worker["task"] for worker in workers)
    for key, name, colour in BREAKDOWN_COMPONENTS:
        values = [worker["breakdown_ms"].get(key) for worker in workers]
        figure.add_trace(go.Bar(
            x=tasks, y=values, name=name, marker_color=colour,
            hovertemplate="%{x}<br>" + name + ": %{y:.2f} ms<extra></extra>",
        ))
    return styled(figure, title, "worker", "time per step (ms)", barmode="stack", legend={"orientation": "h", "y": -0.2})


def step_time_over_run(report: Report) -> go.Figure:
    """Step time (ms) of every worker against seconds since the run's first step; over
    ``MAX_STEP_SERIES`` workers, their spread and the workers a finding names."""
    title = "Step time per worker"
    figure = go.Figure()
    steps = report.steps
    if steps.empty:
        return empty_chart(figure, title, "no step records")
    origin, x_title = time_origin(report)
    workers = pd.unique(steps["task"])
    if len(workers) > MAX_STEP_SERIES:
        warned = [finding for finding in report.findings if finding.severity.rank >= Severity.WARNING.rank]
        named = {task for finding in warned for task in finding.tasks}
        shown = sorted(named & {str(worker) for worker in workers})[:MAX_STEP_SERIES]
        traces = _step_time_spread(steps, origin, points_per_series(len(SPREAD_QUANTILES) + len(shown)))
        steps = steps[steps["task"].isin(shown)]
        title = f"Step time over {len(workers):,} workers"
    else:
        traces = []
    groups = list(steps.groupby("task", sort=True, observed=True)) if len(steps) else []
    budget = points_per_series(len(groups) + len(traces))
    for task, rows in groups:
        rows = rows.sort_values("begin_ns")
        x, y = downsample(seconds_since(rows["begin_ns"], origin), rows["duration_ns"].to_numpy(dtype="float64") / 1e6, budget)
        traces.append(line_trace(x, y, label(task), mode="lines", hovertemplate="%{x:.1f} s: %{y:.2f} ms"))
    figure.add_traces(traces)
    return styled(figure, title, x_title, "step time (ms)", yaxis_rangemode="tozero")


def _step_time_spread(steps: pd.DataFrame, origin_ns: int, bins: int) -> list[dict]:
    """The median, p95 and slowest step (ms) over every worker in each of at most ``bins``
    spans of the run, the slowest naming its worker."""
    seconds = seconds_since(steps["begin_ns"], origin_ns)
    duration_ms = steps["duration_ns"].to_numpy(dtype="float64") / 1e6
    worker, names = pd.factorize(steps["task"])
    known = ~np.isnan(duration_ms)
    seconds, duration_ms, worker = seconds[known], duration_ms[known], worker[known]
    if not len(seconds):
        return []
    bins = max(1, min(bins, len(seconds) // (2 * len(names))))  # about two steps of each worker a span
    edges = np.linspace(seconds.min(), seconds.max(), bins + 1)
    span = np.clip(np.searchsorted(edges, seconds, side="right") - 1, 0, bins - 1)
    order = np.lexsort((duration_ms, span))
    counts = np.bincount(span, minlength=bins)
    filled = counts > 0
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))[filled]
    middle = ((edges[:-1] + edges[1:]) / 2)[filled]
    traces = []
    for name, q in SPREAD_QUANTILES:
        at = order[first + np.floor(q * (counts[filled] - 1)).astype(int)]
        extra = ({"customdata": task_labels(np.asarray(names)[worker[at]]),
                  "hovertemplate": "%{x:.1f} s: %{y:.2f} ms (%{customdata})"}
                 if q == 1.0 else {"hovertemplate": "%{x:.1f} s: %{y:.2f} ms"})
        traces.append(line_trace(middle, duration_ms[at], f"all workers: {name}", mode="lines", **extra))
    return traces


def rpc_latency_heatmap(report: Report) -> go.Figure:
    """Round-trip time (ms) of every probed link, source × destination, median and p99."""
    title = "RPC round-trip time by link"
    links = [link for link in report.rpc if (link.get("rtt_ms") or {}).get("p50") is not None]
    if not links:
        return empty_chart(go.Figure(), title, "no RPC probes recorded")
    sources = sorted({link["src"] for link in links})
    destinations = sorted({link["dst"] for link in links})
    row, col = {s: i for i, s in enumerate(sources)}, {d: i for i, d in enumerate(destinations)}
    figure = make_subplots(rows=1, cols=2, subplot_titles=("median (p50)", "99th percentile"), horizontal_spacing=0.12)
    top = max(float(link["rtt_ms"].get("p99") or link["rtt_ms"]["p50"]) for link in links)
    for index, key in enumerate(("p50", "p99")):
        z = [[None] * len(destinations) for _ in sources]
        text = [[""] * len(destinations) for _ in sources]
        for link in links:
            value = link["rtt_ms"].get(key)
            z[row[link["src"]]][col[link["dst"]]] = value
            text[row[link["src"]]][col[link["dst"]]] = f"{link.get('samples', 0)} probes"
        figure.add_trace(
            go.Heatmap(
                z=z, x=task_labels(destinations), y=task_labels(sources), text=text, coloraxis="coloraxis",
                hovertemplate="%{y} → %{x}<br>" + key + ": %{z:.3f} ms (%{text})<extra></extra>",
            ),
            row=1, col=index + 1,
        )
    figure.update_xaxes(title_text="destination", type="category")
    figure.update_yaxes(title_text="source", type="category", autorange="reversed")
    height = int(min(1400, max(380, 160 + 16 * len(sources))))
    return styled(
        figure, title, height=height,
        coloraxis={"colorscale": "YlOrRd", "cmin": 0, "cmax": top, "colorbar": {"title": {"text": "ms"}}},
    )


def rpc_latency_over_time(report: Report) -> go.Figure:
    """Round-trip time (ms) of the RPC probes over the run, per link (per destination when many)."""
    title = "RPC round-trip time over the run"
    figure = go.Figure()
    rpc = timeline_of(report, "rpc")
    if rpc.empty:
        return empty_chart(figure, title, "no RPC probes recorded")
    origin, x_title = time_origin(report, int(rpc["time_ns"].min()))
    rpc = rpc.sort_values("time_ns", kind="stable")
    links = rpc[["src", "dst"]].drop_duplicates()
    if len(links) <= MAX_LINK_SERIES:
        groups = [(f"{label(src)} → {label(dst)}", rows) for (src, dst), rows in rpc.groupby(["src", "dst"], sort=True)]
    else:
        groups = [(f"all → {label(dst)}", rows) for dst, rows in rpc.groupby("dst", sort=True)]
    budget = points_per_series(len(groups))
    traces = []
    for name, rows in groups:
        x, y = downsample(seconds_since(rows["time_ns"], origin), rows["rtt_ns"].to_numpy(dtype="float64") / 1e6, budget)
        traces.append(line_trace(x, y, name, mode="markers", marker={"size": 4}, hovertemplate="%{x:.1f} s: %{y:.3f} ms"))
    figure.add_traces(traces)
    return styled(figure, title, x_title, "round-trip time (ms)", yaxis_rangemode="tozero")


def gpu_utilization(report: Report) -> go.Figure:
    """Utilisation (%) and memory in use (GB) of every GPU over the run."""
    title = "GPU utilisation"
    gpu = timeline_of(report, "gpu")
    if gpu.empty:
        return empty_chart(go.Figure(), title, "no GPU samples recorded (no GPU, or NVML unavailable)")
    origin, x_title = time_origin(report, int(gpu["time_ns"].min()))
    figure = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    groups = list(gpu.sort_values("time_ns").groupby(["host", "index"], sort=True, observed=True))
    budget = points_per_series(2 * len(groups))
    traces = []
    for number, ((host, index), rows) in enumerate(groups):
        name = f"{label(host)} GPU {int(index)}"
        seconds = seconds_since(rows["time_ns"], origin)
        memory = rows["mem_used_bytes"].to_numpy(dtype="float64") / 1e9
        for row, values in ((1, rows["util_pct"].to_numpy(dtype="float64")), (2, memory)):
            x, y = downsample(seconds, values, budget)
            traces.append(line_trace(x, y, name, mode="lines", legendgroup=name, showlegend=row == 1,
                                line={"color": palette_colour(number)}, **subplot_axes(row)))
    figure.add_traces(traces)
    figure.update_yaxes(title_text="utilisation (%)", range=[0, 105], row=1, col=1)
    figure.update_yaxes(title_text="memory used (GB)", rangemode="tozero", row=2, col=1)
    figure.update_xaxes(title_text=x_title, row=2, col=1)
    return styled(figure, title, height=520)


def host_utilization(report: Report) -> go.Figure:
    """CPU (%), memory in use (%) and network traffic (MB/s) of every sampled host over the run."""
    title = "Host utilisation"
    system = timeline_of(report, "system")
    if system.empty:
        return empty_chart(go.Figure(), title, "no host samples recorded")
    origin, x_title = time_origin(report, int(system["time_ns"].min()))
    figure = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06)
    # One sort and vectorised columns, then a slice per sampler: a 64-host run has 192 series.
    system = system.assign(host=system["host"].astype(str), task=system["task"].astype(str))
    system = system.sort_values(["host", "task", "time_ns"], kind="stable").reset_index(drop=True)
    codes, _ = pd.factorize(system["host"] + "\x00" + system["task"])
    starts = np.flatnonzero(np.r_[True, np.diff(codes) != 0])
    ends = np.r_[starts[1:], len(system)]
    seconds = seconds_since(system["time_ns"], origin)
    rate = network_rate(system)
    rate[starts] = np.nan  # a sampler's first sample has no rate
    columns = (
        (1, system["cpu_pct"].to_numpy(dtype="float64")),
        (2, system["mem_used_frac"].to_numpy(dtype="float64") * 100),
        (3, rate / 1e6),
    )
    budget = points_per_series(3 * len(starts))
    traces = []
    for number, (start, end) in enumerate(zip(starts, ends)):
        host, task = system.at[start, "host"], system.at[start, "task"]
        name = f"{label(task)} ({label(host)})" if host and host != task else label(task)
        for row, values in columns:
            x, y = downsample(seconds[start:end], values[start:end], budget)
            traces.append(line_trace(x, y, name, mode="lines", legendgroup=name, showlegend=row == 1,
                                line={"color": palette_colour(number)}, **subplot_axes(row)))
    figure.add_traces(traces)
    figure.update_yaxes(title_text="CPU (%)", rangemode="tozero", row=1, col=1)
    figure.update_yaxes(title_text="memory used (%)", range=[0, 105], row=2, col=1)
    figure.update_yaxes(title_text="network (MB/s)", rangemode="tozero", row=3, col=1)
    figure.update_xaxes(title_text=x_title, row=3, col=1)
    return styled(figure, title, height=640)


def shard_balance(report: Report) -> go.Figure:
    """Examples each worker consumed (shard records; step records when there are none)."""
    title = "Data-shard balance"
    figure = go.Figure()
    rows = [(shard["task"], shard.get("examples") or 0) for shard in report.shards]
    source = report.shards[0].get("source", "shard counters") if report.shards else ""
    if not rows or not any(examples for _, examples in rows):
        return empty_chart(figure, title, "no shard or step records")
    tasks = task_labels(task for task, _ in rows)
    examples = [examples for _, examples in rows]
    mean = float(np.mean(examples))
    figure.add_trace(go.Bar(x=tasks, y=examples, name="examples", marker_color="#1e88e5",
                            hovertemplate="%{x}: %{y:,} examples<extra></extra>"))
    figure.add_hline(y=mean, line_dash="dash", line_color="#616161", annotation_text=f"mean {mean:,.0f}")
    return styled(figure, f"{title} (from {source})", "worker", "examples consumed", showlegend=False)


def ps_load(report: Report) -> go.Figure:
    """Bytes (MB) and number of variables each parameter server holds."""
    title = "Parameter-server load"
    if not report.ps:
        return empty_chart(go.Figure(), title, "no variable placement recorded (not a parameter-server run?)")
    tasks = task_labels(ps["task"] for ps in report.ps)
    largest = [f"largest: {label(ps.get('largest'))} ({(ps.get('largest_bytes') or 0) / 1e6:,.2f} MB)" for ps in report.ps]
    figure = make_subplots(rows=1, cols=2, subplot_titles=("bytes held", "variables held"), horizontal_spacing=0.12)
    figure.add_trace(go.Bar(x=tasks, y=[(ps.get("bytes") or 0) / 1e6 for ps in report.ps], name="MB", text=largest,
                            marker_color="#8e24aa", hovertemplate="%{x}: %{y:,.2f} MB<br>%{text}<extra></extra>",
                            textposition="none"), row=1, col=1)
    figure.add_trace(go.Bar(x=tasks, y=[ps.get("variables") or 0 for ps in report.ps], name="variables",
                            marker_color="#00897b", hovertemplate="%{x}: %{y} variables<extra></extra>"), row=1, col=2)
    figure.update_xaxes(title_text="parameter server", type="category")
    figure.update_yaxes(title_text="variable bytes (MB)", row=1, col=1)
    figure.update_yaxes(title_text="variables", row=1, col=2)
    return styled(figure, title, showlegend=False)


def fault_timeline(report: Report) -> go.Figure:
    """Failures, retries, recoveries and restarts on a time axis, one row per task."""
    title = "Faults"
    figure = go.Figure()
    faults = [fault for fault in report.faults if fault.get("time_ns") is not None or fault.get("time") is not None]
    if not faults:
        return empty_chart(figure, title, "no faults recorded")
    times = [int(fault["time_ns"]) for fault in faults if fault.get("time_ns") is not None]
    origin, x_title = time_origin(report, min(times) if times else None)

    def seconds(fault) -> float:
        if fault.get("time_ns") is not None:
            return (int(fault["time_ns"]) - origin) / 1e9
        return float(fault["time"])

    tasks = sorted({label(fault["task"]) for fault in faults})
    for fault in faults:  # a failure that recovered: a bar from failure to recovery
        if fault.get("kind") == "failure" and fault.get("recovered_after_s") is not None:
            start = seconds(fault)
            figure.add_trace(go.Scatter(
                x=[start, start + float(fault["recovered_after_s"])], y=[label(fault["task"])] * 2, mode="lines",
                line={"color": "rgba(211,47,47,0.35)", "width": 8}, showlegend=False, hoverinfo="skip",
            ))
    kinds = sorted({str(fault.get("kind")) for fault in faults})
    for kind in kinds:
        chosen = [fault for fault in faults if str(fault.get("kind")) == kind]
        symbol, colour = FAULT_STYLES.get(kind, ("square", "#616161"))
        figure.add_trace(go.Scatter(
            x=[seconds(fault) for fault in chosen], y=[label(fault["task"]) for fault in chosen], mode="markers",
            name=label(kind), marker={"symbol": symbol, "color": colour, "size": 12},
            text=[label(shortened(str(fault.get("message") or ""))) for fault in chosen],
            hovertemplate="%{y} at %{x:.1f} s<br>%{text}<extra>" + label(kind) + "</extra>",
        ))
    figure.update_yaxes(type="category", categoryorder="array", categoryarray=tasks)
    return styled(figure, title, x_title, "task", height=int(max(300, 160 + 30 * len(tasks))))


def findings_during_run(report: Report) -> go.Figure:
    """When each finding announced while the job ran began and cleared, one row per finding.

    From the run's ``live_finding`` records (``report.timelines["live_findings"]``,
    ``tfdiag.analysis.live.live_finding_windows``); a finding that had not cleared when
    the records end reaches the run's last step and is drawn hatched.
    """
    title = "Findings during the run"
    figure = go.Figure()
    windows = timeline_of(report, "live_findings")
    if windows.empty:
        return empty_chart(figure, title, "no findings announced during the run (live findings off, or none)")
    origin, x_title = time_origin(report, int(windows["began_ns"].min()))
    steps = report.steps
    last_ns = max([int(windows["began_ns"].max())] + [int(value) for value in windows["ended_ns"].dropna()]
                  + ([int(steps["end_ns"].max())] if not steps.empty and "end_ns" in steps else []))
    rows = []
    for window in windows.itertuples():
        name = label(f"{window.kind} ({window.tasks})" if window.tasks else str(window.kind))
        still_on = pd.isna(window.ended_ns)
        end_ns = last_ns if still_on else int(window.ended_ns)
        x = seconds_since(pd.Series([int(window.began_ns), end_ns]), origin)
        colour = SEVERITY_COLOURS.get(str(window.severity), "#616161")
        until = "still on when the records end" if still_on else f"cleared at {x[1]:.1f} s"
        hover = f"{label(shortened(str(window.message)))}<br>from {x[0]:.1f} s, {until}<extra></extra>"
        figure.add_trace(go.Bar(
            x=[x[1] - x[0]], base=[x[0]], y=[name], orientation="h", marker_color=colour, showlegend=False,
            marker_pattern_shape="/" if still_on else "", hovertemplate=hover,
        ))
        rows.append(name)
    names = list(dict.fromkeys(rows))
    figure.update_yaxes(type="category", categoryorder="array", categoryarray=names[::-1])
    return styled(figure, title, x_title, "finding", barmode="overlay", height=int(max(260, 160 + 30 * len(names))))


# The views of a run, in the order the tab and the HTML report show them: (title of the
# tab's section, ((name, figure), ...)). The name is what the tab asks for (/figure?name=);
# the tab reads this list from its /figures route, so it is defined here only.
VIEWS: tuple[tuple[str, tuple[tuple[str, Callable[[Report], go.Figure]], ...]], ...] = (
    ("Step time", (("step_breakdown", step_breakdown), ("step_time", step_time_over_run))),
    ("Findings during the run", (("findings_during_run", findings_during_run),)),
    ("Communication", (("rpc_latency_heatmap", rpc_latency_heatmap), ("rpc_latency_over_time", rpc_latency_over_time))),
    ("Utilisation", (("gpu_utilization", gpu_utilization), ("host_utilization", host_utilization))),
    ("Data shards and parameter servers", (("shard_balance", shard_balance), ("ps_load", ps_load))),
    ("Faults", (("fault_timeline", fault_timeline),)),
)

# Name -> figure, in view order.
FIGURES: dict[str, Callable[[Report], go.Figure]] = {name: make for _, charts in VIEWS for name, make in charts}

# The charts shown side by side for each of two compared runs.
COMPARE_FIGURES = ("step_breakdown", "step_time")

__all__ = ["COMPARE_FIGURES", "FIGURES", "VIEWS", "downsample", "empty_figure", "is_empty", "label", "time_origin", *(f.__name__ for f in FIGURES.values())]
