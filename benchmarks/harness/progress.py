"""A running job's progress, read from its own tfdiag records as they are written.

``Progress(run_dir)`` reads the ``step`` and ``closure`` frames each task file gained since
its last ``poll()`` (``tfdiag.store.read_task_file`` from the offset it stopped at, only
those two kinds; an incomplete last frame is read on a later poll), and counts:

* per task, the training steps its ``step`` records cover (a record's ``steps``, null: 1):
  the worker's own file under Keras and TF1, the coordinator's under a ClusterCoordinator;
* the closures that came back ``ok`` (a ClusterCoordinator's ``closure`` records, written
  every second where its ``step`` records come every five: ``closure_recorder``).

``job_steps`` turns those into the job's steps: the most any worker ran where every worker
runs every step (synchronous training: each worker's records count the job's steps), else
the sum over the workers, or the closures times their steps, whichever is further.
``training_span`` reads a run's step records once, after it: when its training (or one
task's) began and ended, and how many steps ended after a given time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from tfdiag.store import read_task_file, task_files

PROGRESS_KINDS = frozenset({"step", "closure"})


@dataclass
class Progress:
    """Steps and closures of a run so far; ``poll()`` reads what its files gained since."""

    run_dir: Path
    steps: dict[str, int] = field(default_factory=dict)  # per task: training steps its records cover
    closures: int = 0  # closures that came back ok
    _offsets: dict[str, int] = field(default_factory=dict)

    def poll(self) -> Progress:
        files, _ = task_files(self.run_dir)
        for path in files:
            name = os.fspath(path)
            read = read_task_file(path, self._offsets.get(name, 0), PROGRESS_KINDS)
            self._offsets[name] = read.end_offset
            for batch in read.batches.get("step", ()):
                columns = batch.to_pydict()
                for task, steps in zip(columns["task"], columns.get("steps") or [None] * batch.num_rows):
                    self.steps[task] = self.steps.get(task, 0) + (steps or 1)
            for batch in read.batches.get("closure", ()):
                self.closures += sum(bool(ok) for ok in batch.column("ok").to_pylist())
        return self

    def job_steps(self, synchronous: bool, closure_steps: int = 1) -> int:
        """The job's steps so far (see the module's docstring).

        >>> progress = Progress(Path("-"), steps={"worker:0": 40, "worker:1": 30}, closures=9)
        >>> progress.job_steps(True), progress.job_steps(False), progress.job_steps(False, closure_steps=10)
        (40, 70, 90)
        """
        counted = self.steps.values()
        by_steps = (max(counted, default=0) if synchronous else sum(counted))
        return max(by_steps, self.closures * closure_steps)


@dataclass(frozen=True)
class TrainingSpan:
    """When a run's step records (all, or one task's) began and ended, on the tasks' wall clock
    (``time.time_ns()``: one clock on a local cluster); None where there were none."""

    first_ns: int | None
    last_ns: int | None
    ends_ns: tuple[int, ...] = ()  # each record's end, sorted
    steps: tuple[int, ...] = ()  # the training steps of each, in the same order

    def steps_after(self, time_ns: int) -> int:
        """Training steps whose records ended after ``time_ns``."""
        return sum(steps for end, steps in zip(self.ends_ns, self.steps) if end > time_ns)


def training_span(run_dir: str | os.PathLike, task: str | None = None) -> TrainingSpan:
    """The span of the run's ``step`` records, or of those of ``task`` (a worker) only."""
    ranges = []
    files, _ = task_files(run_dir)
    for path in files:
        for batch in read_task_file(path, 0, frozenset({"step"})).batches.get("step", ()):
            table = pa.Table.from_batches([batch]).to_pydict()
            steps = table.get("steps") or [None] * batch.num_rows
            ranges += [(begin, end, count or 1) for who, begin, end, count
                       in zip(table["task"], table["begin_ns"], table["end_ns"], steps) if task is None or who == task]
    if not ranges:
        return TrainingSpan(None, None)
    ranges.sort(key=lambda r: r[1])
    return TrainingSpan(min(r[0] for r in ranges), ranges[-1][1], tuple(r[1] for r in ranges),
                        tuple(r[2] for r in ranges))
