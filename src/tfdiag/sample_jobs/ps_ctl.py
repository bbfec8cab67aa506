"""``ps_ctl``: ParameterServerStrategy + ClusterCoordinator custom training loop.

The loop a user would write (and copy): a synthetic regression dataset generated
in-graph on each worker through ``create_per_worker_dataset``, an MLP as a
``tf.Module``-style object of plain ``tf.Variable``s (works with variable partitioners,
which a Keras 3 model under ParameterServerStrategy does not support), plain SGD, one
``coordinator.schedule`` per step and a final ``coordinator.join()``. tfdiag is attached
with one line, ``instrument_coordinator``, unless ``--no-collect``.

Size: ``--model-size`` is the hidden width (three hidden layers), ``--batch`` the
examples per step; the defaults (256, 1024) make a step about 20-30 ms of compute on
one CPU core, so a clean run is not dominated by the coordinator's dispatch gap.

Input: each dataset element is a whole batch, generated vectorised from its index
(``stateless_normal``) for the first ``CACHED_BATCHES`` elements and served from
``.cache()`` after that, so the pipeline costs well under a millisecond per step.
``input-delay=MS`` adds a map that sleeps MS per element (per batch, i.e. per step);
each closure runs ``STEPS_PER_CLOSURE`` steps (``--tune steps_per_closure=N``);
``--tune map_parallel=on`` runs that map with ``num_parallel_calls=AUTOTUNE`` and
``--tune prefetch=on`` adds ``prefetch(AUTOTUNE)``.

Injections: ``slow-worker=I:MS`` sleeps MS in-graph before worker I's step (with
``@STEP``, in the closures scheduled from STEP on: a slow-down that begins mid-run);
``shard-skew=I:F`` makes worker I's batches F times larger (the per-worker dataset
function reads the worker index), so it consumes F times the examples per step;
``hot-ps=I`` adds a 4 MB dense layer whose kernel is created colocated with a variable
that sits on ps I (verified through ``variable.device``); ``--tune partitioner=N``
creates the strategy with ``MinSizePartitioner(max_shards=N)``, which splits that kernel
over the ps tasks; ``kill-worker=I@STEP`` is done by the launcher — the loop joins at
STEP and reports progress, the coordinator re-schedules the closures that the dead
worker held and picks the worker up again once it is restarted.
"""

from __future__ import annotations

import contextlib
import logging
import time

from tfdiag.events import STEPS_PER_CLOSURE  # training steps per closure (``--tune steps_per_closure=N``)
from tfdiag.sample_jobs.common import Progress, make_partitioner, on_ps, per_worker_value, pipeline_options, sleep_us
from tfdiag.sample_jobs.inject import HotPs, InputDelay, KillWorker, ShardSkew, SlowWorker
from tfdiag.sample_jobs.jobs import JobConfig, JobSummary
from tfdiag.sample_jobs.step_clock import StepClock

logger = logging.getLogger("tfdiag.sample_jobs")

FEATURES = 32
LAYERS = 3
LEARNING_RATE = 0.05
# hot-ps: a dense layer of HOT_UNITS outputs on top of the hidden layers; at the
# default width its kernel is 256 x 4096 float32 = 4 MB, read and updated every step.
HOT_UNITS = 4096
# Distinct batches each worker generates and then cycles through from tf.data's cache.
CACHED_BATCHES = 16

__all__ = ["run", "sleep_us"]


def make_dataset_fn(tf, config: JobConfig):
    """The per-worker input pipeline: batches generated from their index → (delay) → (prefetch)."""
    plan = config.plan
    batch = config.batch_size
    skew = {i.worker: int(round(batch * i.factor)) for i in plan.of(ShardSkew)}
    delay_us = int(sum(i.ms for i in plan.of(InputDelay)) * 1000)
    parallel = tf.data.AUTOTUNE if plan.is_on("map_parallel") else None
    true_w = tf.linspace(-1.0, 1.0, FEATURES)[:, None]

    def dataset_fn():
        # Worker I of shard-skew=I:F reads batches F times larger (resolved per worker).
        worker = tf.distribute.coordinator.experimental_get_current_worker_index() if skew else 0
        size = per_worker_value(tf, skew, worker, default=batch, dtype=tf.int32) if skew else batch

        def make_batch(index):
            seed = tf.stack([index, tf.constant(7, tf.int64)])
            x = tf.random.stateless_normal([size, FEATURES], seed=seed)
            noise = tf.random.stateless_normal([size, 1], seed=seed + 1)
            return x, tf.tanh(tf.matmul(x, true_w)) + 0.05 * noise

        # Generated once, then served from memory: the clean pipeline costs next to nothing
        # per step, as a well-built one should, so what input-delay plants is all there is.
        dataset = tf.data.Dataset.range(CACHED_BATCHES).map(make_batch).cache().repeat()
        if delay_us:
            dataset = dataset.map(lambda x, y: (sleep_us(tf, delay_us, x), y), num_parallel_calls=parallel)
        if plan.is_on("prefetch"):
            dataset = dataset.prefetch(tf.data.AUTOTUNE)
        return dataset.with_options(pipeline_options(tf, plan))

    return dataset_fn


