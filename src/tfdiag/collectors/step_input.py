"""When each ``model.fit`` step's input element became available, and when this worker's
own gradients were ready, measured in-graph.

Under ``model.fit`` both Kerases fetch the next element (``next(iterator)``, the
``IteratorGetNext`` op) *inside* the compiled train function, so a callback's batch hooks
see one opaque step; under MultiWorkerMirroredStrategy that step is synchronous, and a
worker with a slow input pipeline makes every other worker wait in the all-reduce.

Mechanism: :func:`stamp_train_step` wraps the model's ``train_step`` (a public, documented
override point that both Keras 3 and tf-keras call on the element right after fetching
it, inside the train function, on every replica) and remakes the train function
(``make_train_function(force=True)``, public in both) so that the traced step reads
``tf.timestamp()`` twice: once with no inputs, which runs as the train function starts
(measured: within a millisecond of the call while a 50 ms ``GetNext`` is still pending),
and once under a control dependency on one value of the element (so that it cannot run
before the element exists); it enqueues both times and the element's leading dimension
into a ``FIFOQueue`` made for the model. These are TensorFlow kernels of a few µs that
feed nothing else: the step's compute never waits for them, and no Python runs per step.
:class:`StepStamps` drains the queue in one call (``take``) when the callback writes its
buffered steps, about once a second; each step gets the first stamp whose element time
falls between its ``on_train_batch_begin`` and ``on_train_batch_end``:
``input_wait = ready - started`` is this worker's own wait for its element, without the
Python dispatch and the function's start-up before it (1-2 ms a step on a busy host,
which short clean steps read as input wait when it was counted from
``on_train_batch_begin``); the rest of the step is compute plus the wait in the
collective for slower workers.

Gradients: the wrapper also wraps ``apply_gradients`` on the model's optimizer instance
(both Kerases' ``train_step`` call it with this worker's own gradients, and both reduce
them across workers *inside* it: tf-keras in ``aggregate_gradients``, Keras 3 in
``_backend_update_step``). While the train step traces, the wrapper reads
``tf.timestamp()`` under a control dependency on every gradient it was given, before
calling the optimizer's own method; the train step enqueues the last such stamp with the
others (NaN where the step applied no gradients through it: a custom ``train_step``, or
one that applies them inside a nested function). ``compute_ns = gradients - ready`` is
this worker's own compute; under a synchronous strategy the rest of its step is the
reduction, the update and its wait for slower workers. Verified on ``mwms_fit`` (tf-keras,
2 workers, 200 steps, load average 2.5) with worker 1 sleeping 40 ms in its forward
pass: worker 0 computed a median 4.1 ms and spent 58.5 ms of its 63.3 ms step after it
(its wait for worker 1, then the reduction), worker 1 computed 44.1 ms and spent 18.0 ms
after it; clean, both computed about 4 ms with 19.4 ms after.
``tests/collectors/test_step_input.py`` checks both Kerases in one process (an optimizer
that waits inside ``apply_gradients`` leaves ``compute_ns`` short; a slow forward pass
makes it long) and the two-worker run.

Cost (``benchmarks/micro.py stamp_cost``; budget ``step_input`` in ``src/tfdiag/collectors/budget.py``): the
earlier stamp, a ``tf.py_function`` per replica per step (a host callback into Python,
under the GIL), took 270 µs of CPU a step of ``mwms_fit``'s model on a loaded machine.
These stamps, process CPU of the same model's train function with and without them in
200 interleaved rounds of 50 steps (``--model-size 16 --batch 16``, a 1 ms step): +20 ±
8 µs a step (95 %) at load average 2.8-3.4, +2 ± 38 at 3.8-5.6. A drain of 50 stamps
takes 260-280 µs of CPU, about once a second (charged to the callback's ``hooks``).

Why not the alternatives: bracketing ``GetNext`` with ``tf.timestamp()`` needs the train
function rebuilt (its body is private and differs between the Kerases); sampled profiler
traces cost ~7 MB and a parse per worker per sample, see the element only while a trace
runs, and would leave most ``step`` records without an input wait, which the analysis
reads as zero; a variable written in-graph would be created under the user's
distribution strategy (a mirrored variable, a collective at creation).

It is skipped (no stamps, ``input_wait_ns`` 0 as before, ``compute_ns`` null) when the
model is compiled with XLA (``jit_compile``: the queue ops have no XLA kernels). Detaching
(``stamps`` None, at ``on_train_end``) restores the model's own ``train_step`` and its
optimizer's ``apply_gradients``, so a later ``fit`` without the callback enqueues nothing.
Nothing raised in the stamp reaches training.

Example:
    >>> stamps = StepStamps()
    >>> stamps.take()
    ([], [], [], [])
"""

