"""Workers compared fairly: per worker, the step timing the ``straggler`` detector judges.

- over the time they all ran (the *overlap*) when every worker has ``OVERLAP_RECORDS``
  timed step records in it: a TF1 non-chief worker that waited 30 s for the chief to
  initialise the model joins late, and its steps, all taken while the chief competed
  for the CPU, must not be set against the chief's solo steps. A shorter overlap is
  too few steps to compare, so the whole run is;
- only with enough steps: a worker with fewer than ``MIN_RECORDS`` timed step records
  (its first, with tracing and warm-up, never counts) is not judged, nor does it set
  the bar for the others — unless it has 2 and was present (first record, warm-up
  included, to last) for at least ``MIN_SPAN_SHARE`` of the longest worker's time: a
  worker so slow that it ran a few long closures over the whole run is the straggler
  itself, where one that joined at the end is not judged. One with fewer timed records
  that had work for that share is judged by its pace: the time it had work per step it
  finished;
- without time away: the time from a failure to its recovery or restart
  (``faults.downtime_ns``) is neither presence nor part of a period;
- with the share of its CPU demand each spent waiting on a run queue while it stepped
  (``runq_wait_share``, ``run_queue``): what tells a worker starved by its neighbours from
  one slow on its own (``straggler``, ``host_contention``).

A long run's step rows are a sample by step number (``step_stats``): a worker past the
cap is read from its exact counters, over the overlap from its segments (counts and sums
exact but for the two segments at the window's edges, one in ``step_stats.SEGMENTS`` of
its records each), so a sampled run is judged as the same run unsampled.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfdiag.analysis.faults import downtime_ns, time_away
from tfdiag.analysis.groups import TaskGroups, mean_of, median_of
from tfdiag.analysis.step_windows import window_counters

# Timed step records (the warm-up record left out; a record may be a closure of several
# steps) a worker needs to be judged, and each worker needs inside the overlap for the
# overlap to be compared: fewer vary too much to compare (ps_ctl's 4-6 closures per worker
# inside the overlap of a clean 200-step run were 1.8x apart).
MIN_RECORDS = 5
OVERLAP_RECORDS = 10
# ... or at least 2 timed records and present (its first record, warm-up included, to its
# last end) for this share of the longest worker's time: a worker so slow that it ran a few
# closures over most of the run is there to be judged (a 200-step ps_ctl run with a worker
# sleeping 40 ms a step: 3-5 closures over the whole run); one that joined for the last
# quarter of the run is not. The warm-up counts: a worker under a CPU quota may spend most
# of its presence in it.
MIN_SPAN_SHARE = 0.5

COMPARED_COLUMNS = ["task", "records", "steps", "p50_ns", "mean_ns", "period_ns", "examples_per_step", "window_ns",
                    "p50_se_ns", "period_se_ns"]
# The standard error of a median of n draws is about sqrt(pi / 2) sigma / sqrt(n) (of a
# mean, sigma / sqrt(n)), with sigma estimated robustly as 1.4826 times the median absolute
# deviation (step times have long tails: a traced step, a collective that waited).
_MEDIAN_SE_PER_MAD = math.sqrt(math.pi / 2) * 1.4826


def judged_workers(steps: pd.DataFrame, workers: pd.DataFrame, counters: pd.DataFrame | None,
                   offsets: dict[str, int], faults: pd.DataFrame, closures: pd.DataFrame | None) -> pd.DataFrame:
    """The workers the straggler detector judges, as ``compared_workers`` rows: those with
    ``MIN_RECORDS`` timed records or present for ``MIN_SPAN_SHARE`` of the run, periods
    over the time each was up, and those barely stepping judged by their pace."""
    compared = _without_time_away(steps, faults, compared_workers(steps, workers, counters, offsets))
    # Present from its first record (warm-up included) to its last: a worker that ran few
    # records over most of the run is slow; one that joined late ran few because it was absent.
    present = compared["task"].map(dict(zip(workers["task"].astype(str), workers["active_ns"])))
    # Away after a failure until it came back (task_failure's) is not presence: a TF1 worker
    # killed after one step and back for a few at the end spans the run with 5 records.
    present = present - compared["task"].map(downtime_ns(faults)).fillna(0.0)
    spans_most = (compared["records"] >= 2) & (present >= MIN_SPAN_SHARE * float(workers["active_ns"].max()))
    judged = compared[(compared["records"] >= MIN_RECORDS) | spans_most]
    paced = _barely_stepping(steps, workers, faults, closures, compared)
    return pd.concat([judged, paced], ignore_index=True) if paced is not None else judged.reset_index(drop=True)


def compared_workers(steps: pd.DataFrame, workers: pd.DataFrame | None = None, counters: pd.DataFrame | None = None,
                     offsets: dict[str, int] | None = None) -> pd.DataFrame:
    """Per worker, its timing over the window every worker was stepping (or, when a worker
    has fewer than ``OVERLAP_RECORDS`` timed records in it, over the whole run), warm-up
    records left out.

    The window runs from the latest first timed step start to the earliest last step end.
    A worker whose kept rows are a sample (``counters["sampled"]``, a long run) is read
    from its exact counters instead: over the window from its segments
    (``step_windows.window_counters``), over the whole run from its ``workers`` row.
    Columns: ``task``, ``records``, ``steps`` (training steps), ``p50_ns``, ``mean_ns``,
    ``period_ns`` (as ``breakdown.worker_table``), ``examples_per_step``,
    ``window_ns`` (0 when the whole run is compared), and the standard errors of the
    median step and of the period, ``p50_se_ns`` and ``period_se_ns`` (from the records'
    spread; NaN where read from counters, or with too few records). Works column by column,
    with masks: a run may hold ten million step records.
    """
    sampled = set() if counters is None else set(counters.loc[counters["sampled"], "task"].astype(str))
    groups = TaskGroups(steps["task"])
    timed = ~steps["warmup"].to_numpy(bool)
    for name, rows in zip(groups.names, groups.rows):
        if name in sampled:
            timed[rows] = False
    begin, end = steps["begin_ns"].to_numpy(), steps["end_ns"].to_numpy()
    timed_rows = {name: rows[timed[rows]] for name, rows in zip(groups.names, groups.rows) if timed[rows].any()}
    firsts = pd.Series({name: float(begin[rows].min()) for name, rows in timed_rows.items()}, dtype=float)
    lasts = pd.Series({name: float(end[rows].max()) for name, rows in timed_rows.items()}, dtype=float)
    if sampled:
        exact = _timed_extent(counters[counters["task"].astype(str).isin(sampled)], offsets or {})
        firsts, lasts = pd.concat([firsts, exact["first"]]), pd.concat([lasts, exact["last_end"]])
    if firsts.empty:
        return pd.DataFrame(columns=COMPARED_COLUMNS)
    start, stop = float(firsts.max()), float(lasts.min())
    inside = timed & (begin >= start) & (end <= stop)
    counts = pd.Series({name: float(inside[rows].sum()) for name, rows in timed_rows.items()}, dtype=float)
    if sampled:
        window = window_counters(counters[counters["task"].astype(str).isin(sampled)], offsets or {}, start, stop)
        counts = pd.concat([counts, window.set_index("task")["records"]])
    overlap = bool((counts >= OVERLAP_RECORDS).all())
    rows = _of_rows(steps, groups, inside if overlap else timed, float(stop - start) if overlap else 0.0)
    if not sampled:
        return rows
    if overlap:
        of_counters = pd.DataFrame({
            "task": window["task"], "records": window["records"], "steps": window["steps"],
            "p50_ns": window["p50_ns"], "mean_ns": window["mean_ns"],
            "period_ns": window["period_ns"].fillna(window["mean_ns"]),
            "examples_per_step": window["examples"] / window["steps"].clip(lower=1.0),
            "window_ns": float(stop - start), "p50_se_ns": math.nan, "period_se_ns": math.nan})
    else:
        of_counters = exact_whole_run(workers[workers["task"].astype(str).isin(sampled)])
    return pd.concat([rows, of_counters[COMPARED_COLUMNS]], ignore_index=True).sort_values("task", ignore_index=True)


def with_wait_shares(compared: pd.DataFrame, run_queue: pd.DataFrame) -> pd.DataFrame:
    """``compared`` with a ``runq_wait_share`` column from ``run_queue.run_queue_table`` (NaN: not sampled)."""
    shares = dict(zip(run_queue["task"].astype(str), run_queue["runq_wait_share"].astype(float)))
    return compared.assign(runq_wait_share=compared["task"].astype(str).map(shares).astype(float))


def _of_rows(steps: pd.DataFrame, groups: TaskGroups, chosen: np.ndarray, window_ns: float) -> pd.DataFrame:
    """``compared_workers``' columns from the rows ``chosen`` (a mask of ``steps``, grouped by ``groups``)."""
    begin, duration = steps["begin_ns"].to_numpy(), steps["duration_ns"].to_numpy()
    covered, examples = steps["steps"].to_numpy(), steps["examples"].to_numpy()
    rows = []
    for name, own in zip(groups.names, groups.rows):
        own = own[chosen[own]]
        if not len(own):
            continue
        records, steps_sum = len(own), float(covered[own].sum())
        # The mean gap between consecutive starts telescopes to (last - first) / (records - 1),
        # over the training steps each record covers.
        period = (float(begin[own].max() - begin[own].min()) / (records - 1) / (steps_sum / records)
                  if records > 1 else math.nan)
        mean, median = mean_of(duration[own]), median_of(duration[own])
        rows.append((name, records, int(steps_sum), median, mean,
                     mean if math.isnan(period) else period, float(examples[own].sum()) / max(steps_sum, 1.0),
                     window_ns, *_standard_errors(duration[own], median, begin[own], steps_sum / records)))
    return pd.DataFrame(rows, columns=COMPARED_COLUMNS)


