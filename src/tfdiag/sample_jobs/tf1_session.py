"""``tf1_session``: the low-level TF1 model — between-graph replication with a chief.

What older TensorFlow jobs (and Estimator users) look like: every task builds a
``tf.train.ClusterSpec`` from ``TF_CONFIG`` and starts a ``tf.distribute.Server``; ps
tasks ``join()``; every worker builds its *own* graph (between-graph replication) under
``tf.compat.v1.train.replica_device_setter``, which puts variables on the ps tasks
(round-robin, or ``--tune partitioner=N`` with a fixed-size partitioner on the wide
layer) and ops on the worker, and trains asynchronously with ``MonitoredTrainingSession``.
Worker 0 is the chief: it initialises the variables and writes checkpoints
(``LOGDIR/checkpoints``); the others wait for it, polling every ``CHIEF_POLL_S``
(:func:`wait_for_chief`) before they open their session: ``MonitoredTrainingSession``'s
own wait sleeps 30 s between checks (``SessionManager``'s ``recovery_wait_secs``), which
would leave the chief training alone for the first 30 s of every run. ``StopAtStepHook(last_step=STEPS)``
stops every worker once the shared ``global_step`` reaches STEPS, so ``--steps`` counts
updates from all workers together, as in the ps jobs.

tfdiag attaches ``DiagnosticsHook(logdir)`` to each worker's session when
``tfdiag.collectors`` provides it; otherwise the job says so once and runs without it.

Injections: ``input-delay``, ``shard-skew`` (worker I's batches are F times larger) and
``slow-worker`` (an in-graph sleep on worker I) are built into worker I's graph;
``hot-ps=I`` puts the 4 MB ``hot`` kernel on ps I with an explicit device;
``slow-ps`` and ``kill-worker`` are done by the launcher. A killed non-chief worker
leaves the others training (asynchronous updates; ``global_step`` still reaches STEPS);
restarted, it reconnects and ``MonitoredTrainingSession`` waits until the chief's
variables are ready. Killing the chief (worker 0) stops initialisation/checkpointing:
the job fails.
"""

from __future__ import annotations

import logging
import time

from tfdiag.events import parse_task
from tfdiag.sample_jobs.common import Progress, say_once, sleep_us
from tfdiag.sample_jobs.inject import HotPs, InputDelay, ShardSkew, SlowWorker
from tfdiag.sample_jobs.jobs import JobConfig, JobSummary
from tfdiag.sample_jobs.step_clock import StepClock

logger = logging.getLogger("tfdiag.sample_jobs")

FEATURES = 32
LAYERS = 3
LEARNING_RATE = 0.05
HOT_UNITS = 4096
# How often a non-chief worker checks whether the chief has initialised the variables.
CHIEF_POLL_S = 0.2


def make_hooks(config: JobConfig, examples_per_step: int):
    """tfdiag's ``DiagnosticsHook`` if this tfdiag has it (a one-line warning if not)."""
    if not config.collect:
        return []
    try:
        from tfdiag.collectors import DiagnosticsHook
    except (ImportError, AttributeError):
        say_once("tfdiag.collectors has no DiagnosticsHook yet: tf1_session runs without tfdiag records")
        return []
    try:
        return [DiagnosticsHook(config.logdir, examples_per_step=examples_per_step)]
    except TypeError:  # an earlier DiagnosticsHook(logdir) without examples_per_step
        return [DiagnosticsHook(config.logdir)]


