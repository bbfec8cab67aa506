"""``straggler``: one or more workers take much longer per step than the others.

Two ways to be slow: a longer median step (the work itself is slower), or — in
asynchronous training — a longer step *period* (time between step starts), which is
how a worker whose process is stopped or starved between closures (a container CPU
quota, a busy host) shows: its closures take about as long, but it runs far fewer of
them. Synchronous workers wait for each other, so their periods are equal and only the
step time can single one out — or, for a worker whose process is stopped, its sampler's
late wake-ups (``_stopped``).

Workers are compared fairly:

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
  that had work for that share (time away after a failure not counted) is judged by its
  pace: the time it had work per step it finished;
- per example where workers' steps carry different numbers of examples (a skewed
  shard makes one worker's batches 3x larger and its steps about 3x longer: that is
  ``shard_imbalance``, not a slow worker).

A long run's step rows are a sample by step number (``step_stats``): a worker past the
cap is read from its exact counters, over the overlap from its segments (counts and sums
exact but for the two segments at the window's edges, one in ``step_stats.SEGMENTS`` of
its records each), so a sampled run is judged as the same run unsampled.

(Over 400 lines: the asynchronous judgement by step and period and the synchronous one by
own compute and stopped share share the thresholds, the fair comparison and the finding.)
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfdiag.analysis.closure_gaps import paced_speedup
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.groups import TaskGroups, mean_of, median_of
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.step_stats import window_counters
from tfdiag.analysis.sync_steps import shared_ns, speedup_with_own, step_if_running_as_peers, stopped_shares
from tfdiag.analysis.whatif import predicted_speedup, speedup_at_periods

KIND = "straggler"

# A worker is a straggler when its median step (or, asynchronously, its step period) is at
# least a quarter slower than the other workers' and the gap is larger than scheduling
# noise. Clean sample-job runs on the 2-core CI machine show per-worker medians within
# about 10 % and 2 ms of each other (tests/analysis/test_detectors.py runs them), so 1.25
# and 5 ms leave a margin.
WARNING_SLOWDOWN = 1.25
CRITICAL_SLOWDOWN = 2.0
MIN_GAP_NS = 5_000_000
# Workers that share one CPU-only host (``Measurements.shared_host``) get the cores the
# scheduler gives them among every runnable thread there, and on a busy host one worker's
# share can stay smaller for seconds: clean 200-step ps_ctl runs on the 2-core host with
# two CPU hogs beside them started one worker's steps up to 1.30x less often than the
# other's (9 runs, 1.03-1.30x; within-run differences of 3-4 standard errors, so no test
# of the run's own spread tells them from a fault), and a CI host twice slower read one as
# a straggler, its 5 ms floor no longer above 25 % of a step. The gap then is a ratio of
# shares, so the bar is a ratio: the faults it must still find there ran 2.3-3.0x
# (cpu-starve=1:60:40 from outside) and 5x (slow-worker=1:40) per step or period.
SHARED_HOST_SLOWDOWN = 1.5
# Timed step records (the warm-up record left out; a record may be a closure of several
# steps) a worker needs to be judged, and each worker needs inside the overlap for the
# overlap to be compared. ps_ctl at 200 steps writes 20 closures of 10 steps in all: its
# 4-6 records per worker inside the overlap were 1.8x apart on a clean run.
MIN_RECORDS = 5
OVERLAP_RECORDS = 10
# ... or at least 2 timed records and present (its first record, warm-up included, to its
# last end) for this share of the longest worker's time: a 200-step ps_ctl run with a worker
# sleeping 40 ms a step: 3-5 closures of the slow worker over the whole run; a TF1 worker
# that joined for the last quarter of the run: a quarter. The warm-up counts: the
# tutorial-style loop at 10 steps per closure with worker 1 under a CPU quota (20 ms in 50)
# ran 4 closures after a 430 ms warm-up, its timed records over 41 % of the other's, present
# for 60 % of its time.
MIN_SPAN_SHARE = 0.5
# Examples per step differing by more than this ratio between workers: compare per example.
EXAMPLES_PER_STEP_SPREAD = 1.1
# A synchronous worker whose process could not run (``sync_steps.stopped_shares``) for
# STOPPED_EXTRA_SHARE more of its steps than the typical other worker, and at least
# STOPPED_RATIO times as much, is a straggler: every step stands still while it is stopped,
# so 0.15 costs the job 1.18x. A wake-up is late or not, so a share from n wake-ups varies
# by sqrt(p(1 - p) / n): at MIN_WAKES (5 s of steps, 10 wake-ups a second) and p = 0.1, by
# 0.042, and two workers' difference by 0.06, 2.5 times less than the margin; where every
# worker is late often (p = 0.3 on a host at load 20, 0.065 each) the ratio keeps a host
# late for every worker alike from naming one. mwms_fit with worker 1 stopped 40 ms of
# every 100 ms: see docs/findings.md.
STOPPED_EXTRA_SHARE = 0.15
STOPPED_RATIO = 2.0
MIN_WAKES = 50


def typical_of_others(values: pd.Series) -> pd.Series:
    """For each worker, the median of the other workers' values.

    Leaving the worker itself out keeps one straggler of two from setting its own bar.

    >>> typical_of_others(pd.Series([10.0, 12.0, 40.0])).tolist()
    [26.0, 25.0, 11.0]
    """
    array = values.to_numpy(dtype=float)
    return pd.Series([float(np.median(np.delete(array, i))) for i in range(len(array))], index=values.index)


def compared_workers(steps: pd.DataFrame, workers: pd.DataFrame | None = None, counters: pd.DataFrame | None = None,
                     offsets: dict[str, int] | None = None) -> pd.DataFrame:
    """Per worker, its timing over the window every worker was stepping (or, when a worker
    has fewer than ``OVERLAP_RECORDS`` timed records in it, over the whole run), warm-up
    records left out.

    The window runs from the latest first timed step start to the earliest last step end.
    A worker whose kept rows are a sample (``counters["sampled"]``, a long run) is read
    from its exact counters instead: over the window from its segments
    (``step_stats.window_counters``), over the whole run from its ``workers`` row.
    Columns: ``task``, ``records``, ``steps`` (training steps), ``p50_ns``, ``mean_ns``,
    ``period_ns`` (as ``breakdown.worker_table``), ``examples_per_step``,
    ``window_ns`` (0 when the whole run is compared). Works column by column, with masks:
    a run may hold ten million step records.
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
            "window_ns": float(stop - start)})
    else:
        of_counters = exact_whole_run(workers[workers["task"].astype(str).isin(sampled)])
    return pd.concat([rows, of_counters[COMPARED_COLUMNS]], ignore_index=True).sort_values("task", ignore_index=True)