def _standard_errors(durations: np.ndarray, median: float, begins: np.ndarray,
                     steps_per_record: float) -> tuple[float, float]:
    """The standard errors of a worker's median step and of its period (the mean gap between
    its records' starts, per training step), each from the spread of the typical values:
    1.4826 median absolute deviations (so a rare long gap, a pause the period measures, is
    not taken for noise); NaN from too few.

    >>> [round(se, 2) for se in _standard_errors(np.array([10.0, 12, 14, 16]), 13.0, np.array([0.0, 20, 30, 60]), 1.0)]
    [1.86, 8.56]
    """
    median_se = _MEDIAN_SE_PER_MAD * _mad(durations, median) / math.sqrt(len(durations)) \
        if len(durations) >= 2 else math.nan
    gaps = np.diff(np.sort(begins)).astype("float64")
    period_se = 1.4826 * _mad(gaps, median_of(gaps)) / math.sqrt(len(gaps)) / steps_per_record \
        if len(gaps) >= 2 else math.nan
    return median_se, period_se


def _mad(values: np.ndarray, median: float) -> float:
    """The median absolute deviation of ``values`` from their ``median``."""
    return median_of(np.abs(values - median))


def _timed_extent(counters: pd.DataFrame, offsets: dict[str, int]) -> pd.DataFrame:
    """Per task (index), on the reference clock: ``first``, its first step start after the
    warm-up, and ``last_end``, from the exact counters."""
    shift = counters["clock_task"].map(lambda clock: offsets.get(clock, 0)).to_numpy(dtype="float64")
    first = counters["first_begin_ns"].to_numpy(dtype="float64") - shift
    task = counters["task"].astype(str).to_numpy()
    warm = first == pd.Series(first).groupby(task).transform("min").to_numpy()
    second = counters["second_begin_ns"].astype("float64").to_numpy() - shift
    return pd.DataFrame({"first": np.where(warm, second, first),
                         "last_end": counters["last_end_ns"].to_numpy(dtype="float64") - shift},
                        index=task).groupby(level=0).agg(first=("first", "min"), last_end=("last_end", "max"))


