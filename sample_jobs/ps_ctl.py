"""``ps_ctl``: ParameterServerStrategy + ClusterCoordinator custom training loop.

The loop a user would write (and copy): a synthetic regression dataset generated
in-graph on each worker through ``create_per_worker_dataset``, a small MLP as a
``tf.Module`` (works with variable partitioners, unlike a Keras 3 model under
ParameterServerStrategy, see TF-NOTES), plain SGD, one ``coordinator.schedule`` per
step and a final ``coordinator.join()``. tfdiag is attached with one line,
``instrument_coordinator``, unless ``--no-collect``.

One step consumes one dataset element: examples are batched *before* the
``input-delay`` map, so ``input-delay=MS`` costs MS per step (per batch). ``--tune
map_parallel=on`` runs that map with ``num_parallel_calls=AUTOTUNE`` and ``--tune
prefetch=on`` adds ``prefetch(AUTOTUNE)`` after it.

Delays never burn CPU: they are ``SleepDataset`` ops (``tf.data.experimental``'s
testing ``sleep``) on a one-element dataset read in-graph, so they run on the remote
worker — ``tf.py_function`` cannot (its Python lives in the coordinator process).
"""

from __future__ import annotations

import logging
import time

from tfdiag.sample_jobs.inject import InputDelay, SlowWorker
from tfdiag.sample_jobs.jobs import JobConfig, JobSummary

logger = logging.getLogger("tfdiag.sample_jobs")

FEATURES = 32
HIDDEN = 64
LEARNING_RATE = 0.05
# Closures the coordinator may hold in flight before ``schedule`` blocks; a join every
# so often keeps a slow worker from being starved of the queue's tail.
JOIN_EVERY = 0  # 0: one join at the end, as most user loops do


def sleep_us(tf, microseconds, value=None):
    """An in-graph, non-busy sleep: returns ``value`` (or 0) after ``microseconds``.

    ``take(1)`` stops the iterator before a second ``GetNext``, which would sleep again.
    """
    from tensorflow.python.data.experimental.ops import testing

    element = tf.constant(0, tf.int64) if value is None else value
    dataset = tf.data.Dataset.from_tensors(element).apply(testing.sleep(tf.cast(microseconds, tf.int64))).take(1)
    return dataset.get_single_element()


def make_dataset_fn(tf, config: JobConfig):
    """The per-worker input pipeline: generate → batch → (delay map) → (prefetch)."""
    plan = config.plan
    batch = config.batch_size
    delay_us = int(sum(i.ms for i in plan.of(InputDelay)) * 1000)
    parallel = tf.data.AUTOTUNE if plan.is_on("map_parallel") else None
    prefetch = plan.is_on("prefetch")
    true_w = tf.linspace(-1.0, 1.0, FEATURES)[:, None]

    def make_example(index):
        seed = tf.stack([index, tf.constant(7, tf.int64)])
        x = tf.random.stateless_normal([FEATURES], seed=seed)
        noise = tf.random.stateless_normal([1], seed=seed + 1)
        y = tf.tanh(tf.matmul(x[None, :], true_w))[0] + 0.05 * noise
        return x, y

    def dataset_fn():
        dataset = tf.data.Dataset.counter().map(make_example).batch(batch, drop_remainder=True)
        if delay_us:
            dataset = dataset.map(lambda x, y: (sleep_us(tf, delay_us, x), y), num_parallel_calls=parallel)
        if prefetch:
            dataset = dataset.prefetch(tf.data.AUTOTUNE)
        # tf.data's default graph rewrites would parallelise the delay map and inject a
        # prefetch after it, hiding an input bottleneck the job is asked to plant; the
        # baseline pipeline is exactly what is written above, and the tunings are the
        # explicit `num_parallel_calls` and `prefetch`.
        options = tf.data.Options()
        options.experimental_optimization.map_parallelization = False
        options.experimental_optimization.inject_prefetch = False
        return dataset.with_options(options)

    return dataset_fn


