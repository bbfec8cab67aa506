"""``task_failure``: a task failed during the run; what it cost and whether it came back.

A task that died without last words (no exit record, no clean close) while the job still
progressed is named from its process (``processes``: gone from this host's process
table): the first to go is the root, with any that went within a beat of it; the tasks
that went later (the rest of the job, killed with it) are shown as ending after it. A
process that went after the job had stopped progressing ended on a hung job (``stalled``
names that hang's root), and one that went after another task's failure record is not
its root.

What the failure cost is predicted from the run itself where it shows the job with every
worker up: the throughput of the windows in which every worker was stepping is what the
affected time (from a worker's failure to the next such window: its downtime and its
warm-up after a restart) would have run at. On a host the workers share, a survivor steps
faster alone, so counting each lost worker as 1/n of the capacity over-predicts (ps_ctl at
200 steps, worker 1 killed before it stepped and never back: 1.60x predicted, 1.42x
measured on two busy cores); with workers on hosts of their own both give the same.
Without such a window (the killed worker never stepped, as there, or too few records)
the capacity model stands; under ParameterServerStrategy, where the failed workers never
stepped, the job's pace (``closure_gaps.JobPace``) with them at the others' median pace
instead. Either is held to what the coordinator's loop allows (``JobPace.limit``).
"""

from __future__ import annotations

import math
from functools import reduce

import numpy as np
import pandas as pd

from tfdiag.analysis.faults import FAILURE_KINDS
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.last_words import JobEnd
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.processes import GONE
from tfdiag.analysis.detectors.stalled import STALL_FACTOR
from tfdiag.events import HEARTBEAT_EVERY_S, cluster_tasks

KIND = "task_failure"

# Step records (a closure of several steps is one) the windows with every worker up must
# hold for their throughput to stand for the repaired run: ps_ctl at 200 steps writes 20
# closures in all, the records of one or two seconds.
MIN_ALL_UP_RECORDS = 10
# A task that died without last words went while the job worked when the job's last step
# ended no more than this many heartbeats (or ``stalled.STALL_FACTOR`` of its median
# interval between step ends) before the task's last record: a hung job beats on for
# longer than two beats without a step.
PROGRESSING_BEATS = 2


def detect(measured: Measurements) -> list[Finding]:
    ended = measured.job_end
    ends = [_job_end_finding(ended)] if ended is not None else _died_without_last_words(measured)
    return ends + _recovered_or_not(measured)


def _job_end_finding(ended: JobEnd) -> Finding:
    """The task whose failure ended the job, told apart from those that failed because of it."""
    roots = [root["task"] for root in ended.roots]
    victims = [victim["task"] for victim in ended.victims]
    title = f"{', '.join(roots)} failed and ended the job"
    if victims:
        title += f": {', '.join(victims)} failed because of it"
    states = "; ".join(f"{root['task']} {root['state']}" for root in ended.roots)
    causes = "; ".join(f"{victim['task']}: {victim['error_type']}: {victim['cause']}" for victim in ended.victims)
    return Finding(
        kind=KIND,
        severity=Severity.CRITICAL,
        title=title,
        summary=f"{states}." + (f" Then {causes}" if causes else ""),
        tasks=tuple(roots),
        evidence={"root": ended.roots, "failed_because_of_it": ended.victims, "ended_ns": ended.ended_ns},
        recommendation=Recommendation(
            action=f"Look at {', '.join(roots)} first (its log, its host: the OOM killer, preemption, a frozen "
            "container); the other tasks only reported it. Make the job survive the next one: checkpoint and "
            "restart failed tasks automatically.",
            change=(
                "model.fit(..., callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir)]) or "
                "tf.distribute.experimental.PreemptionCheckpointHandler; run tasks under a supervisor that restarts "
                "them (Kubernetes restartPolicy: OnFailure)"
            ),
            predicted_speedup=None,
        ),
    )


