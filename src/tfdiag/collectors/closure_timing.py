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
    """Trace-time accumulator of the ``next()`` timings of one closure's graph.

    Each ``next()`` adds two timestamps; the waits are summed once, at the end, by a
    handful of ops whatever the number of steps (one ``Sub`` per step before: the
    in-graph timing's cost grew with the steps of a closure). Examples known when the
    graph is traced (a batch of static size, the usual case) are added up here, not in
    the graph.
    """

    def __init__(self):
        self.starts = []
        self.stops = []
        self.examples = []  # per element: a Python int where known at trace time, else a tensor

    def timed_next(self, get_next):
        tf = _tf()
        start = tf.timestamp()
        with tf.control_dependencies([start]):
            element = get_next()
        tensors = [t for t in tf.nest.flatten(element, expand_composites=True) if isinstance(t, tf.Tensor)]
        with tf.control_dependencies(tensors):
            stop = tf.timestamp()
        self.starts.append(start)
        self.stops.append(stop)
        count = examples_in(element)
        static = tf.get_static_value(count)
        self.examples.append(int(static) if static is not None else count)
        return element

    def total_wait(self):
        """The time spent in every ``next()``, as float64 seconds (0 when none was read)."""
        tf = _tf()
        if not self.stops:
            return tf.constant(0.0, tf.float64)
        return tf.reduce_sum(tf.stack(self.stops) - tf.stack(self.starts))

    def total_examples(self):
        """The examples of every element read, as float64; -1 when none was read or any is unknowable."""
        tf = _tf()
        known = [count for count in self.examples if isinstance(count, int)]
        if not self.examples or any(count < 0 for count in known):
            return tf.constant(float(UNKNOWN), tf.float64)
        tensors = [count for count in self.examples if not isinstance(count, int)]
        if not tensors:
            return tf.constant(float(sum(known)), tf.float64)
        counts = tf.stack(tensors)
        total = tf.where(tf.reduce_any(counts < 0), tf.constant(UNKNOWN, tf.int64), tf.reduce_sum(counts) + sum(known))
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


def instrument(fn, on_trace=None):
    """A ``tf.function`` returning ``(fn's outputs, stats vector)``; each time it is traced,
    ``on_trace(variables)`` gets the variables ``fn``'s graph read (``tf_internals.traced_variables``).

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
        if on_trace is not None:
            on_trace(tf_internals.traced_variables())
        done = [t for t in tf.nest.flatten(outputs, expand_composites=True) if isinstance(t, tf.Tensor)]
        with tf.control_dependencies(done + timing.stops):
            end = tf.timestamp()
        # One float64 vector, not five tensors: the coordinator copies every output of a
        # closure back with its own RPC, which for five scalars more than doubled the
        # per-closure cost of a small step.
        stats = tf.stack(
            [
                begin,
                end,
                timing.total_wait(),
                timing.total_examples(),
                tf.constant(float(max(len(timing.stops), 1)), tf.float64),
            ]
        )
        return outputs, stats

    return instrumented


class InstrumentedFunction:
    """The user's ``fn``, its instrumented ``tf.function`` (:func:`instrument`), and what to schedule for given arguments.

    ``ClusterCoordinator.schedule`` of a ``tf.function`` looks its concrete function up in
    the trace cache on every call (``Closure.__init__``: about 70 µs of the calling thread
    on ps_ctl's train function, ``benchmarks/micro.py schedule_cost``); of a ``ConcreteFunction``
    it runs that one. Once the same arguments were scheduled twice in a row (the same
    per-worker values and tensors, equal Python scalars: :func:`_same_arguments`), the
    concrete function traced for them is looked up once and scheduled while they stay
    the same; any other arguments get the ``tf.function``, which traces or looks up as
    TensorFlow would. Holds the last arguments of that kind until others come, and the
    concrete function while the coordinator lives: dropping it at ``close()`` unregisters
    it from every task, which waits on a stopped worker (``tests/collectors/test_fault_log.py``).

    Example:
        >>> timed = InstrumentedFunction(train_step)  # doctest: +SKIP
        >>> remote = coordinator.schedule(timed.function_for(args, None), args=args)  # doctest: +SKIP
        >>> timed.scheduled(args, None, coordinator.strategy)  # doctest: +SKIP
    """

    def __init__(self, fn):
        self.fn = fn
        # The variables each trace read, until the coordinator takes them to record their
        # placement (a list, not a property: schedule checks it on every call).
        self.captured: list = []
        self.function = instrument(fn, on_trace=self.captured.extend)
        self.traced = False  # scheduled once: a later failure to schedule is the coordinator's, not tracing's
        self._arguments = None  # (args, kwargs) of the last schedule, where _same_arguments can compare them
        self._concrete = None  # the concrete function traced for ``_arguments``, once looked up
        self._lookup_failed = False

    def take_captured(self) -> list:
        """The variables traces read since the last call (a trace runs in ``schedule``)."""
        captured, self.captured[:] = list(self.captured), []
        return captured

    def function_for(self, args, kwargs):
        """The concrete function for ``args``/``kwargs`` where known, else the ``tf.function``."""
        if self._concrete is not None and _same_arguments(self._arguments, (tuple(args or ()), dict(kwargs or {}))):
            return self._concrete
        return self.function

    def scheduled(self, args, kwargs, strategy) -> None:
        """Notes a successful schedule with ``args``/``kwargs`` (under ``strategy``)."""
        self.traced = True
        arguments = (tuple(args or ()), dict(kwargs or {}))
        if self._arguments is not None and _same_arguments(self._arguments, arguments):
            if self._concrete is None and not self._lookup_failed:
                self._concrete = tf_internals.traced_concrete_function(self.function, *arguments, strategy)
                self._lookup_failed = self._concrete is None  # never again: a lookup that traced must not recur
            return
        self._concrete = None
        self._arguments = arguments if _comparable(arguments) else None


def _fixed_spec(value) -> bool:
    """Whether ``value``'s type spec can never change: a tensor, or a ``ClusterCoordinator`` per-worker value."""
    tf = _tf()
    return isinstance(value, (tf.Tensor, tf.distribute.experimental.coordinator.PerWorkerValues))


_SCALARS = (int, float, bool, str, type(None))


def _comparable(arguments) -> bool:
    """Whether every argument is of a kind :func:`_same_arguments` can compare (no containers)."""
    args, kwargs = arguments
    return all(type(value) in _SCALARS or _fixed_spec(value) for value in (*args, *kwargs.values()))


def _same_arguments(old, new) -> bool:
    """Whether ``new`` ``(args, kwargs)`` trace as ``old`` did for sure: each the same object of
    a fixed spec (:func:`_fixed_spec`) or an equal Python scalar of the same type.

    >>> _same_arguments(((1, "a"), {"k": None}), ((1, "a"), {"k": None}))
    True
    >>> _same_arguments(((1,), {}), ((True,), {})), _same_arguments(((1,), {}), ((1, 2), {}))
    (False, False)
    """
    (old_args, old_kwargs), (new_args, new_kwargs) = old, new
    if len(old_args) != len(new_args) or old_kwargs.keys() != new_kwargs.keys():
        return False
    pairs = [*zip(old_args, new_args), *((old_kwargs[k], new_kwargs[k]) for k in old_kwargs)]
    for before, now in pairs:
        if type(before) in _SCALARS:
            if type(now) is not type(before) or now != before:
                return False
        elif now is not before:
            return False
    return True


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
    (``benchmarks/micro.py timing_copy``), so the caller batches. A worker that fails or is
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