from __future__ import annotations

import bisect
import logging
import math
import threading

logger = logging.getLogger("tfdiag")

# The attribute of a model that holds its stamping state (queue, own train_step and apply_gradients).
_STATE_ATTRIBUTE = "_tfdiag_step_stamps"


class StepStamps:
    """The stamps of a model's steps, drained from its queue in batches."""

    def __init__(self):
        self.queue = None  # set by stamp_train_step

    def take(self) -> tuple[list[int], list[int], list[int | None], list[int]]:
        """``(started_ns, ready_ns, gradients_ns, rows)`` of every stamp since the last
        ``take``, in order (``gradients_ns`` None where the step applied no gradients
        through the model's optimizer). Never raises."""
        queue = self.queue
        if queue is None:
            return [], [], [], []
        try:
            size = int(queue.size())
            if not size:
                return [], [], [], []
            started, ready, gradients, rows = queue.dequeue_many(size)
            return (_nanoseconds(started), _nanoseconds(ready), _nanoseconds(gradients),
                    rows.numpy().tolist())
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            logger.warning("tfdiag: cannot read the input-wait stamps (%r); they are off.", error)
            self.queue = None
            return [], [], [], []


def _nanoseconds(seconds) -> list[int | None]:
    return [None if math.isnan(t) else int(round(t * 1e9)) for t in seconds.numpy().tolist()]


def match_stamps(steps: list[tuple[int, int]], started_ns: list[int], ready_ns: list[int],
                 gradients_ns: list[int | None], rows: list[int]
                 ) -> list[tuple[int | None, int | None, int | None, int]]:
    """For each ``(begin_ns, end_ns)`` step, the first stamp whose element time is inside it
    (its start, element and gradients times) and the rows of all of them.

    Stamps are in order (a queue's). A step without a stamp gets ``(None, None, None, 0)``.

    >>> match_stamps([(0, 10), (10, 20), (20, 30)], [1, 2, 21], [3, 4, 25], [5, 6, None], [8, 8, 8])
    [(1, 3, 5, 16), (None, None, None, 0), (21, 25, None, 8)]
    """
    matched = []
    for begin_ns, end_ns in steps:
        first, last = bisect.bisect_left(ready_ns, begin_ns), bisect.bisect_right(ready_ns, end_ns)
        matched.append((started_ns[first], ready_ns[first], gradients_ns[first], sum(rows[first:last]))
                       if first < last else (None, None, None, 0))
    return matched


class _State:
    """A stamped model: its own ``train_step`` and its optimizer's own ``apply_gradients``,
    the queue its stamps go to, and the gradients stamps of the step being traced."""

    def __init__(self, own, optimizer, own_apply, queue):
        self.own = own  # the model's own train_step attribute, if it had one (else the class's is used)
        self.optimizer = optimizer  # the optimizer whose apply_gradients is wrapped, or None
        self.own_apply = own_apply  # its own apply_gradients attribute, if it had one
        self.queue = queue
        # While a train_step traces, its gradients stamps (per thread: MirroredStrategy
        # traces each replica's step in a thread of its own).
        self.tracing = threading.local()


def _uses_xla(model) -> bool:
    jit = getattr(model, "jit_compile", False)
    return jit is True or (isinstance(jit, str) and jit != "False")


