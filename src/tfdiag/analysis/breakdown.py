"""Per-step and per-worker timing: the measurements every detector starts from."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfdiag.analysis.groups import TaskGroups, mean_of, median_of, quantile, sum_of, value_of_group
from tfdiag.analysis.step_stats import dense_histogram_quantiles, histogram_quantile

# Share of step time spent waiting for the next element from which a worker is input bound
# (``input_bound``'s warning; ``straggler`` leaves a worker it slows to ``input_bound``). The
# TensorFlow profiler's overview page calls a step "highly input bound" above 20 %.
WARNING_INPUT_FRACTION = 0.20


def step_table(steps: pd.DataFrame, offsets: dict[str, int]) -> pd.DataFrame:
    """One row per step on the reference clock, with its duration.

    Before (as logged)::

        task      step  begin_ns  end_ns  input_wait_ns  examples  clock_task
        worker:0  0     1000      1900    100            32        worker:0
        worker:0  1     2000      2500    100            32        worker:0

    After::

        task      step  begin_ns  end_ns  duration_ns  input_wait_ns  examples  warmup
        worker:0  0     1000      1900    900          100            32        True
        worker:0  1     2000      2500    500          100            32        False

    ``warmup`` marks each worker's first step, which includes tracing and graph setup.
    A record may cover several training steps (a ParameterServerStrategy closure that
    runs ten): ``steps`` says how many, and ``duration_ns`` and ``input_wait_ns`` are then
    per training step, so every worker's timing is comparable.
    Rows keep the order of the logs (grouped by writer, not sorted by time): sorting ten
    million rows costs more memory than anything downstream needs.
    """
    if steps.empty:
        columns = ["task", "step", "begin_ns", "end_ns", "duration_ns", "input_wait_ns", "examples", "steps"]
        empty = pd.DataFrame({name: pd.Series(dtype="float64") for name in columns})
        return empty.astype({"task": "object"}).assign(warmup=pd.Series(dtype=bool))
    task = steps["task"].astype("category")
    shift = value_of_group(steps["clock_task"], offsets)  # onto the reference clock (align.to_reference_clock)
    begin, end = steps["begin_ns"].to_numpy() - shift, steps["end_ns"].to_numpy() - shift
    covered = (steps["steps"].fillna(1).clip(lower=1).astype("int64").to_numpy() if "steps" in steps
               else np.ones(len(steps), "int64"))
    warmup = np.zeros(len(steps), bool)
    for rows in TaskGroups(task).rows:
        own = begin[rows]
        valid = own[~np.isnan(own)] if own.dtype.kind == "f" else own
        if len(valid):
            warmup[rows] = own == valid.min()
    return pd.DataFrame(
        {
            "task": task,
            "step": steps["step"],
            "begin_ns": begin,
            "end_ns": end,
            "duration_ns": (end - begin) // covered,
            "input_wait_ns": steps["input_wait_ns"].fillna(0).astype("int64").to_numpy() // covered,
            "examples": steps["examples"].fillna(0).astype("int64"),
            "steps": covered,
            "warmup": warmup,
        },
        index=steps.index,
    )


def worker_table(steps: pd.DataFrame, counters: pd.DataFrame | None = None,
                 offsets: dict[str, int] | None = None) -> pd.DataFrame:
    """Per-worker summary of a ``step_table``: one row per worker.

    Columns: ``task``, ``steps``, ``p50_ns``, ``p95_ns``, ``mean_ns`` (step duration),
    ``period_ns`` (mean time between training-step starts), ``input_wait_frac``, ``examples``,
    ``active_ns`` (first begin to last end), ``records`` (step records: ``steps / records``
    is the training steps a record covers, exactly, where the kept rows are a sample).
    Timing leaves out each worker's warm-up step
    unless it is the worker's only one; ``steps`` and ``examples`` count every step.

    With ``counters`` (``LoadedRun.step_counters``), a worker whose rows are a sample
    (``step_stats``) gets its row from the exact counters instead, its percentiles from
    the duration histogram (within ``step_stats.PERCENTILE_RELATIVE_ERROR``).
    """
    table = _worker_table_of_rows(steps)
    if counters is None or not counters["sampled"].any():
        return table
    exact = counter_worker_table(counters, offsets or {}).set_index("task")
    sampled = table["task"].isin(set(counters.loc[counters["sampled"], "task"]))
    table = table.set_index("task")  # the kept rows hold every task, in the rows' order
    table.loc[sampled.to_numpy()] = exact.loc[table.index[sampled.to_numpy()]]
    return table.reset_index()


def counter_worker_table(counters: pd.DataFrame, offsets: dict[str, int]) -> pd.DataFrame:
    """``worker_table`` from ``step_stats`` counters (one row per task and clock): exact
    counts, sums and times, and percentiles from the duration histograms."""
    shift = counters["clock_task"].map(lambda clock: offsets.get(clock, 0)).to_numpy(dtype="float64")
    first = counters["first_begin_ns"].to_numpy(dtype="float64") - shift
    task = counters["task"]
    warm = first == pd.Series(first).groupby(task.to_numpy()).transform("min").to_numpy()  # holds the warm-up
    per_clock = pd.DataFrame({
        "task": task,
        "rows": counters["rows"], "steps": counters["steps"], "examples": counters["examples"],
        "warm_rows": np.where(warm, counters["first_rows"], 0),
        "warm_steps": np.where(warm, counters["first_steps"], 0),
        "duration": counters["duration_sum"], "wait": counters["wait_sum"],
        "warm_duration": np.where(warm, counters["first_duration_sum"], 0.0),
        "warm_wait": np.where(warm, counters["first_wait_sum"], 0.0),
        # the first start after the warm-up: the second begin where the warm-up is, else the first
        "start": np.where(warm, counters["second_begin_ns"].astype("float64").to_numpy() - shift, first),
        "last_start": counters["last_begin_ns"].to_numpy(dtype="float64") - shift,
        "first": first,
        "last_end": counters["last_end_ns"].to_numpy(dtype="float64") - shift,
    })
    grouped = per_clock.groupby("task", sort=False)
    sums = grouped[["rows", "steps", "examples", "warm_rows", "warm_steps", "duration", "wait", "warm_duration",
                    "warm_wait"]].sum()
    times = grouped.agg(start=("start", "min"), last_start=("last_start", "max"), first=("first", "min"),
                        last_end=("last_end", "max"))
    codes = pd.Index(sums.index).get_indexer(task)
    # Only the buckets some task counted: 1,024 tasks' whole histograms are 35 MB a copy.
    lo, hi = _counted_buckets(list(counters["histogram"]) + list(counters["first_histogram"]))
    histograms = np.zeros((len(sums), hi - lo), "int64")
    np.add.at(histograms, codes, np.stack([row[lo:hi] for row in counters["histogram"]]))
    warm_histograms = np.zeros_like(histograms)
    np.add.at(warm_histograms, codes, np.stack([row[lo:hi] for row in counters["first_histogram"]]) * warm[:, None])
    # The warm-up is left out of the timing unless it is the worker's only record.
    several = (sums["rows"] > 1).to_numpy()
    histograms -= np.where(several[:, None], warm_histograms, 0)
    duration = sums["duration"] - sums["warm_duration"].where(several, 0.0)
    wait = sums["wait"] - sums["warm_wait"].where(several, 0.0)
    timed = sums["rows"] - sums["warm_rows"].where(several, 0)
    after = sums["rows"] - sums["warm_rows"]
    per_record = (sums["steps"] - sums["warm_steps"]) / after.where(after > 0)
    period = (times["last_start"] - times["start"]) / (after - 1).where(after > 1) / per_record
    mean = duration / timed.where(timed > 0)
    percentiles = dense_histogram_quantiles(histograms, (0.5, 0.95), lo)
    table = pd.DataFrame({
        "task": sums.index.astype(str),
        "steps": sums["steps"].to_numpy(),
        "p50_ns": percentiles[:, 0],
        "p95_ns": percentiles[:, 1],
        "mean_ns": mean.to_numpy(),
        "period_ns": period.fillna(mean).to_numpy(),
        "input_wait_frac": (wait / duration.clip(lower=1.0)).to_numpy(),
        "examples": sums["examples"].to_numpy(dtype="float64"),
        "active_ns": (times["last_end"] - times["first"]).to_numpy(),
        "records": sums["rows"].to_numpy(),
    })
    return table[WORKER_COLUMNS]


WORKER_COLUMNS = ["task", "steps", "p50_ns", "p95_ns", "mean_ns", "period_ns", "input_wait_frac", "examples", "active_ns",
                  "records"]


def _worker_table_of_rows(steps: pd.DataFrame) -> pd.DataFrame:
    if steps.empty:
        return pd.DataFrame(columns=WORKER_COLUMNS)
    warmup = steps["warmup"].to_numpy(bool)
    begin, end = steps["begin_ns"].to_numpy(), steps["end_ns"].to_numpy()
    # Sums of untrusted int64 values are taken in float64, which cannot wrap round.
    duration, wait = (steps[name].to_numpy("float64") for name in ("duration_ns", "input_wait_ns"))
    covered, examples = steps["steps"].to_numpy(), steps["examples"].to_numpy("float64")
    groups = TaskGroups(steps["task"])
    rows = []
    for task, own in zip(groups.names, groups.rows):
        timed = own if len(own) == 1 else own[~warmup[own]]
        after = own[~warmup[own]]
        timed_duration = duration[timed]
        mean = mean_of(timed_duration)
        # The mean gap between consecutive step starts after the warm-up step telescopes to
        # (last start - second start) / (steps - 2): no sort needed.
        period = math.nan
        if len(after) > 1:
            starts = begin[after]
            period = float((starts.max() - starts.min()) / np.float64(len(after) - 1) / mean_of(covered[after]))
        wait_frac = sum_of(wait[timed]) / max(sum_of(timed_duration), 1.0) if len(timed) else math.nan
        rows.append((task, covered[own].sum(), median_of(timed_duration), quantile(timed_duration, 0.95), mean,
                     mean if math.isnan(period) else period,  # one or two steps: no period
                     wait_frac, sum_of(examples[own]), float(np.float64(end[own].max()) - np.float64(begin[own].min())),
                     len(own)))
    return pd.DataFrame(rows, columns=WORKER_COLUMNS)


def run_throughput(steps: pd.DataFrame, counters: pd.DataFrame | None = None,
                   offsets: dict[str, int] | None = None) -> tuple[float | None, float | None]:
    """(median step time in ms, examples per second over the whole run) of a ``step_table``;
    from the exact ``step_stats`` counters (and their histograms) when some rows are a sample."""
    if counters is not None and counters["sampled"].any():
        shift = counters["clock_task"].map(lambda clock: (offsets or {}).get(clock, 0)).to_numpy()
        span_ns = (int((counters["last_end_ns"].to_numpy(dtype="int64") - shift).max())
                   - int((counters["first_begin_ns"].to_numpy(dtype="int64") - shift).min()))
        step_ms = histogram_quantile(np.sum(list(counters["histogram"]), axis=0), 0.5) / 1e6
        examples = float(counters["examples"].sum())
        return step_ms, examples / (span_ns / 1e9) if span_ns > 0 else None
    if steps.empty:
        return None, None
    span_ns = int(steps["end_ns"].max()) - int(steps["begin_ns"].min())
    step_ms = float(np.median(steps["duration_ns"])) / 1e6
    examples_per_s = float(steps["examples"].astype("float64").sum()) / (span_ns / 1e9) if span_ns > 0 else None
    return step_ms, examples_per_s


def closure_tail_ns(steps: pd.DataFrame, closures: pd.DataFrame, quantile: float = 0.5) -> pd.Series:
    """Per worker, the median (or ``quantile``) time from a closure's end on the worker to its
    result on the coordinator (``result_ns - end_ns``, both on the reference clock), indexed by task.

    That tail is part of the idle time between a worker's closures that is not the
    coordinator's: the closure's outstanding parameter-server work (variable updates still
    in flight when the step's last timestamp is taken) and the result's way back. Steps
    and closures pair by ``(task, step) == (worker, closure_id)``; empty when none pair.

        steps:    task      step  end_ns        closures: worker    closure_id  result_ns
                  worker:0  7     1_000                   worker:0  7           9_000
        result:   worker:0  8000.0
    """
    if steps.empty or closures.empty:
        return pd.Series(dtype="float64")
    paired = steps[["task", "step", "end_ns"]].astype({"task": str}).merge(
        closures[["worker", "closure_id", "result_ns"]].astype({"worker": str}),
        left_on=["task", "step"], right_on=["worker", "closure_id"])
    tail = (paired["result_ns"].astype("float64") - paired["end_ns"].astype("float64")).clip(lower=0.0)
    return tail.groupby(paired["task"]).quantile(quantile)


def _counted_buckets(histograms: list[np.ndarray]) -> tuple[int, int]:
    """The range [lo, hi) of buckets holding every count of ``histograms`` (0, 1 if none)."""
    counted = [np.flatnonzero(row) for row in histograms]
    counted = [row for row in counted if len(row)]
    if not counted:
        return 0, 1
    return min(int(row[0]) for row in counted), max(int(row[-1]) for row in counted) + 1
