"""``host_contention``: a worker slower than its peers because its neighbours had the CPU.

``straggler`` decides (``straggler.starved``): a worker at least ``WARNING_SLOWDOWN`` slower
whose run-queue wait explains it, or which waited at least as much as its peers beside
``BUSY_NEIGHBOURS_CORES`` of foreign work on the shared host, is reported here, naming the
busiest process outside the job, and not as a straggler: nothing in the job is to fix.
"""

from __future__ import annotations

from tfdiag.analysis.detectors.straggler import CRITICAL_SLOWDOWN, contended
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.measurements import Measurements

KIND = "host_contention"


def detect(measured: Measurements) -> list[Finding]:
    starved = contended(measured)
    if starved.empty:
        return []
    tasks, names = tuple(starved["task"]), ", ".join(starved["task"])
    worst = float(starved["slowdown"].max())
    around = measured.neighbours
    busiest = around.busiest if around is not None else None
    who = busiest or "other processes on its host"
    others = f" (processes outside the job used {around.others_cores:.1f} cores there)" if around is not None else ""

    def pct(value) -> str:
        return f"{float(value):.0%}"

    evidence = {
        "slowdown": {row.task: round(float(row.slowdown), 2) for row in starved.itertuples()},
        "runq_wait_share": {row.task: round(float(row.runq_wait_share), 3) for row in starved.itertuples()},
        "typical_wait_share": round(float(starved["typical_wait_share"].min()), 3),
        "wait_shares": {str(row.task): round(float(row.runq_wait_share), 3)
                        for row in measured.run_queue.itertuples() if row.task in set(measured.compared["task"])},
    }
    if around is not None:
        evidence.update({"host": around.host, "others_cores": around.others_cores, "busiest_process": busiest,
                         "busiest_cores": around.busiest_cores})
    return [Finding(
        kind=KIND,
        severity=Severity.CRITICAL if worst >= CRITICAL_SLOWDOWN else Severity.WARNING,
        title=f"{names} {'is' if len(tasks) == 1 else 'are'} {worst:.1f}x slower than the other workers, "
              f"starved of CPU by {who}",
        summary=(f"{names} waited on the CPU run queue for {pct(starved['runq_wait_share'].max())} of the CPU time "
                 f"it asked for, against {pct(starved['typical_wait_share'].min())} for the other workers{others}: "
                 "its neighbours had the cores, so it is not a straggler to fix in the job."),
        tasks=tasks,
        evidence=evidence,
        recommendation=Recommendation(
            action=f"Give {names} the CPU {busiest or 'its neighbours'} takes.",
            change=(f"Stop or move {who}, or keep it off the workers' cores (a cgroup or cpuset for it, "
                    "taskset for the workers)."),
            predicted_speedup=None,
        ),
    )]
