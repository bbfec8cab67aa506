"""When each ``model.fit`` step's input element became available, measured in-graph.

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

Cost (``benchmarks/stamp_cost.py``; budget ``step_input`` in ``collectors/budget.py``): the
earlier stamp, a ``tf.py_function`` per replica per step (a host callback into Python,
under the GIL), took 270 µs of CPU a step of ``mwms_fit``'s model on a loaded machine;
the enqueue was within the noise of the same blocks, and a drain of 200 stamps took
about 0.5 ms (docs/benchmarks.md, "Collector overhead").

Why not the alternatives: bracketing ``GetNext`` with ``tf.timestamp()`` needs the train
function rebuilt (its body is private and differs between the Kerases); sampled profiler
traces cost ~7 MB and a parse per worker per sample, see the element only while a trace
runs, and would leave most ``step`` records without an input wait, which the analysis
reads as zero; a variable written in-graph would be created under the user's
distribution strategy (a mirrored variable, a collective at creation).

It is skipped (no stamps, ``input_wait_ns`` 0 as before) when the model is compiled with
XLA (``jit_compile``: the queue ops have no XLA kernels). Detaching (``stamps`` None, at
``on_train_end``) restores the model's own ``train_step``, so a later ``fit`` without the
callback enqueues nothing. Nothing raised in the stamp reaches training.

Example:
    >>> stamps = StepStamps()
    >>> stamps.take()
    ([], [], [])
"""

from __future__ import annotations

import bisect
import logging

logger = logging.getLogger("tfdiag")

# The attribute of a model that holds its stamping state (queue and own train_step).
_STATE_ATTRIBUTE = "_tfdiag_step_stamps"


class StepStamps:
    """The stamps of a model's steps, drained from its queue in batches."""

    def __init__(self):
        self.queue = None  # set by stamp_train_step

    def take(self) -> tuple[list[int], list[int], list[int]]:
        """``(started_ns, ready_ns, rows)`` of every stamp since the last ``take``, in order.
        Never raises."""
        queue = self.queue
        if queue is None:
            return [], [], []
        try:
            size = int(queue.size())
            if not size:
                return [], [], []
            started, ready, rows = queue.dequeue_many(size)
            return _nanoseconds(started), _nanoseconds(ready), rows.numpy().tolist()
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            logger.warning("tfdiag: cannot read the input-wait stamps (%r); they are off.", error)
            self.queue = None
            return [], [], []


def _nanoseconds(seconds) -> list[int]:
    return [int(round(t * 1e9)) for t in seconds.numpy().tolist()]


def match_stamps(steps: list[tuple[int, int]], started_ns: list[int], ready_ns: list[int],
                 rows: list[int]) -> list[tuple[int | None, int | None, int]]:
    """For each ``(begin_ns, end_ns)`` step, the first stamp whose element time is inside it
    (its start and element times) and the rows of all of them.

    Stamps are in order (a queue's). A step without a stamp gets ``(None, None, 0)``.

    >>> match_stamps([(0, 10), (10, 20), (20, 30)], [1, 2, 21], [3, 4, 25], [8, 8, 8])
    [(1, 3, 16), (None, None, 0), (21, 25, 8)]
    """
    matched = []
    for begin_ns, end_ns in steps:
        first, last = bisect.bisect_left(ready_ns, begin_ns), bisect.bisect_right(ready_ns, end_ns)
        matched.append((started_ns[first], ready_ns[first], sum(rows[first:last])) if first < last
                       else (None, None, 0))
    return matched


class _State:
    """A stamped model: its own ``train_step`` and the queue its stamps go to."""

    def __init__(self, own, queue):
        self.own = own  # the model's own train_step attribute, if it had one (else the class's is used)
        self.queue = queue


def _uses_xla(model) -> bool:
    jit = getattr(model, "jit_compile", False)
    return jit is True or (isinstance(jit, str) and jit != "False")


def stamp_train_step(model, stamps: StepStamps | None, rows_of) -> bool:
    """Makes ``model``'s train step stamp into a queue that ``stamps`` reads; ``None`` detaches it.

    ``rows_of(element)`` returns the element's leading dimension as an int64 tensor
    (built in-graph). Attaching remakes the train function once per ``fit`` (traced at
    its first step); detaching restores the model's own ``train_step`` and remakes it
    again. Returns whether stamps will arrive.
    """
    state = getattr(model, _STATE_ATTRIBUTE, None)
    if stamps is None:
        if state is not None:
            try:
                if state.own is None:
                    delattr(model, "train_step")
                else:
                    setattr(model, "train_step", state.own)
                delattr(model, _STATE_ATTRIBUTE)
                model.make_train_function(force=True)
            except Exception as error:  # noqa: BLE001
                logger.warning("tfdiag: cannot restore the model's train step (%r).", error)
        return False
    if _uses_xla(model):
        return False
    import tensorflow as tf

    if state is None:
        queue = tf.queue.FIFOQueue(2**31 - 1, [tf.float64, tf.float64, tf.int64], shapes=[[], [], []],
                                   name="tfdiag_input_ready")
        state = _State(vars(model).get("train_step"), queue)
    original = state.own or type(model).train_step.__get__(model, type(model))
    queue = state.queue

    def train_step(data):
        # The rows alone can be a constant (a static batch size) that the graph optimiser
        # folds: one value of the element ties the stamp to the element's arrival.
        started = tf.timestamp(name="tfdiag_step_started")  # no inputs: runs as the function starts
        anchor = [tf.reshape(t, [-1])[:1] for t in tf.nest.flatten(data, expand_composites=True)[:1]]
        with tf.control_dependencies(anchor):
            ready = tf.timestamp()
        queue.enqueue([started, ready, rows_of(data)], name="tfdiag_input_ready")
        return original(data)

    try:
        setattr(model, "train_step", train_step)
        setattr(model, _STATE_ATTRIBUTE, state)
        # Keras 3 binds train_step when it makes the train function (before on_train_begin);
        # tf-keras looks it up when tracing. Remaking it (public API) serves both.
        model.make_train_function(force=True)
    except Exception as error:  # noqa: BLE001 - e.g. a model class that forbids new attributes
        logger.warning("tfdiag: cannot time input waits of this model (%r).", error)
        return False
    stamps.queue = queue
    stamps.take()  # stamps of an earlier fit
    return True
