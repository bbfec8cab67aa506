"""Stopped, silent and failed tasks while a job runs, from heartbeats, liveness checks and exit records.

``Stops`` is the part of the live screen (``live_screen``) that needs no confirming
analysis: a window without step records is not analysed at all (``live.enough_data``),
and a stop is a matter of time, not of a statistic, so these are announced on their own
evidence. ``judge(now_ns)`` returns what holds now, by (kind, task):

- ``task_failure``: a task's ``exit`` record (it ended on an error, or with its collectors
  open), a task unreachable in ``MIN_UNANSWERED`` status checks in a row (``liveness``), or
  one that missed a heartbeat and whose process on this host is gone (``processes``);
- ``stalled``: a task that missed a heartbeat and whose process on this host is stopped,
  one that wrote no heartbeat for ``SILENT_AFTER_S`` (stopped, frozen or
  gone; a task that closed cleanly is not), a task frozen in its status checks, or a
  worker whose progress count did not move for ``SCREEN_STALL_S`` while another worker's did
  (or, when every worker stopped, the worker the RPC probe stopped reaching first).

Example:
    >>> stops = Stops(own_task="chief:0")
    >>> stops.judge(0)
    {}
"""

from __future__ import annotations

import socket

import numpy as np
import pyarrow as pa

from tfdiag.analysis.processes import GONE, ProcessEnd, ProcessTable
from tfdiag.events import HEARTBEAT_EVERY_S

# A task that wrote no heartbeat for four beats stopped writing (job_status.SILENT_AFTER_S
# and the stalled detector's HEARTBEAT_LOST_S are the same four beats).
SILENT_AFTER_S = 4 * HEARTBEAT_EVERY_S
# A task whose newest heartbeat is this old missed one: where its process is on this host,
# the process table says at once whether it was stopped or is gone.
MISSED_BEAT_S = 1.5 * HEARTBEAT_EVERY_S
# A worker whose progress did not move for this long, while another worker's did, has
# stopped: workers of one job differ in step time by a few x, not by seconds against a
# peer that keeps stepping; two beats (HEARTBEAT_EVERY_S apart) must have seen no progress.
SCREEN_STALL_S = 2 * HEARTBEAT_EVERY_S
# ... and never before this many of its own typical steps (a job of multi-second steps).
STALL_STEPS = 5
# Status checks in a row a task left unanswered before it is named (analysis/liveness.py's
# MIN_UNANSWERED: one lost check is not a dead task).
MIN_UNANSWERED = 2
VERDICTS = {"DEADLINE_EXCEEDED": ("stalled", "frozen or hung"), "UNAVAILABLE": ("task_failure", "gone")}
MAX_MESSAGE_CHARS = 160