def dense_value(tf, variable):
    """The full value of a variable, partitioned (``ShardedVariable``) or not."""
    shards = getattr(variable, "variables", None)
    return tf.concat(list(shards), axis=0) if shards else variable


class MLP:
    """``LAYERS`` ReLU layers of width ``hidden`` and a linear output, as plain variables.

    Created under ``strategy.scope()``: ParameterServerStrategy places each variable on a
    ps (round-robin, or split by the partitioner). With ``hot_ps`` set, a wide extra layer
    is created colocated with a variable that already sits on that ps, unless the strategy
    was made ``partitioned``: the partitioner is to split that layer over the ps tasks,
    and ParameterServerStrategy never splits a colocated variable.
    """

    def __init__(self, tf, strategy, hidden: int, hot_ps: int | None = None, partitioned: bool = False):
        init = tf.random_normal_initializer(stddev=0.05, seed=1)
        self.layers = []
        width = FEATURES
        for i in range(LAYERS):
            kernel = tf.Variable(init([width, hidden]), name=f"dense{i}/kernel")
            bias = tf.Variable(tf.zeros([hidden]), name=f"dense{i}/bias")
            self.layers.append((kernel, bias))
            width = hidden
        self.hot = None
        if hot_ps is not None:
            anchor = on_ps(tf, strategy, hot_ps, [v for layer in self.layers for v in layer])
            with strategy.extended.colocate_vars_with(anchor) if not partitioned else contextlib.nullcontext():
                kernel = tf.Variable(init([width, HOT_UNITS]), name="hot/kernel")
            self.hot = (kernel, tf.Variable(init([HOT_UNITS, 1]), name="hot/out"))
        self.out = tf.Variable(init([width, 1]), name="out/kernel")
        self.out_bias = tf.Variable(tf.zeros([1]), name="out/bias")

    @property
    def variables(self) -> list:
        """Every trainable variable (the shards of a partitioned one, each)."""
        found = [v for layer in self.layers for v in layer] + [self.out, self.out_bias]
        if self.hot:
            found += list(self.hot)
        flat = []
        for variable in found:
            flat.extend(getattr(variable, "variables", None) or [variable])
        return flat

    def __call__(self, tf, x):
        for kernel, bias in self.layers:
            x = tf.nn.relu(tf.matmul(x, dense_value(tf, kernel)) + dense_value(tf, bias))
        y = tf.matmul(x, dense_value(tf, self.out)) + self.out_bias
        if self.hot:
            wide = tf.nn.relu(tf.matmul(x, dense_value(tf, self.hot[0])))
            y += 0.01 * tf.matmul(wide, dense_value(tf, self.hot[1]))
        return y


def log_placement(model: MLP) -> None:
    """Logs where every variable landed (what tfdiag's placement capture records)."""
    for variable in model.variables:
        logger.info("ps_ctl: variable %s %s on %s", variable.name, variable.shape.as_list(), variable.device)


def steps_per_closure(config: JobConfig) -> int:
    """Training steps per scheduled closure: ``--tune steps_per_closure=N``, else the default."""
    return int(config.plan.tuned("steps_per_closure") or STEPS_PER_CLOSURE)


def slow_workers(config: JobConfig, step: int) -> dict[int, int]:
    """The ``slow-worker`` delays (worker -> µs) in effect for a closure that begins at ``step``."""
    return {i.worker: int(i.ms * 1000) for i in config.plan.of(SlowWorker) if i.from_step <= step}


