"""``straggler``: one or more workers take much longer per step than the others."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.whatif import predicted_speedup

KIND = "straggler"

# A worker is a straggler when its median step is at least a quarter slower than the
# other workers' median and the gap is larger than scheduling noise. Clean sample-job runs
# on the 2-core CI machine show per-worker medians within about 10 % and 2 ms of each
# other (tests/analysis/test_detectors.py runs them), so 1.25 and 5 ms leave a margin.
WARNING_SLOWDOWN = 1.25
CRITICAL_SLOWDOWN = 2.0
MIN_GAP_NS = 5_000_000


def typical_step_ns(workers: pd.DataFrame) -> pd.Series:
    """For each worker, the median of the other workers' median step times.

    Leaving the worker itself out keeps one straggler of two from setting its own bar.
    """
    p50 = workers["p50_ns"].to_numpy()
    return pd.Series([float(np.median(np.delete(p50, i))) for i in range(len(p50))], index=workers.index)


def detect(measured: Measurements) -> list[Finding]:
    workers = measured.workers
    if len(workers) < 2:
        return []
    typical = typical_step_ns(workers)
    slowdown = workers["p50_ns"] / typical
    slow = workers[(slowdown >= WARNING_SLOWDOWN) & (workers["p50_ns"] - typical >= MIN_GAP_NS)]
    if slow.empty:
        return []
    typical_ns = float(typical[slow.index].min())
    # What if the stragglers stepped like the typical worker?
    new_duration = workers["mean_ns"].where(~workers.index.isin(slow.index), typical)
    speedup = predicted_speedup(workers, new_duration, measured.synchronous)
    tasks = tuple(slow["task"])
    worst = float(slowdown[slow.index].max())
    severity = Severity.CRITICAL if worst >= CRITICAL_SLOWDOWN else Severity.WARNING
    if measured.synchronous:
        change = f"Fix or replace the host of {', '.join(tasks)}; every synchronous step waits for it."
    else:
        change = (
            f"Fix or replace the host of {', '.join(tasks)} (check its CPU load, throttling and neighbours); "
            "ParameterServerStrategy already gives it fewer closures, but its steps still cost time."
        )
    return [
        Finding(
            kind="straggler",
            severity=severity,
            title=f"{', '.join(tasks)} {'is' if len(tasks) == 1 else 'are'} {worst:.1f}x slower per step than the other workers",
            summary=(
                f"Median step time of {', '.join(tasks)} is {float(slow['p50_ns'].max()) / 1e6:.1f} ms against "
                f"{typical_ns / 1e6:.1f} ms for the other workers."
            ),
            tasks=tasks,
            evidence={
                "step_time_ms_p50": {row.task: round(float(row.p50_ns) / 1e6, 2) for row in workers.itertuples()},
                "typical_step_ms": round(typical_ns / 1e6, 2),
                "slowdown": {row.task: round(float(slowdown[row.Index]), 2) for row in slow.itertuples()},
                "steps": {row.task: int(row.steps) for row in workers.itertuples()},
            },
            recommendation=Recommendation(
                action=f"Bring {', '.join(tasks)} up to the speed of the other workers.",
                change=change,
                predicted_speedup=speedup,
            ),
        )
    ]
