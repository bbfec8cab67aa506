"""``instrument_coordinator``: step and closure records for ParameterServerStrategy loops.

A ``ClusterCoordinator`` runs each scheduled function (a *closure*) on one worker. The
instrumented coordinator schedules, instead of the user's ``fn``, a ``tf.function`` that
calls ``fn`` and also returns, measured in-graph on the worker:

* ``begin``/``end``: ``tf.timestamp()`` at the start and the end of the closure (on the
  worker's clock; ``end`` has control dependencies on every output of ``fn``);
* ``wait``: the time spent in ``next()`` on the per-worker iterators passed as arguments
  (each ``next`` is bracketed by ``tf.timestamp()`` with control dependencies on the
  element), and ``examples``: the leading dimension of the first component of each
  element.

The worker that ran a closure is the device its outputs stay on until they are fetched
(asking in-graph, with ``experimental_get_current_worker_index()``, would feed the
index to every call as an extra input). The caller gets back a RemoteValue of ``fn``'s
own outputs. The coordinator's dispatch thread notes when each closure's result comes
in; a background thread wakes every ``FETCH_EVERY_S``, copies the timings of the
closures finished since from each worker at once, and writes one ``step`` record (task
and clock ``worker:<index>``) and one ``closure`` record (dispatch and result time on
the coordinator's clock) per closure into the coordinator's task file. A failed closure
is recorded with ``ok=False`` and its error message.

Besides steps and closures the instrumented coordinator runs, each on its own daemon
thread and off the training thread:

* the RPC probe (``rpc_probe``): from the coordinator to every worker and ps, and from
  every worker to every ps (a function the coordinator runs with its timestamps on the
  worker, outside the closure queue), a few links every ``probe_interval_s``;
* the system sampler (``system``) of the coordinator's host, every ``system_interval_s``;
* fault capture (``faults``): the coordinator's own log lines about failed workers,
  re-scheduled closures and recoveries become ``fault`` records;
* cumulative ``shard`` records per worker (examples its closures consumed), every
  ``SHARD_EVERY_S``;
* and, when ``variables`` is given (or ``record_placement`` is called), ``placement``.
"""

from __future__ import annotations

import atexit
import collections
import itertools
import logging
import threading
import time
import weakref

from tfdiag.collectors import identity, writers
from tfdiag.collectors.faults import FaultCapture
from tfdiag.collectors.placement import record_placement
from tfdiag.collectors.rpc_probe import DEFAULT_INTERVAL_S, RpcProber, cluster_tasks, task_of_device
from tfdiag.collectors.system import SystemSampler

logger = logging.getLogger("tfdiag")

# How often the result thread collects finished closures and copies their timings from
# the workers: one op and one copy per worker per fetch, instead of one per closure.
# Their records reach the writer at most this much later. (The result times come from
# the dispatch threads, ``_watch_result``: the thread need not poll for them.)
FETCH_EVERY_S = 1.0
# How often the result thread looks for finished closures until the first one is
# recorded (which starts the RPC probe: a run of a few seconds needs its first rounds)
# and, at close, for the last ones.
POLL_S = 0.05
# How long ``close()`` waits for closures still in flight before dropping their records.
CLOSE_TIMEOUT_S = 30.0
MAX_ERROR_CHARS = 2000
# Cumulative per-worker example counts (``shard`` records) are written this often.
SHARD_EVERY_S = 1.0


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
        if tensors and tensors[0].shape.rank:
            self.examples.append(tf.cast(tf.shape(tensors[0], out_type=tf.int64)[0], tf.int64))
        else:
            self.examples.append(tf.constant(1, tf.int64))
        return element


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


def _instrument(fn):
    """A ``tf.function`` returning ``(fn's outputs, timings)``."""
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
                tf.cast(tf.add_n(timing.examples), tf.float64) if timing.examples else tf.constant(-1.0, tf.float64),
                tf.constant(float(max(len(timing.waits), 1)), tf.float64),
            ]
        )
        return outputs, stats

    return instrumented


_remote_value_class = None


def _user_remote_value(remote):
    """Wraps the RemoteValue of the instrumented closure as a RemoteValue of ``fn``."""
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


