"""``gpu_underutilized``: GPUs idle for much of the run although input keeps up."""

from __future__ import annotations

from tfdiag.analysis.detectors.evidence import task_list
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.measurements import Measurements

KIND = "gpu_underutilized"

# NVML utilisation is the share of sample periods in which a kernel ran. Below 50 % the
# GPU waits more than it works; below 20 % it mostly idles.
WARNING_UTIL_PCT = 50.0
CRITICAL_UTIL_PCT = 20.0
# When input waits explain the idling, input_bound carries the finding instead.
INPUT_BOUND_FRACTION = 0.2


def detect(measured: Measurements) -> list[Finding]:
    gpus = measured.gpus
    if gpus.empty:
        return []
    idle = gpus[gpus["util_mean"] < WARNING_UTIL_PCT]
    if idle.empty:
        return []
    workers = measured.workers
    if not workers.empty and float(workers["input_wait_frac"].median()) >= INPUT_BOUND_FRACTION:
        return []
    utilisation = float(idle["util_mean"].mean()) / 100
    # Fixed per-step costs (launches, host work, synchronisation) are paid once per step;
    # at utilisation u, doubling the batch doubles the GPU work and keeps the rest:
    # time per example goes from 1 to (1 + u) / 2.
    speedup = 2 / (1 + utilisation)
    devices = [f"{row.host}/GPU:{row.index}" for row in idle.itertuples()]
    return [
        Finding(
            kind="gpu_underutilized",
            severity=Severity.CRITICAL if utilisation * 100 < CRITICAL_UTIL_PCT else Severity.WARNING,
            title=f"{len(devices)} GPU{'s' if len(devices) > 1 else ''} busy only {utilisation:.0%} of the time",
            summary=(
                f"{task_list(devices)} ran kernels {utilisation:.0%} of the time on average while input kept up: "
                "steps are too small to fill the device, so per-step overheads dominate."
            ),
            tasks=tuple(devices),
            evidence={
                "util_pct_mean": {f"{row.host}/GPU:{row.index}": round(float(row.util_mean), 1) for row in gpus.itertuples()},
                "mem_used_frac": {f"{row.host}/GPU:{row.index}": round(float(row.mem_used_frac), 3) for row in gpus.itertuples()},
            },
            recommendation=Recommendation(
                action="Give each GPU more work per step: double the per-replica batch (and scale the learning rate), "
                "or run several steps per tf.function call.",
                change="global_batch_size *= 2; model.compile(..., steps_per_execution=8)",
                predicted_speedup=speedup,
            ),
        )
    ]