def build_graph(tf, config: JobConfig, cluster, worker: int):
    """This worker's replica of the graph: ``(train_op, loss, global_step)``."""
    v1 = tf.compat.v1
    plan = config.plan
    batch = config.batch_size
    skew = {i.worker: i.factor for i in plan.of(ShardSkew)}
    batch = int(round(batch * skew.get(worker, 1.0)))
    delay_us = int(sum(i.ms for i in plan.of(InputDelay)) * 1000)
    slow_us = int(sum(i.ms for i in plan.of(SlowWorker) if i.worker == worker) * 1000)
    hot = plan.of(HotPs)
    shards = plan.tuned("partitioner")
    parallel = tf.data.AUTOTUNE if plan.is_on("map_parallel") else None
    hidden = config.hidden

    device = v1.train.replica_device_setter(worker_device=f"/job:worker/task:{worker}", cluster=cluster)
    with v1.device(device):
        global_step = v1.train.get_or_create_global_step()
        true_w = tf.linspace(-1.0, 1.0, FEATURES)[:, None]

        def make_batch(index):
            seed = tf.stack([index, tf.constant(worker, tf.int64)])
            x = tf.random.stateless_normal([batch, FEATURES], seed=seed)
            return x, tf.tanh(tf.matmul(x, true_w)) + 0.05 * tf.random.stateless_normal([batch, 1], seed=seed + 1)

        dataset = tf.data.Dataset.counter().map(make_batch)
        if delay_us:
            dataset = dataset.map(lambda x, y: (sleep_us(tf, delay_us, x), y), num_parallel_calls=parallel)
        if plan.is_on("prefetch"):
            dataset = dataset.prefetch(tf.data.AUTOTUNE)
        from tfdiag.sample_jobs.common import pipeline_options

        x, y = v1.data.make_one_shot_iterator(dataset.with_options(pipeline_options(tf, plan))).get_next()
        if slow_us:
            x = sleep_us(tf, slow_us, x)

        init = v1.initializers.random_normal(stddev=0.05, seed=1)
        h, width = x, FEATURES
        for i in range(LAYERS):
            kernel = v1.get_variable(f"dense{i}/kernel", [width, hidden], initializer=init)
            bias = v1.get_variable(f"dense{i}/bias", [hidden], initializer=v1.zeros_initializer())
            h, width = tf.nn.relu(tf.matmul(h, kernel) + bias), hidden
        out = v1.get_variable("out/kernel", [width, 1], initializer=init)
        prediction = tf.matmul(h, out)
        if hot:
            partitioner = v1.fixed_size_partitioner(int(shards)) if shards else None
            if partitioner is None:
                with v1.device(f"/job:ps/task:{hot[-1].ps}"):
                    kernel = v1.get_variable("hot/kernel", [width, HOT_UNITS], initializer=init)
            else:
                kernel = v1.get_variable("hot/kernel", [width, HOT_UNITS], initializer=init, partitioner=partitioner)
            hot_out = v1.get_variable("hot/out", [HOT_UNITS, 1], initializer=init)
            prediction += 0.01 * tf.matmul(tf.nn.relu(tf.matmul(h, kernel)), hot_out)
        loss = tf.reduce_mean(tf.square(prediction - y))
        train_op = v1.train.GradientDescentOptimizer(LEARNING_RATE).minimize(loss, global_step=global_step)
    for variable in v1.global_variables():
        logger.info("tf1_session: variable %s %s on %s", variable.name, variable.shape.as_list(), variable.device)
    return train_op, loss, global_step


def wait_for_chief(tf, server, session_config) -> float:
    """Waits until every global variable is initialised (by the chief); returns the seconds waited."""
    v1 = tf.compat.v1
    uninitialized = v1.report_uninitialized_variables()
    start = time.perf_counter()
    with v1.Session(server.target, config=session_config) as session:
        while len(session.run(uninitialized)):
            time.sleep(CHIEF_POLL_S)
    return time.perf_counter() - start


def run(config: JobConfig) -> JobSummary:
    """Runs this worker's replica (every worker of ``TF_CONFIG`` runs it)."""
    import tensorflow as tf

    from tfdiag.collectors import identity

    v1 = tf.compat.v1
    v1.disable_eager_execution()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    cluster = resolver.cluster_spec()
    job, worker = parse_task(identity.resolve_task(default="worker:0"))
    server = tf.distribute.Server(cluster, job_name=job, task_index=worker, protocol="grpc", start=True)
    is_chief = worker == 0
    train_op, loss, global_step = build_graph(tf, config, cluster, worker)

    skew = {i.worker: i.factor for i in config.plan.of(ShardSkew)}
    local_batch = int(round(config.batch_size * skew.get(worker, 1.0)))
    hooks = [v1.train.StopAtStepHook(last_step=config.steps)] + make_hooks(config, local_batch)
    # Only this worker and the ps tasks: the session must not wait for the other workers.
    session_config = v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{worker}"])
    progress = Progress() if is_chief else Progress(environ={})
    if not is_chief:
        waited_s = wait_for_chief(tf, server, session_config)
        logger.info("tf1_session: worker %d waited %.1f s for the chief to initialise the variables", worker, waited_s)
    steps_here = 0
    wall_s = 0.0
    clock = StepClock(config.steps)  # of the job's updates, as the global step counts them
    with v1.train.MonitoredTrainingSession(
        master=server.target,
        is_chief=is_chief,
        checkpoint_dir=f"{config.logdir}/checkpoints" if is_chief else None,
        save_checkpoint_steps=None,
        save_checkpoint_secs=None,
        save_summaries_steps=None,
        save_summaries_secs=None,
        log_step_count_steps=None,
        hooks=hooks,
        config=session_config,
    ) as session:
        start = time.perf_counter()
        while not session.should_stop():
            _, step = session.run([train_op, global_step])
            steps_here += 1
            progress.update(int(step))
            clock.tick(int(step))
        # The training ends with the loop: closing the chief's session afterwards took 0-16 s
        # on the 2-core host (200 steps, 2 ps), which is no part of the job's throughput.
        wall_s = time.perf_counter() - start
    logger.info("tf1_session: worker %d ran %d of %d updates", worker, steps_here, config.steps)
    examples = config.steps * config.batch_size  # the chief reports the whole job's updates
    return JobSummary(steps=config.steps, wall_s=wall_s, examples=examples, steady=clock.steady)