COMPARED_COLUMNS = ["task", "records", "steps", "p50_ns", "mean_ns", "period_ns", "examples_per_step", "window_ns"]


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
        mean = mean_of(duration[own])
        rows.append((name, records, int(steps_sum), median_of(duration[own]), mean,
                     mean if math.isnan(period) else period, float(examples[own].sum()) / max(steps_sum, 1.0),
                     window_ns))
    return pd.DataFrame(rows, columns=COMPARED_COLUMNS)


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
        "window_ns": 0.0,
    })


def slowdown_bar(measured: Measurements) -> float:
    """The ratio a worker must be slower by: ``SHARED_HOST_SLOWDOWN`` where every worker
    shares one CPU-only host, else ``WARNING_SLOWDOWN``."""
    return SHARED_HOST_SLOWDOWN if measured.shared_host is not None else WARNING_SLOWDOWN


def _slower(values: pd.Series, typical: pd.Series, scale: pd.Series, bar: float) -> pd.Series:
    """Slower by the ratio ``bar``, and by at least ``MIN_GAP_NS`` on the worker's own step
    (``scale``: its examples per step when ``values`` are per example, else 1)."""
    return (values / typical >= bar) & ((values - typical) * scale >= MIN_GAP_NS)


def detect(measured: Measurements) -> list[Finding]:
    if len(measured.workers) < 2:
        return []
    if measured.synchronous:
        own = measured.own_times
        if len(own) == len(measured.workers):  # every worker's own compute, stamped before the all-reduce
            return _synchronous(measured, own)
    compared = _without_time_away(measured, compared_workers(measured.steps, measured.workers,
                                                             measured.run.step_counters, measured.offsets))
    # Present from its first record (warm-up included) to its last: a worker that ran few
    # records over most of the run is slow; one that joined late ran few because it was absent.
    present = compared["task"].map(dict(zip(measured.workers["task"].astype(str), measured.workers["active_ns"])))
    # Away after a failure until it came back (task_failure's) is not presence: a TF1 worker
    # killed after one step and back for a few at the end spans the run with 5 records.
    present = present - compared["task"].map(_downtime_ns(measured.faults)).fillna(0.0)
    spans_most = (compared["records"] >= 2) & (present >= MIN_SPAN_SHARE * float(measured.workers["active_ns"].max()))
    judged = compared[(compared["records"] >= MIN_RECORDS) | spans_most]
    paced = _barely_stepping(measured, compared)
    judged = pd.concat([judged, paced], ignore_index=True) if paced is not None else judged.reset_index(drop=True)
    if len(judged) < 2:
        return []
    eps = judged["examples_per_step"]
    per_example = bool((eps > 0).all() and eps.max() / eps.min() > EXAMPLES_PER_STEP_SPREAD)
    # Per example: each time divided by the worker's examples per step; the gap is then
    # taken back on the worker's own step.
    scale = eps if per_example else pd.Series(1.0, index=judged.index)
    step, period = judged["p50_ns"] / scale, judged["period_ns"] / scale
    typical, typical_period = typical_of_others(step), typical_of_others(period)
    step_slowdown, period_slowdown = step / typical, period / typical_period
    bar = slowdown_bar(measured)
    by_step = _slower(step, typical, scale, bar)
    by_period = _slower(period, typical_period, scale, bar) & (not measured.synchronous)
    if per_example:
        # Slower per example but not per step: a worker with fewer examples per step pays a
        # step's fixed cost over fewer of them (ps_fit shard-skew=1:3: 19.7 ms steps of 512
        # examples on worker 0 against 32.5 ms of 1536 on worker 1). No slow worker.
        by_step &= judged["p50_ns"] > typical_of_others(judged["p50_ns"])
        by_period &= judged["period_ns"] > typical_of_others(judged["period_ns"])
    slow = judged[by_step | by_period]
    if slow.empty:
        return []
    if by_period[slow.index].any():
        # What if the stragglers started steps as often (per example) as the other workers?
        new_period = judged["period_ns"].where(~by_period, typical_period * scale)
        speedup = speedup_at_periods(judged, new_period)
        slowdown = period_slowdown.where(by_period, step_slowdown)
    else:
        # What if the stragglers stepped like the typical worker?
        new_mean = judged["mean_ns"].where(~by_step, typical_of_others(judged["mean_ns"] / scale) * scale)
        new_period = judged["period_ns"] - (judged["mean_ns"] - new_mean)
        speedup = predicted_speedup(judged, new_mean, measured.synchronous)
        slowdown = step_slowdown
    if not measured.synchronous:  # under ParameterServerStrategy: the job's pace (closure_gaps)
        speedup = paced_speedup(measured, judged["task"], new_period / judged["period_ns"]) or speedup
    return [_finding(measured, judged, slow, slowdown, typical * scale, typical_period * scale, speedup,
                     starved=bool(by_period[slow.index].all() and not by_step[slow.index].any()), per_example=per_example)]