def exact_whole_run(workers: pd.DataFrame) -> pd.DataFrame:
    """``compared_workers``' columns over the whole run from the worker table (exact counters)."""
    return pd.DataFrame({
        "task": workers["task"].astype(str),
        "records": (workers["records"] - 1).clip(lower=0),  # the warm-up record is not timed
        "steps": workers["steps"],
        "p50_ns": workers["p50_ns"].astype(float),
        "mean_ns": workers["mean_ns"].astype(float),
        "period_ns": workers["period_ns"].astype(float),
        "examples_per_step": workers["examples"] / workers["steps"].clip(lower=1),
        "window_ns": 0.0, "p50_se_ns": math.nan, "period_se_ns": math.nan,
    })


def _barely_stepping(steps: pd.DataFrame, workers: pd.DataFrame, faults: pd.DataFrame, closures: pd.DataFrame | None,
                     compared: pd.DataFrame) -> pd.DataFrame | None:
    """Workers that had work for ``MIN_SPAN_SHARE`` of the run but finished under 2 timed
    records, as ``compared_workers`` rows judged by the pace they delivered: their period
    is the time they had work per step they finished (their step, the whole run's). None
    without any (the usual case: no frame is built).

    Under ParameterServerStrategy a worker has work from its first closure's dispatch: at
    200 steps of ps_ctl on the 2-core host at load 15, a worker under a CPU quota began its
    first closure 3.3 s after its dispatch and finished 2 of the run's 21 in 4 s. A worker
    that failed and had not come back by the end is not judged by its pace: it finished
    little because it was gone (``task_failure`` names it; ps_ctl with worker 1 killed at
    step 50 of 200 and restarted after the run ended: 1 closure, "15.6x less often").
    """
    stepped = set(compared.loc[compared["records"] >= 2, "task"].astype(str))
    if set(workers["task"].astype(str)) <= stepped:  # every worker stepped (the usual case)
        return None
    workers = workers.assign(task=workers["task"].astype(str))
    gone = set(faults.loc[(faults["kind"] == "failure") & faults["recovered_after_s"].isna(), "task"].astype(str))
    few = workers[~workers["task"].isin(stepped | gone) & (workers["steps"] > 0)]
    if few.empty:
        return None
    present = _present_ns(steps, faults, closures, few)
    few = few[present >= MIN_SPAN_SHARE * float(workers["active_ns"].max())]
    if few.empty:
        return None
    return pd.DataFrame({
        "task": few["task"], "records": (few["records"] - 1).clip(lower=0), "steps": few["steps"],
        "p50_ns": few["p50_ns"].astype(float), "mean_ns": few["mean_ns"].astype(float),
        "period_ns": present[few.index] / few["steps"],
        "examples_per_step": few["examples"] / few["steps"], "window_ns": 0.0,
        "p50_se_ns": math.nan, "period_se_ns": math.nan,
    }, columns=COMPARED_COLUMNS)


