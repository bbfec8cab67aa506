"""The all-reduce probe of ``DiagnosticsCallback`` under MultiWorkerMirroredStrategy.

About every ``every_s`` seconds (sooner in the first seconds: :class:`ProbeCadence`) it
times an all-reduce of ``size_bytes`` across the workers and writes one ``allreduce``
record. It runs in the training thread, at the same step on every worker (collectives
must be issued in the same order everywhere: the probe carries each worker's step time
and the step of the next one follows from their mean, the same on every worker), and
costs one small all-reduce round trip per probe (plus one untimed call the first time,
which traces the function and sets up the collective).

Example:
    >>> probe = AllreduceProbe(strategy, writer, every_s=5.0)  # doctest: +SKIP
    >>> if step >= probe.cadence.next_step:  # doctest: +SKIP
    ...     probe.run(step, recent_steps)
"""

from __future__ import annotations

import logging
import math
import time

logger = logging.getLogger("tfdiag")

# A 4 KB all-reduce between two local workers takes ~2-5 ms. Its first call, a few steps
# in, is an untimed warm-up; the next ones come 0.5, 1 and 2 s after the one before (so
# that a short run still gets a few), then every DEFAULT_ALLREDUCE_EVERY_S (ProbeCadence).
DEFAULT_ALLREDUCE_EVERY_S = 5.0
ALLREDUCE_RAMP_S = (0.5, 1.0, 2.0)
FIRST_ALLREDUCE_STEP = 5
DEFAULT_ALLREDUCE_BYTES = 4096
# The probe carries each worker's step time, from its last steps, at most this many.
STEP_TIME_STEPS = 50


def _allreduce_function(strategy, size_bytes: int):
    """A ``tf.function`` summing a float32 vector of ``size_bytes`` over every replica.

    Its argument, this worker's seconds per step, is the vector's first element; it
    returns the replicas' mean of it, the same value on every worker.
    """
    import tensorflow as tf

    elements = max(int(size_bytes) // 4, 1)

    @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])  # one trace, whatever the value
    def allreduce(step_s):
        value = strategy.run(lambda: tf.concat([tf.reshape(step_s, [1]), tf.ones([elements - 1], tf.float32)], 0))
        total = strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
        return total[0] / strategy.num_replicas_in_sync

    return allreduce


class ProbeCadence:
    """At which steps the all-reduce probe runs: every few seconds, at the same steps on every worker.

    Collectives must be issued in the same order on every worker, so no worker may decide
    by its own clock. Each probe's all-reduce carries every worker's recent seconds per
    step and returns their mean, identical everywhere; the next probe comes as many steps
    later as make up the next gap at that pace: ``ramp_s``'s gaps after the first calls,
    then ``every_s``. The first call is at ``first_step``.

    >>> cadence = ProbeCadence(every_s=5.0)
    >>> cadence.next_step
    5
    >>> cadence.ran(5, step_s=0.01)  # then 0.5 s later: 50 steps of 10 ms
    55
    >>> [cadence.ran(step, 0.01) for step in (55, 155, 355)]
    [155, 355, 855]
    """

    def __init__(self, every_s: float, ramp_s: tuple[float, ...] = ALLREDUCE_RAMP_S,
                 first_step: int = FIRST_ALLREDUCE_STEP):
        self.every_s = every_s
        self.ramp_s = ramp_s
        self.calls = 0
        self.next_step = first_step

    def ran(self, step: int, step_s: float) -> int:
        """Records a probe at ``step`` that read ``step_s`` seconds per step; returns the next probe's step."""
        gap_s = self.ramp_s[self.calls] if self.calls < len(self.ramp_s) else self.every_s
        self.calls += 1
        steps = round(gap_s / step_s) if step_s > 0 and math.isfinite(step_s) else FIRST_ALLREDUCE_STEP
        self.next_step = step + max(int(steps), 1)
        return self.next_step


class AllreduceProbe:
    """Times an all-reduce of ``size_bytes`` across the workers of ``strategy`` at the
    steps its ``cadence`` picks; one ``allreduce`` record per timed call into ``writer``."""

    def __init__(self, strategy, writer, every_s: float = DEFAULT_ALLREDUCE_EVERY_S,
                 size_bytes: int = DEFAULT_ALLREDUCE_BYTES):
        self.writer = writer
        self.size_bytes = size_bytes
        self.cadence = ProbeCadence(every_s)
        self._allreduce = _allreduce_function(strategy, size_bytes)

    def run(self, step: int, recent: list[tuple[int, int]]) -> bool:
        """Runs the probe at ``step`` (untimed the first time, which traces the function and
        sets up the collective) and sets the step of the next one from the workers' mean
        step time; ``recent`` are this worker's last steps' ``(begin_ns, end_ns)`` (at most
        ``STEP_TIME_STEPS``). Returns False when the all-reduce failed: the probe is then off."""
        step_s = sum(end - begin for begin, end in recent) / len(recent) / 1e9
        warm = self.cadence.calls > 0
        start_ns = time.time_ns()
        begin = time.perf_counter_ns()
        try:
            mean_step_s = float(self._allreduce(step_s))
        except Exception as error:  # noqa: BLE001 - the same error happens on every worker
            logger.warning("tfdiag: all-reduce probe failed (%r); it is off.", error)
            return False
        duration_ns = time.perf_counter_ns() - begin
        self.cadence.ran(step, mean_step_s)
        if warm:
            self.writer.append("allreduce", task=self.writer.task, time_ns=start_ns, duration_ns=duration_ns,
                               bytes=self.size_bytes)
        return True