def _barely_stepping(measured: Measurements, compared: pd.DataFrame) -> pd.DataFrame | None:
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
    if set(measured.workers["task"].astype(str)) <= stepped:  # every worker stepped (the usual case)
        return None
    workers = measured.workers.assign(task=measured.workers["task"].astype(str))
    faults = measured.faults
    gone = set(faults.loc[(faults["kind"] == "failure") & faults["recovered_after_s"].isna(), "task"].astype(str))
    few = workers[~workers["task"].isin(stepped | gone) & (workers["steps"] > 0)]
    if few.empty:
        return None
    present = _present_ns(measured, few)
    few = few[present >= MIN_SPAN_SHARE * float(workers["active_ns"].max())]
    if few.empty:
        return None
    return pd.DataFrame({
        "task": few["task"], "records": (few["records"] - 1).clip(lower=0), "steps": few["steps"],
        "p50_ns": few["p50_ns"].astype(float), "mean_ns": few["mean_ns"].astype(float),
        "period_ns": present[few.index] / few["steps"],
        "examples_per_step": few["examples"] / few["steps"], "window_ns": 0.0,
    }, columns=COMPARED_COLUMNS)


def _present_ns(measured: Measurements, workers: pd.DataFrame) -> pd.Series:
    """Per worker (rows of ``measured.workers``, tasks as strings), the time it had work: its
    first record to its last (``active_ns``), plus the wait from its first closure's dispatch
    to its first record, less its time away after failures."""
    first_begin = measured.steps.groupby(measured.steps["task"].astype(str), observed=True)["begin_ns"].min()
    closures = measured.closures
    waited = pd.Series(0.0, index=workers.index)
    if closures is not None and not closures.empty:
        first_dispatch = closures.groupby(closures["worker"].astype(str))["dispatch_ns"].min()
        waited = (workers["task"].map(first_begin) - workers["task"].map(first_dispatch)).astype(float)
        waited = waited.fillna(0.0).clip(lower=0.0)
    return workers["active_ns"] + waited - workers["task"].map(_downtime_ns(measured.faults)).fillna(0.0)


