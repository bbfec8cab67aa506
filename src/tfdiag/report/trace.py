"""Chrome trace / Perfetto export: a process (track group) per task, a slice per step.

The result is the JSON object format of the Trace Event Format
(https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKHSIsbRQ):
``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``. Times are
microseconds since the run's first recorded event, on the aligned (reference) clock.

Each kind of track (steps, closures, RPC probes, faults) is built by one function of
``TRACK_BUILDERS``; each builder asks ``TraceContext`` for the process and thread ids of
its task, so metadata events are emitted once per track.

Example:
    >>> from tfdiag.analysis import analyze
    >>> trace = render_chrome_trace(analyze("logs/run1"))  # doctest: +SKIP
    >>> Path("trace.json").write_text(json.dumps(trace))  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tfdiag.analysis.result import Report

# Thread ids inside a task's process, one per kind of track, in display order.
STEPS_THREAD = 1
CLOSURES_THREAD = 2
RPC_THREAD = 3
FAULTS_THREAD = 4


@dataclass
class TraceContext:
    """Process and thread ids of the trace, assigned on first use, plus the time origin."""

    origin_ns: int
    pids: dict[str, int] = field(default_factory=dict)
    threads: set[tuple[int, int]] = field(default_factory=set)
    metadata: list[dict[str, Any]] = field(default_factory=list)

    def pid(self, task: str) -> int:
        """The process id of ``task``, naming its process (track group) on first use."""
        if task not in self.pids:
            pid = len(self.pids) + 1
            self.pids[task] = pid
            self.metadata.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": task}})
            self.metadata.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        return self.pids[task]

    def track(self, task: str, tid: int, name: str) -> tuple[int, int]:
        """(pid, tid) of the track ``name`` of ``task``, naming the thread on first use."""
        pid = self.pid(task)
        if (pid, tid) not in self.threads:
            self.threads.add((pid, tid))
            self.metadata.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
        return pid, tid

    def us(self, times_ns: np.ndarray) -> np.ndarray:
        """Times in ns on the reference clock as µs since the origin (ns precision kept)."""
        return np.round((np.asarray(times_ns, dtype="int64") - self.origin_ns) / 1e3, 3)


def step_events(report: Report, context: TraceContext) -> list[dict[str, Any]]:
    """One complete ("X") event per step, and an "input wait" slice nested in it when > 0."""
    steps = report.steps
    events: list[dict[str, Any]] = []
    if steps.empty:
        return events
    for task, rows in steps.groupby("task", sort=True):
        pid, tid = context.track(str(task), STEPS_THREAD, "steps")
        begin_us = context.us(rows["begin_ns"].to_numpy())
        duration_us = np.round(rows["duration_ns"].to_numpy(dtype="float64") / 1e3, 3)
        wait_us = np.round(rows["input_wait_ns"].to_numpy(dtype="float64") / 1e3, 3)
        numbers = rows["step"].to_numpy()
        examples = rows["examples"].to_numpy()
        for begin, duration, wait, number, count in zip(begin_us.tolist(), duration_us.tolist(), wait_us.tolist(), numbers.tolist(), examples.tolist()):
            events.append(
                {
                    "name": f"step {number}",
                    "cat": "step",
                    "ph": "X",
                    "ts": begin,
                    "dur": duration,
                    "pid": pid,
                    "tid": tid,
                    "args": {"step": number, "examples": count, "input_wait_ms": round(wait / 1e3, 3)},
                }
            )
            if wait > 0:
                events.append(
                    {
                        "name": "input wait",
                        "cat": "input",
                        "ph": "X",
                        "ts": begin,
                        "dur": min(wait, duration),
                        "pid": pid,
                        "tid": tid,
                    }
                )
    return events


def closure_events(report: Report, context: TraceContext) -> list[dict[str, Any]]:
    """ParameterServerStrategy closures, dispatch to result, on the worker that ran them."""
    closures = report.timelines.get("closures")
    events: list[dict[str, Any]] = []
    if closures is None or closures.empty:
        return events
    for row in closures.itertuples():
        task = str(row.worker) or "unscheduled"
        pid, tid = context.track(task, CLOSURES_THREAD, "closures (coordinator clock)")
        [begin] = context.us(np.array([row.dispatch_ns])).tolist()
        events.append({
            "name": f"closure {row.closure_id}" + ("" if row.ok else " (failed)"), "cat": "closure", "ph": "X",
            "ts": begin, "dur": round((row.result_ns - row.dispatch_ns) / 1e3, 3), "pid": pid, "tid": tid,
            "args": {"ok": bool(row.ok), "error": str(row.error or "")},
        })
    return events


def rpc_events(report: Report, context: TraceContext) -> list[dict[str, Any]]:
    """RPC probes: a slice per round trip on the probing task's track, named by destination."""
    rpc = report.timelines.get("rpc")
    events: list[dict[str, Any]] = []
    if rpc is None or rpc.empty:
        return events
    for src, rows in rpc.groupby("src", sort=True):
        pid, tid = context.track(str(src), RPC_THREAD, "rpc probes")
        for begin, rtt, dst in zip(context.us(rows["time_ns"].to_numpy()).tolist(), rows["rtt_ns"].tolist(), rows["dst"]):
            events.append({"name": f"rpc → {dst}", "cat": "rpc", "ph": "X", "ts": begin, "dur": round(rtt / 1e3, 3),
                           "pid": pid, "tid": tid, "args": {"dst": str(dst), "rtt_ms": round(rtt / 1e6, 3)}})
    return events


def fault_events(report: Report, context: TraceContext) -> list[dict[str, Any]]:
    """Failures, retries and recoveries as instant events on the task they concern (those with a time)."""
    events: list[dict[str, Any]] = []
    for fault in report.faults:
        if fault.get("time_ns") is None:
            continue
        pid, tid = context.track(str(fault["task"]), FAULTS_THREAD, "faults")
        [time] = context.us(np.array([fault["time_ns"]])).tolist()
        events.append({"name": f"{fault['kind']}", "cat": "fault", "ph": "i", "s": "p", "ts": time, "pid": pid,
                       "tid": tid, "args": {"message": fault["message"], "recovered_after_s": fault["recovered_after_s"]}})
    return events


TRACK_BUILDERS: tuple[Callable[[Report, TraceContext], list[dict[str, Any]]], ...] = (
    step_events,
    closure_events,
    rpc_events,
    fault_events,
)


def _origin_ns(report: Report) -> int:
    if not report.steps.empty:
        return int(report.steps["begin_ns"].min())
    return int(report.run.get("start_time_ns") or 0)


def render_chrome_trace(report: Report) -> dict[str, Any]:
    """The run as a Chrome trace / Perfetto JSON object (``json.dumps`` it to save)."""
    context = TraceContext(origin_ns=_origin_ns(report))
    # Every task of the run gets its track group, in the order of run.tasks, even if idle.
    for task in report.run.get("tasks") or []:
        context.pid(str(task))
    events = [event for build in TRACK_BUILDERS for event in build(report, context)]
    return {
        "traceEvents": context.metadata + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "run": str(report.run.get("path") or ""),
            "strategy": str(report.run.get("strategy") or ""),
            "origin_ns": context.origin_ns,
            "generator": "tfdiag",
        },
    }