def _watch_result(remote, view, pending: "_Pending") -> None:
    """Stamps ``pending.result_ns`` when the closure's result comes in, and lets TensorFlow
    copy its outputs to the coordinator only while ``view`` lives.

    When a closure succeeds, the coordinator's dispatch thread for that worker calls the
    RemoteValue's ``_copy_to_local`` at once: the result time is read there, in the
    dispatch thread, exactly. TensorFlow copies the outputs to the coordinator if
    anything still holds the RemoteValue (so that they outlive the worker), and runs the
    worker's next closure only after. The result thread holds every RemoteValue until
    it has read the timings, which made that copy happen for every closure, of outputs
    the caller had dropped: 2.2 ms of the coordinator's CPU per closure on ps_ctl, none
    measurable without it (benchmarks/overhead_ab.py). With this, outputs are copied as
    TensorFlow would for the caller's view alone; the result thread reads the other
    timings from the workers in its batches (``_fetch_stats``).
    """
    # No cycle through remote (pending holds it): the RemoteValue goes as soon as it is recorded.
    view_ref, remote_ref, pending_ref = weakref.ref(view), weakref.ref(remote), weakref.ref(pending)

    def copy_to_local():
        watched = pending_ref()
        if watched is not None:
            watched.result_ns = time.time_ns()
        held = remote_ref()
        if view_ref() is not None:
            return type(held)._copy_to_local(held)
        return held._values  # noqa: SLF001 - nobody will read them here: they stay on the worker

    remote._copy_to_local = copy_to_local  # noqa: SLF001 - RemoteValueImpl.get calls it


# What the result thread reads of a RemoteValueImpl (TensorFlow 2.21); checked per closure.
_REMOTE_VALUE_STATE = ("_status_available_event", "_status", "_error", "_values", "_has_fetched_to_local",
                       "_fetched_tensors", "_copy_to_local")


def _finished(remote) -> bool:
    """Whether a closure's result (or its error) is in."""
    return remote._status_available_event.is_set()  # noqa: SLF001 - see _REMOTE_VALUE_STATE


def _closure_error(remote) -> BaseException | None:
    """The error a finished closure ended with, None when it succeeded."""
    if remote._error is not None:  # noqa: SLF001
        return remote._error
    if getattr(remote._status, "name", "") == "ABORTED":  # noqa: SLF001
        return _tf().errors.CancelledError(None, None, "the closure was aborted (its worker failed)")
    return None


def _stats_handle(remote):
    """The stats vector of a finished closure, still on the worker: ``(fn's outputs, stats)[1]``."""
    return remote._values[1]  # noqa: SLF001


def _copied_to_local(remote) -> bool:
    """Whether TensorFlow copied the closure's outputs here (``_watch_result``
    hands back the remote handles themselves when nobody holds the result)."""
    return remote._has_fetched_to_local and remote._fetched_tensors is not remote._values  # noqa: SLF001


def _fetch_stats(remotes) -> list[list[float] | None]:
    """The stats vectors of finished closures: one op and one copy per worker.

    Vectors TensorFlow already copied (the caller kept the result) are read here; the
    others are stacked on their worker and copied at once. A worker that fails before
    its vectors are read loses them (None), not its closures' records.
    """
    tf = _tf()
    stats: list[list[float] | None] = [None] * len(remotes)
    by_device = collections.defaultdict(list)
    for position, remote in enumerate(remotes):
        if _copied_to_local(remote):
            stats[position] = remote._fetched_tensors[1].numpy().tolist()  # noqa: SLF001
        else:
            by_device[_stats_handle(remote).device].append(position)
    for device, positions in by_device.items():
        try:
            with tf.device(device):
                rows = tf.stack([_stats_handle(remotes[p]) for p in positions]).numpy().tolist()
        except Exception as error:  # noqa: BLE001 - a worker gone since; its closures still count
            logger.warning("tfdiag: cannot read the timings of %d closures from %s (%r).", len(positions), device, error)
            continue
        for position, row in zip(positions, rows):
            stats[position] = row
    return stats


_STATS = ("begin", "end", "wait", "examples", "steps")  # the order of the stats vector


