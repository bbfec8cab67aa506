"""Whether this process ran when it wanted to: timed wake-ups, and how many came late.

Between samples the sampler's thread wakes every ``WAKE_S`` on average and times how much
later than asked each wait returned. A wake-up is a ``time.sleep`` and a clock read (its
CPU charged by the sampler's loop: 90-146 µs a wake-up where an ``Event.wait`` in a
``charged`` block took 127-185, ``benchmarks/micro.py collector_cost``). A running process
wakes well under a millisecond late, a few ms on a loaded host or while another thread
holds the GIL (its switch interval is 5 ms); a stopped process — ``SIGSTOP``, a container
CPU quota's throttling — wakes late by the rest of the stop whenever its timer expires
inside one. So the share of wake-ups ``events.LATE_WAKE_S`` or more late estimates the
share of time the process could not run (a little under it: the first ``LATE_WAKE_S`` of
each stop is not seen).
"""

from __future__ import annotations

import random
import time

from tfdiag.events import LATE_WAKE_S

# Mean seconds between two timed wake-ups (10 a second). Each wait is drawn at random from
# WAKE_S/2 to 3*WAKE_S/2: fixed waits lock onto a periodic quota (they wake in the running
# part of its period every time), random ones sample it fairly.
WAKE_S = 0.1
# Mean seconds between the timed wake-ups of a task that takes them mostly to probe the job's
# other workers on its host (``SystemSampler``): a ParameterServerStrategy coordinator, a
# TF1 worker. A probe finds a process stopped only while it is, so a few a second tell a
# stop duty cycle (a worker stopped a fifth of the time escapes 12 probes, 6 s of them,
# once in 15), where ten a second cost a ps_ctl coordinator 1 % of its throughput
# (benchmarks/overhead_ab.py: 0.990, 0.982-0.997, 315 µs of CPU a wake-up at load 3-7).
PROBE_WAKE_S = 0.5


class WakeTimer:
    """Counts this thread's wake-ups and those later than ``LATE_WAKE_S`` since the last ``take``.

    >>> timer = WakeTimer(wake_s=0.05)
    >>> timer.woke(asked_s=0.05, slept_s=0.0502); timer.woke(asked_s=0.05, slept_s=0.09)
    >>> timer.take()
    (2, 1, 40.0)
    """

    def __init__(self, wake_s: float = WAKE_S):
        self.wake_s = wake_s
        self._wakes = self._late = 0
        self._late_s = 0.0

    def sleep(self, at_most_s: float) -> None:
        """One timed wake-up: sleeps a random wait around ``wake_s`` (at most ``at_most_s``)
        and counts how late it returned."""
        asked = min(random.uniform(self.wake_s / 2, 1.5 * self.wake_s), at_most_s)
        before = time.monotonic()
        time.sleep(asked)
        self.woke(asked, time.monotonic() - before)

    def woke(self, asked_s: float, slept_s: float) -> None:
        late_s = slept_s - asked_s
        self._wakes += 1
        if late_s >= LATE_WAKE_S:
            self._late += 1
            self._late_s += late_s

    def take(self) -> tuple[int, int, float]:
        """``(wakes, late_wakes, late_ms)`` since the previous call."""
        taken = (self._wakes, self._late, round(self._late_s * 1e3, 3))
        self._wakes = self._late = 0
        self._late_s = 0.0
        return taken
