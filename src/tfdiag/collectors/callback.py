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

from tfdiag.collectors import tf_internals
from tfdiag.collectors.allreduce_probe import (DEFAULT_ALLREDUCE_BYTES, DEFAULT_ALLREDUCE_EVERY_S, STEP_TIME_STEPS,
                                               AllreduceProbe)
from tfdiag.collectors.arguments import check_count, check_logdir
from tfdiag.collectors.batch_size import examples_in
from tfdiag.collectors.step_input import StepStamps, match_stamps, stamp_train_step
from tfdiag.collectors.system import SAMPLE_EVERY_S, WAKE_S
from tfdiag.collectors.task_session import TaskSession, Wants
from tfdiag.errors import InvalidOptionError

logger = logging.getLogger("tfdiag")

try:  # Keras 3 ships with TensorFlow 2.16+; without it the class still works for tf-keras.
    from keras.callbacks import Callback as _KerasCallback
except ImportError:  # pragma: no cover - Keras 3 is a dependency of TensorFlow 2.21
    _KerasCallback = object


# Steps are buffered and written (with their input-wait stamps, read in one call) this
# often: a drain costs a few hundred µs, a drain per step would cost more than the step's
# other hooks together (src/tfdiag/collectors/step_input.py).
WRITE_EVERY_NS = 1_000_000_000


def _is_multi_worker(strategy) -> bool:
    name = type(strategy).__name__ if strategy is not None else ""
    if "CollectiveAllReduce" not in name and "MultiWorkerMirrored" not in name:
        return False
    workers = tf_internals.strategy_worker_count(strategy)
    return workers is None or workers > 1


def _is_parameter_server(strategy) -> bool:
    return strategy is not None and "ParameterServer" in type(strategy).__name__