def _present_ns(steps: pd.DataFrame, faults: pd.DataFrame, closures: pd.DataFrame | None,
                workers: pd.DataFrame) -> pd.Series:
    """Per worker (rows of the worker table, tasks as strings), the time it had work: its
    first record to its last (``active_ns``), plus the wait from its first closure's dispatch
    to its first record, less its time away after failures."""
    first_begin = steps.groupby(steps["task"].astype(str), observed=True)["begin_ns"].min()
    waited = pd.Series(0.0, index=workers.index)
    if closures is not None and not closures.empty:
        first_dispatch = closures.groupby(closures["worker"].astype(str))["dispatch_ns"].min()
        waited = (workers["task"].map(first_begin) - workers["task"].map(first_dispatch)).astype(float)
        waited = waited.fillna(0.0).clip(lower=0.0)
    return workers["active_ns"] + waited - workers["task"].map(downtime_ns(faults)).fillna(0.0)


def _without_time_away(steps: pd.DataFrame, faults: pd.DataFrame, compared: pd.DataFrame) -> pd.DataFrame:
    """``compared`` with each worker's period taken over the time it was up: the time from a
    failure to its recovery or restart inside the worker's span of step records is left out
    (a TF1 worker killed 2.3 s into an 800-step run and back 5.5 s later started a step every
    45 ms over its span, every 20 ms while it was up, as its peer did)."""
    if faults.empty or compared.empty:
        return compared
    away_spans = time_away(faults)
    if away_spans.empty:
        return compared
    begins = steps.groupby(steps["task"].astype(str), observed=True)["begin_ns"].agg(["min", "max"])
    period = compared["period_ns"].to_numpy("float64").copy()
    period_se = compared["period_se_ns"].to_numpy("float64").copy()
    for row, task in enumerate(compared["task"].astype(str)):
        if task not in begins.index or compared["records"].iloc[row] < 2:
            continue
        first, last = (float(value) for value in begins.loc[task])
        own = away_spans[away_spans["task"] == task]
        away = float(np.nansum(np.clip(np.minimum(own["to_ns"], last) - np.maximum(own["from_ns"], first), 0.0, None)))
        if away and last > first:  # a damaged log's NaN times compare False: nothing left out
            period[row] = max(period[row] * (1.0 - away / (last - first)), float(compared["mean_ns"].iloc[row]))
            period_se[row] = math.nan  # its gaps span the absence
    return compared.assign(period_ns=period, period_se_ns=period_se)