class MLP:
    """A two-layer perceptron as plain ``tf.Variable``s (created under the strategy scope)."""

    def __init__(self, tf):
        init = tf.random_normal_initializer(stddev=0.1, seed=1)
        self.w1 = tf.Variable(init([FEATURES, HIDDEN]), name="dense1/kernel")
        self.b1 = tf.Variable(tf.zeros([HIDDEN]), name="dense1/bias")
        self.w2 = tf.Variable(init([HIDDEN, 1]), name="dense2/kernel")
        self.b2 = tf.Variable(tf.zeros([1]), name="dense2/bias")
        self.variables = [self.w1, self.b1, self.w2, self.b2]

    def __call__(self, tf, x):
        hidden = tf.nn.relu(tf.matmul(x, self.w1) + self.b1)
        return tf.matmul(hidden, self.w2) + self.b2


def make_train_step(tf, strategy, model: MLP, config: JobConfig):
    slow = {i.worker: i.ms for i in config.plan.of(SlowWorker)}

    def extra_delay_us():
        """Microseconds this worker sleeps per step (``slow-worker=I:MS``)."""
        index = tf.cast(tf.distribute.coordinator.experimental_get_current_worker_index(), tf.int64)
        delay = tf.constant(0, tf.int64)
        for worker, ms in slow.items():
            delay += tf.where(tf.equal(index, worker), tf.constant(int(ms * 1000), tf.int64), 0)
        return delay

    @tf.function
    def train_step(iterator):
        def replica_fn(x, y):
            # Reading the variables waits for the batch, so a delay cannot overlap them.
            with tf.control_dependencies([x]), tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(model(tf, x) - y))
            grads = tape.gradient(loss, model.variables)
            for variable, grad in zip(model.variables, grads):
                variable.assign_sub(LEARNING_RATE * grad)
            return loss

        x, y = next(iterator)
        if slow:
            x = sleep_us(tf, extra_delay_us(), x)  # the step cannot start before the delay ends
        loss = strategy.run(replica_fn, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, loss, axis=None)

    return train_step


def run(config: JobConfig) -> JobSummary:
    """Runs the job as the coordinator (the chief task of ``TF_CONFIG``)."""
    import tensorflow as tf

    from tfdiag.collectors import identity
    from tfdiag.sample_jobs.task import wait_for_cluster

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    wait_for_cluster(resolver.cluster_spec().as_dict(), identity.resolve_task(default="chief:0"))
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    if config.collect:
        from tfdiag.collectors import instrument_coordinator

        coordinator = instrument_coordinator(coordinator, config.logdir)

    with strategy.scope():
        model = MLP(tf)
    train_step = make_train_step(tf, strategy, model, config)
    dataset_fn = make_dataset_fn(tf, config)

    # dataset_fn runs on each worker and its dataset is read directly. (Wrapping it in
    # strategy.distribute_datasets_from_function would put a one-element
    # MultiDeviceIterator buffer in front of it, a prefetch the user did not ask for;
    # InputReplicationMode.PER_REPLICA, which avoids that buffer, fails to bind the
    # iterator under ParameterServerStrategy in TF 2.21.) `--tune prefetch=on` is then
    # the only prefetch.
    @tf.function
    def per_worker_dataset_fn():
        return dataset_fn()

    per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
    per_worker_iterator = iter(per_worker_dataset)

    # Warm-up: trace and ship the function to every worker before the clock starts.
    coordinator.schedule(train_step, args=(per_worker_iterator,))
    coordinator.join()

    start = time.perf_counter()
    loss = None
    for step in range(config.steps):
        loss = coordinator.schedule(train_step, args=(per_worker_iterator,))
        if JOIN_EVERY and (step + 1) % JOIN_EVERY == 0:
            coordinator.join()
    coordinator.join()
    wall_s = time.perf_counter() - start
    logger.info("ps_ctl: final loss %.4f", float(loss.fetch()))
    if config.collect:
        coordinator.close()
    return JobSummary(steps=config.steps, wall_s=wall_s, examples=config.steps * config.batch_size)
