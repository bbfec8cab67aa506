"""In-graph timing of ``ClusterCoordinator`` closures, and reading those timings back.

:func:`instrument` wraps the user's function in a ``tf.function`` that calls it and also
returns, measured in-graph on the worker, one float64 vector (``STATS`` gives the order):

* ``begin``/``end``: ``tf.timestamp()`` at the start and the end of the closure (on the
  worker's clock; ``end`` has control dependencies on every output of ``fn``);
* ``wait``: the time spent in ``next()`` on the per-worker iterators passed as arguments
  (each ``next`` is bracketed by ``tf.timestamp()`` with control dependencies on the
  element), and ``examples``: the sum over elements of
  :func:`tfdiag.collectors.batch_size.examples_in` (-1 when the closure read no iterator
  or an element's examples are unknowable);
* ``steps``: how many ``next()`` calls the closure made (at least 1).

:func:`user_remote_value` gives the caller a RemoteValue of ``fn``'s own outputs,
:func:`timing_of` takes a finished closure's vector (read here when TensorFlow copied the
outputs for the caller, else its handle on the worker), and :func:`fetch_stats` copies
the vectors of many finished closures from their workers, one op and one copy per worker.
"""

from __future__ import annotations

import collections

from tfdiag.collectors import tf_internals
from tfdiag.collectors.batch_size import UNKNOWN, examples_in
from tfdiag.collectors.bounded import BoundedCalls

STATS = ("begin", "end", "wait", "examples", "steps")  # the order of the stats vector


def _tf():
    import tensorflow as tf  # lazy: the caller has TensorFlow loaded already

    return tf


class _ClosureTiming:
    """Trace-time accumulator of the ``next()`` timings of one closure's graph."""

    def __init__(self):
        self.waits = []
        self.examples = []

    def timed_next(self, get_next):
        tf = _tf()
        start = tf.timestamp()
        with tf.control_dependencies([start]):
            element = get_next()
        tensors = [t for t in tf.nest.flatten(element, expand_composites=True) if isinstance(t, tf.Tensor)]
        with tf.control_dependencies(tensors):
            stop = tf.timestamp()
        self.waits.append(stop - start)
        self.examples.append(examples_in(element))
        return element

    def total_examples(self):
        """The examples of every element read, as float64; -1 when none was read or any is unknowable."""
        tf = _tf()
        if not self.examples:
            return tf.constant(float(UNKNOWN), tf.float64)
        counts = tf.stack(self.examples)
        total = tf.where(tf.reduce_any(counts < 0), tf.constant(UNKNOWN, tf.int64), tf.reduce_sum(counts))
        return tf.cast(total, tf.float64)


class _TimedIterator:
    """Stands in for a per-worker iterator inside the traced closure; times ``next()``."""

    def __init__(self, iterator, timing: _ClosureTiming):
        self._iterator = iterator
        self._timing = timing

    def __iter__(self):
        return self

    def __next__(self):
        return self._timing.timed_next(lambda: next(self._iterator))

    def get_next(self):
        return self._timing.timed_next(self._iterator.get_next)

    def __getattr__(self, name):  # element_spec, get_next_as_optional, ...
        return getattr(self._iterator, name)


def _is_iterator(value) -> bool:
    tf = _tf()
    return isinstance(value, (tf.data.Iterator, tf.distribute.DistributedIterator))


def instrument(fn):
    """A ``tf.function`` returning ``(fn's outputs, stats vector)``.

    Example:
        >>> timed = instrument(train_step)  # doctest: +SKIP
        >>> remote = coordinator.schedule(timed, args=(per_worker_iterator,))  # doctest: +SKIP
    """
    tf = _tf()
    python_fn = getattr(fn, "python_function", fn)  # trace fn's body into our graph

    def wrap(value, timing):
        return _TimedIterator(value, timing) if _is_iterator(value) else value

    @tf.function
    def instrumented(*args, **kwargs):
        timing = _ClosureTiming()
        begin = tf.timestamp()
        args = [wrap(a, timing) for a in args]
        kwargs = {k: wrap(v, timing) for k, v in kwargs.items()}
        with tf.control_dependencies([begin]):
            outputs = python_fn(*args, **kwargs)
        done = [t for t in tf.nest.flatten(outputs, expand_composites=True) if isinstance(t, tf.Tensor)]
        with tf.control_dependencies(done + timing.waits):
            end = tf.timestamp()
        zero = tf.constant(0.0, tf.float64)
        # One float64 vector, not five tensors: the coordinator copies every output of a
        # closure back with its own RPC, which for five scalars more than doubled the
        # per-closure cost of a small step.
        stats = tf.stack(
            [
                begin,
                end,
                tf.add_n(timing.waits) if timing.waits else zero,
                timing.total_examples(),
                tf.constant(float(max(len(timing.waits), 1)), tf.float64),
            ]
        )
        return outputs, stats

    return instrumented


_remote_value_class = None


def user_remote_value(remote):
    """Wraps the RemoteValue of an instrumented closure as a RemoteValue of the user's ``fn``."""
    global _remote_value_class
    if _remote_value_class is None:
        base = _tf().distribute.experimental.coordinator.RemoteValue

        class InstrumentedRemoteValue(base):
            """The RemoteValue of the user's function (the timings stripped off)."""

            def __init__(self, remote):
                self._remote = remote

            def fetch(self):
                return self._remote.fetch()[0]

            def get(self):
                return self._remote.get()[0]

            def __repr__(self):
                return f"<InstrumentedRemoteValue of {self._remote!r}>"

        _remote_value_class = InstrumentedRemoteValue
    return _remote_value_class(remote)


def stats_handle(remote):
    """The stats vector of a finished closure, still on its worker."""
    return tf_internals.worker_outputs(remote)[1]


def timing_of(remote):
    """A finished closure's stats: the vector (a list) when TensorFlow copied the outputs to
    this process for the caller, else its handle on the worker, for :func:`fetch_stats`.

    Holding this rather than ``remote`` lets the closure's own outputs go.
    """
    local = tf_internals.local_outputs(remote)
    if local is not None:
        return local[1].numpy().tolist()
    return stats_handle(remote)


def fetch_stats(timings, calls: BoundedCalls, timeout_s: float, on_failure=None) -> list[list[float] | None]:
    """The stats vectors of finished closures (:func:`timing_of` each): one op and one copy per worker.

    Vectors already read are passed through; the handles are stacked on their worker and
    copied at once, through ``calls``: a worker that does not answer within ``timeout_s``
    is left to its thread, on an eager executor of its own (``tf_internals.own_executor``),
    so it holds up no closure. The cost is mostly per call, not per vector
    (``benchmarks/timing_copy.py``), so the caller batches. A worker that fails or is
    late loses its vectors (None), not its closures' records; each such loss is reported
    as ``on_failure(device, closures, error)``.
    """
    tf = _tf()
    stats: list[list[float] | None] = [None] * len(timings)
    by_device = collections.defaultdict(list)
    for position, timing in enumerate(timings):
        if isinstance(timing, list):
            stats[position] = timing
        else:
            by_device[timing.device].append(position)
    for device, positions in by_device.items():
        handles = [timings[p] for p in positions]

        def copy(handles=handles, device=device):
            with tf_internals.own_executor(), tf.device(device):
                return tf.stack(handles).numpy().tolist()

        try:
            rows = calls.call(device, copy, timeout_s)
        except Exception as error:  # noqa: BLE001 - a worker gone or stuck; its closures still count
            if on_failure is not None:
                on_failure(device, len(positions), error)
            continue
        for position, row in zip(positions, rows):
            stats[position] = row
    return stats