def _died_without_last_words(measured: Measurements) -> list[Finding]:
    """The tasks whose processes are gone though they wrote no last words, when the first of
    them went while the job progressed and before any other failure: killed while working,
    not stopped with a hung job nor after another task's failure."""
    gone = {task: end for task, end in measured.process_ends.items() if end.state == GONE}
    steps, beats = measured.steps, measured.heartbeats
    if not gone or steps.empty:
        return []
    # When each went: its last record of any kind (a beat every 5 s, a sample every 2 s, its steps).
    last_beat = beats.groupby(beats["task"].astype(str), observed=True)["time_ns"].max() if not beats.empty else {}
    last_step = steps.groupby(steps["task"].astype(str), observed=True)["end_ns"].max()
    went_ns = {task: max(end.last_seen_ns - measured.offsets.get(task, 0), int(last_beat.get(task, 0)),
                         int(last_step.get(task, 0))) for task, end in gone.items()}
    first_ns = min(went_ns.values())
    step_ends = np.sort(steps["end_ns"].to_numpy())
    progressing_ns = max(PROGRESSING_BEATS * HEARTBEAT_EVERY_S * 1e9,
                         STALL_FACTOR * float(np.median(np.diff(step_ends))) if len(step_ends) > 1 else 0.0)
    faults = measured.faults
    failed_before = not faults.empty and bool(
        (faults["kind"].isin(FAILURE_KINDS) & (faults["time_ns"] < first_ns)).any())
    if first_ns - step_ends[-1] > progressing_ns or failed_before:
        return []  # it went with a hung job, or after another task's failure: that is the root
    roots = sorted((task for task, at in went_ns.items() if at - first_ns <= HEARTBEAT_EVERY_S * 1e9),
                   key=went_ns.get)
    later = sorted(set(gone) - set(roots), key=went_ns.get)
    job_ended = set(last_beat.keys()) <= set(gone) | measured.closed_tasks
    start_ns = int(steps["begin_ns"].min())
    died = [{"task": task, "state": f"last record {(went_ns[task] - start_ns) / 1e9:.1f} s into the run; "
             f"{gone[task].describe()}"} for task in roots]
    title = f"{', '.join(roots)} died without last words"
    if later:
        title += f"; {', '.join(later)} ended {(went_ns[later[0]] - first_ns) / 1e9:.0f} s later without closing"
    return [Finding(
        kind=KIND,
        severity=Severity.CRITICAL,
        title=title,
        summary="; ".join(f"{task['task']}: {task['state']}" for task in died)
                + ("." if job_ended else ". The tasks still writing go on without it."),
        tasks=tuple(roots + later),
        # "root" only for the job's end (job_status: failed); a task lost by a job that goes on "died".
        evidence={"root" if job_ended else "died": died, "failed_because_of_it": [],
                  "ended_later": [{"task": task, "after_s": round((went_ns[task] - first_ns) / 1e9, 1)}
                                  for task in later],
                  "ended_ns": first_ns},
        recommendation=Recommendation(
            action=f"Look at {', '.join(roots)} first: the kernel's log on its host (dmesg: the OOM killer), the "
            "scheduler's events (preemption, eviction), a core dump. Make the job survive the next one: "
            "checkpoint and restart failed tasks automatically.",
            change=("model.fit(..., callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir)]); run tasks under "
                    "a supervisor that restarts them (Kubernetes restartPolicy: OnFailure)"),
            predicted_speedup=None,
        ),
    )]