def _without_time_away(measured: Measurements, compared: pd.DataFrame) -> pd.DataFrame:
    """``compared`` with each worker's period taken over the time it was up: the time from a
    failure to its recovery or restart inside the worker's span of step records is left out
    (a TF1 worker killed 2.3 s into an 800-step run and back 5.5 s later started a step every
    45 ms over its span, every 20 ms while it was up, as its peer did)."""
    if measured.faults.empty or compared.empty:
        return compared
    away_spans = _time_away(measured.faults)
    if away_spans.empty:
        return compared
    steps = measured.steps
    begins = steps.groupby(steps["task"].astype(str), observed=True)["begin_ns"].agg(["min", "max"])
    period = compared["period_ns"].to_numpy("float64").copy()
    for row, task in enumerate(compared["task"].astype(str)):
        if task not in begins.index or compared["records"].iloc[row] < 2:
            continue
        first, last = (float(value) for value in begins.loc[task])
        own = away_spans[away_spans["task"] == task]
        away = float(np.nansum(np.clip(np.minimum(own["to_ns"], last) - np.maximum(own["from_ns"], first), 0.0, None)))
        if away and last > first:  # a damaged log's NaN times compare False: nothing left out
            period[row] = max(period[row] * (1.0 - away / (last - first)), float(compared["mean_ns"].iloc[row]))
    return compared.assign(period_ns=period)


def _time_away(faults: pd.DataFrame) -> pd.DataFrame:
    """Each failure that was followed by a recovery or restart: ``task``, ``from_ns``, ``to_ns``."""
    back = faults[(faults["kind"] == "failure") & faults["recovered_after_s"].notna()] if not faults.empty else faults
    if back.empty:
        return pd.DataFrame(columns=["task", "from_ns", "to_ns"])
    start = back["time_ns"].astype(float)
    return pd.DataFrame({"task": back["task"].astype(str), "from_ns": start,
                         "to_ns": start + back["recovered_after_s"].astype(float) * 1e9})


def _downtime_ns(faults: pd.DataFrame) -> dict[str, float]:
    """Per task, the time from each of its failures to its recovery or restart (ns)."""
    if faults.empty:
        return {}
    away = _time_away(faults)
    return (away["to_ns"] - away["from_ns"]).groupby(away["task"]).sum().to_dict()