def make_train_steps(tf, strategy, model: MLP, slow: dict[int, int], steps: int):
    """A tf.function that runs ``steps`` training steps on one worker (one closure), each
    delayed by ``slow[worker]`` µs on the workers ``slow`` names."""

    def replica_fn(x, y):
        # Reading the variables waits for the batch, so a delay cannot overlap them.
        with tf.control_dependencies([x]), tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(tf, x) - y))
        grads = tape.gradient(loss, model.variables)
        for variable, grad in zip(model.variables, grads):
            variable.assign_sub(LEARNING_RATE * grad)
        return loss

    @tf.function
    def train_steps(iterator):
        loss = tf.constant(0.0)
        for _ in range(steps):  # a Python loop: unrolled, each step its own next()
            # Read the next batch only after the previous step is done, as a loop of
            # one-step closures would: without it the unrolled graph reads ahead, an
            # implicit prefetch that --tune prefetch=on is there to make explicit.
            with tf.control_dependencies([loss]):
                x, y = next(iterator)
            if slow:  # slow-worker=I:MS: the step cannot start before the delay ends
                worker = tf.distribute.coordinator.experimental_get_current_worker_index()
                x = sleep_us(tf, per_worker_value(tf, slow, worker), x)
            loss = strategy.reduce(tf.distribute.ReduceOp.MEAN, strategy.run(replica_fn, args=(x, y)), axis=None)
        return loss

    return train_steps


def make_strategy(tf, config: JobConfig):
    """ParameterServerStrategy from ``TF_CONFIG``, with the ``--tune partitioner=N`` partitioner."""
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    partitioner = make_partitioner(tf, config.plan)
    return resolver, tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner)


def run(config: JobConfig) -> JobSummary:
    """Runs the job as the coordinator (the chief task of ``TF_CONFIG``)."""
    import tensorflow as tf

    from tfdiag.collectors import identity
    from tfdiag.sample_jobs.task import wait_for_cluster

    tf.get_logger().setLevel("INFO")  # the coordinator's worker-failure and recovery lines
    resolver, strategy = make_strategy(tf, config)
    wait_for_cluster(resolver.cluster_spec().as_dict(), identity.resolve_task(default="chief:0"))
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    if config.collect:
        from tfdiag.collectors import instrument_coordinator

        coordinator = instrument_coordinator(coordinator, config.logdir)

    hot = config.plan.of(HotPs)
    with strategy.scope():
        model = MLP(tf, strategy, config.hidden, hot_ps=hot[-1].ps if hot else None,
                    partitioned=bool(config.plan.tuned("partitioner")))
    log_placement(model)  # tfdiag records the placement itself, of the variables the train function reads
    per_closure = steps_per_closure(config)
    closure_fns = {}

    def closure_fn(steps: int, done: int):
        slow = slow_workers(config, done)
        key = (steps, tuple(sorted(slow.items())))
        if key not in closure_fns:
            closure_fns[key] = make_train_steps(tf, strategy, model, slow, steps)
        return closure_fns[key]

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
    coordinator.schedule(closure_fn(per_closure, 0), args=(per_worker_iterator,))
    coordinator.join()

    progress = Progress()
    progress.update(0)  # warmed up: training starts
    kill_steps = sorted(k.step for k in config.plan.of(KillWorker))
    start = time.perf_counter()
    clock = StepClock(config.steps)
    loss = None
    done = 0
    while done < config.steps:
        steps = min(per_closure, config.steps - done)
        loss = coordinator.schedule(closure_fn(steps, done), args=(per_worker_iterator,))
        done += steps
        clock.tick(done)
        if kill_steps and done >= kill_steps[0]:
            coordinator.join()  # every step up to here is done: "reached STEP" is exact
            progress.update(done)
            kill_steps.pop(0)
    coordinator.join()
    wall_s = time.perf_counter() - start
    clock.tick(done)
    logger.info("ps_ctl: final loss %.4f", float(loss.fetch()))
    if config.collect:
        coordinator.close()
    return JobSummary(steps=config.steps, wall_s=wall_s, examples=config.steps * config.batch_size,
                      keep=(coordinator, strategy, model, closure_fns, per_worker_dataset_fn, per_worker_iterator),
                      steady=clock.steady)
