"""``input_bound``: workers wait for their input pipeline for a large part of each step."""

from __future__ import annotations

from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.whatif import predicted_speedup

KIND = "input_bound"

# Share of step time spent in `next(iterator)` above which a worker is input bound. The
# TensorFlow profiler's overview page calls a step "highly input bound" above 20 %;
# above half of the step, input is the dominant cost.
WARNING_INPUT_FRACTION = 0.20
CRITICAL_INPUT_FRACTION = 0.50

CHANGE = (
    "dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)"
    ".prefetch(tf.data.AUTOTUNE)"
)


def detect(measured: Measurements) -> list[Finding]:
    workers = measured.workers
    if workers.empty:
        return []
    bound = workers[workers["input_wait_frac"] >= WARNING_INPUT_FRACTION]
    if bound.empty:
        return []
    # With prefetching, input production overlaps compute: a step costs max(compute, input).
    input_ns = workers["mean_ns"] * workers["input_wait_frac"]
    compute_ns = workers["mean_ns"] - input_ns
    speedup = predicted_speedup(workers, compute_ns.combine(input_ns, max), measured.synchronous)
    worst = float(bound["input_wait_frac"].max())
    severity = Severity.CRITICAL if worst >= CRITICAL_INPUT_FRACTION else Severity.WARNING
    tasks = tuple(bound["task"])
    share = f"{bound['input_wait_frac'].median():.0%}"
    return [
        Finding(
            kind="input_bound",
            severity=severity,
            title=f"Input pipeline stalls {len(tasks)} of {len(workers)} workers",
            summary=(
                f"Workers {', '.join(tasks)} spend a median {share} of each step waiting for the next batch; "
                "the accelerator idles while tf.data produces it."
            ),
            tasks=tasks,
            evidence={
                "input_wait_frac": {row.task: round(float(row.input_wait_frac), 3) for row in bound.itertuples()},
                "input_wait_ms_per_step": {
                    row.task: round(float(row.mean_ns * row.input_wait_frac) / 1e6, 2) for row in bound.itertuples()
                },
                "step_time_ms_mean": {row.task: round(float(row.mean_ns) / 1e6, 2) for row in bound.itertuples()},
                "threshold": WARNING_INPUT_FRACTION,
            },
            recommendation=Recommendation(
                action="Overlap input with compute: parallelise the map and prefetch batches in the tf.data pipeline.",
                change=CHANGE,
                predicted_speedup=speedup,
            ),
        )
    ]