def _recovered_or_not(measured: Measurements) -> list[Finding]:
    """The failures the coordinator and the tasks' restarts show, with what they cost."""
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
    restored = _restored_run(measured, failures, sorted(known))
    pace = measured.pace
    never_stepped = sorted(known - set(pace.own_ns.index)) if pace is not None else []
    failed_workers = {str(task) for task in failures["task"] if str(task).startswith("worker:")}
    if restored is not None:
        speedup = span_s / restored["repaired_s"] if restored["repaired_s"] > 0 else None
    elif never_stepped and failed_workers <= set(never_stepped):
        # Under ParameterServerStrategy, workers that never stepped at the others' median
        # pace, the run's start and pauses kept (ps_fit, worker 1 killed before its first
        # step record: 1.45x where capacity said 1.64x; 1.01x measured on a shared host).
        own = pd.concat([pace.own_ns, pd.Series(float(pace.own_ns.median()), index=never_stepped)])
        speedup = pace.speedup(own)
    else:
        speedup = span_s / (span_s - lost_s) if span_s > lost_s > 0 else None
    # No worker restored makes the job faster than the coordinator's loop hands out closures.
    if speedup is not None and pace is not None:
        speedup = min(speedup, pace.limit())
    unrecovered = [row.task for row in failures.itertuples() if math.isnan(row.recovered_after_s)]
    tasks = tuple(dict.fromkeys(failures["task"]))
    recovery = (
        f"{len(unrecovered)} never recovered" if unrecovered
        else f"all recovered, after {max(downtime_s):.1f} s at most"
    )
    return [
        Finding(
            kind=KIND,
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
                **({"all_workers_up": {key: round(value, 2) for key, value in restored.items()}} if restored else {}),
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


def _restored_run(measured: Measurements, failures: pd.DataFrame, workers: list[str]) -> dict | None:
    """The run's length had every worker stayed up, from the windows in which all were stepping.

    Returns ``{"steps_per_s", "affected_s", "steps_while_affected", "repaired_s"}`` — the
    throughput (training steps) with every worker up, the time from each worker failure to
    the next such window (or the end), the steps run in it, and the run's length had that
    time run at the full throughput — or None without ``MIN_ALL_UP_RECORDS`` in the windows,
    or where step rows are a sample (a long run: windows cannot be counted from them).

    >>> steps = pd.DataFrame({"task": ["worker:0"] * 8 + ["worker:1"] * 4,
    ...     "begin_ns": [s * 10**9 for s in (0, 1, 2, 3, 4, 5, 6, 7)] + [s * 10**9 for s in (0, 1, 6, 7)],
    ...     "end_ns": [s * 10**9 for s in (1, 2, 3, 4, 5, 6, 7, 8)] + [s * 10**9 for s in (1, 2, 7, 8)],
    ...     "steps": 1})
    >>> failures = pd.DataFrame({"task": ["worker:1"], "time_ns": [2 * 10**9]})
    >>> _windows_restored(steps, failures, ["worker:0", "worker:1"], min_records=2)
    {'steps_per_s': 2.0, 'affected_s': 5.0, 'steps_while_affected': 6.0, 'repaired_s': 6.0}
    """
    counters = measured.run.step_counters
    if measured.steps.empty or (counters is not None and not counters.empty and counters["sampled"].any()):
        return None
    return _windows_restored(measured.steps, failures, workers, MIN_ALL_UP_RECORDS)


def _windows_restored(steps: pd.DataFrame, failures: pd.DataFrame, workers: list[str], min_records: int) -> dict | None:
    task = steps["task"].astype(str)
    begin, end = steps["begin_ns"].astype("float64"), steps["end_ns"].astype("float64")
    worker_failures = failures[failures["task"].astype(str).isin(workers)]
    up = [_stepping(begin[task == w], end[task == w], worker_failures.loc[worker_failures["task"] == w, "time_ns"])
          for w in workers]
    windows = reduce(_intersect, up) if up else []
    inside = _within(begin, end, windows)
    if inside.sum() < min_records:
        return None
    steps_per_s = float(steps.loc[inside, "steps"].sum()) / (sum(e - s for s, e in windows) / 1e9)
    affected = _merged([(float(f), next((s for s, _ in windows if s >= f), float(end.max())))
                        for f in worker_failures["time_ns"]])
    affected_s = sum(e - s for s, e in affected) / 1e9
    while_affected = float(steps.loc[_within(begin, end, affected), "steps"].sum())
    span_s = (float(end.max()) - float(begin.min())) / 1e9
    return {"steps_per_s": steps_per_s, "affected_s": affected_s, "steps_while_affected": while_affected,
            "repaired_s": span_s - affected_s + while_affected / steps_per_s}


def _stepping(begin: pd.Series, end: pd.Series, failed_at: pd.Series) -> list[tuple[float, float]]:
    """A worker's spans of stepping: each life (its records between two of its failures),
    from its second record's start (the first warms up) to its last record's end."""
    lives = pd.Series(np.searchsorted(np.sort(failed_at.to_numpy(dtype="float64")), begin.to_numpy(), side="right"),
                      index=begin.index)
    spans = []
    for _, life in begin.groupby(lives):
        starts = life.sort_values()
        if len(starts) >= 2:
            spans.append((float(starts.iloc[1]), float(end[life.index].max())))
    return spans


def _intersect(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(max(s1, s2), min(e1, e2)) for s1, e1 in a for s2, e2 in b if min(e1, e2) > max(s1, s2)]


def _merged(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for start, stop in sorted(s for s in spans if s[1] > s[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


def _within(begin: pd.Series, end: pd.Series, spans: list[tuple[float, float]]) -> pd.Series:
    """Records that end inside one of ``spans`` (and began after its start)."""
    inside = pd.Series(False, index=begin.index)
    for start, stop in spans:
        inside |= (begin >= start) & (end <= stop)
    return inside
