"""``DiagnosticsCallback``: one ``step`` record per training batch, for Keras 3 and tf-keras.

The class subclasses ``keras.callbacks.Callback`` (Keras 3), which is what Keras 3's
``model.fit`` requires, and also carries the small private protocol that tf-keras's
``CallbackList`` calls on every callback (``_implements_train_batch_hooks`` and friends,
``_supports_tf_logs``), so the same instance is accepted by both ``model.fit``s without
importing tf-keras (importing it costs about a second and loads a second Keras).
"""

from __future__ import annotations

import logging
import sys
import time

from tfdiag.collectors import identity
from tfdiag.errors import InvalidOptionError
from tfdiag.store import TaskWriter

logger = logging.getLogger("tfdiag")

try:  # Keras 3 ships with TensorFlow 2.16+; without it the class still works for tf-keras.
    from keras.callbacks import Callback as _KerasCallback
except ImportError:  # pragma: no cover - Keras 3 is a dependency of TensorFlow 2.21
    _KerasCallback = object


class DiagnosticsCallback(_KerasCallback):
    """Records one ``step`` record per training batch into ``logdir``.

    Each record holds the task, a step number counted from 0 over the whole ``fit``,
    ``begin_ns``/``end_ns`` (``time.time_ns()`` at ``on_train_batch_begin`` and
    ``on_train_batch_end``), ``input_wait_ns`` and ``examples``.

    ``input_wait_ns`` is always 0 here: both Kerases call ``next()`` on the input iterator
    inside the compiled train function, so no Python hook sees the time spent waiting
    for input (the ``ClusterCoordinator`` instrumentation measures it in-graph).
    ``examples`` is ``examples_per_step`` when given, else 0 (unknown): Keras does not
    tell callbacks the batch size.

    Per batch, the training thread only reads the clock and appends a dict to the
    writer's buffer; a background thread writes the file. Nothing raised inside the
    callback reaches training: the first error is logged on the ``tfdiag`` logger and
    the callback then stops recording.

    Args:
        logdir: the run directory (``RUN``); records go to ``RUN/plugins/tfdiag/``.
        examples_per_step: examples in one batch (global batch size), if known.

    Example:
        >>> model.fit(dataset, epochs=2, callbacks=[DiagnosticsCallback("logs/run1", 64)])  # doctest: +SKIP
    """

    # tf-keras: pass logs through untouched (we never read them), which also keeps
    # ParameterServerStrategy's "no batch-level callbacks" check from rejecting us.
    _supports_tf_logs = True

    def __init__(self, logdir, examples_per_step: int | None = None):
        if _KerasCallback is not object:
            super().__init__()
        if not logdir:
            raise InvalidOptionError(f"Invalid value for argument `logdir`. Expected a directory. Received: {logdir!r}")
        if examples_per_step is not None and (not isinstance(examples_per_step, int) or examples_per_step < 0):
            raise InvalidOptionError(
                f"Invalid value for argument `examples_per_step`. Expected a non-negative int or None. "
                f"Received: {examples_per_step!r}"
            )
        self.logdir = logdir
        self.examples_per_step = examples_per_step
        self.task: str | None = None
        self._writer: TaskWriter | None = None
        self._failed = False
        self._reset()

    # -- tf-keras CallbackList protocol (Keras 3 does not need these) -----------------
    def _implements_train_batch_hooks(self) -> bool:
        return True

    def _implements_test_batch_hooks(self) -> bool:
        return False

    def _implements_predict_batch_hooks(self) -> bool:
        return False

    # Keras 3's base class provides these; define them for the no-Keras-3 fallback.
    if _KerasCallback is object:  # pragma: no cover

        def set_model(self, model):
            self.model = model

        def set_params(self, params):
            self.params = params

        def __getattr__(self, name):
            if name.startswith("on_"):
                return lambda *args, **kwargs: None
            raise AttributeError(name)

    # -- hooks -----------------------------------------------------------------------
    def _reset(self) -> None:
        self._step = 0
        self._begin_ns = 0

    def on_train_begin(self, logs=None):
        self._reset()
        self._failed = False
        try:
            strategy = self._strategy()
            self.task = identity.resolve_task(strategy)
            identity.write_run_manifest(self.logdir, self.task, strategy)
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            self._fail(error)

    def on_train_batch_begin(self, batch, logs=None):
        self._begin_ns = time.time_ns()

    def on_train_batch_end(self, batch, logs=None):
        end_ns = time.time_ns()
        if self._failed:
            return
        try:
            if self._writer is None:
                self._writer = TaskWriter(self.logdir, self.task or "worker:0")
            self._writer.append(
                "step",
                task=self._writer.task,
                step=self._step,
                begin_ns=self._begin_ns,
                end_ns=end_ns,
                input_wait_ns=0,
                examples=self.examples_per_step or 0,
                clock_task=self._writer.task,
            )
            self._step += 1
        except Exception as error:  # noqa: BLE001
            self._fail(error)

    def on_train_end(self, logs=None):
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except Exception as error:  # noqa: BLE001
                self._fail(error)

    # -- helpers ---------------------------------------------------------------------
    @property
    def steps_recorded(self) -> int:
        """Steps recorded in the current (or last) ``fit``."""
        return self._step

    def _strategy(self):
        model = getattr(self, "_model", None) or getattr(self, "model", None)
        strategy = getattr(model, "distribute_strategy", None)  # tf-keras
        if strategy is None and "tensorflow" in sys.modules:
            tf = sys.modules["tensorflow"]
            if tf.distribute.has_strategy():
                strategy = tf.distribute.get_strategy()
        return strategy

    def _fail(self, error: BaseException) -> None:
        if not self._failed:
            logger.warning("tfdiag: DiagnosticsCallback stopped recording after an error: %r", error)
        self._failed = True