class Stops:
    """What heartbeats, liveness checks and exit records say about each task, folded as read
    (a few numbers per task: nothing grows with the run's length)."""

    def __init__(self, own_task: str | None = None):
        self.own_task = own_task
        self.beats: dict[str, int] = {}  # writer -> its newest heartbeat
        self.closed: set[str] = set()  # writers that wrote their clean-close marker
        self.progress: dict[str, tuple[int, int, str]] = {}  # subject -> (count, first beat with it, writer)
        self.unanswered: dict[str, tuple[int, str]] = {}  # liveness target -> (checks failed in a row, status)
        self.exits: dict[str, str] = {}  # task -> the title of its exit
        self.answers: dict[str, int] = {}  # task -> when the RPC probe last reached it
        self.processes: dict[str, tuple[str, int, int]] = {}  # task -> (host, pid, start) of its newest sample
        self._host = socket.gethostname()
        self._table = ProcessTable(self._host, 0, {}, frozenset())  # ``before_read``'s: asked of no process yet

    def before_read(self, now_ns: int) -> None:
        """Asks this host's process table about the tasks that missed a beat at ``now_ns``,
        before the records are read: a process gone now wrote all it would (``processes``).
        Only these can be judged at ``now_ns``: a read adds beats and closes, never takes any."""
        self._table = ProcessTable.take(self.processes[writer][1] for writer in self._missed(now_ns))

    def fold(self, kind: str, batch: pa.RecordBatch) -> None:
        """Folds a batch of any kind (kinds other than heartbeat, liveness, exit and system are ignored)."""
        if kind == "heartbeat":
            self._fold_heartbeats(batch.to_pylist())
        elif kind == "liveness":
            for row in sorted(batch.to_pylist(), key=lambda r: r["time_ns"] or 0):
                failed, _ = self.unanswered.get(row["target"], (0, ""))
                ok = row["status"] == "OK"
                self.unanswered[row["target"]] = (0 if ok else failed + 1, row["status"])
        elif kind == "exit":
            for row in batch.to_pylist():
                self.exits[row["task"]] = _exit_title(row)
        elif kind == "system":
            for row in batch.to_pylist():
                if row.get("pid_start_ns") is not None and row.get("pid") is not None:
                    self.processes[row["task"]] = (row["host"], row["pid"], row["pid_start_ns"])

    def _fold_heartbeats(self, rows: list[dict]) -> None:
        for row in sorted(rows, key=lambda r: r["time_ns"] or 0):
            writer, time_ns = row["task"], row["time_ns"] or 0
            self.beats[writer] = max(self.beats.get(writer, 0), time_ns)
            if row["closed"]:
                self.closed.add(writer)
            if row["progress"] is None or not row["subject"]:
                continue
            count, _, _ = self.progress.get(row["subject"], (None, 0, writer))
            if count != row["progress"]:
                self.progress[row["subject"]] = (row["progress"], time_ns, writer)

    def answered(self, task: str, time_ns: int) -> None:
        """The RPC probe reached ``task`` at ``time_ns``."""
        self.answers[task] = max(self.answers.get(task, 0), time_ns)

    def judge(self, now_ns: int, periods_ns: dict[str, float] | None = None) -> dict[tuple[str, str], str]:
        """What holds at ``now_ns``: (kind, task) -> the finding's title. ``periods_ns``:
        each worker's typical step, where known (a stall is judged against it too)."""
        found = {("task_failure", task): title for task, title in self.exits.items()}
        for target, (failed, status) in self.unanswered.items():
            if failed >= MIN_UNANSWERED and status in VERDICTS:
                kind, verdict = VERDICTS[status]
                found.setdefault((kind, target), f"{target} is {verdict}: {failed} status checks in a row "
                                                 f"unanswered ({status})")
        for key, title in self._ended_processes(now_ns).items():
            found.setdefault(key, title)
        alive = {writer for writer, beat in self.beats.items() if now_ns - beat < SILENT_AFTER_S * 1e9}
        for writer, beat in self.beats.items():
            if (writer not in alive and writer not in self.closed and writer != self.own_task
                    and ("task_failure", writer) not in found):
                found.setdefault(("stalled", writer), f"{writer} has written nothing for {(now_ns - beat) / 1e9:.0f} s "
                                                      f"(no heartbeat): stopped, frozen or gone")
        for task, title in self._no_progress(alive, periods_ns or {}).items():
            found.setdefault(("stalled", task), title)
        return found

    def _ended_processes(self, now_ns: int) -> dict[tuple[str, str], str]:
        """The tasks that missed a beat, left no last words, and whose process on this host
        the process table ``before_read`` took finds gone (``task_failure``) or stopped (``stalled``)."""
        found = {}
        for writer in self._missed(now_ns):
            process = self.processes[writer]
            state = self._table.state(process[1], process[2])
            if state is not None:
                said = ProcessEnd(writer, *process[:2], state, self.beats[writer]).describe()
                found[("task_failure" if state == GONE else "stalled", writer)] = (
                    f"{writer} {'died without last words' if state == GONE else 'stopped'}: {said}")
        return found

    def _missed(self, now_ns: int) -> list[str]:
        """The writers with a process on this host that missed a beat at ``now_ns`` and left
        no last words or clean close."""
        return [writer for writer, beat in self.beats.items()
                if (process := self.processes.get(writer)) is not None and process[0] == self._host
                and now_ns - beat >= MISSED_BEAT_S * 1e9 and writer not in self.closed and writer not in self.exits
                and writer != self.own_task]

    def _no_progress(self, alive: set[str], periods_ns: dict[str, float]) -> dict[str, str]:
        idle = {}  # subject -> seconds its count has not moved, on its writer's clock
        for subject, (count, since_ns, writer) in self.progress.items():
            if writer in alive and writer not in self.closed and subject not in self.closed:
                idle[subject] = (self.beats[writer] - since_ns) / 1e9
        if len(idle) < 2:
            return {}
        bar = {task: max(SCREEN_STALL_S, STALL_STEPS * periods_ns.get(task, 0) / 1e9) for task in idle}
        stalled = {task for task, seconds in idle.items() if seconds >= bar[task]}
        moving = set(idle) - stalled
        if moving:
            return {task: f"{task} has made no progress for {idle[task]:.0f} s while "
                          f"{', '.join(sorted(moving))} kept stepping" for task in stalled}
        # Every worker stopped (one frozen worker can hold the whole job): the ones the RPC
        # probe stopped reaching before the stall began, while it still reached another task since.
        began_ns = max(self.progress[task][1] for task in idle)
        reached = [time_ns for time_ns in self.answers.values() if time_ns > began_ns]
        unanswering = sorted(task for task in idle if self.answers.get(task, began_ns + 1) <= began_ns)
        if not reached or not unanswering:
            return {}
        return {task: f"{task} has not answered the RPC probe for {min(idle.values()):.0f} s, and the job has "
                      f"made no progress since" for task in unanswering}


def _exit_title(row: dict) -> str:
    if row.get("reason") == "exception":
        text = " ".join(str(row.get("message") or "").split())
        if len(text) > MAX_MESSAGE_CHARS:
            text = text[:MAX_MESSAGE_CHARS - 3] + "..."
        return f"{row['task']} ended on {row.get('error_type') or 'an error'}: {text}".rstrip(": ")
    return f"{row['task']} ended with its collectors open"


def typical_periods(rows: dict[str, tuple[np.ndarray, ...]]) -> dict[str, float]:
    """Each worker's median step (ns per record) from the screen's recent rows."""
    return {task: float(np.median(row[1])) for task, row in rows.items() if len(row[1])}
