"""``coordinator_bound``: ParameterServerStrategy workers idle, waiting for the coordinator."""

from __future__ import annotations

import numpy as np

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


def detect(measured: Measurements) -> list[Finding]:
    workers = measured.workers
    if workers.empty or measured.synchronous or measured.run.frame("closure").empty:
        return []
    idle = idle_fraction(workers)
    typical = float(np.median(idle))
    if typical < WARNING_IDLE_FRACTION:
        return []
    # With k steps per closure the dispatch gap is paid once per k steps.
    gap = workers["period_ns"] - workers["mean_ns"]
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
