"""Whether a worker's closures just became slower than usual: what the coordinator already
knows, read for free.

The closure recorder hands :meth:`ClosurePace.slowed` each batch of closures it records
(about once a second). A closure's *busy time* is from when its worker could start it
(its dispatch, or the worker's previous result if that came later) to its result. A
worker's batch whose median busy time is ``RISE`` times its usual (a moving geometric
mean of its earlier batches' medians) marks an onset: the worker is returned once, when
it turns slow, not on every batch while it stays slow; after ``MOVED_AFTER`` slow batches
in a row the new pace is the usual one. A delay on a link to a ps slows every worker's
closures at once (each step reads the variables there), a link to one worker or a
straggler slows that worker's: the RPC probe then looks closer at the links
(``rpc_probe.RpcProber.look_closer``), so a clean run, whose pace holds, costs no probe.

Example:
    >>> pace = ClosurePace()
    >>> batches = [[("worker:0", t * 10_000_000, (t + 1) * 10_000_000) for t in range(b * 5, b * 5 + 5)]
    ...            for b in range(USUAL_BATCHES)]
    >>> [pace.slowed(batch) for batch in batches][-1]
    set()
    >>> start = USUAL_BATCHES * 50_000_000
    >>> pace.slowed([("worker:0", start + t * 30_000_000, start + (t + 1) * 30_000_000) for t in range(5)])
    {'worker:0'}
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Iterable

# A batch whose median busy time is this many times the worker's usual is an onset. A
# 10 ms link delay makes a step that reads its variables over it several times slower
# (ps_ctl's 40-step closures: about 15x); a 2x straggler, 2x. Below it a clean run's
# batch-to-batch jitter stays (its medians move by tens of percent on a loaded host).
RISE = 1.5
# Closures of a worker a batch must hold for its median to say anything.
MIN_CLOSURES = 3
# Batches of a worker before its usual is trusted.
USUAL_BATCHES = 5
# Slow batches in a row after which the slower pace is the usual one (a job that changed).
MOVED_AFTER = 10


class ClosurePace:
    """Per worker, the usual busy time of its closures, and the onsets of slower ones."""

    def __init__(self):
        self._last_result_ns: dict[str, int] = {}
        self._usual_ns: dict[str, float] = {}
        self._batches: dict[str, int] = defaultdict(int)
        self._slow_batches: dict[str, int] = {}  # worker -> slow batches in a row, while slow

    def slowed(self, closures: Iterable[tuple[str, int, int]]) -> set[str]:
        """The workers that turned slow in this batch of ``(worker, dispatch_ns, result_ns)``."""
        busy: dict[str, list[int]] = defaultdict(list)
        for worker, dispatch_ns, result_ns in sorted(closures, key=lambda closure: closure[2]):
            started = max(dispatch_ns, self._last_result_ns.get(worker, dispatch_ns))
            busy[worker].append(result_ns - started)
            self._last_result_ns[worker] = result_ns
        onsets = set()
        for worker, times in busy.items():
            if len(times) >= MIN_CLOSURES and self._is_slow(worker, statistics.median(times)):
                onsets.add(worker)
        return onsets

    def _is_slow(self, worker: str, median_ns: float) -> bool:
        """Folds one batch's median into ``worker``'s pace; whether it begins a slow spell."""
        usual = self._usual_ns.get(worker)
        slow = usual is not None and self._batches[worker] >= USUAL_BATCHES and median_ns >= RISE * usual
        if slow:
            in_a_row = self._slow_batches.get(worker, 0) + 1
            self._slow_batches[worker] = in_a_row
            if in_a_row >= MOVED_AFTER:  # the job's pace changed: this is its usual now
                self._usual_ns[worker] = median_ns
                del self._slow_batches[worker]
            return in_a_row == 1
        self._slow_batches.pop(worker, None)
        median_ns = max(median_ns, 1.0)
        self._usual_ns[worker] = median_ns if usual is None else usual ** 0.75 * median_ns ** 0.25
        self._batches[worker] += 1
        return False