class DiagnosticsCallback(_KerasCallback):
    """Records one ``step`` record per training batch into ``logdir``.

    Each record holds the task, a step number counted from 0 over the whole ``fit``,
    ``begin_ns``/``end_ns`` (``time.time_ns()`` at ``on_train_batch_begin`` and
    ``on_train_batch_end``), ``input_wait_ns``, ``compute_ns`` and ``examples``.

    Both Kerases call ``next()`` on the input iterator inside the compiled train function,
    so no Python hook sees the wait for input: the callback wraps the model's
    ``train_step`` (``src/tfdiag/collectors/step_input.py``) so that an in-graph stamp says when this
    worker's element arrived and another when the train function started; ``input_wait_ns``
    is the time between the two (0 when
    the model is XLA-compiled and no stamp comes, and in the first step, whose time before
    the element may be tracing). A third stamp, taken in the optimizer's
    ``apply_gradients`` once this worker's gradients exist, gives ``compute_ns``: from the
    element to the gradients, before the cross-worker reduction (under a synchronous
    strategy the rest of the step is mostly the wait for slower workers); null where no
    stamp came. ``examples`` is ``examples_per_step``
    when given, else the examples this worker's replicas received (the leading dimension
    of the element, whatever its structure).

    Per batch, the training thread only reads the clock and appends a tuple to a list;
    about once a second it reads the stamps (one drain of the queue, a few hundred µs of
    CPU, ``benchmarks/micro.py stamp_cost``) and appends the buffered steps' records to the
    writer's buffer (so records reach the file up to a second later); a background thread
    writes the file. Nothing raised inside the callback reaches training: the first error is logged on the ``tfdiag`` logger and
    the callback then stops recording.

    Under ParameterServerStrategy (tf-keras ``model.fit``), Python batch hooks run on
    the coordinator when a closure is *dispatched*, not when a worker runs it, so the
    callback records no batches there: it wraps the strategy's ``ClusterCoordinator``
    with ``instrument_coordinator`` instead, which records every closure on the worker
    that ran it (in-graph timing, input waits, RPC probes, faults).

    At ``on_train_begin`` it opens its task session (``task_session``): the placement of
    the model's variables, the task's last words, the system sampler of this host (a
    background thread, every ``system_interval_s``) and, in the task that writes the
    manifest, live findings; ``on_train_end`` closes it. Under MultiWorkerMirroredStrategy
    about every ``allreduce_every_s`` seconds (sooner in the first seconds) it times an
    all-reduce of ``allreduce_bytes`` across the workers (one ``allreduce`` record), in the
    training thread, at the same step on every worker (``allreduce_probe``).

    Args:
        logdir: the run directory (``RUN``); records go to ``RUN/plugins/tfdiag/``.
        examples_per_step: examples in one batch (global batch size), if known; under
            ParameterServerStrategy only where a closure's elements do not tell (the
            count taken in-graph from each element wins).
        system_interval_s: seconds between system samples; ``None`` or 0: off.
        allreduce_every_s: seconds between all-reduce probes, once past the first few
            (MultiWorkerMirroredStrategy); 0: off.
        allreduce_bytes: size of the probe all-reduce.
        live_interval_s: seconds between live screens of the run's recent records, in the
            task that writes the manifest (``src/tfdiag/collectors/live_thread.py``: findings printed on
            stderr and written as ``live_finding`` records); 0: off; None (the default): the
            ``TFDIAG_LIVE_FINDINGS`` environment variable (``off`` turns them off), else on,
            every 2 s.

    Example:
        >>> model.fit(dataset, epochs=2, callbacks=[DiagnosticsCallback("logs/run1", 64)])  # doctest: +SKIP
    """

    # tf-keras: pass logs through untouched (we never read them), which also keeps
    # ParameterServerStrategy's "no batch-level callbacks" check from rejecting us.
    _supports_tf_logs = True

    def __init__(self, logdir, examples_per_step: int | None = None, *, system_interval_s: float | None = SAMPLE_EVERY_S,
                 allreduce_every_s: float = DEFAULT_ALLREDUCE_EVERY_S, allreduce_bytes: int = DEFAULT_ALLREDUCE_BYTES,
                 live_interval_s: float | None = None):
        if _KerasCallback is not object:
            super().__init__()
        check_logdir(logdir)
        check_count("examples_per_step", examples_per_step, optional=True)
        if isinstance(allreduce_every_s, bool) or not isinstance(allreduce_every_s, (int, float)) \
                or not allreduce_every_s >= 0:
            raise InvalidOptionError("Invalid value for argument `allreduce_every_s`. Expected a number of seconds "
                                     f">= 0. Received: {allreduce_every_s!r}")
        self.logdir = logdir
        self.examples_per_step = examples_per_step
        self.system_interval_s = system_interval_s
        self.allreduce_every_s = allreduce_every_s
        self.allreduce_bytes = allreduce_bytes
        self.live_interval_s = live_interval_s
        self.task: str | None = None
        # From on_train_begin to on_train_end; none under ParameterServerStrategy (the coordinator has it).
        self.task_session: TaskSession | None = None
        self._allreduce: AllreduceProbe | None = None
        self._coordinator = None
        self._stamps = StepStamps()
        self._stamping = False
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
        self._buffered: list[tuple[int, int, int]] = []  # (step, begin_ns, end_ns) not yet written
        self._written_ns = 0
        self._progress = None  # the heartbeat's step counter (src/tfdiag/collectors/heartbeat.py)

    def on_train_begin(self, logs=None):
        self._reset()
        self._failed = False
        try:
            strategy = self._strategy()
            if _is_parameter_server(strategy):
                self._instrument_coordinator(strategy)
                return
            if self.task_session is None:
                model = tf_internals.callback_model(self)
                # Timed wake-ups only where a stopped process holds every worker up (all-reduce).
                wants = Wants(system_interval_s=self.system_interval_s,
                              wake_s=WAKE_S if _is_multi_worker(strategy) else None, last_words=True, stacks=True,
                              variables=model, live_interval_s=self.live_interval_s)
                self.task_session = TaskSession(self.logdir, wants, strategy=strategy)
                self.task = self.task_session.task
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            self._fail(error)
            return
        self._start_training_path(strategy)

    def on_train_batch_begin(self, batch, logs=None):
        self._begin_ns = time.time_ns()

    def on_train_batch_end(self, batch, logs=None):
        end_ns = time.time_ns()
        if self._failed or self.task_session is None:
            return
        self._buffered.append((self._step, self._begin_ns, end_ns))
        self._step += 1
        try:
            if self._progress is None:
                self._progress = self.task_session.progress()
            self._progress.count = self._step
        except Exception as error:  # noqa: BLE001
            self._fail(error)
            return
        # Before the write, which empties the buffer the probe reads the step time from.
        if self._allreduce is not None and self._step >= self._allreduce.cadence.next_step:
            recent = [(begin, end) for _, begin, end in self._buffered[-STEP_TIME_STEPS:]]
            if not self._allreduce.run(self._step, recent):
                self._allreduce = None
        if end_ns - self._written_ns >= WRITE_EVERY_NS:
            self._write_steps(end_ns)

    def _write_steps(self, now_ns: int) -> None:
        """Appends the buffered steps' records, with their input waits from the stamps."""
        self._written_ns = now_ns
        steps, self._buffered = self._buffered, []
        stamped = match_stamps([(begin, end) for _, begin, end in steps], *self._stamps.take())
        try:
            writer = self.task_session.writer
            for (step, begin_ns, end_ns), (started_ns, ready_ns, gradients_ns, examples) in zip(steps, stamped):
                # The first step of a fit may trace the train function before the element is fetched.
                timed = ready_ns is not None and step > 0
                # The wait starts when the train function did, not at the Python hook before it.
                since_ns = max(started_ns or begin_ns, begin_ns)
                # From the element to this worker's own gradients, before the cross-worker reduction.
                computed = timed and gradients_ns is not None
                writer.append(
                    "step",
                    task=writer.task,
                    step=step,
                    begin_ns=begin_ns,
                    end_ns=end_ns,
                    input_wait_ns=min(max(ready_ns - since_ns, 0), end_ns - begin_ns) if timed else 0,
                    examples=self.examples_per_step or examples,
                    clock_task=writer.task,
                    compute_ns=min(max(gradients_ns - ready_ns, 0), end_ns - begin_ns) if computed else None,
                )
        except Exception as error:  # noqa: BLE001
            self._fail(error)

    def on_train_end(self, logs=None):
        if self._buffered and not self._failed and self.task_session is not None:
            self._write_steps(time.time_ns())
        if self._stamping:
            self._stamping = False
            stamp_train_step(tf_internals.callback_model(self), None, examples_in)
        self._allreduce = None
        coordinator, self._coordinator = self._coordinator, None
        if coordinator is not None:
            coordinator.close()  # writes the records of the last closures
        task_session, self.task_session = self.task_session, None
        if task_session is not None:
            task_session.close()

    # -- ParameterServerStrategy -----------------------------------------------------
    def _instrument_coordinator(self, strategy) -> None:
        """Swaps the strategy's (and the model's) coordinator for an instrumented one.

        Both are private (``tf_internals.cluster_coordinator_of``), so anything unexpected
        leaves training as it was and only turns this collector off.
        """
        from tfdiag.collectors.coordinator import instrument_coordinator

        model = tf_internals.callback_model(self)
        coordinator = tf_internals.cluster_coordinator_of(model, strategy)
        if coordinator is None:
            logger.warning("tfdiag: no ClusterCoordinator found under ParameterServerStrategy; no step records.")
            return
        self._coordinator = instrument_coordinator(coordinator, self.logdir, examples_per_step=self.examples_per_step,
                                                   system_interval_s=self.system_interval_s, variables=model,
                                                   live_interval_s=self.live_interval_s)
        self.task = self._coordinator.task
        tf_internals.replace_cluster_coordinator(model, strategy, self._coordinator)

    # -- the training path ------------------------------------------------------------
    def _start_training_path(self, strategy) -> None:
        """What runs on the training thread: the input-wait stamps and the all-reduce probe."""
        model = tf_internals.callback_model(self)
        if model is not None:
            try:
                self._stamping = stamp_train_step(model, self._stamps, examples_in)
            except Exception as error:  # noqa: BLE001
                logger.warning("tfdiag: input-wait stamps are off (%r).", error)
        if self.allreduce_every_s and _is_multi_worker(strategy):
            try:
                self._allreduce = AllreduceProbe(strategy, self.task_session.writer, self.allreduce_every_s,
                                                 self.allreduce_bytes)
            except Exception as error:  # noqa: BLE001
                logger.warning("tfdiag: all-reduce probe is off (%r).", error)

    # -- helpers ---------------------------------------------------------------------
    @property
    def steps_recorded(self) -> int:
        """Steps recorded in the current (or last) ``fit``."""
        return self._step

    def _strategy(self):
        model = tf_internals.callback_model(self)
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
