"""Pieces every sample job shares: in-graph delays, the tf.data options, progress reports.

Delays never burn CPU: they are ``SleepDataset`` ops (``tf.data.experimental``'s testing
``sleep``) on a one-element dataset read in-graph, so they run where the graph runs —
on the remote worker under ParameterServerStrategy, where a ``tf.py_function`` cannot
(its Python lives in the coordinator process).
"""

from __future__ import annotations

import logging
import os
import sys

from tfdiag.collectors.tf_internals import dataset_sleep, strategy_resolver
from tfdiag.events import parse_task

logger = logging.getLogger("tfdiag.sample_jobs")

# The launcher sets this for the task that prints the summary when a worker is to be
# killed at a step: the job writes the last step it reached to that file.
PROGRESS_ENV = "TFDIAG_SAMPLE_PROGRESS"


def sleep_us(tf, microseconds, value=None):
    """An in-graph, non-busy sleep: returns ``value`` (or 0) after ``microseconds``.

    ``take(1)`` stops the iterator before a second ``GetNext``, which would sleep again.
    """
    element = tf.constant(0, tf.int64) if value is None else value
    dataset = tf.data.Dataset.from_tensors(element).apply(dataset_sleep(tf.cast(microseconds, tf.int64))).take(1)
    return dataset.get_single_element()


def per_worker_value(tf, values: dict, worker_index, default=0, dtype=None):
    """``values[worker_index]`` or ``default``, as a tensor; ``worker_index`` may be a tensor.

    Under ParameterServerStrategy pass
    ``tf.distribute.coordinator.experimental_get_current_worker_index()``: it is resolved
    when the closure (or the per-worker dataset function) runs on a worker.
    """
    dtype = dtype or tf.int64
    index = tf.cast(worker_index, tf.int64)
    value = tf.constant(default, dtype)
    for worker, amount in values.items():
        value = tf.where(tf.equal(index, int(worker)), tf.constant(amount, dtype), value)
    return value


def pipeline_options(tf, plan, *, autoshard: bool = False):
    """The ``tf.data.Options`` of every sample pipeline.

    tf.data's default graph rewrites would parallelise the delay map and inject a
    prefetch after it, hiding an input bottleneck the job is asked to plant; the
    baseline pipeline is exactly what the job writes, and the tunings are the explicit
    ``num_parallel_calls`` and ``prefetch``. With ``autoshard``, ``--tune
    autoshard=data|file|off|auto`` sets the auto-shard policy (multi-worker strategies).
    """
    options = tf.data.Options()
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
    policy = plan.tuned("autoshard")
    if autoshard and policy:
        options.experimental_distribute.auto_shard_policy = getattr(
            tf.data.experimental.AutoShardPolicy, policy.upper()
        )
    return options


def say_once(message: str, _said=set()) -> None:  # noqa: B006 - a deliberate process-wide memo
    """Prints ``tfdiag-sample: MESSAGE`` to stderr the first time it is called with it."""
    if message not in _said:
        _said.add(message)
        print(f"tfdiag-sample: {message}", file=sys.stderr, flush=True)


class Progress:
    """Tells the launcher the last step this job reached (for ``kill-worker=I@STEP``).

    A no-op unless the launcher asked for it through ``TFDIAG_SAMPLE_PROGRESS``; then each
    ``update`` replaces a small file (write to a temporary name, then rename).
    """

    def __init__(self, environ=None):
        self.path = (os.environ if environ is None else environ).get(PROGRESS_ENV) or None
        self.step = -1

    @property
    def enabled(self) -> bool:
        return self.path is not None

    def update(self, step: int) -> None:
        if self.path is None or step <= self.step:
            return
        self.step = step
        try:
            tmp = f"{self.path}.tmp"
            with open(tmp, "w") as f:
                f.write(str(step))
            os.replace(tmp, self.path)
        except OSError as error:
            logger.warning("tfdiag-sample: cannot write progress to %s (%s)", self.path, error)
            self.path = None


def read_progress(path) -> int:
    """The step last written by ``Progress.update`` to ``path``; -1 if none yet."""
    try:
        with open(path) as f:
            return int(f.read().strip() or -1)
    except (OSError, ValueError):
        return -1


def worker_index_from_tf_config() -> int:
    """This process's worker index from ``TF_CONFIG`` (0 when not a worker or unset)."""
    from tfdiag.collectors import identity

    job, index = parse_task(identity.resolve_task(default="worker:0"))
    return index if job == "worker" else 0


def on_ps(tf, strategy, index: int, candidates=()):
    """A variable that sits on ps ``index`` (ParameterServerStrategy, inside its scope).

    One of ``candidates`` if one is there already, else a new non-trainable scalar:
    variables are placed round-robin over the ps tasks, so one of the next ``num_ps``
    new variables lands on ps ``index``. Pass the result to
    ``strategy.extended.colocate_vars_with`` to put a variable next to it.
    """
    suffix = f"/job:ps/replica:0/task:{index}/"
    for variable in candidates:
        for shard in getattr(variable, "variables", None) or [variable]:
            if suffix in shard.device:
                return shard
    ps_count = strategy_resolver(strategy).cluster_spec().num_tasks("ps")  # the round-robin period
    for attempt in range(ps_count):
        anchor = tf.Variable(0.0, trainable=False, name=f"ps{index}_anchor{attempt}")
        if suffix in anchor.device:
            return anchor
    raise RuntimeError(f"no variable could be placed on ps {index}")


def make_partitioner(tf, plan, min_shard_bytes: int = 256 << 10):
    """``--tune partitioner=N``: ``MinSizePartitioner(min_shard_bytes, max_shards=N)``, or None."""
    shards = plan.tuned("partitioner")
    if not shards:
        return None
    return tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=min_shard_bytes, max_shards=int(shards)
    )
