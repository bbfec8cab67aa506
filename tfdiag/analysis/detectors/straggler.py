"""``straggler``: one or more workers take much longer per step than the others.

Two ways to be slow: a longer median step (the work itself is slower), or — in
asynchronous training — a longer step *period* (time between step starts), which is
how a worker whose process is stopped or starved between closures (a container CPU
quota, a busy host) shows: its closures take about as long, but it runs far fewer of
them. Synchronous workers wait for each other, so their periods are equal and only the
step time can single one out.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.measurements import Measurements
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


def typical_of_others(values: pd.Series) -> pd.Series:
    """For each worker, the median of the other workers' values.

    Leaving the worker itself out keeps one straggler of two from setting its own bar.
    """
    array = values.to_numpy(dtype=float)
    return pd.Series([float(np.median(np.delete(array, i))) for i in range(len(array))], index=values.index)


def typical_step_ns(workers: pd.DataFrame) -> pd.Series:
    """For each worker, the median of the other workers' median step times."""
    return typical_of_others(workers["p50_ns"])


def _slower(values: pd.Series, typical: pd.Series) -> pd.Series:
    return (values / typical >= WARNING_SLOWDOWN) & (values - typical >= MIN_GAP_NS)


def detect(measured: Measurements) -> list[Finding]:
    workers = measured.workers
    if len(workers) < 2:
        return []
    typical = typical_step_ns(workers)
    step_slowdown = workers["p50_ns"] / typical
    typical_period = typical_of_others(workers["period_ns"])
    period_slowdown = workers["period_ns"] / typical_period
    by_step = _slower(workers["p50_ns"], typical)
    by_period = _slower(workers["period_ns"], typical_period) & (not measured.synchronous)
    slow = workers[by_step | by_period]
    if slow.empty:
        return []
    if by_period[slow.index].any():
        # What if the stragglers started steps as often as the other workers?
        speedup = speedup_at_periods(workers, workers["period_ns"].where(~by_period, typical_period))
        slowdown = period_slowdown.where(by_period, step_slowdown)
    else:
        # What if the stragglers stepped like the typical worker?
        speedup = predicted_speedup(workers, workers["mean_ns"].where(~by_step, typical), measured.synchronous)
        slowdown = step_slowdown
    tasks = tuple(slow["task"])
    worst = float(slowdown[slow.index].max())
    severity = Severity.CRITICAL if worst >= CRITICAL_SLOWDOWN else Severity.WARNING
    names = ", ".join(tasks)
    if measured.synchronous:
        change = f"Fix or replace the host of {names}; every synchronous step waits for it."
    else:
        change = (
            f"Fix or replace the host of {names} (check its CPU load, quota, throttling and neighbours); "
            "ParameterServerStrategy already gives it fewer closures, but the job loses what it does not run."
        )
    total_steps = max(int(workers["steps"].sum()), 1)
    if by_period[slow.index].all() and not by_step[slow.index].any():
        title = f"{names} {'starts' if len(tasks) == 1 else 'start'} steps {worst:.1f}x less often than the other workers"
        summary = (
            f"{names} ran {', '.join(f'{int(row.steps) / total_steps:.0%}' for row in slow.itertuples())} of the steps, one every "
            f"{float(slow['period_ns'].max()) / 1e6:.1f} ms against {float(typical_period[slow.index].min()) / 1e6:.1f} ms "
            f"for the other workers, with about the same step time: it loses its time between steps."
        )
    else:
        title = f"{names} {'is' if len(tasks) == 1 else 'are'} {worst:.1f}x slower per step than the other workers"
        summary = (
            f"Median step time of {names} is {float(slow['p50_ns'].max()) / 1e6:.1f} ms against "
            f"{float(typical[slow.index].min()) / 1e6:.1f} ms for the other workers."
        )
    return [
        Finding(
            kind="straggler",
            severity=severity,
            title=title,
            summary=summary,
            tasks=tasks,
            evidence={
                "step_time_ms_p50": {row.task: round(float(row.p50_ns) / 1e6, 2) for row in workers.itertuples()},
                "typical_step_ms": round(float(typical[slow.index].min()) / 1e6, 2),
                "step_period_ms": {row.task: round(float(row.period_ns) / 1e6, 2) for row in workers.itertuples()},
                "typical_period_ms": round(float(typical_period[slow.index].min()) / 1e6, 2),
                "slowdown": {row.task: round(float(slowdown[row.Index]), 2) for row in slow.itertuples()},
                "steps": {row.task: int(row.steps) for row in workers.itertuples()},
                "step_share": {row.task: round(int(row.steps) / total_steps, 3) for row in workers.itertuples()},
            },
            recommendation=Recommendation(
                action=f"Bring {names} up to the speed of the other workers.",
                change=change,
                predicted_speedup=speedup,
            ),
        )
    ]
