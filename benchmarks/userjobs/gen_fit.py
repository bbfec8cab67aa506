"""HOLDOUT user job: a generator-fed, multi-output Keras ``fit`` under MultiWorkerMirroredStrategy.

Written for ``benchmarks/trials.py`` and never used to fit a threshold. Each worker reads
its own examples from a Python generator (``tf.data.Dataset.from_generator``, endless,
so of unknown cardinality, as users write it), batched; a functional tf-keras model with
two heads (a rating regressed with MSE, a click classified with cross-entropy, weighted
1 : 0.5), ``fit`` with ``steps_per_epoch`` and ``DiagnosticsCallback`` attached.

Options (``JobConfig.extra``, set by the trial): ``slow_worker`` and ``input_ms``: that
worker's generator sleeps ``input_ms`` per batch (a slow reader); ``raise_at`` and
``raise_worker``: that worker's generator raises ``ValueError`` at that batch (a bad record).
Worker 0 prints the summary line.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from tfdiag.sample_jobs.fit_common import step_counter
from tfdiag.sample_jobs.jobs import JobConfig, JobSummary

FEATURES, BATCH = 24, 64
TASK_COMMAND = [sys.executable, "-u", "-m", "benchmarks.userjobs.gen_fit"]


def records(worker: int, extra: dict):
    """Endless (features, {"rating", "click"}) batches of one worker's reader."""
    rng = np.random.default_rng(worker)
    slow = extra.get("slow_worker") == worker
    raise_at = extra.get("raise_at") if extra.get("raise_worker") == worker else None
    batch = 0
    while True:
        if slow:
            time.sleep(extra["input_ms"] / 1e3)
        if raise_at is not None and batch == raise_at:
            raise ValueError(f"gen_fit: corrupt record in batch {batch} of worker {worker}")
        x = rng.normal(size=(BATCH, FEATURES)).astype(np.float32)
        rating = (x[:, :4].sum(axis=1, keepdims=True) / 2).astype(np.float32)
        click = (x[:, 4:5] > 0).astype(np.float32)
        batch += 1
        yield x, {"rating": rating, "click": click}


def run_worker(config: JobConfig) -> None:
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras as keras

    from tfdiag.collectors import DiagnosticsCallback

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    worker = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    signature = (tf.TensorSpec([None, FEATURES], tf.float32),
                 {"rating": tf.TensorSpec([None, 1], tf.float32), "click": tf.TensorSpec([None, 1], tf.float32)})
    dataset = tf.data.Dataset.from_generator(lambda: records(worker, config.extra), output_signature=signature)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    dataset = dataset.with_options(options)
    with strategy.scope():
        inputs = keras.Input((FEATURES,))
        hidden = keras.layers.Dense(192, activation="relu")(inputs)
        hidden = keras.layers.Dense(192, activation="relu")(hidden)
        model = keras.Model(inputs, {"rating": keras.layers.Dense(1, name="rating")(hidden),
                                     "click": keras.layers.Dense(1, activation="sigmoid", name="click")(hidden)})
        model.compile(keras.optimizers.Adam(1e-3), loss={"rating": "mse", "click": "binary_crossentropy"},
                      loss_weights={"rating": 1.0, "click": 0.5})
    counter = step_counter(keras, config.steps)  # the job's own clock of its steps (its steady rate)
    started = time.monotonic()
    model.fit(dataset, epochs=1, steps_per_epoch=config.steps, verbose=0,
              callbacks=[DiagnosticsCallback(config.logdir), counter])
    wall_s = time.monotonic() - started
    counter.clock.tick(counter.steps)
    if worker == 0:
        workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
        summary = JobSummary(config.steps, wall_s, config.steps * BATCH * workers, steady=counter.clock.steady)
        print(summary.line(), flush=True)


def main() -> int:
    run_worker(JobConfig.from_json(sys.argv[sys.argv.index("--config") + 1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
