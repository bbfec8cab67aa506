"""What the tf-keras ``model.fit`` jobs (ps_fit, mwms_fit) share: Keras import, layers, callbacks.

``import_tf_keras`` sets ``TF_USE_LEGACY_KERAS=1`` before TensorFlow is imported, so
``tf.keras`` is tf-keras too (Keras 3's ``model.fit`` fails under both multi-worker
strategies in TensorFlow 2.21).
"""

from __future__ import annotations

import os

from tfdiag.sample_jobs.common import Progress, per_worker_value, say_once, sleep_us
from tfdiag.sample_jobs.step_clock import StepClock


def import_tf_keras():
    """``(tf, tf_keras)`` with ``tf.keras`` resolving to tf-keras."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf
    import tf_keras

    return tf, tf_keras


def set_mixed_precision(tf, keras, plan) -> str:
    """``--tune mixed_precision=on``: ``mixed_float16`` on GPUs, ``mixed_bfloat16`` on CPUs."""
    if not plan.is_on("mixed_precision"):
        return "float32"
    policy = "mixed_float16" if tf.config.list_physical_devices("GPU") else "mixed_bfloat16"
    keras.mixed_precision.set_global_policy(policy)
    say_once(f"mixed precision: {policy}")
    return policy


def worker_delay_layer(tf, keras, delays_us: dict, worker_index):
    """An identity layer that first sleeps ``delays_us[worker]`` µs in-graph (``slow-worker``).

    ``worker_index`` is an int (MultiWorkerMirroredStrategy: this process's index) or a
    callable returning a tensor (ParameterServerStrategy: resolved per closure).

    The sleep is a control dependency of the output, not on its data path: the gradient
    of the layer is the identity's, and the sleep's ``tf.data`` op (which has no gradient)
    is never differentiated.
    """

    class WorkerDelay(keras.layers.Layer):
        """Identity, after a per-worker sleep: a slow host without burning CPU."""

        def call(self, inputs):
            index = worker_index() if callable(worker_index) else worker_index
            slept = sleep_us(tf, per_worker_value(tf, delays_us, index))
            with tf.control_dependencies([slept]):
                return tf.identity(inputs)

    return WorkerDelay(name="injected_worker_delay")


def progress_callback(keras, offset: int = 0):
    """Reports the step reached to the launcher (``kill-worker``); None when not asked for."""
    progress = Progress()
    if not progress.enabled:
        return None

    class ReportProgress(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True  # allowed under ParameterServerStrategy
            self.steps = offset

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            progress.update(self.steps)

    return ReportProgress()


def step_counter(keras, planned: int):
    """A callback counting the training batches run (EarlyStopping may end fit early) and
    timing them (``clock``: ``step_clock.StepClock`` of ``planned`` steps; tick it once more
    after ``fit`` returns, which waits for the last scheduled steps)."""

    class CountSteps(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True  # allowed under ParameterServerStrategy
            self.steps = 0
            self.clock = StepClock(planned)

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            self.clock.tick(self.steps)

    return CountSteps()
