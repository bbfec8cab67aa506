"""How a job ended: which task failed first (the root) and which failed because of it.

From each task's last words (``exit`` records: the exception that ended it and the tasks
its text names as failed) and heartbeats. A task whose error names other tasks failed
because of them; a task named, or one that ended on an error naming no other, is a root.
A root's own records say what happened to it: an exception of its own, an exit with its
collectors open, heartbeats that stopped without a close marker (killed or frozen: the
kernel's verdict is not in the log, but where the analysis runs on the task's host its
process table tells which, ``processes``), or no records at all (a task that runs no
collector, such as a ps).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from tfdiag.analysis.processes import ProcessEnd

# A cause is one line of the report: TensorFlow's abort lines run to about 200 characters.
MAX_CAUSE_CHARS = 300


@dataclass(frozen=True)
class JobEnd:
    """``roots``: ``{"task", "state"}`` per root task; ``victims``: ``{"task", "error_type",
    "cause", "blamed"}`` per task that failed because of a root; ``ended_ns``: the first exit."""

    roots: list[dict]
    victims: list[dict]
    ended_ns: int


def job_end(exits: pd.DataFrame, heartbeats: pd.DataFrame,
            process_ends: dict[str, ProcessEnd] | None = None) -> JobEnd | None:
    """The roots and victims of the job's end, None when no task ended on an exception
    (``process_ends``: what this host's process table says of tasks without last words).

    >>> exits = pd.DataFrame({"task": ["worker:0"], "time_ns": [50 * 10**9], "reason": ["exception"],
    ...     "error_type": ["UnavailableError"], "blamed": ["worker:1"],
    ...     "message": ["Graph execution error:\\nCollective ops is aborted by: The following tasks are unhealthy"]})
    >>> beats = pd.DataFrame({"task": ["worker:1", "worker:1"], "time_ns": [30 * 10**9, 40 * 10**9],
    ...     "closed": [False, False]})
    >>> ended = job_end(exits, beats)
    >>> ended.roots
    [{'task': 'worker:1', 'state': 'last heartbeat 10.0 s before the first failure; no last words: killed or frozen'}]
    >>> ended.victims[0]["cause"]
    'Collective ops is aborted by: The following tasks are unhealthy'
    """
    if exits.empty:
        return None
    errors = exits[exits["reason"] == "exception"].sort_values("time_ns")
    if errors.empty:
        return None
    # In time order: a task named by an earlier error is a root whatever its own error says
    # later (a frozen worker that resumes fails on the peers that aborted because of it).
    roots: list[str] = []
    victims: list[dict] = []
    for row in errors.itertuples():
        named = [task for task in str(row.blamed).split(",") if task]
        if row.task in roots or any(victim["task"] == row.task for victim in victims):
            continue
        if not named:
            roots.append(row.task)
            continue
        victims.append({"task": row.task, "error_type": row.error_type, "cause": _cause(str(row.message)),
                        "blamed": named})
        roots += [task for task in named if task not in roots and all(v["task"] != task for v in victims)]
    ended_ns = int(errors["time_ns"].min())
    processes = process_ends or {}
    return JobEnd(roots=[{"task": task, "state": _state(task, exits, heartbeats, ended_ns, processes.get(task))}
                         for task in roots],
                  victims=victims, ended_ns=ended_ns)


def _state(task: str, exits: pd.DataFrame, heartbeats: pd.DataFrame, ended_ns: int,
           process: ProcessEnd | None) -> str:
    """What a root's own records say: its error, its last heartbeat before the job's first
    failure, and whether the process said anything at its end."""
    own = exits[exits["task"] == task].sort_values("time_ns")
    beats = heartbeats[heartbeats["task"] == task] if not heartbeats.empty else heartbeats
    if own.empty and beats.empty:
        return "wrote no records (it runs no collector); the errors name it"
    said = []
    before = beats[beats["time_ns"] <= ended_ns]
    if not before.empty:
        said.append(f"last heartbeat {(ended_ns - int(before['time_ns'].max())) / 1e9:.1f} s before the first failure")
    if own.empty:
        closed = not beats.empty and bool(beats.sort_values("time_ns")["closed"].iloc[-1])
        said.append("closed its collectors normally" if closed
                    else f"no last words: {process.describe()}" if process else "no last words: killed or frozen")
    else:
        last = own.iloc[-1]
        when = "ended" if int(last["time_ns"]) <= ended_ns else "later ended"
        said.append(f"{when} on {last['error_type']}: {_cause(str(last['message']))}" if last["reason"] == "exception"
                    else f"{when} with its collectors open")
    return "; ".join(said)


def _cause(message: str) -> str:
    """The line of an error's text that says why (TensorFlow's abort line, with the tasks it
    lists on the next line), else its first line.

    >>> _cause("Graph execution error:\\n\\nDetected at node X\\nCollective ops is aborted by: peer reset")
    'Collective ops is aborted by: peer reset'
    >>> _cause("aborted by: The following tasks are unhealthy (stopped sending heartbeats):\\n/job:worker/task:1\\n")
    'aborted by: The following tasks are unhealthy (stopped sending heartbeats): /job:worker/task:1'
    """
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if "aborted by" in line or "unhealthy" in line or "remote target" in line:
            if line.endswith(":") and index + 1 < len(lines):
                line = f"{line} {lines[index + 1]}"
            return line[:MAX_CAUSE_CHARS]
    return lines[0][:MAX_CAUSE_CHARS] if lines else ""
