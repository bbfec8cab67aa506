"""``coordinator_bound``: ParameterServerStrategy workers idle, waiting for the coordinator.

A worker's idle time between closures is not all the coordinator's: after a closure's
last timestamp the worker still waits for its last parameter-server round trip (the
variable updates in flight) before the result reaches the coordinator. That round trip —
the slowest ps's fastest probe, at most the measured tail (``breakdown.closure_tail_ns``)
— is taken out of the idle time, once per closure; a slow link then shows as
``slow_link``, not as a coordinator that cannot keep up. And the coordinator serves
every worker alike, so no worker's share is taken larger than the least idle worker's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfdiag.analysis.breakdown import closure_tail_ns
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.whatif import predicted_speedup

KIND = "coordinator_bound"

# Share of a worker's step period spent idle between closures. Every closure costs the
# coordinator Python dispatch and a round trip for its result; when workers idle for 40 %
# of their time or more, that fixed cost rivals the work itself.
WARNING_IDLE_FRACTION = 0.4
CRITICAL_IDLE_FRACTION = 0.7
# The change advised: run this many steps inside each scheduled function.
STEPS_PER_CLOSURE = 10


def idle_fraction(workers) -> np.ndarray:
    """Per worker, the share of the step period not spent inside a step."""
    return (1 - workers["mean_ns"] / workers["period_ns"]).clip(lower=0).to_numpy()


def ps_round_trip_in_gap_ns(measured: Measurements) -> pd.Series:
    """Per worker (indexed like ``measured.workers``), the ps round trip each step waits for
    between closures: the closure's tail, at most one round trip to the slowest ps (its
    fastest probe from that worker, else from any source), divided by the steps per closure."""
    workers = measured.workers
    links = measured.link_latency
    to_ps = links[links["dst"].astype(str).str.startswith("ps:")] if not links.empty else links
    if to_ps.empty:
        return pd.Series(0.0, index=workers.index)
    slowest_any = float(to_ps.groupby("dst")["rtt_min_ns"].median().max())
    own = to_ps.groupby("src")["rtt_min_ns"].max()
    round_trip = workers["task"].map(own).fillna(slowest_any)
    tail = workers["task"].map(closure_tail_ns(measured.steps, measured.run.frame("closure"))).fillna(0.0)
    steps_per_closure = workers["task"].map(measured.steps.groupby("task", observed=True)["steps"].mean()).fillna(1.0)
    return np.minimum(tail, round_trip) / steps_per_closure.clip(lower=1.0)


def detect(measured: Measurements) -> list[Finding]:
    workers = measured.workers
    if workers.empty or measured.synchronous or measured.run.frame("closure").empty:
        return []
    in_gap = ps_round_trip_in_gap_ns(measured)
    gap = (workers["period_ns"] - workers["mean_ns"] - in_gap).clip(lower=0.0)
    # The coordinator serves every worker alike: a worker idle longer than the least idle
    # one loses the difference on its own (a CPU quota, a busy host: ``straggler``).
    gap = gap.clip(upper=float(gap.min()))
    idle = (gap / workers["period_ns"]).to_numpy()
    typical = float(np.median(idle))
    if typical < WARNING_IDLE_FRACTION:
        return []
    # With k steps per closure the dispatch gap is paid once per k steps.
    new_period_saving = gap * (1 - 1 / STEPS_PER_CLOSURE)
    speedup = predicted_speedup(workers, workers["mean_ns"] - new_period_saving, synchronous=False)
    return [
        Finding(
            kind="coordinator_bound",
            severity=Severity.CRITICAL if typical >= CRITICAL_IDLE_FRACTION else Severity.WARNING,
            title=f"Workers idle {typical:.0%} of the time between closures",
            summary=(
                f"Each closure runs {float(workers['mean_ns'].median()) / 1e6:.1f} ms but a worker starts one only every "
                f"{float(workers['period_ns'].median()) / 1e6:.1f} ms: the coordinator cannot dispatch fast enough."
            ),
            tasks=tuple(workers["task"]),
            evidence={
                "idle_frac": {row.task: round(float(idle[i]), 3) for i, row in enumerate(workers.itertuples())},
                "ps_round_trip_ms_per_step": {row.task: round(float(in_gap[row.Index]) / 1e6, 2) for row in workers.itertuples()},
                "closure_ms_median": round(float(workers["mean_ns"].median()) / 1e6, 2),
                "period_ms_median": round(float(workers["period_ns"].median()) / 1e6, 2),
                "steps_per_closure": STEPS_PER_CLOSURE,  # the change's parameter
            },
            recommendation=Recommendation(
                action=f"Do more work per closure: run {STEPS_PER_CLOSURE} steps inside each scheduled tf.function.",
                change=(
                    f"@tf.function\ndef train_steps(iterator):\n    for _ in tf.range({STEPS_PER_CLOSURE}): train_step(next(iterator))"
                    f"  # model.fit: steps_per_execution={STEPS_PER_CLOSURE}"
                ),
                predicted_speedup=speedup,
            ),
        )
    ]
