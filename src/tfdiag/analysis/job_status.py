"""Where a job stands now: running, closed, failed, hung, or gone silent.

Read from an analysed run and the wall clock (``tfdiag watch`` follows a running job
with it): ``failed`` when a task ended on an error (``task_failure``'s job end),
``hung`` when a ``stalled`` finding is critical (not a task that stopped writing while the others
progress), ``closed`` when every task that beats
wrote its clean-close marker, ``silent`` when none of them has written for
``SILENT_AFTER_S`` of the wall clock and none closed (every process died or froze at
once: nothing is left to report it), else ``running``.

Example:
    >>> status = job_status(analyze(run), run, time.time_ns())  # doctest: +SKIP
    >>> status.state, status.reason  # doctest: +SKIP
    ('failed', 'worker:1 failed and ended the job: worker:0 failed because of it')
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tfdiag.analysis.findings import Severity
from tfdiag.analysis.load import LoadedRun
from tfdiag.analysis.result import Report
from tfdiag.events import HEARTBEAT_EVERY_S

RUNNING, CLOSED, FAILED, HUNG, SILENT = "running", "closed", "failed", "hung", "silent"
# Four beats missed by every task: no task is left alive to write.
SILENT_AFTER_S = 4 * HEARTBEAT_EVERY_S


@dataclass(frozen=True)
class JobStatus:
    """``state`` (one of the names above), ``reason`` (one line), ``progress`` per worker
    (``task``, ``steps``, ``idle_s``: seconds since its last step ended, None before one)."""

    state: str
    reason: str
    progress: list[dict] = field(default_factory=list)


def job_status(report: Report, run: LoadedRun, now_ns: int) -> JobStatus:
    """The status of ``run`` (analysed as ``report``) at wall-clock time ``now_ns``."""
    progress = _progress(report, now_ns)
    for finding in report.findings:
        if finding.kind == "task_failure" and "root" in finding.evidence:  # last_words.job_end's
            return JobStatus(FAILED, finding.title, progress)
    for finding in report.findings:
        if finding.kind == "stalled" and finding.severity is Severity.CRITICAL \
                and finding.evidence.get("state") != "stopped_writing":  # the others still progress
            return JobStatus(HUNG, finding.title, progress)
    beats = run.frame("heartbeat")
    if beats.empty:
        return JobStatus(RUNNING, "no heartbeat yet", progress)
    last = beats.sort_values("time_ns").groupby(beats["task"].astype(str), observed=True).tail(1)
    if last["closed"].fillna(False).astype(bool).all():
        return JobStatus(CLOSED, f"every task closed its collectors ({len(last)} writing)", progress)
    quiet_s = (now_ns - int(last["time_ns"].max())) / 1e9
    if quiet_s > SILENT_AFTER_S:
        return JobStatus(SILENT, f"no task has written for {quiet_s:.0f} s and none closed: the job died or froze",
                         progress)
    return JobStatus(RUNNING, f"{len(last)} tasks writing", progress)


def _progress(report: Report, now_ns: int) -> list[dict]:
    steps = report.steps
    last_end = steps.groupby(steps["task"].astype(str), observed=True)["end_ns"].max() if not steps.empty else {}
    return [{"task": worker["task"], "steps": worker["steps"],
             "idle_s": round(max(now_ns - float(last_end[worker["task"]]), 0.0) / 1e9, 1)
             if worker["task"] in last_end else None}
            for worker in report.workers]