class _Pending:
    """A scheduled closure: its id, RemoteValue, and when it was scheduled and its result
    came in (``time.time_ns()``; None until a success is seen, see ``_watch_result``)."""

    __slots__ = ("closure_id", "dispatch_ns", "remote", "result_ns", "__weakref__")

    def __init__(self, closure_id: int, dispatch_ns: int, remote):
        self.closure_id = closure_id
        self.dispatch_ns = dispatch_ns
        self.remote = remote
        self.result_ns: int | None = None


_Finished = collections.namedtuple("_Finished", "pending result_ns error")


class InstrumentedCoordinator:
    """A ``ClusterCoordinator`` whose ``schedule`` records steps and closures.

    Everything but ``schedule`` and ``close`` passes through to the wrapped coordinator
    (``join``, ``done``, ``create_per_worker_dataset``, ``fetch``, ``strategy``, ...).
    Made by :func:`instrument_coordinator`.
    """

    def __init__(self, coordinator, logdir, examples_per_step: int | None = None, task: str | None = None, *,
                 probe_interval_s: float | None = DEFAULT_INTERVAL_S, system_interval_s: float | None = 1.0,
                 capture_faults: bool = True, variables=None, probe_workers: bool = True):
        self._coordinator = coordinator
        self.logdir = logdir
        self.examples_per_step = examples_per_step
        strategy = getattr(coordinator, "strategy", None)
        self.task = task or identity.resolve_task(strategy, default="chief:0")
        identity.write_run_manifest(logdir, self.task, strategy)
        self._writer = writers.acquire(logdir, self.task)
        self._examples: collections.Counter = collections.Counter()
        self._shard_written_at = 0.0
        self._background: list = []
        self._start_collectors(strategy, probe_interval_s, system_interval_s, capture_faults, probe_workers)
        if variables is not None:
            self.record_placement(variables)
        self._functions: dict[int, tuple] = {}
        self._ids = itertools.count()
        self._pending: collections.deque[_Pending] = collections.deque()
        self._cv = threading.Condition()
        self._closing = False
        self._disabled = False
        self.closures_recorded = 0
        self._thread = threading.Thread(target=self._track, name="tfdiag-closures", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def __getattr__(self, name):
        return getattr(self._coordinator, name)

    @property
    def coordinator(self):
        """The wrapped ``ClusterCoordinator``."""
        return self._coordinator

    def schedule(self, fn, args=None, kwargs=None):
        """Like ``ClusterCoordinator.schedule``; the result behaves as ``fn``'s RemoteValue."""
        if self._disabled or self._closing:
            return self._coordinator.schedule(fn, args=args, kwargs=kwargs)
        try:
            instrumented = self._instrumented(fn)
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            return self._disable(error, fn, args, kwargs)
        dispatch_ns = time.time_ns()
        try:
            remote = self._coordinator.schedule(instrumented, args=args, kwargs=kwargs)
        except Exception as error:  # noqa: BLE001
            if self._traced(fn):
                raise  # fn traced before: this is the coordinator reporting a failure
            return self._disable(error, fn, args, kwargs)
        self._mark_traced(fn)
        if not all(hasattr(remote, name) for name in _REMOTE_VALUE_STATE):
            logger.warning("tfdiag: this TensorFlow's RemoteValue hides its state; scheduling without step records.")
            self._disabled = True
            return _user_remote_value(remote)
        view = _user_remote_value(remote)
        pending = _Pending(next(self._ids), dispatch_ns, remote)
        _watch_result(remote, view, pending)
        with self._cv:
            self._pending.append(pending)
        return view

    def record_placement(self, variables) -> list[dict]:
        """Records where ``variables`` (a model, module or list) live: one ``placement`` record each."""
        return record_placement(variables, writer=self._writer)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Waits (up to ``timeout_s``) for closures in flight, writes their records, closes the file."""
        with self._cv:
            if self._closing:
                return
            self._closing = True
            self._close_deadline = time.monotonic() + timeout_s
            self._cv.notify()
        for collector in self._background:
            try:
                collector.stop()
            except Exception as error:  # noqa: BLE001
                logger.warning("tfdiag: cannot stop %r: %r", collector, error)
        self._thread.join(timeout_s + 5)
        self._write_shards()
        if self._faults is not None:
            self._faults.uninstall()
        writers.release(self._writer)
        atexit.unregister(self.close)

    @property
    def collectors(self) -> dict:
        """The background collectors running, by name (for tests and introspection)."""
        return dict(self._named)

    # -- internals -------------------------------------------------------------------
    def _start_collectors(self, strategy, probe_interval_s, system_interval_s, capture_faults, probe_workers):
        self._named: dict = {}
        self._faults = None
        if capture_faults:
            self._faults = self._named["faults"] = FaultCapture(self._writer).install()
        starters = []
        if system_interval_s:
            starters.append(("system", lambda: SystemSampler(self._writer, self.task, system_interval_s)))
        if probe_interval_s:
            cluster = identity.resolve_cluster(strategy)
            targets = cluster_tasks(cluster, jobs=("worker", "ps"))
            ps_tasks = cluster_tasks(cluster, jobs=("ps",))
            workers = cluster_tasks(cluster, jobs=("worker",))
            relays = [(w, ps) for w in workers for ps in ps_tasks] if probe_workers else []
            faults = self._faults
            starters.append(("rpc", lambda: RpcProber(self._writer, self.task, targets, probe_interval_s,
                                                      relays=relays,
                                                      paused=(faults.recovering if faults else None))))
        for name, make in starters:
            try:
                collector = make()
                if name == "system":
                    collector.start()
            except Exception as error:  # noqa: BLE001 - a collector never breaks training
                logger.warning("tfdiag: cannot start the %s collector (%r); it is off.", name, error)
                continue
            self._named[name] = collector
            self._background.append(collector)
        # The probes start once the first closure has come back: while the coordinator
        # creates per-worker resources and traces the first closures, a probe closure or
        # remote function from another thread once hung the warm-up join (slow-ps run).
        self._probes_started = False

    def _start_probes(self) -> None:
        self._probes_started = True
        if self._closing:
            return
        for name in ("rpc",):
            collector = self._named.get(name)
            if collector is not None:
                try:
                    collector.start()
                except Exception as error:  # noqa: BLE001
                    logger.warning("tfdiag: cannot start the %s collector (%r); it is off.", name, error)

    def _write_shards(self) -> None:
        """One cumulative ``shard`` record per worker: examples its closures consumed."""
        self._shard_written_at = time.monotonic()
        now = time.time_ns()
        for worker, examples in sorted(self._examples.items()):
            self._writer.append("shard", task=worker, time_ns=now, examples=int(examples), file="", policy="")

    def _instrumented(self, fn):
        entry = self._functions.get(id(fn))
        if entry is None or entry[0] is not fn:
            entry = [fn, _instrument(fn), False]
            self._functions[id(fn)] = entry
        return entry[1]

    def _traced(self, fn) -> bool:
        entry = self._functions.get(id(fn))
        return bool(entry and entry[0] is fn and entry[2])

    def _mark_traced(self, fn) -> None:
        self._functions[id(fn)][2] = True

    def _disable(self, error, fn, args, kwargs):
        logger.warning("tfdiag: cannot instrument %r (%r); scheduling it without step records.", fn, error)
        self._disabled = True
        return self._coordinator.schedule(fn, args=args, kwargs=kwargs)

    def _track(self) -> None:
        """Every ``FETCH_EVERY_S`` (``POLL_S`` until the first record and at close), records
        the closures finished since."""
        while True:
            with self._cv:
                if not self._closing:
                    self._cv.wait(FETCH_EVERY_S if self._probes_started else POLL_S)
                closing = self._closing
                finished = self._take_finished()
                in_flight = len(self._pending)
            if finished:
                self._record(finished)
                if time.monotonic() - self._shard_written_at >= SHARD_EVERY_S:
                    self._write_shards()
            if closing:
                if not in_flight:
                    return
                if time.monotonic() > self._close_deadline:
                    logger.warning("tfdiag: %d closures still running at close; their records are dropped.", in_flight)
                    return
                time.sleep(POLL_S)

    def _take_finished(self) -> list[_Finished]:
        """Takes the finished closures out of ``_pending`` (the caller holds ``_cv``).

        A success's result time was stamped as it came in; a failure's is now.
        """
        now_ns = time.time_ns()
        finished, in_flight = [], collections.deque()
        for item in self._pending:
            if _finished(item.remote):
                finished.append(_Finished(item, item.result_ns or now_ns, _closure_error(item.remote)))
            else:
                in_flight.append(item)
        self._pending = in_flight
        return finished

    def _record(self, finished: list[_Finished]) -> None:
        """Writes the ``step`` and ``closure`` records of finished closures."""
        try:
            succeeded = [f for f in finished if f.error is None]
            stats = dict(zip((f.pending.closure_id for f in succeeded), _fetch_stats([f.pending.remote for f in succeeded])))
        except Exception as error:  # noqa: BLE001 - never let bookkeeping die
            logger.warning("tfdiag: cannot read closure timings (%r).", error)
            stats = {}
        for item, result_ns, error in finished:
            try:
                worker = ""
                row = stats.get(item.closure_id)
                if error is None:
                    worker = task_of_device(_stats_handle(item.remote).device) or ""
                if row is not None:
                    self._write_step(item.closure_id, worker, dict(zip(_STATS, row)))
                self._writer.append(
                    "closure",
                    worker=worker,
                    closure_id=item.closure_id,
                    dispatch_ns=item.dispatch_ns,
                    result_ns=result_ns,
                    ok=error is None,
                    error="" if error is None else f"{type(error).__name__}: {error}"[:MAX_ERROR_CHARS],
                )
                self.closures_recorded += 1
            except Exception as exc:  # noqa: BLE001 - never let bookkeeping die
                logger.warning("tfdiag: cannot record closure %d: %r", item.closure_id, exc)

    def _write_step(self, closure_id: int, worker: str, stats: dict) -> None:
        examples = self.examples_per_step if self.examples_per_step is not None else int(stats["examples"])
        self._writer.append(
            "step",
            task=worker,
            step=closure_id,
            begin_ns=int(round(stats["begin"] * 1e9)),
            end_ns=int(round(stats["end"] * 1e9)),
            input_wait_ns=int(round(stats["wait"] * 1e9)),
            examples=max(examples, 0),
            clock_task=worker,
            steps=int(stats["steps"]),
        )
        self._examples[worker] += max(examples, 0)
        if not self._probes_started:
            self._start_probes()


def instrument_coordinator(coordinator, logdir, examples_per_step: int | None = None, *,
                           probe_interval_s: float | None = DEFAULT_INTERVAL_S,
                           system_interval_s: float | None = 1.0, capture_faults: bool = True,
                           variables=None) -> InstrumentedCoordinator:
    """Wraps a ``tf.distribute.coordinator.ClusterCoordinator`` so that its closures are recorded.

    Args:
        coordinator: the ``ClusterCoordinator``.
        logdir: the run directory; the coordinator's task file and the manifest go to
            ``logdir/plugins/tfdiag/``.
        examples_per_step: examples one closure consumes; by default the leading
            dimension of the elements its iterators yield.
        probe_interval_s: seconds between RPC probe rounds; after three rounds of
            every link, each round probes the next link in turn (coordinator → every
            task, worker → every ps), so each link is probed every
            ``probe_interval_s * links`` seconds; ``None`` or 0 turns the probe off.
        system_interval_s: seconds between system samples; ``None`` or 0: off.
        capture_faults: turn the coordinator's log lines about failures, retries and
            recoveries into ``fault`` records.
        variables: a model, ``tf.Module`` or list of variables whose placement to record
            now (or call ``record_placement`` on the result later).

    Returns:
        An object used like the coordinator. Call its ``close()`` after the last
        ``join()`` to write the records of the last closures (it also runs at exit).

    Example:
        >>> coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)  # doctest: +SKIP
        >>> coordinator = instrument_coordinator(coordinator, "logs/run1")  # doctest: +SKIP
        >>> result = coordinator.schedule(train_step, args=(per_worker_iterator,))  # doctest: +SKIP
        >>> coordinator.join(); coordinator.close()  # doctest: +SKIP
    """
    if isinstance(coordinator, InstrumentedCoordinator):
        return coordinator
    return InstrumentedCoordinator(coordinator, logdir, examples_per_step=examples_per_step,
                                   probe_interval_s=probe_interval_s, system_interval_s=system_interval_s,
                                   capture_faults=capture_faults, variables=variables)
