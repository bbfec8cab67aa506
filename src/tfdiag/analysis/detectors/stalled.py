"""``stalled``: workers (or the whole job) stopped making progress while the run is still alive.

The run's clock is its latest ``heartbeat`` (not the wall clock: re-analysing an old run
gives the same answer). A task whose collectors closed normally wrote a clean-close
marker; a task whose beats stopped without one died or was frozen. Every worker whose
progress a still-beating task reports (the coordinator counts each worker's closures,
a callback or hook its own steps) is stalled when its last progress (last step end,
closure result, or heartbeat count change) lies further behind the run's clock than
``stall_threshold_ns`` of its own rhythm. Only the coordinator sees a frozen PS worker:
its closures stay in flight and no more results come from it.

One frozen worker can hold the whole job (the tutorial-style PS loop with worker 1
stopped: worker 0's closures stopped completing 0.2 s before worker 1's last one came
back, since its steps wait on the parameter servers that wait on worker 1). Which worker
stopped first then says nothing; which one stopped *answering* does: where the
coordinator's RPC probe reached some task after the stall began, a stalled worker it has
not reached since (directly or relayed from it) is *unresponsive* and named first, and
the others are waiting (``_answering``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfdiag.analysis.align import to_reference_clock
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.groups import TaskGroups
from tfdiag.analysis.liveness import last_answers, silent_tasks
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.processes import STOPPED
from tfdiag.store.paths import stacks_path
from tfdiag.analysis.step_stats import RECENT_ROWS
from tfdiag.events import HEARTBEAT_EVERY_S

KIND = "stalled"

# A worker is stalled after this many of its typical intervals between progress records
# with no progress: a run's step times vary by a few x, never by ten, while it works.
STALL_FACTOR = 10.0
# ... or after this multiple of its longest earlier gap between records, so a run that
# pauses regularly (a checkpoint save, an evaluation) is judged against those pauses.
LONGEST_GAP_FACTOR = 2.0
# ... and never before this: several heartbeats (``HEARTBEAT_EVERY_S`` apart) must have seen no progress,
# and a short pause (a garbage collection, a slow first trace) is not a hang.
STALL_FLOOR_S = 30.0
# ... or this, where a task the stalled ones depend on stopped answering its status checks
# (analysis/liveness.py): two checks unanswered, seconds apart, are evidence no pause gives.
SILENT_STALL_FLOOR_S = 10.0
# A task whose last beat is this far behind the run's clock stopped writing: four missed beats.
HEARTBEAT_LOST_S = 4 * HEARTBEAT_EVERY_S
# Beats come every ``HEARTBEAT_EVERY_S``: a beat with no other beat of its task within this much is not
# part of the task's rhythm (a damaged time, a clock jump) and must not set the run's clock.
ISOLATED_BEAT_S = 60.0


def stall_threshold_ns(intervals_ns: pd.Series, floor_s: float = STALL_FLOOR_S) -> float:
    """How long a worker with these intervals between progress records may show none.

    >>> stall_threshold_ns(pd.Series([20e6] * 50)) / 1e9  # 20 ms steps: the floor
    30.0
    >>> stall_threshold_ns(pd.Series([30e9] * 10)) / 1e9  # 30 s steps: ten of them
    300.0
    """
    if intervals_ns.empty:
        return floor_s * 1e9
    return max(STALL_FACTOR * float(intervals_ns.median()), LONGEST_GAP_FACTOR * float(intervals_ns.max()),
               floor_s * 1e9)


def detect(measured: Measurements) -> list[Finding]:
    beats = measured.heartbeats
    if beats is None or beats.empty:
        return []
    beats = _in_rhythm(beats)
    if beats.empty:
        return []
    now_ns = int(beats["time_ns"].max())
    groups, times, tasks = TaskGroups(beats["task"]), beats["time_ns"].to_numpy(), beats["task"].to_numpy()
    last_beat = pd.Series([times[rows].max() for rows in groups.rows], index=groups.names, dtype=times.dtype)
    closed = set(tasks[beats["closed"].fillna(False).to_numpy(bool)])
    frozen = {task: end for task, end in measured.process_ends.items() if end.state == STOPPED}
    stopped = sorted(task for task, at in last_beat.items()
                     if task not in closed and (now_ns - at > HEARTBEAT_LOST_S * 1e9 or task in frozen))
    alive = set(last_beat.index) - closed - set(stopped)
    reporting = beats["task"].isin(alive).to_numpy() & beats["progress"].notna().to_numpy()
    subjects = sorted(set(beats["subject"].to_numpy()[reporting]))
    # Each subject's rows found once, not by a scan of every row per subject (1,024 workers:
    # a million step rows scanned a thousand times).
    rows = {name: _rows_by(frame, column) for name, frame, column in (
        ("steps", measured.steps, "task"), ("closures", measured.closures, "worker"), ("beats", beats, "subject"))}
    states = [_progress_state(measured, beats, subject, now_ns, rows) for subject in subjects]
    stalled, progressing = _split(states, "threshold_ns")
    if not stalled:
        # A task that stopped answering explains a stall sooner than the floor would allow.
        quick, others = _split(states, "silent_threshold_ns")
        if quick and silent_tasks(measured.run.frame("liveness"), measured.offsets,
                                  min(state["since_ns"] for state in quick)):
            stalled, progressing = quick, others
    for state in states:
        del state["threshold_ns"], state["silent_threshold_ns"]
    if stalled:
        return [_stalled_finding(measured, beats, now_ns, stalled, progressing, stopped, last_beat)]
    if stopped:
        return [_stopped_finding(now_ns, stopped, last_beat, frozen, everyone=not alive)]
    return []


def _split(states: list[dict], threshold: str) -> tuple[list[dict], list[dict]]:
    """The states stalled beyond their ``threshold``, and the others."""
    beyond = [state["stalled_s"] * 1e9 > state[threshold] for state in states]
    return ([s for s, yes in zip(states, beyond) if yes], [s for s, yes in zip(states, beyond) if not yes])


def _in_rhythm(beats: pd.DataFrame) -> pd.DataFrame:
    """The beats that have another beat of their task within ``ISOLATED_BEAT_S``."""
    time = beats["time_ns"].to_numpy()
    gap = ISOLATED_BEAT_S * 1e9
    near = np.zeros(len(beats), bool)
    for rows in TaskGroups(beats["task"]).rows:
        rows = rows[np.argsort(time[rows], kind="stable")]
        close = np.abs(np.diff(time[rows])) <= gap  # each beat and the next of its task
        near[rows[1:]] |= close
        near[rows[:-1]] |= close
    order = np.argsort(time)  # by time, as before
    return beats.iloc[order[near[order]]]


def _rows_by(frame: pd.DataFrame | None, column: str) -> dict[str, np.ndarray]:
    """Value of ``column`` -> the positions of its rows in ``frame``, ascending."""
    if frame is None or frame.empty:
        return {}
    return {str(key): rows for key, rows in frame[column].groupby(frame[column], observed=True, sort=False).indices.items()}


def _progress_state(measured: Measurements, beats: pd.DataFrame, subject: str, now_ns: int,
                    rows: dict[str, dict[str, np.ndarray]]) -> dict:
    """When ``subject`` last made progress, at which step, and how long it may pause
    (``rows``: each frame's rows of each task, ``_rows_by``)."""
    steps = measured.steps
    none = np.zeros(0, "int64")
    own = rows["steps"].get(subject, none)
    ends = np.sort(steps["end_ns"].to_numpy()[own]) if len(own) else np.zeros(0)
    closures = measured.closures
    results = np.zeros(0)
    if closures is not None and not closures.empty:
        mine = rows["closures"].get(subject, none)
        mine = mine[closures["ok"].fillna(False).astype(bool).to_numpy()[mine]]
        results = closures["result_ns"].to_numpy()[mine]
    counted = rows["beats"].get(subject, none)
    counted = counted[beats["progress"].notna().to_numpy()[counted]]
    beat_times, counts = beats["time_ns"].to_numpy()[counted], beats["progress"].to_numpy()[counted]
    by_time = np.argsort(beat_times, kind="quicksort")  # as sort_values("time_ns") orders them
    beat_times, counts = beat_times[by_time], counts[by_time]
    final = counts[-1]
    progress_times = ends if len(ends) >= len(results) else np.sort(results)
    # After the warm-up record, and only the latest: a long run's older rows are a sample
    # by step number (step_stats), whose gaps are stretched by its stride.
    intervals = np.diff(progress_times)[1:]
    intervals = pd.Series(intervals[~np.isnan(intervals)][-(RECENT_ROWS - 1):])
    if not len(progress_times):  # only the beats counted it: the first beat that saw the final count
        last_ns = float(beat_times[counts == final][0])
    else:  # a collector counts a step or closure after writing its record: the records are as recent
        last_ns = max(float(np.nanmax(times)) for times in (ends, results) if len(times) and not np.isnan(times).all())
    return {
        "task": subject,
        "since_ns": int(last_ns),
        "stalled_s": round((now_ns - last_ns) / 1e9, 1),
        "last_step": int(steps["step"].iloc[own].max()) if len(own) else None,
        "completed": int(final),
        "threshold_ns": stall_threshold_ns(intervals),
        "silent_threshold_ns": stall_threshold_ns(intervals, SILENT_STALL_FLOOR_S),
    }


def _answering(measured: Measurements, stalled: list[dict]) -> tuple[list[str], list[str]]:
    """The stalled workers and the ps tasks neither the RPC probe nor a liveness check has
    reached since the stall began (``unresponsive``), and the stalled workers they have,
    when the probe reached any task after the earliest stall (a probe answered shows the
    prober still ran); a task never reached is in neither. A ps runs no collector of its
    own: the probe and the liveness checks are its voice (a probe round whose leg through a
    frozen worker waits out its deadline leaves the ps it goes on to unprobed for seconds,
    while the ps answers its checks)."""
    probes = measured.run.frame("rpc")
    if probes.empty:
        return [], []
    began_ns = min(state["since_ns"] for state in stalled)
    answered = to_reference_clock(probes["recv_ns"], probes["src"], measured.offsets)
    if not (answered > began_ns).any():
        return [], []
    checked = last_answers(measured.run.frame("liveness"), measured.offsets)
    latest = pd.concat([answered.groupby(probes["dst"].astype(str)).max(),
                        answered.groupby(probes["src"].astype(str)).max(), checked]).groupby(level=0).max()
    since = {state["task"]: state["since_ns"] for state in stalled} | {ps: began_ns for ps in measured.ps_tasks}
    reached = {task: latest[task] > at for task, at in since.items() if task in latest.index}
    workers = {state["task"] for state in stalled}
    return ([task for task, yes in reached.items() if not yes],
            [task for task, yes in reached.items() if yes and task in workers])


def _stalled_finding(measured, beats, now_ns, stalled, progressing, stopped, last_beat) -> Finding:
    unresponsive, answering = _answering(measured, stalled)
    began_ns = min(state["since_ns"] for state in stalled)
    silent = silent_tasks(measured.run.frame("liveness"), measured.offsets, began_ns)
    # Where the hang began: the workers that stopped answering, then the first to stop.
    stalled = sorted(stalled, key=lambda state: (state["task"] not in unresponsive, state["since_ns"]))
    names = [state["task"] for state in stalled]
    # The tasks that stopped writing (died or froze) no later than a beat after the others'
    # last progress: the stall's likely cause, named before the tasks that wait.
    stopped = sorted(stopped, key=lambda task: last_beat[task])
    stopped_first = [task for task in stopped if last_beat[task] <= began_ns + HEARTBEAT_EVERY_S * 1e9]
    whole_job = not progressing
    in_flight = _in_flight(beats, now_ns)
    scope = "The whole job has" if whole_job else f"{', '.join(names)} ha{'ve' if len(names) > 1 else 's'}"
    longest = max(state["stalled_s"] for state in stalled)
    detail = (f"; {in_flight['closures']} closures in flight, the oldest dispatched {in_flight['oldest_age_s']} s "
              f"before the latest heartbeat") if in_flight and in_flight["closures"] else ""
    others = "" if whole_job else f" while {', '.join(s['task'] for s in progressing)} kept progressing"
    gone = f"; {', '.join(stopped)} stopped writing without closing (died or frozen)" if stopped else ""
    if silent:
        others += "; " + "; ".join(
            f"{task['task']} has not answered its last {task['unanswered']} status checks, since the stall began "
            f"({task['status']}: {task['verdict']})" for task in silent)
        others += f": {'the stalled tasks wait' if len(names) > 1 else names[0] + ' waits'} for it"
    silent_names = [task["task"] for task in silent]
    waiting = [name for name in names if name in answering]
    if unresponsive and waiting:
        others += (f"; {', '.join(unresponsive)} stopped answering the coordinator's probes, which "
                   f"{', '.join(waiting)} still answer{'s' if len(waiting) == 1 else ''}: "
                   f"{'it waits' if len(waiting) == 1 else 'they wait'} for {', '.join(unresponsive)}")
    elif stopped_first and not silent:
        others += f"; {', '.join(stopped_first)} stopped writing as the stall began: the others wait for it"
    elif not silent and len(stalled) > 1 and stalled[1]["since_ns"] > stalled[0]["since_ns"]:
        lag_s = (stalled[1]["since_ns"] - stalled[0]["since_ns"]) / 1e9
        others += f"; {names[0]} stopped first, {lag_s:.1f} s before the next"
    return Finding(
        kind=KIND,
        severity=Severity.CRITICAL,
        title=f"{'Whole job stalled' if whole_job else 'Stalled: ' + ', '.join(names)} for {longest:.0f} s"
              + (f"; {', '.join(dict.fromkeys(silent_names + unresponsive))} not answering"
                 if silent_names or (unresponsive and waiting) else
                 f"; {', '.join(stopped_first)} stopped writing" if stopped_first else ""),
        summary=f"{scope} made no progress for up to {longest:.0f} s{others}{detail}{gone}. "
                "The run is still alive (heartbeats continue): a hung task, not a finished run.",
        tasks=tuple(dict.fromkeys(silent_names + unresponsive + stopped_first + names + stopped)),
        evidence={
            "state": "whole_job" if whole_job else "partial",
            "first_stalled": (stopped_first or names)[0],
            "unresponsive": unresponsive,
            "silent": silent,
            "stacks": _stacks_files(measured, names),
            "stalled": stalled,
            "progressing": [state["task"] for state in progressing],
            "in_flight": in_flight,
            "stopped_writing": [{"task": task, "last_heartbeat_ns": int(last_beat[task])} for task in stopped],
            "latest_heartbeat_ns": now_ns,
        },
        recommendation=Recommendation(
            action="Look at the stalled tasks now, while they hang: read where they wait (each task's "
            "plugins/tfdiag/<task>.stacks, written after 30 s without progress; kill -USR1 <pid> writes it again), check the host (OOM, a stopped process, a full disk, a lost network link), and bound "
            "every wait so a hung worker fails and is restarted instead of blocking the job.",
            change="py-spy dump --pid <pid of the stalled task>; run every task under a supervisor that restarts "
            "it (Kubernetes restartPolicy: OnFailure): a restarted worker rejoins and ClusterCoordinator "
            "re-schedules its closures",
            predicted_speedup=None,
        ),
    )


def _stacks_files(measured: Measurements, tasks: list[str]) -> dict[str, str]:
    """The Python stacks the stalled tasks wrote of themselves (``src/tfdiag/collectors/stacks.py``), by task."""
    paths = {task: stacks_path(measured.run.path, task) for task in tasks}
    return {task: str(path) for task, path in paths.items() if path.is_file()}


def _stopped_finding(now_ns, stopped, last_beat, frozen, everyone: bool) -> Finding:
    """Critical: a task lost for the rest of the run takes its share of the job's work with it;
    when it was the last task writing (``everyone``), the job is hung or dead."""
    stopped = sorted(stopped, key=lambda task: last_beat[task])  # the first to stop first
    lost = [task for task in stopped if task not in frozen]  # known by their missed beats alone
    said = "".join(f"{task}: {frozen[task].describe()}. " for task in stopped if task in frozen)
    if lost:
        said += (f"{', '.join(lost)} wrote no heartbeat for the last "
                 f"{max(now_ns - last_beat[t] for t in lost) / 1e9:.0f} s of the run and never closed its "
                 "collectors: the task died (killed, crashed) or its process was frozen. ")
    return Finding(
        kind=KIND,
        severity=Severity.CRITICAL,
        title=f"{', '.join(stopped)} stopped" + (" writing without a clean close" if lost else " (process stopped)"),
        summary=said + ("No task writes on: the job is hung." if everyone else
                        "The tasks still writing made progress, so the job is not hung, but runs without it."),
        tasks=tuple(stopped),
        evidence={
            "state": "every_task_stopped" if everyone else "stopped_writing",
            "first_stalled": stopped[0],
            "stopped_writing": [{"task": task, "last_heartbeat_ns": int(last_beat[task])} for task in stopped],
            "stopped_processes": [{"task": task, "pid": frozen[task].pid, "host": frozen[task].host}
                                  for task in stopped if task in frozen],
            "latest_heartbeat_ns": now_ns,
        },
        recommendation=Recommendation(
            action="Find out why the task ended without closing (its log, the OOM killer, preemption) or who "
            "stopped it (kill -CONT <pid> resumes a stopped process), and run tasks under a supervisor that "
            "restarts them.",
            change="Kubernetes restartPolicy: OnFailure; tf.distribute.experimental.PreemptionCheckpointHandler",
            predicted_speedup=None,
        ),
    )


def _in_flight(beats: pd.DataFrame, now_ns: int) -> dict | None:
    """The coordinator's latest count of closures in flight, and the oldest one's dispatch."""
    rows = beats[beats["in_flight"].notna()].sort_values("time_ns")
    if rows.empty:
        return None
    latest = rows.iloc[-1]
    oldest = latest["oldest_in_flight_ns"]
    return {
        "reported_by": latest["task"],
        "closures": int(latest["in_flight"]),
        "oldest_dispatch_ns": None if pd.isna(oldest) else int(oldest),
        "oldest_age_s": None if pd.isna(oldest) else round((now_ns - float(oldest)) / 1e9, 1),
    }
