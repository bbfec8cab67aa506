"""``ps_fit``: ParameterServerStrategy + tf-keras ``model.fit``.

The job a Keras user with parameter servers writes: ``ParameterServerStrategy`` from
``TF_CONFIG``, the click/conversion model built and compiled under ``strategy.scope()``,
a ``DatasetCreator`` whose function runs on every worker, and ``model.fit`` with
``steps_per_epoch`` (required under ParameterServerStrategy) and the usual callbacks —
EarlyStopping, ModelCheckpoint, ReduceLROnPlateau — next to tfdiag's
``DiagnosticsCallback``. It runs on the chief (the coordinator); ps and workers are plain
``tf.distribute.Server``s.

tfdiag under ``model.fit``: the same ``DiagnosticsCallback`` as everywhere. Under
ParameterServerStrategy it records each closure on the worker that ran it by wrapping
the strategy's coordinator (Keras calls the batch hooks when a step is *scheduled*, on
the coordinator, which says nothing about the workers).

Injections: ``input-delay`` and ``shard-skew`` act in the per-worker dataset function
(worker I reads batches F times larger); ``slow-worker`` is an identity layer that sleeps
on worker I; ``hot-ps=I`` adds the hot block (``hot_wide`` and ``hot_narrow``, a 4 MB
kernel each) created colocated with a variable on ps I; ``--tune partitioner=N`` sets
the strategy's ``variable_partitioner`` (tf-keras supports sharded variables);
``slow-ps`` and ``kill-worker`` are done by the launcher. ``--tune strategy=mwms`` runs
``mwms_fit`` instead.
"""

from __future__ import annotations

import contextlib
import logging
import time

from tfdiag.collectors import tf_internals
from tfdiag.sample_jobs import click_model
from tfdiag.sample_jobs.common import make_partitioner, on_ps, per_worker_value, pipeline_options
from tfdiag.sample_jobs.fit_common import (
    import_tf_keras,
    progress_callback,
    set_mixed_precision,
    step_counter,
    worker_delay_layer,
)
from tfdiag.sample_jobs.inject import HotPs, InputDelay, ShardSkew, SlowWorker
from tfdiag.sample_jobs.jobs import JobConfig, JobSummary

logger = logging.getLogger("tfdiag.sample_jobs")


def prepare(config: JobConfig) -> None:
    """Runs on every task before it serves: the workers read the data files locally."""
    click_model.write_data(config.logdir)


def make_dataset_creator(tf, keras, config: JobConfig, files):
    plan = config.plan
    batch = config.batch_size
    skew = {i.worker: int(round(batch * i.factor)) for i in plan.of(ShardSkew)}
    delay_us = int(sum(i.ms for i in plan.of(InputDelay)) * 1000)

    def dataset_fn(input_context):
        # Runs on each worker; shard-skew=I:F gives worker I batches F times larger.
        size = batch
        if skew:
            worker = tf.distribute.coordinator.experimental_get_current_worker_index()
            size = per_worker_value(tf, skew, worker, default=batch)
        return click_model.make_dataset(tf, files, size, plan, delay_us=delay_us, options=pipeline_options(tf, plan))

    return keras.utils.experimental.DatasetCreator(dataset_fn)


def run(config: JobConfig) -> JobSummary:
    """Runs the job as the coordinator (the chief task of ``TF_CONFIG``)."""
    tf, keras = import_tf_keras()

    from tfdiag.collectors import identity
    from tfdiag.sample_jobs.task import wait_for_cluster

    tf.get_logger().setLevel("INFO")  # the coordinator's worker-failure and recovery lines
    plan = config.plan
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    wait_for_cluster(resolver.cluster_spec().as_dict(), identity.resolve_task(default="chief:0"))
    partitioner = make_partitioner(tf, plan)
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    files = click_model.write_data(config.logdir)
    set_mixed_precision(tf, keras, plan)

    callbacks = click_model.standard_callbacks(keras, config.logdir)
    if config.collect:
        from tfdiag.collectors import DiagnosticsCallback

        callbacks.append(DiagnosticsCallback(config.logdir, examples_per_step=config.batch_size))

    slow = {i.worker: int(i.ms * 1000) for i in plan.of(SlowWorker)}
    hot = plan.of(HotPs)
    with strategy.scope():
        extra = []
        if slow:
            extra.append(worker_delay_layer(
                tf, keras, slow, tf.distribute.coordinator.experimental_get_current_worker_index))
        hot_scope = None
        if hot:
            anchor = on_ps(tf, strategy, hot[-1].ps)
            hot_scope = (lambda: contextlib.nullcontext()) if partitioner else (
                lambda: strategy.extended.colocate_vars_with(anchor))
        model = click_model.build_model(keras, config.hidden, extra_layers=extra, hot_scope=hot_scope)
        click_model.compile_model(keras, model)
    for variable in model.variables:
        logger.info("ps_fit: variable %s %s on %s", variable.name, variable.shape.as_list(), variable.device)

    epochs, steps_per_epoch = click_model.epochs_for(config.steps)
    counter = step_counter(keras, config.steps)
    callbacks.append(counter)
    progress = progress_callback(keras)
    if progress is not None:
        callbacks.append(progress)
    dataset = make_dataset_creator(tf, keras, config, files)
    start = time.perf_counter()
    history = model.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks, verbose=0)
    wall_s = time.perf_counter() - start
    counter.clock.tick(counter.steps)
    logger.info("ps_fit: loss by epoch %s", [round(v, 4) for v in history.history.get("loss", [])])
    if config.collect:
        tf_internals.cluster_coordinator_of(model, strategy).close()  # the records of the last closures
    return JobSummary(steps=counter.steps, wall_s=wall_s, examples=counter.steps * config.batch_size,
                      keep=(strategy, model, dataset), steady=counter.clock.steady)
