"""``mirrored``: MirroredStrategy over all local GPUs, Keras 3 ``model.fit``.

One process, one replica per GPU (synchronous, all-reduce over NCCL or the host). On a
machine without an NVIDIA GPU it says so once and runs the same code on the CPU (one
replica). The model is the click/conversion model with a custom layer, ``FeatureCross``
(a DCN-style cross layer with its own weights), and ``--tune mixed_precision=on`` sets
Keras's ``mixed_float16`` policy on GPUs (``mixed_bfloat16`` on CPUs); the two output
heads stay float32, as Keras's mixed-precision guide advises. tfdiag's
``DiagnosticsCallback`` runs next to EarlyStopping, ModelCheckpoint and
ReduceLROnPlateau.

``--batch`` is the global batch (split over the replicas); ``input-delay``,
``prefetch``, ``map_parallel`` and ``batch`` apply. ``--workers``/``--ps`` do not: the
launcher starts this job as one task, ``worker:0``.
"""

from __future__ import annotations

import logging
import os
import time

from tfdiag.sample_jobs import click_model
from tfdiag.sample_jobs.common import pipeline_options, say_once
from tfdiag.sample_jobs.fit_common import step_counter
from tfdiag.sample_jobs.inject import InputDelay
from tfdiag.sample_jobs.jobs import JobConfig, JobSummary

logger = logging.getLogger("tfdiag.sample_jobs")


def feature_cross_layer(keras):
    """``FeatureCross``: ``x0 * (x W + b) + x`` — one cross layer of a Deep & Cross Network."""

    class FeatureCross(keras.layers.Layer):
        def build(self, input_shape):
            width = input_shape[-1]
            self.kernel = self.add_weight(name="kernel", shape=(width, width), initializer="glorot_uniform")
            self.bias = self.add_weight(name="bias", shape=(width,), initializer="zeros")

        def call(self, x):
            return x * (keras.ops.matmul(x, self.kernel) + self.bias) + x

    return FeatureCross(name="feature_cross")


def make_strategy(tf):
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        say_once(f"MirroredStrategy over {len(gpus)} GPU(s)")
        return tf.distribute.MirroredStrategy(), True
    say_once("no GPU found: MirroredStrategy runs on the CPU (one replica)")
    return tf.distribute.MirroredStrategy(["/cpu:0"]), False


def run(config: JobConfig) -> JobSummary:
    """Runs the job in this process (the launcher's ``worker:0``)."""
    if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
        say_once("TF_USE_LEGACY_KERAS=1 is set; mirrored uses Keras 3 regardless")
    import keras
    import tensorflow as tf

    plan = config.plan
    strategy, on_gpu = make_strategy(tf)
    output_dtype = "float32"
    if plan.is_on("mixed_precision"):
        policy = "mixed_float16" if on_gpu else "mixed_bfloat16"
        keras.mixed_precision.set_dtype_policy(policy)
        say_once(f"mixed precision: {policy}")

    files = click_model.write_data(config.logdir)
    delay_us = int(sum(i.ms for i in plan.of(InputDelay)) * 1000)
    dataset = click_model.make_dataset(tf, files, config.batch_size, plan, delay_us=delay_us,
                                       options=pipeline_options(tf, plan))
    with strategy.scope():
        model = click_model.build_model(keras, config.hidden, extra_layers=[feature_cross_layer(keras)],
                                        output_dtype=output_dtype)
        click_model.compile_model(keras, model)

    callbacks = click_model.standard_callbacks(keras, config.logdir, keras3=True)
    if config.collect:
        from tfdiag.collectors import DiagnosticsCallback

        callbacks.append(DiagnosticsCallback(config.logdir, examples_per_step=config.batch_size))

    counter = step_counter(keras, config.steps)
    callbacks.append(counter)
    epochs, steps_per_epoch = click_model.epochs_for(config.steps)
    start = time.perf_counter()
    history = model.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks, verbose=0)
    wall_s = time.perf_counter() - start
    counter.clock.tick(counter.steps)
    logger.info("mirrored: loss by epoch %s", [round(v, 4) for v in history.history.get("loss", [])])
    return JobSummary(steps=counter.steps, wall_s=wall_s, examples=counter.steps * config.batch_size,
                      steady=counter.clock.steady)
