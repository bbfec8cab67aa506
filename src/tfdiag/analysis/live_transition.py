"""A live finding that began or cleared: its ``live_finding`` record and its announced line.

Pandas-free, so that both the cheap screen (``live_screen``, which announces stopped,
silent and failed tasks itself) and the confirming analysis (``live``) make the same
records and lines.

Example:
    >>> from tfdiag.analysis.findings import Finding, Recommendation, Severity
    >>> f = Finding("straggler", Severity.WARNING, "worker:1 is 1.8x slower per step than the other workers",
    ...             "", ("worker:1",), {}, Recommendation("", "", 1.22))
    >>> message("began", f.kind, f.tasks, f.title, 1.22, 41200)
    'tfdiag: worker:1 straggler since step 41,200: worker:1 is 1.8x slower per step than the other workers; predicted +22 % if repaired'
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Transition:
    """A finding that began or cleared: one ``live_finding`` record and one log line."""

    state: str  # "began" or "cleared"
    kind: str
    tasks: tuple[str, ...]
    severity: str
    onset_ns: int
    step: int | None
    predicted_speedup: float | None
    message: str
    time_ns: int
    window_s: float | None = None  # the seconds of records judged, ending at time_ns; None: the screen's own

    def record(self, task: str) -> dict:
        """The ``live_finding`` record of this transition, written by ``task``."""
        return dict(task=task, time_ns=self.time_ns, state=self.state, kind=self.kind, tasks=",".join(self.tasks),
                    severity=self.severity, onset_ns=self.onset_ns, step=self.step,
                    predicted_speedup=self.predicted_speedup, message=self.message, window_s=self.window_s)


def message(state: str, kind: str, tasks: tuple[str, ...], title: str, speedup: float | None,
            step: int | None) -> str:
    """The log line of a transition: ``tfdiag: <tasks> <kind> since step N: <title>; predicted +X % if repaired``.

    >>> message("began", "straggler", ("worker:1",), "slow", 1.001, 41200)[-33:]
    'no speed-up predicted if repaired'
    >>> message("began", "stalled", ("worker:1",), "no progress for 12 s", None, None)
    'tfdiag: worker:1 stalled since the start: no progress for 12 s'
    >>> message("cleared", "straggler", ("worker:1",), "slow", 1.22, 41200)
    'tfdiag: worker:1 straggler (since step 41,200) cleared'
    """
    who = f"{', '.join(tasks)} " if tasks else ""
    since = f"since step {step:,}" if step is not None else "since the start"
    if state == "cleared":
        return f"tfdiag: {who}{kind} ({since}) cleared"
    if speedup is None:
        predicted = ""
    elif round(speedup - 1, 2) <= 0:
        predicted = "; no speed-up predicted if repaired"
    else:
        predicted = f"; predicted {speedup - 1:+.0%} if repaired".replace("%", " %")
    return f"tfdiag: {who}{kind} {since}: {title}{predicted}"


def training_step(highest: int, steps_per_record: float, closures: bool) -> int:
    """The job's training step that a window's highest ``step`` number stands for.

    A ``step`` record's number is the worker's step, except under a ClusterCoordinator,
    where it is the closure's id (counted over the whole job) and a closure runs
    ``steps_per_record`` training steps: the job has then run about that many per closure
    dispatched so far, what the user's ``optimizer.iterations`` counts.

    >>> training_step(1_199, 1, closures=False), training_step(99, 10, closures=True)
    (1199, 1000)
    """
    return (highest + 1) * max(int(round(steps_per_record)), 1) if closures else highest
