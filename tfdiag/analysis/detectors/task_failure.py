"""``task_failure``: a task failed during the run; what it cost and whether it came back."""

from __future__ import annotations

import math

from tfdiag.analysis.faults import FAILURE_KINDS
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.measurements import Measurements
from tfdiag.events import cluster_tasks

KIND = "task_failure"


def detect(measured: Measurements) -> list[Finding]:
    faults = measured.faults
    failures = faults[faults["kind"].isin(FAILURE_KINDS)] if not faults.empty else faults
    if failures.empty:
        return []
    steps, workers = measured.steps, measured.workers
    span_s = float(steps["end_ns"].max() - steps["begin_ns"].min()) / 1e9 if not steps.empty else 0.0
    # Workers of the cluster, not only those that stepped: a worker killed before its first
    # step record (ps_ctl's kill-worker=1@30) is one of them.
    known = set(cluster_tasks((measured.run.manifest or {}).get("cluster") or {}, jobs=("worker",)))
    known |= set(workers["task"]) | {task for task in failures["task"].astype(str) if task.startswith("worker:")}
    worker_count = max(len(known), 1)
    # Time a failed task was gone, counted up to the end of the run when it never came back.
    end_ns = float(steps["end_ns"].max()) if not steps.empty else float(failures["time_ns"].max())
    downtime_s = [
        row.recovered_after_s if not math.isnan(row.recovered_after_s) else max(end_ns - row.time_ns, 0) / 1e9
        for row in failures.itertuples()
    ]
    # Each worker supplies 1/n of the capacity: losing one for d seconds costs d/n of the run.
    lost_s = sum(d for d, task in zip(downtime_s, failures["task"]) if str(task).startswith("worker:")) / worker_count
    speedup = span_s / (span_s - lost_s) if span_s > lost_s > 0 else None
    unrecovered = [row.task for row in failures.itertuples() if math.isnan(row.recovered_after_s)]
    tasks = tuple(dict.fromkeys(failures["task"]))
    recovery = (
        f"{len(unrecovered)} never recovered" if unrecovered
        else f"all recovered, after {max(downtime_s):.1f} s at most"
    )
    return [
        Finding(
            kind="task_failure",
            severity=Severity.CRITICAL if unrecovered else Severity.WARNING,
            title=f"{len(failures)} task failure{'s' if len(failures) > 1 else ''}: {', '.join(tasks)}",
            summary=f"{', '.join(tasks)} failed during the run; {recovery}. First error: {failures['message'].iloc[0][:200]}",
            tasks=tasks,
            evidence={
                "failures": [
                    {"task": row.task, "time_ns": int(row.time_ns), "recovered_after_s": None if math.isnan(row.recovered_after_s) else round(row.recovered_after_s, 2)}
                    for row in failures.itertuples()
                ],
                "worker_seconds_lost": round(lost_s * worker_count, 2),
                "run_seconds": round(span_s, 2),
            },
            recommendation=Recommendation(
                action="Find the cause on the failed host (OOM killer, preemption, hardware) and make recovery fast: "
                "restart failed tasks automatically and checkpoint so work is not lost.",
                change=(
                    "tf.distribute.experimental.PreemptionCheckpointHandler(cluster_resolver, checkpoint_manager); "
                    "run workers under a supervisor that restarts them (Kubernetes restartPolicy: OnFailure)"
                ),
                predicted_speedup=speedup,
            ),
        )
    ]
