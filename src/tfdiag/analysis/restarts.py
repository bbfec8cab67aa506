"""Task restarts a task's own records show: a failure and a restart for ``task_failure``.

A TF1 worker has no coordinator to report its failure: when its process is killed and
started again, the only traces are in its own file. Each process's ``DiagnosticsHook``
writes a ``session`` record when it creates its session, and the heartbeat thread writes
a clean-close row (``closed`` true) when the process releases its collectors normally
(``src/tfdiag/collectors/heartbeat.py``). A task with two sessions and no clean close between them
stopped without closing — killed, crashed, preempted — and came back. This holds even
when the first process died before its first step (a non-chief still waiting for the
chief), where no step record shows anything.

``DiagnosticsHook`` stamps a session's ``begin_ns`` before it opens its task's writer, so
every heartbeat of the later process comes at or after its session's start. A process
that opens and closes the task's writer before its session (e.g. a ``record_placement``
call with a logdir) leaves a clean-close row that reads as a clean stop of the earlier
process: that restart is not seen.

A process killed after its hook began but before its session was ready (a non-chief
still waiting for the chief's variables when a ``kill-worker`` came) wrote heartbeats
and no ``session`` record. Heartbeats of a task from before its first session, with no
clean close among them, are such an earlier process: a failure and a restart too. A
process that kept the task's writer open from before its own session (a collector
opened earlier in the same process and not released) would read the same way; no
collector of a TF1 session does that.

A task without ``session`` records (a ``model.fit`` worker under MultiWorkerMirroredStrategy:
no coordinator reports its failure either) is read from its ``system`` records, which
carry the sampling process's ``host`` and ``pid``: when one process's samples end and
another's begin with no clean-close row in between, the earlier process stopped without
closing and the task came back as a new process (``BackupAndRestore`` restarts every
worker of such a job). The failure is dated by the earlier process's last sample or the
end of a step record after it (a new process samples before its first step), the restart
by the later process's first sample. Processes whose samples overlap in time ran side by
side (two processes claiming one task): no restart. A task that samples nothing (system
sampling off; a plain ``tf.distribute.Server`` worker, whose failures the coordinator
reports) shows nothing here.

The rows have the ``fault`` record's columns, so they join the run's own fault records
before ``faults.fault_table``.

Example:
    >>> import pandas as pd
    >>> session = pd.DataFrame({"task": ["worker:1", "worker:1"], "begin_ns": [100, 900], "ready_ns": [150, 950]})
    >>> beats = pd.DataFrame({"task": ["worker:1"] * 2, "time_ns": [120, 400], "closed": [False, False]})
    >>> restart_faults(session, beats)[["task", "kind", "time_ns"]].values.tolist()
    [['worker:1', 'failure', 400], ['worker:1', 'restart', 900]]
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfdiag.analysis.groups import codes_of

COLUMNS = ["task", "kind", "time_ns", "message"]


def restart_faults(session: pd.DataFrame, heartbeat: pd.DataFrame, steps: pd.DataFrame | None = None,
                   system: pd.DataFrame | None = None) -> pd.DataFrame:
    """A ``failure`` and a ``restart`` row per session of a task that followed an unclosed one
    (or unclosed heartbeats of a process that died before its session was ready), and per
    process of a task without sessions that followed an unclosed one (``system`` records).

    The failure is dated by the last sign of life of the earlier process: its last
    heartbeat or the end of its last ``step`` record (as logged, on the task's own clock),
    else its session's readiness (by sessions), or its last sample (by processes); the
    restart by the later session's start or the later process's first sample.
    """
    if session.empty and not _several_processes(system):
        return pd.DataFrame(columns=COLUMNS)  # nothing restarted (a live window: every evaluation)
    beats = heartbeat if not heartbeat.empty else pd.DataFrame(columns=["task", "time_ns", "closed"])
    beats = beats.astype({"task": str})
    steps = steps if steps is not None and not steps.empty else pd.DataFrame(columns=["task", "end_ns"])
    steps = steps.astype({"task": str})
    with_sessions = set(session["task"].astype(str)) if not session.empty else set()
    rows = _process_restarts(system, beats, steps, with_sessions) if system is not None and not system.empty else []
    if session.empty:
        return pd.DataFrame(rows, columns=COLUMNS)
    for task, lives in session.astype({"task": str}).sort_values("begin_ns").groupby("task"):
        own = beats[beats["task"] == task]
        own_steps = steps[steps["task"] == task]
        first = lives.iloc[0]
        before = own[own["time_ns"] < first.begin_ns]
        if not before.empty and not before["closed"].fillna(False).astype(bool).any():
            ended = own_steps["end_ns"][own_steps["end_ns"] < first.begin_ns]
            rows += _restart_rows(task, max([*before["time_ns"].astype("int64"), *ended.astype("int64")]),
                                  int(first.begin_ns), "before its first session was ready")
        for earlier, later in zip(lives.itertuples(), lives.iloc[1:].itertuples()):
            between = own[(own["time_ns"] >= earlier.begin_ns) & (own["time_ns"] < later.begin_ns)]
            if between["closed"].fillna(False).astype(bool).any():
                continue
            ended = own_steps["end_ns"][(own_steps["end_ns"] >= earlier.begin_ns) & (own_steps["end_ns"] < later.begin_ns)]
            signs = [int(earlier.ready_ns), *between["time_ns"].astype("int64"), *ended.astype("int64")]
            rows += _restart_rows(task, max(signs), int(later.begin_ns), "without closing its session")
    return pd.DataFrame(rows, columns=COLUMNS)


def _several_processes(system: pd.DataFrame | None) -> bool:
    """Whether any task's ``system`` samples (with a pid and a time) come from more than one
    process: the only way ``_process_restarts`` finds a restart."""
    if system is None or system.empty:
        return False
    dated = (system["pid"].notna() & system["time_ns"].notna()).to_numpy()
    keys = np.column_stack([codes_of(system[name])[0][dated] for name in ("task", "host", "pid")])
    processes = np.unique(keys, axis=0)
    return len(np.unique(processes[:, 0])) < len(processes)


def _process_restarts(system: pd.DataFrame, beats: pd.DataFrame, steps: pd.DataFrame, skip: set[str]) -> list[dict]:
    """The restart rows of tasks not in ``skip``: a process's samples followed by another's
    with no clean-close heartbeat in between."""
    samples = system[["task", "host", "pid", "time_ns"]].dropna(subset=["pid", "time_ns"])
    samples = samples.astype({"task": str, "host": str})
    rows = []
    for task, own in samples[~samples["task"].isin(skip)].groupby("task"):
        lives = own.groupby(["host", "pid"])["time_ns"].agg(["min", "max"]).sort_values("min")
        closed = beats.loc[(beats["task"] == task) & beats["closed"].fillna(False).astype(bool), "time_ns"]
        ends = steps.loc[steps["task"] == task, "end_ns"]
        for (_, earlier), ((host, pid), later) in zip(lives.iterrows(), lives.iloc[1:].iterrows()):
            if later["min"] <= earlier["max"] or ((closed > earlier["min"]) & (closed < later["min"])).any():
                continue  # side by side, or the earlier process closed normally
            last_steps = ends[(ends > earlier["max"]) & (ends < later["min"])]
            last_seen = int(max([earlier["max"], *last_steps.astype("int64")]))
            rows += _restart_rows(task, last_seen, int(later["min"]), "without closing its collectors",
                                  f"process (pid {int(pid)} on {host})")
    return rows


def _restart_rows(task: str, last_seen: int, restarted: int, how: str, new: str = "session") -> list[dict]:
    gone_s = (restarted - last_seen) / 1e9
    return [{"task": task, "kind": "failure", "time_ns": last_seen,
             "message": f"{task} stopped {how} (no clean-close heartbeat) "
                        f"and started a new {new} {gone_s:.1f} s after it was last seen"},
            {"task": task, "kind": "restart", "time_ns": restarted, "message": f"{task} started a new {new}"}]