def stamp_train_step(model, stamps: StepStamps | None, rows_of) -> bool:
    """Makes ``model``'s train step stamp into a queue that ``stamps`` reads; ``None`` detaches it.

    ``rows_of(element)`` returns the element's leading dimension as an int64 tensor
    (built in-graph). Attaching wraps the model's ``train_step`` and its optimizer's
    ``apply_gradients`` and remakes the train function once per ``fit`` (traced at its
    first step); detaching restores both and remakes it again. Returns whether stamps
    will arrive.
    """
    state = getattr(model, _STATE_ATTRIBUTE, None)
    if stamps is None:
        if state is not None:
            try:
                _restore(model, "train_step", state.own)
                if state.optimizer is not None:
                    _restore(state.optimizer, "apply_gradients", state.own_apply)
                delattr(model, _STATE_ATTRIBUTE)
                model.make_train_function(force=True)
            except Exception as error:  # noqa: BLE001
                logger.warning("tfdiag: cannot restore the model's train step (%r).", error)
        return False
    if _uses_xla(model):
        return False
    import tensorflow as tf

    if state is None:
        queue = tf.queue.FIFOQueue(2**31 - 1, [tf.float64, tf.float64, tf.float64, tf.int64],
                                   shapes=[[], [], [], []], name="tfdiag_input_ready")
        optimizer = getattr(model, "optimizer", None)
        state = _State(vars(model).get("train_step"), optimizer,
                       None if optimizer is None else vars(optimizer).get("apply_gradients"), queue)
    original = state.own or type(model).train_step.__get__(model, type(model))
    queue = state.queue

    def train_step(data):
        # The rows alone can be a constant (a static batch size) that the graph optimiser
        # folds: one value of the element ties the stamp to the element's arrival.
        started = tf.timestamp(name="tfdiag_step_started")  # no inputs: runs as the function starts
        anchor = [tf.reshape(t, [-1])[:1] for t in tf.nest.flatten(data, expand_composites=True)[:1]]
        with tf.control_dependencies(anchor):
            ready = tf.timestamp()
        state.tracing.stamps = applied = []
        try:
            outputs = original(data)
        finally:
            state.tracing.stamps = None
        # The last gradients the step applied, if they were applied in this graph (not in a
        # nested function or branch, whose tensors this graph cannot read).
        graph = tf.compat.v1.get_default_graph()
        applied = [stamp for stamp in applied if stamp.graph is graph]
        gradients = applied[-1] if applied else tf.constant(math.nan, tf.float64)
        queue.enqueue([started, ready, gradients, rows_of(data)], name="tfdiag_input_ready")
        return outputs

    try:
        setattr(model, _STATE_ATTRIBUTE, state)
        setattr(model, "train_step", train_step)
        if state.optimizer is not None:
            setattr(state.optimizer, "apply_gradients", _stamped_apply_gradients(tf, state))
        # Keras 3 binds train_step when it makes the train function (before on_train_begin);
        # tf-keras looks it up when tracing. Remaking it (public API) serves both.
        model.make_train_function(force=True)
    except Exception as error:  # noqa: BLE001 - e.g. a model class that forbids new attributes
        logger.warning("tfdiag: cannot time input waits of this model (%r).", error)
        stamp_train_step(model, None, rows_of)  # puts back what was set
        return False
    stamps.queue = queue
    stamps.take()  # stamps of an earlier fit
    return True


def _stamped_apply_gradients(tf, state: _State):
    """The optimizer's ``apply_gradients``, which first stamps when all the gradients it was
    given exist: this worker's own, before the cross-worker reduction inside it."""
    own_apply = state.own_apply or type(state.optimizer).apply_gradients.__get__(state.optimizer)

    def apply_gradients(grads_and_vars, *args, **kwargs):
        grads_and_vars = list(grads_and_vars)
        if getattr(state.tracing, "stamps", None) is not None:
            try:
                gradients = [gradient for gradient, _ in grads_and_vars if gradient is not None]
                with tf.control_dependencies(tf.nest.flatten(gradients, expand_composites=True)):
                    state.tracing.stamps.append(tf.timestamp(name="tfdiag_gradients_ready"))
            except Exception as error:  # noqa: BLE001 - the step goes on without the stamp
                logger.warning("tfdiag: cannot stamp this model's gradients (%r).", error)
        return own_apply(grads_and_vars, *args, **kwargs)

    return apply_gradients


def _restore(owner, name: str, own) -> None:
    """Puts back ``owner``'s own attribute ``name`` (or removes ours where it had none)."""
    if own is None:
        if name in vars(owner):
            delattr(owner, name)
    else:
        setattr(owner, name, own)
