"""``mwms_fit``: MultiWorkerMirroredStrategy + tf-keras ``model.fit``.

The same click/conversion model and data as ``ps_fit``, trained synchronously: every
worker runs this code with its own ``TF_CONFIG``, builds the strategy first (it must
exist before any other TensorFlow op), reads the record files, and calls ``model.fit``
with ``DiagnosticsCallback`` next to EarlyStopping, ModelCheckpoint (tf-keras writes
the chief's checkpoint into ``LOGDIR/checkpoints`` and the others' into temporary
folders) and ReduceLROnPlateau. Worker 0 is the chief; there is no ps.

Input: a plain ``tf.data.Dataset`` of *global* batches is passed to ``fit``; the
strategy auto-shards it over the workers (``AUTO``: by file, as there are 8 files) and
splits each batch. ``--tune autoshard=data|file|off|auto`` sets
``options.experimental_distribute.auto_shard_policy``.

``shard-skew=I:F`` cannot be expressed with a global-batch dataset (the strategy splits
batches evenly), so with it the job switches to ``DatasetCreator`` — a dataset function
per worker, sharding files by ``input_context`` — in which worker I's batches are F
times larger. Every step stays synchronous, so the whole job runs at worker I's pace
and worker I consumes F times the examples (``examples`` in its step records).

``slow-worker=I:MS`` is an identity layer that sleeps on worker I. ``kill-worker``:
MultiWorkerMirroredStrategy has no elastic recovery — when a worker dies the
collectives of the others fail (``UnavailableError``/``Socket closed``, or a timeout
of the collective health check) and they end with an error; a restarted worker cannot
rejoin a running ``fit``. So the job does what a fault-tolerant Keras job does: it
trains with ``BackupAndRestore`` (a backup in ``LOGDIR/backup`` at the end of every
epoch), and with ``kill-worker=I@STEP+restart`` the launcher restarts worker I and every
worker that failed after it, as an orchestrator restarts a failed job; they resume
from the last epoch backed up. Without ``+restart`` the job ends with an error.
The summary line of a restarted job counts from the first attempt's ``fit`` (its start
is kept in ``LOGDIR/backup.started`` until training completes) and every step of the
finished epochs, the restored ones included: the time lost to a failure is in it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from tfdiag.sample_jobs import click_model
from tfdiag.sample_jobs.common import pipeline_options, say_once, worker_index_from_tf_config
from tfdiag.sample_jobs.fit_common import (
    import_tf_keras,
    progress_callback,
    set_mixed_precision,
    step_counter,
    worker_delay_layer,
)
from tfdiag.sample_jobs.inject import InputDelay, ShardSkew, SlowInput, SlowWorker
from tfdiag.sample_jobs.jobs import JobConfig, JobSummary

logger = logging.getLogger("tfdiag.sample_jobs")


def worker_batches(config: JobConfig, workers: int) -> list[int]:
    """Examples each worker reads per step: equal shares, or F times more for shard-skew=I:F.

    ``--tune autoshard=data`` is the advisor's fix for an imbalance: the same examples
    per step, split evenly over the workers again.
    """
    per_worker = max(1, config.batch_size // workers)
    skew = {i.worker: i.factor for i in config.plan.of(ShardSkew)}
    batches = [int(round(per_worker * skew.get(worker, 1.0))) for worker in range(workers)]
    if config.plan.tuned("autoshard") == "data":
        return [sum(batches) // workers] * workers
    return batches


def make_input(tf, keras, config: JobConfig, files, worker: int, workers: int):
    """``(dataset or DatasetCreator, examples this worker consumes per step)``."""
    plan = config.plan
    # input-delay on every worker's pipeline; slow-input on worker I's alone.
    delay_ms = sum(i.ms for i in plan.of(InputDelay)) + sum(i.ms for i in plan.of(SlowInput) if i.worker == worker)
    delay_us = int(delay_ms * 1000)
    batches = worker_batches(config, workers)
    if len(set(batches)) == 1:
        if plan.of(ShardSkew):
            say_once(f"autoshard=data: every worker reads an equal share, {batches[0]} examples per step")
        options = pipeline_options(tf, plan, autoshard=True)
        global_batch = sum(batches)
        # Each element is a global batch, which the strategy splits over the workers: one
        # element feeds a step on every worker, so it sleeps MS per worker for MS per step.
        dataset = click_model.make_dataset(tf, files, global_batch, plan, delay_us=delay_us * workers, options=options)
        return dataset, batches[0]

    local = batches[worker]
    say_once(f"shard-skew: worker {worker} reads {local} examples per step (others {min(batches)})")

    def dataset_fn(input_context):
        own = [f for i, f in enumerate(files) if i % input_context.num_input_pipelines == input_context.input_pipeline_id]
        return click_model.make_dataset(tf, own or files, local, plan, delay_us=delay_us,
                                        options=pipeline_options(tf, plan))

    return keras.utils.experimental.DatasetCreator(dataset_fn), local


def run(config: JobConfig) -> JobSummary:
    """Runs this worker's part of the job (every worker of ``TF_CONFIG`` runs it)."""
    tf, keras = import_tf_keras()

    plan = config.plan
    # The strategy first: it configures the collective runtime before any op runs.
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    worker = worker_index_from_tf_config()
    workers = strategy.num_replicas_in_sync  # one CPU replica per worker here
    files = click_model.write_data(config.logdir)
    set_mixed_precision(tf, keras, plan)
    dataset, local_examples = make_input(tf, keras, config, files, worker, workers)

    slow = {i.worker: int(i.ms * 1000) for i in plan.of(SlowWorker)}
    with strategy.scope():
        extra = [worker_delay_layer(tf, keras, slow, worker)] if slow else []
        model = click_model.build_model(keras, config.hidden, extra_layers=extra)
        click_model.compile_model(keras, model)

    # The first callback: it restores the backed-up epoch before the others begin.
    callbacks = [keras.callbacks.BackupAndRestore(backup_dir=str(Path(config.logdir) / "backup"))]
    callbacks += click_model.standard_callbacks(keras, config.logdir)
    if config.collect:
        from tfdiag.collectors import DiagnosticsCallback

        callbacks.append(DiagnosticsCallback(config.logdir, examples_per_step=local_examples))
    counter = step_counter(keras, config.steps)
    callbacks.append(counter)
    progress = progress_callback(keras)
    if progress is not None:
        callbacks.append(progress)

    epochs, steps_per_epoch = click_model.epochs_for(config.steps)
    started = Path(config.logdir) / "backup.started"
    start = first_start(started) if worker == 0 else time.time()
    history = model.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks, verbose=0)
    wall_s = time.time() - start
    counter.clock.tick(counter.steps)
    if worker == 0:
        started.unlink(missing_ok=True)
    logger.info("mwms_fit: loss by epoch %s", [round(v, 4) for v in history.history.get("loss", [])])
    # Epochs before the first this process ran were restored from the backup.
    steps = counter.steps + (history.epoch[0] if history.epoch else epochs) * steps_per_epoch
    return JobSummary(steps=steps, wall_s=wall_s, examples=steps * sum(worker_batches(config, workers)),
                      steady=counter.clock.steady)


def first_start(path: Path) -> float:
    """When the first attempt at this training began (``time.time()``), kept in ``path``.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "backup.started"
    >>> first_start(path) == first_start(path)
    True
    """
    try:
        return float(path.read_text())
    except (OSError, ValueError):
        now = time.time()
        path.write_text(repr(now))
        return now
