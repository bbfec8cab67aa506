"""Whether a worker's closures just became slower than usual: what the coordinator already
knows, read for free.

The closure recorder hands :meth:`ClosurePace.slowed` each batch of closures it records
(about once a second). A closure's *busy time* is from when its worker could start it
(its dispatch, or the worker's previous result if that came later) to its result. A
worker's batch whose median busy time is ``RISE`` times its usual (``onsets.Onsets``) marks
an onset: the worker is returned once, when it turns slow, not on every batch while it
stays slow; after ``MOVED_AFTER`` slow batches in a row the new pace is the usual one. A
straggler slows its own closures; a delay on a link to a ps, every worker's, as much as
its steps wait on it (ps_tutorial's one-step closures several times; ps_ctl's 40-step
closures, whose TensorFlow runs the remote reads ahead, 1.3x for 10 ms: there the status
checks of ``liveness`` see it). The RPC probe then looks closer at the links
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

from tfdiag.collectors.onsets import Onsets

# A batch whose median busy time is this many times the worker's usual is an onset. A
# 10 ms link delay makes a step that waits on it several times slower (ps_tutorial's
# one-step closures); a 2x straggler, 2x. Below it a clean run's batch-to-batch jitter
# stays (its medians move by tens of percent on a loaded host).
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
        self._onsets = Onsets(RISE, warm_up=USUAL_BATCHES, settle=MOVED_AFTER)

    def slowed(self, closures: Iterable[tuple[str, int, int]]) -> set[str]:
        """The workers that turned slow in this batch of ``(worker, dispatch_ns, result_ns)``."""
        busy: dict[str, list[int]] = defaultdict(list)
        for worker, dispatch_ns, result_ns in sorted(closures, key=lambda closure: closure[2]):
            started = max(dispatch_ns, self._last_result_ns.get(worker, dispatch_ns))
            busy[worker].append(result_ns - started)
            self._last_result_ns[worker] = result_ns
        return {worker for worker, times in busy.items()
                if len(times) >= MIN_CLOSURES and self._onsets.began(worker, statistics.median(times))}
