"""When each ``model.fit`` step's input element became available, measured in-graph.

Under ``model.fit`` both Kerases fetch the next element (``next(iterator)``, the
``IteratorGetNext`` op) *inside* the compiled train function, so a callback's batch hooks
see one opaque step; under MultiWorkerMirroredStrategy that step is synchronous, and a
worker with a slow input pipeline makes every other worker wait in the all-reduce.

Mechanism: :func:`stamp_train_step` wraps the model's ``train_step`` (a public, documented
override point that both Keras 3 and tf-keras call on the element right after fetching
it, inside the train function, on every replica) and remakes the train function
(``make_train_function(force=True)``, public in both) so that the traced step first runs a
``tf.py_function`` whose inputs are the element's leading dimension and one value of the
element (so that it cannot run before the element exists). That op runs as soon as the
element exists, records ``time.time_ns()`` and the rows, and feeds nothing
else: it is stateful, so the function runs it (automatic control dependencies) without the
step's compute waiting for it. A second ``tf.py_function``, with no inputs, stamps when
the train function started: it does not wait for the element (measured: it runs within
a millisecond of the call while a 50 ms ``GetNext`` is still pending). The callback
reads both at ``on_train_batch_end``: ``input_wait = ready - started`` is this worker's
own wait for its element, without the Python dispatch and the function's start-up
before it (1-2 ms a step on a busy host, which short clean steps read as input wait
when the wait was counted from ``on_train_batch_begin``); the rest of the step is
compute plus the wait in the collective for slower workers.

Why not the alternatives: bracketing ``GetNext`` with ``tf.timestamp()`` needs the train
function rebuilt (its body is private and differs between the Kerases); sampled profiler
traces cost ~7 MB and a parse per worker per sample, see the element only while a trace
runs, and would leave most ``step`` records without an input wait, which the analysis
reads as zero. The py_functions cost two host callbacks per replica per step (tens of µs).

It is skipped (no stamps, ``input_wait_ns`` 0 as before) when the model is compiled with
XLA (``jit_compile``: a py_function cannot be compiled). Nothing raised in the stamp
reaches training.

Example:
    >>> stamps = StepStamps()
    >>> stamps.start(); stamps.stamp(32); stamps.stamp(32)
    >>> started_ns, ready_ns, examples = stamps.take()
    >>> examples, ready_ns >= started_ns, stamps.take()
    (64, True, (None, None, 0))
"""

from __future__ import annotations

import logging
import threading
import time

logger = logging.getLogger("tfdiag")

# The attribute of a model that holds its wrapped train_step's current receiver.
_SLOT_ATTRIBUTE = "_tfdiag_step_stamps"


class StepStamps:
    """What the stamps of one training step said: when it started, first element time, rows seen."""

    def __init__(self):
        self._lock = threading.Lock()
        self._started_ns: int | None = None
        self._ready_ns: int | None = None
        self._examples = 0

    def start(self) -> None:
        """Called in-graph by every replica as the train function starts; never raises."""
        now_ns = time.time_ns()
        with self._lock:
            if self._started_ns is None:
                self._started_ns = now_ns

    def stamp(self, rows) -> None:
        """Called in-graph by every replica once its element exists; never raises."""
        now_ns = time.time_ns()
        try:
            rows = int(rows)
        except Exception:  # noqa: BLE001 - a collector never breaks training
            rows = 0
        with self._lock:
            if self._ready_ns is None:
                self._ready_ns = now_ns
            self._examples += max(rows, 0)

    def take(self) -> tuple[int | None, int | None, int]:
        """``(first start ns, first element ns, rows)`` since the last ``take`` (None: no stamp), and starts over."""
        with self._lock:
            taken = (self._started_ns, self._ready_ns, self._examples)
            self._started_ns, self._ready_ns, self._examples = None, None, 0
        return taken


class _Slot:
    """Where a wrapped train_step sends its stamps; rebound by each ``fit`` (one wrap per model)."""

    def __init__(self, stamps: StepStamps | None):
        self.stamps = stamps

    def start(self):
        stamps = self.stamps
        if stamps is not None:
            stamps.start()
        return []

    def stamp(self, rows, *anchor):
        stamps = self.stamps
        if stamps is not None:
            try:
                stamps.stamp(rows.numpy() if hasattr(rows, "numpy") else rows)
            except Exception:  # noqa: BLE001
                pass
        return []


def _uses_xla(model) -> bool:
    jit = getattr(model, "jit_compile", False)
    return jit is True or (isinstance(jit, str) and jit != "False")


def stamp_train_step(model, stamps: StepStamps | None, rows_of) -> bool:
    """Makes ``model``'s train step report to ``stamps``; ``None`` detaches it.

    ``rows_of(element)`` returns the element's leading dimension as an int64 tensor
    (built in-graph). The wrap is made once per model and only retargeted afterwards,
    because a train function traced in an earlier ``fit`` keeps calling it. Returns whether
    stamps will arrive.
    """
    slot = getattr(model, _SLOT_ATTRIBUTE, None)
    if slot is not None:
        slot.stamps = stamps
        return stamps is not None
    if stamps is None or _uses_xla(model):
        return False
    import tensorflow as tf

    slot = _Slot(stamps)
    original = model.train_step

    def train_step(data):
        # The rows alone can be a constant (a static batch size) that the graph optimiser
        # folds: one value of the element ties the stamp to the element's arrival.
        anchor = [tf.reshape(t, [-1])[:1] for t in tf.nest.flatten(data, expand_composites=True)[:1]]
        tf.py_function(slot.start, [], [], name="tfdiag_step_started")  # no inputs: runs as the function starts
        tf.py_function(slot.stamp, [rows_of(data), *anchor], [], name="tfdiag_input_ready")
        return original(data)

    try:
        setattr(model, "train_step", train_step)
        setattr(model, _SLOT_ATTRIBUTE, slot)
        # Keras 3 binds train_step when it makes the train function (before on_train_begin);
        # tf-keras looks it up when tracing. Remaking it (public API) serves both.
        model.make_train_function(force=True)
    except Exception as error:  # noqa: BLE001 - e.g. a model class that forbids new attributes
        logger.warning("tfdiag: cannot time input waits of this model (%r).", error)
        return False
    return True
