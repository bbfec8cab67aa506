"""What the tab's "Now" panel and Faults section show: a run's state now, and how it failed.

``now_view`` is ``tfdiag watch``'s view as data (``analysis.job_status`` and the current
findings) plus the tasks the ``stalled`` finding names as silent; ``fault_timeline`` is
the run's fault records and its tasks' last words (``exit`` records) in time order, with
the task whose failure ended the job (``task_failure``'s job end) marked as the root.
"""

from __future__ import annotations

from tfdiag.analysis import LoadedRun, Report
from tfdiag.analysis.align import to_reference_clock
from tfdiag.analysis.job_status import job_status
from tfdiag.analysis.measurements import Measurements

# How each list of the stalled finding's evidence says a task went silent.
SILENT_SIGNALS = {
    "unresponsive": "stopped answering the coordinator's probes",
    "silent": "status checks unanswered",
    "stopped_writing": "stopped writing without a clean close (died or frozen)",
}


def now_view(report: Report, run: LoadedRun, now_ns: int) -> dict:
    """``{"state", "reason", "progress", "findings", "silent", "time_ns"}`` of the run at
    wall-clock time ``now_ns``: ``progress`` per worker (``task``, ``steps``, ``idle_s``),
    ``findings`` (``kind``, ``severity``, ``title``, ``tasks``), ``silent`` (``task``,
    ``signal``: a key of ``SILENT_SIGNALS``, ``detail``)."""
    status = job_status(report, run, now_ns)
    return {
        "state": status.state,
        "reason": status.reason,
        "progress": status.progress,
        "findings": [{"kind": f.kind, "severity": f.severity.value, "title": f.title, "tasks": list(f.tasks)}
                     for f in report.findings],
        "silent": silent_tasks(report),
        "time_ns": now_ns,
    }


def silent_tasks(report: Report) -> list[dict]:
    """The tasks the ``stalled`` findings name as not answering or no longer writing, once per task and signal."""
    silent: dict[tuple[str, str], dict] = {}
    for finding in report.findings:
        if finding.kind != "stalled":
            continue
        evidence = finding.evidence
        for task in evidence.get("unresponsive") or []:
            silent.setdefault((task, "unresponsive"), {"task": task, "signal": "unresponsive",
                                                       "detail": SILENT_SIGNALS["unresponsive"]})
        for entry in evidence.get("silent") or []:
            silent.setdefault((entry["task"], "silent"), {
                "task": entry["task"], "signal": "silent",
                "detail": f"{entry['unanswered']} {SILENT_SIGNALS['silent']} ({entry['status']}: {entry['verdict']})"})
        for entry in evidence.get("stopped_writing") or []:
            silent.setdefault((entry["task"], "stopped_writing"), {"task": entry["task"], "signal": "stopped_writing",
                                                                   "detail": SILENT_SIGNALS["stopped_writing"]})
    return list(silent.values())


def fault_timeline(report: Report, run: LoadedRun) -> dict:
    """``{"events", "roots", "victims"}``: ``events`` in time order, each ``{"time_ns",
    "time_s"`` (since the run's start, None without one), ``"task", "kind"`` (failure,
    retry, recovery, restart or exit), ``"detail", "message", "root"}`` (whether the task
    is a root of the job's end); ``roots`` (``task``, ``state``) and ``victims`` (``task``,
    ``error_type``, ``cause``, ``blamed``) of the ``task_failure`` that ended the job, if one did."""
    ended = next((f.evidence for f in report.findings if f.kind == "task_failure" and "root" in f.evidence), {})
    roots = ended.get("root") or []
    root_tasks = {root["task"] for root in roots}
    events = [{"time_ns": fault["time_ns"], "task": fault["task"], "kind": fault["kind"],
               "detail": first_line(fault["message"]), "message": fault["message"]}
              for fault in report.faults]
    causes = {victim["task"]: victim["cause"] for victim in ended.get("failed_because_of_it") or []}
    exits = run.frame("exit")
    if not exits.empty:
        times = to_reference_clock(exits["time_ns"], exits["task"], Measurements(run).offsets)
        events += [{"time_ns": int(time_ns), "task": str(row.task), "kind": "exit",
                    "detail": f"{row.error_type}: {causes.get(row.task) or first_line(str(row.message))}"
                    if row.reason == "exception"
                    else "ended with its collectors open",
                    "message": str(row.message)}
                   for time_ns, row in zip(times, exits.itertuples())]
    start_ns = (run.manifest or {}).get("start_time_ns")
    events.sort(key=lambda event: event["time_ns"])
    for event in events:
        event["time_s"] = round((event["time_ns"] - start_ns) / 1e9, 3) if start_ns else None
        event["root"] = event["task"] in root_tasks
    return {"events": events, "roots": roots, "victims": ended.get("failed_because_of_it") or []}


def first_line(text: str) -> str:
    """The first line of ``text`` that holds anything."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