def _finding(measured, judged, slow, slowdown, typical, typical_period, speedup, *, starved, per_example) -> Finding:
    tasks = tuple(slow["task"])
    worst = float(slowdown[slow.index].max())
    names = ", ".join(tasks)
    if measured.synchronous:
        change = f"Fix or replace the host of {names}; every synchronous step waits for it."
    else:
        change = (
            f"Fix or replace the host of {names} (check its CPU load, quota, throttling and neighbours); "
            "ParameterServerStrategy already gives it fewer closures, but the job loses what it does not run."
        )
    # Shares of the whole run's steps (a starved worker runs fewer of them).
    run_steps = dict(zip(measured.workers["task"], measured.workers["steps"].astype(int)))
    total_steps = max(sum(run_steps.values()), 1)
    unit = "per example" if per_example else "per step"
    judged_rows, slow_rows = list(judged.itertuples()), list(slow.itertuples())  # each itertuples() costs
    if starved:
        title = f"{names} {'starts' if len(tasks) == 1 else 'start'} steps {worst:.1f}x less often than the other workers"
        summary = (
            f"{names} ran {', '.join(f'{run_steps[row.task] / total_steps:.0%}' for row in slow_rows)} of the "
            f"steps, one every {float(slow['period_ns'].max()) / 1e6:.1f} ms against "
            f"{float(typical_period[slow.index].min()) / 1e6:.1f} ms for the other workers, with about the same step "
            "time: it loses its time between steps."
        )
    else:
        title = f"{names} {'is' if len(tasks) == 1 else 'are'} {worst:.1f}x slower {unit} than the other workers"
        summary = (
            f"Median step time of {names} is {float(slow['p50_ns'].max()) / 1e6:.1f} ms against "
            f"{float(typical[slow.index].min()) / 1e6:.1f} ms for the other workers"
            + (" at its number of examples per step" if per_example else "")
            + (", over the time every worker ran." if judged["window_ns"].iloc[0] else ".")
        )
    evidence = {
        "step_time_ms_p50": {row.task: round(float(row.p50_ns) / 1e6, 2) for row in judged_rows},
        "typical_step_ms": round(float(typical[slow.index].min()) / 1e6, 2),
        "step_period_ms": {row.task: round(float(row.period_ns) / 1e6, 2) for row in judged_rows},
        "typical_period_ms": round(float(typical_period[slow.index].min()) / 1e6, 2),
        "slowdown": {row.task: round(float(slowdown[row.Index]), 2) for row in slow_rows},
        "compared": unit,
        "examples_per_step": {row.task: round(float(row.examples_per_step), 1) for row in judged_rows},
        "overlap_s": round(float(judged["window_ns"].iloc[0]) / 1e9, 3) or None,  # None: the whole run
        "steps": run_steps,
        "step_share": {task: round(steps / total_steps, 3) for task, steps in run_steps.items()},
        "compared_steps": {row.task: int(row.steps) for row in judged_rows},
    }
    unjudged = sorted(set(measured.workers["task"]) - set(judged["task"]))
    if unjudged:
        evidence["not_judged"] = {task: f"fewer than {MIN_RECORDS} timed steps over part of the run"
                                  for task in unjudged}
    waits = {task: round(seconds, 1) for task, seconds in (measured.session_waits or {}).items() if task in set(measured.workers["task"])}
    if waits:
        evidence["chief_wait_s"] = waits
    return Finding(
        kind=KIND,
        severity=Severity.CRITICAL if worst >= CRITICAL_SLOWDOWN else Severity.WARNING,
        title=title,
        summary=summary,
        tasks=tasks,
        evidence=evidence,
        recommendation=Recommendation(
            action=f"Bring {names} up to the speed of the other workers.",
            change=change,
            predicted_speedup=speedup,
        ),
    )


def _synchronous(measured: Measurements, own: pd.DataFrame) -> list[Finding]:
    """Synchronous workers judged by their own compute before the all-reduce (``sync_steps``):
    median compute against the typical other worker's, per example where their batches
    differ; predicted as if the stragglers computed as fast (input waits kept: a slow
    pipeline is ``input_bound``'s). With none slower, by the share of their steps their
    process could not run (``_stopped``)."""
    judged = own[own["records"] >= MIN_RECORDS].reset_index(drop=True)
    if len(judged) < 2:
        return []
    eps = judged["examples_per_step"]
    per_example = bool((eps > 0).all() and eps.max() / eps.min() > EXAMPLES_PER_STEP_SPREAD)
    scale = eps if per_example else pd.Series(1.0, index=judged.index)
    compute = judged["compute_p50_ns"] / scale
    typical = typical_of_others(compute)
    is_slow = _slower(compute, typical, scale, slowdown_bar(measured))
    if not is_slow.any():
        return _stopped(measured, judged)
    new_compute = judged["compute_ns"].where(~is_slow, typical_of_others(judged["compute_ns"] / scale) * scale)
    new_own = judged["input_ns"] + new_compute
    slow, slowdown = judged[is_slow], compute / typical
    tasks, names, worst = tuple(slow["task"]), ", ".join(slow["task"]), float(slowdown[is_slow].max())
    unit = "per example" if per_example else "per step"

    def ms(value) -> float:
        return round(float(value) / 1e6, 2)

    return [Finding(
        kind=KIND,
        severity=Severity.CRITICAL if worst >= CRITICAL_SLOWDOWN else Severity.WARNING,
        title=f"{names} {'computes' if len(tasks) == 1 else 'compute'} {worst:.1f}x longer {unit} than the other "
              "workers; every synchronous step waits for it",
        summary=(f"Before the all-reduce, {names} computes for a median {ms(slow['compute_p50_ns'].max())} ms a step "
                 f"against {ms((typical * scale)[is_slow].min())} ms for the other workers, which wait for it: every "
                 f"worker's step takes {ms(judged['step_ns'].max())} ms."),
        tasks=tasks,
        evidence={
            "compute_ms_p50": {row.task: ms(row.compute_p50_ns) for row in judged.itertuples()},
            "typical_compute_ms": ms((typical * scale)[is_slow].min()),
            "own_ms_mean": {row.task: ms(row.own_ns) for row in judged.itertuples()},
            "input_wait_ms_mean": {row.task: ms(row.input_ns) for row in judged.itertuples()},
            "slowdown": {row.task: round(float(slowdown[row.Index]), 2) for row in slow.itertuples()},
            "compared": unit,
            "examples_per_step": {row.task: round(float(row.examples_per_step), 1) for row in judged.itertuples()},
            "step_ms_mean": ms(judged["step_ns"].max()),
            "shared_ms": ms(shared_ns(judged)),
            "predicted_step_ms": ms(shared_ns(judged) + new_own.max()),
            "compared_steps": {row.task: int(row.records) for row in judged.itertuples()},
        },
        recommendation=Recommendation(
            action=f"Bring {names} up to the speed of the other workers.",
            change=f"Fix or replace the host of {names}; every synchronous step waits for it.",
            predicted_speedup=speedup_with_own(judged, new_own),
        ),
    )]


