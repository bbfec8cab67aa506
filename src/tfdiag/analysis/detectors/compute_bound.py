"""``compute_bound``: the GPUs are busy and nothing else stalls them."""

from __future__ import annotations

from tfdiag.analysis.detectors.evidence import task_list
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.measurements import Measurements

KIND = "compute_bound"

# A device above 80 % utilisation with little input wait is limited by its own arithmetic.
BUSY_UTIL_PCT = 80.0
MAX_INPUT_FRACTION = 0.1
# Mixed precision runs matrix work in float16 on tensor cores; the gain applies only to
# the device share of the step. Assume the device part halves (NVIDIA's mixed-precision
# guide reports 1.5-3x on matmul-heavy models; 2x is the conservative middle).
MIXED_PRECISION_DEVICE_SPEEDUP = 2.0


def detect(measured: Measurements) -> list[Finding]:
    gpus, workers = measured.gpus, measured.workers
    if gpus.empty or workers.empty:
        return []
    busy = gpus[gpus["util_mean"] >= BUSY_UTIL_PCT]
    if busy.empty or float(workers["input_wait_frac"].median()) > MAX_INPUT_FRACTION:
        return []
    device_share = float(busy["util_mean"].mean()) / 100
    speedup = 1 / ((1 - device_share) + device_share / MIXED_PRECISION_DEVICE_SPEEDUP)
    devices = [f"{row.host}/GPU:{row.index}" for row in busy.itertuples()]
    return [
        Finding(
            kind="compute_bound",
            severity=Severity.INFO,
            title=f"Compute bound: GPUs busy {device_share:.0%} of the time",
            summary=(
                f"{task_list(devices)} are busy {device_share:.0%} of the time and input waits are small: the run is "
                "limited by arithmetic. Cheaper arithmetic or more devices are what helps now."
            ),
            tasks=tuple(devices),
            evidence={
                "util_pct_mean": {f"{row.host}/GPU:{row.index}": round(float(row.util_mean), 1) for row in busy.itertuples()},
                "input_wait_frac_median": round(float(workers["input_wait_frac"].median()), 3),
            },
            recommendation=Recommendation(
                action="Use mixed precision so matrix work runs in float16 on tensor cores.",
                change="keras.mixed_precision.set_global_policy('mixed_float16')",
                predicted_speedup=speedup,
            ),
        )
    ]
