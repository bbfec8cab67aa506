"""A job's own clock of its training steps: its throughput without its start-up.

A job's summary rate (``JobSummary.examples_per_s``) divides every example by the whole
training's wall time: tracing, the first steps' placement and the drain at the end are in
it. A job of a few seconds spends a large part of them there (``gen_fit``'s 150 steps: 1.6
s of 5.3), so a change that makes each step 1.28x faster shows as 1.16x. The steady rate
leaves out the first ``WARMUP_SHARE`` of the planned steps, timed by the job itself (never
from tfdiag's records: it is what a prediction is checked against).

Example:
    >>> ticks = iter(range(100)).__next__
    >>> clock = StepClock(planned=20, now=ticks)
    >>> for done in range(1, 21):
    ...     clock.tick(done)
    >>> clock.steady  # steps 2 to 20, one second each
    (18, 18)
"""

from __future__ import annotations

import time
from typing import Callable

# The share of a job's planned steps its steady rate leaves out: tracing and the first
# steps' placement are in them.
WARMUP_SHARE = 0.1


class StepClock:
    """``tick(done)`` after each step (``done``: the steps finished so far, or scheduled, where
    a loop only schedules them: tick once more after its join); ``steady`` is (steps,
    seconds) from the tick that passed the first ``WARMUP_SHARE`` of ``planned`` to the last.
    A ``ClusterCoordinator`` loop's early ticks time its schedules, not its steps (its queue
    takes them at once): its clock leaves out the tracing before the first schedule returns,
    and its steady rate stands to another run's as their whole trainings' do."""

    def __init__(self, planned: int, now: Callable[[], float] = time.perf_counter):
        self.mark = max(1, round(planned * WARMUP_SHARE))
        self._now = now
        self._from: tuple[int, float] | None = None  # (done, time) at the first tick past the mark
        self._last: tuple[int, float] | None = None

    def tick(self, done: int) -> None:
        now = self._now()
        if self._from is None and done >= self.mark:
            self._from = (done, now)
        self._last = (done, now)

    @property
    def steady(self) -> tuple[int, float] | None:
        """(steps, seconds) after the warm-up; None before a step past it was timed."""
        if self._from is None or self._last is None or self._last[0] <= self._from[0]:
            return None
        return self._last[0] - self._from[0], self._last[1] - self._from[1]