def _stopped(measured: Measurements, judged: pd.DataFrame) -> list[Finding]:
    """Synchronous workers whose process could not run for a much larger share of their steps
    than the others' (a CPU quota, ``SIGSTOP``), from their samplers' late wake-ups and cgroup
    throttling; predicted as if they had been stopped only as much as the typical other worker."""
    shares = stopped_shares(measured.run.frame("system"), measured.run.frame("step"))
    shares = shares[shares["task"].isin(set(judged["task"])) & (shares["wakes"] >= MIN_WAKES)].reset_index(drop=True)
    if len(shares) < 2:
        return []
    share, typical = shares["stopped_share"], typical_of_others(shares["stopped_share"])
    is_stopped = (share - typical >= STOPPED_EXTRA_SHARE) & (share >= STOPPED_RATIO * typical)
    if not is_stopped.any():
        return []
    worst = (share - typical)[is_stopped].idxmax()
    step_ns = float(judged["step_ns"].max())
    new_step_ns = step_if_running_as_peers(step_ns, float(share[worst]), float(typical[worst]))
    slow = shares[is_stopped]
    tasks, names = tuple(slow["task"]), ", ".join(slow["task"])
    slowdown = step_ns / max(new_step_ns, 1.0)

    def pct(value) -> str:
        return f"{float(value):.0%}"

    return [Finding(
        kind=KIND,
        severity=Severity.CRITICAL if slowdown >= CRITICAL_SLOWDOWN else Severity.WARNING,
        title=f"{names} could not run for {pct(share[is_stopped].max())} of its steps against "
              f"{pct(typical[is_stopped].min())} for the other workers; every synchronous step waits for it",
        summary=(f"The process of {names} was stopped or throttled (a CPU quota, a stopped process) for about "
                 f"{pct(share[is_stopped].max())} of the time it stepped: its sampler woke 10 ms or more late "
                 f"{int(slow['late_wakes'].max())} times of {int(slow['wakes'].max())}. The other workers wait for it "
                 f"in every all-reduce, so every worker's step takes {step_ns / 1e6:.1f} ms."),
        tasks=tasks,
        evidence={
            "stopped_share": {row.task: round(float(row.stopped_share), 3) for row in shares.itertuples()},
            "typical_stopped_share": round(float(typical[is_stopped].min()), 3),
            "late_wakes": {row.task: f"{int(row.late_wakes)}/{int(row.wakes)}" for row in shares.itertuples()},
            "late_s": {row.task: round(float(row.late_ms) / 1e3, 2) for row in shares.itertuples()},
            "throttled_s": {row.task: None if math.isnan(row.throttled_ms) else round(float(row.throttled_ms) / 1e3, 2)
                            for row in shares.itertuples()},
            "stopped_s": {row.task: round(float(row.stopped_share * row.span_ns) / 1e9, 2) for row in slow.itertuples()},
            "compute_ms_p50": {row.task: round(float(row.compute_p50_ns) / 1e6, 2) for row in judged.itertuples()},
            "step_ms_mean": round(step_ns / 1e6, 2),
            "predicted_step_ms": round(new_step_ns / 1e6, 2),
            "slowdown": {task: round(slowdown, 2) for task in tasks},
        },
        recommendation=Recommendation(
            action=f"Give {names} the CPU its peers have.",
            change=(f"Lift the CPU quota or throttling of {names} (its container's cpu.max / CPU limit) or move it "
                    "off the host that starves it; every synchronous step waits for it."),
            predicted_speedup=slowdown,
        ),
    )]
