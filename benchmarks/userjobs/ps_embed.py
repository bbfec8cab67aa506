"""HOLDOUT user job: a ParameterServerStrategy loop over a large embedding table.

Written for ``benchmarks/trials.py`` and never used to fit a threshold. A recommender's
loop as a user writes it: a 200,000 x 32 embedding table (25.6 MB) split over the ps
tasks by a ``MinSizePartitioner``, sparse ids per example, a two-layer tower, gradients
applied with ``scatter_sub`` to the rows a batch touched, one step per ``schedule``, and
tfdiag attached exactly as the README shows: ``instrument_coordinator(coordinator,
logdir)`` with no ``variables=``.

Options (``JobConfig.extra``, set by the trial): ``hot_ps`` (bool) creates the table
unpartitioned, so it lands whole on the first ps (``ps:0``) — a hot ps; ``raise_at``
(int) raises ``RuntimeError`` in the loop after that many steps (a user's bug).
"""

from __future__ import annotations

import sys
import time

from benchmarks.userjobs.runner import chief_trains
from tfdiag.sample_jobs.jobs import JobConfig, JobSummary
from tfdiag.sample_jobs.step_clock import StepClock

VOCABULARY, DIM, IDS, HIDDEN, BATCH = 200_000, 32, 16, 128, 256
TASK_COMMAND = [sys.executable, "-u", "-m", "benchmarks.userjobs.ps_embed"]


def train(config: JobConfig) -> str:
    """The chief's loop; returns the summary line."""
    import tensorflow as tf

    from tfdiag.collectors import instrument_coordinator

    hot = bool(config.extra.get("hot_ps"))
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    partitioner = None if hot else tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=256 << 10, max_shards=len(resolver.cluster_spec().as_dict()["ps"]))
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    with strategy.scope():
        table = tf.Variable(tf.random.uniform([VOCABULARY, DIM], -0.05, 0.05), name="embedding")
        w1 = tf.Variable(tf.random.normal([DIM, HIDDEN], stddev=0.1), name="w1")
        w2 = tf.Variable(tf.random.normal([HIDDEN, 1], stddev=0.1), name="w2")

    def dataset_fn(context):
        ids = tf.random.stateless_uniform([BATCH * 64, IDS], seed=[3, 4], maxval=VOCABULARY, dtype=tf.int64)
        labels = tf.cast(ids[:, :1] % 3 == 0, tf.float32)
        return tf.data.Dataset.from_tensor_slices((ids, labels)).repeat().batch(BATCH).prefetch(2)

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    coordinator = instrument_coordinator(tf.distribute.coordinator.ClusterCoordinator(strategy), config.logdir)
    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    def replica_fn(ids, labels):
        with tf.GradientTape() as tape:
            rows = tf.nn.embedding_lookup(table, ids)
            pooled = tf.reduce_mean(rows, axis=1)
            logits = tf.nn.relu(pooled @ w1) @ w2
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels, logits))
        shards = list(getattr(table, "variables", [table]))  # a partitioned table's gradients come per shard
        *g_shards, g1, g2 = tape.gradient(loss, [*shards, w1, w2])
        for shard, grad in zip(shards, g_shards):
            shard.scatter_sub(tf.IndexedSlices(0.1 * grad.values, grad.indices, grad.dense_shape))
        w1.assign_sub(0.1 * g1)
        w2.assign_sub(0.1 * g2)
        return loss

    @tf.function
    def step(iterator):
        ids, labels = next(iterator)
        return strategy.run(replica_fn, args=(ids, labels))

    raise_at = int(config.extra.get("raise_at") or 0)
    started = time.monotonic()
    clock = StepClock(config.steps)  # the job's own clock of its steps (its steady rate)
    for done in range(config.steps):
        if raise_at and done == raise_at:
            coordinator.join()
            raise RuntimeError(f"ps_embed: bad batch at step {done}")  # the planted user error
        coordinator.schedule(step, args=(iterator,))
        clock.tick(done + 1)
    coordinator.join()
    wall_s = time.monotonic() - started
    clock.tick(config.steps)
    return JobSummary(config.steps, wall_s, config.steps * BATCH, steady=clock.steady).line()


def main() -> int:
    return chief_trains(train, JobConfig.from_json(sys.argv[sys.argv.index("--config") + 1]))


if __name__ == "__main__":
    sys.exit(main())
