"""``instrument_coordinator``: step and closure records for ParameterServerStrategy loops.

A ``ClusterCoordinator`` runs each scheduled function (a *closure*) on one worker. The
instrumented coordinator schedules, instead of the user's ``fn``, a ``tf.function`` that
calls ``fn`` and also returns its begin and end time, input wait and examples, measured
in-graph on the worker (``closure_timing``); once the same arguments come twice in a
row, the concrete function traced for them, which spares ``schedule`` a trace-cache
lookup per closure (``closure_timing.InstrumentedFunction``). The caller gets back a
RemoteValue of ``fn``'s own outputs.

The worker that ran a closure is the device its outputs stay on until they are fetched
(asking in-graph, with ``experimental_get_current_worker_index()``, would feed the
index to every call as an extra input). The coordinator's dispatch thread notes when
each closure's result comes in; a background thread (the *result thread*) wakes every
``RECORD_EVERY_S`` and writes one ``closure`` record (dispatch and result time on the
coordinator's clock) per closure finished since, into the coordinator's task file; every
``FETCH_EVERY_S`` (and at close) it copies the timings of the closures recorded since
from each worker at once and writes one ``step`` record per closure (task and clock
``worker:<index>``). Every closure gets both records; only the step records come later.
A failed closure is recorded with ``ok=False`` and its error message. A worker that does
not hand back the timings within ``FETCH_TIMEOUT_S`` is left to a daemon thread: its
closures keep their ``closure`` records, lose their ``step`` records, and the loss is
logged and noted once per worker.

Besides steps and closures the instrumented coordinator runs, each on its own daemon
thread and off the training thread:

* the RPC probe (``rpc_probe``): from the coordinator to every worker and ps, and from
  every worker to every ps (a function the coordinator runs with its timestamps on the
  worker, outside the closure queue), a few links every ``probe_interval_s``; its
  functions are traced and run once here, before the first closure is dispatched
  (within ``rpc_probe.PREPARE_BUDGET_S``), and the probe thread starts once the first
  closure is back;
* the system sampler (``system``) of the coordinator's host, every ``system_interval_s``;
* fault capture (``faults``): the coordinator's own log lines about failed workers,
  re-scheduled closures and recoveries become ``fault`` records;
* cumulative ``shard`` records per worker (examples its closures consumed), every
  ``SHARD_EVERY_S``;
* and, when ``variables`` is given (or ``record_placement`` is called), ``placement``.

(Over 400 lines: the wrapper, its result thread and the start and stop of its side
collectors share one closure bookkeeping and one shutdown; in-graph timing and every
access to TensorFlow's private state live in ``closure_timing`` and ``tf_internals``.)
"""

from __future__ import annotations

import atexit
import collections
import itertools
import logging
import threading
import time
import weakref

from tfdiag.collectors import closure_timing, heartbeat, identity, live_thread, tf_internals, writers
from tfdiag.collectors.budget import MeteredCalls, charged
from tfdiag.collectors.fault_log import FaultCapture
from tfdiag.collectors.placement import record_placement
from tfdiag.collectors.rpc_probe import DEFAULT_INTERVAL_S, RpcProber
from tfdiag.collectors.system import SAMPLE_EVERY_S, SystemSampler
from tfdiag.events import cluster_tasks, task_of_device

logger = logging.getLogger("tfdiag")

# How often the result thread writes the ``closure`` records of the closures finished
# since (their result times come from the dispatch threads, ``_watch_result``: the thread
# need not poll for them). What the stall check and the heartbeat's progress count read.
RECORD_EVERY_S = 1.0
# How often it copies those closures' timings from the workers (one op and one copy per
# worker) and writes their ``step`` records, which reach the writer at most this much
# later. A copy costs the coordinator a few ms of CPU, nearly the same for 5 closures
# as for 40 (benchmarks/timing_copy.py; docs/benchmarks.md, "Collector overhead"):
# every 5 s rather than every second takes a fifth of the copies.
FETCH_EVERY_S = 5.0
# ... or as soon as this many closures' timings wait (bounds the batch and the handles held).
MAX_UNREAD_TIMINGS = 4096
# How often the result thread looks for finished closures until the first one is
# recorded (which starts the RPC probe: a run of a few seconds needs its first rounds)
# and, at close, for the last ones.
POLL_S = 0.05
# How long ``close()`` waits for closures still in flight before dropping their records.
CLOSE_TIMEOUT_S = 30.0
# How long the result thread waits for one worker's timings: a step record is worth
# little next to a result thread free to record the other workers' closures.
FETCH_TIMEOUT_S = 10.0
# A closure's error is kept to this many characters, its head and its tail: TensorFlow puts
# the op's own message after the "Detected at node" traces.
MAX_ERROR_CHARS = 2000
# Cumulative per-worker example counts (``shard`` records) are written this often.
SHARD_EVERY_S = 1.0


def _shortened(text: str) -> str:
    """``text`` cut to ``MAX_ERROR_CHARS``, keeping its head and tail.

    >>> short = _shortened("a" * 1500 + "b" * 1500)
    >>> len(short), short[995:1004]
    (1999, 'a [...] b')
    """
    if len(text) <= MAX_ERROR_CHARS:
        return text
    half = (MAX_ERROR_CHARS - len(" [...] ")) // 2
    return text[:half] + " [...] " + text[-half:]


def _watch_result(remote, view, pending: "_Pending") -> None:
    """Stamps ``pending.result_ns`` when the closure's result comes in, and lets TensorFlow
    copy its outputs to the coordinator only while ``view`` lives.

    The result time is read in the coordinator's dispatch thread, exactly, as the result
    comes in (``tf_internals.on_result``). TensorFlow copies the outputs to the
    coordinator there if anything still holds the RemoteValue, and runs the worker's next
    closure only after. The result thread holds every RemoteValue until it has read the
    timings, which made that copy happen for every closure, of outputs the caller had
    dropped: 2.2 ms of the coordinator's CPU per closure on ps_ctl, none measurable
    without it (benchmarks/overhead_ab.py). With this, outputs are copied as TensorFlow
    would for the caller's view alone; the result thread reads the timings from the
    workers in its batches (``closure_timing.fetch_stats``).
    """
    # No reference to remote or pending (pending holds remote): each goes as soon as it is recorded.
    view_ref, pending_ref = weakref.ref(view), weakref.ref(pending)

    def result_came_in() -> bool:
        watched = pending_ref()
        if watched is not None:
            watched.result_ns = time.time_ns()
        return view_ref() is not None

    tf_internals.on_result(remote, result_came_in)


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
# A recorded closure whose timings are still to be read: ``timing`` is ``closure_timing.timing_of``'s.
_Unread = collections.namedtuple("_Unread", "closure_id worker timing")


class InstrumentedCoordinator:
    """A ``ClusterCoordinator`` whose ``schedule`` records steps and closures.

    Everything but ``schedule`` and ``close`` passes through to the wrapped coordinator
    (``join``, ``done``, ``create_per_worker_dataset``, ``fetch``, ``strategy``, ...).
    Made by :func:`instrument_coordinator`.
    """

    def __init__(self, coordinator, logdir, examples_per_step: int | None = None, task: str | None = None, *,
                 probe_interval_s: float | None = DEFAULT_INTERVAL_S, system_interval_s: float | None = SAMPLE_EVERY_S,
                 capture_faults: bool = True, variables=None, probe_workers: bool = True):
        self._coordinator = coordinator
        self.logdir = logdir
        self.examples_per_step = examples_per_step
        strategy = getattr(coordinator, "strategy", None)
        tf_internals.check_tf_version()
        self.task = task or identity.resolve_task(strategy, default="chief:0")
        identity.write_run_manifest(logdir, self.task, strategy)
        self._writer = writers.acquire(logdir, self.task)
        self._examples: collections.Counter = collections.Counter()
        self._shard_written_at = 0.0
        self._background: list = []
        self._start_collectors(strategy, probe_interval_s, system_interval_s, capture_faults, probe_workers)
        if variables is not None:
            self.record_placement(variables)
        self._fetches = MeteredCalls("tfdiag-timings", "results")
        self._unread: list[_Unread] = []
        self._unread_since = 0.0  # time.monotonic() when the oldest of ``_unread`` was recorded
        self._workers: dict[str, str] = {}  # device -> worker task, as closures come back
        self._flush_asked = False
        self._unreadable_workers: set[str] = set()
        self._functions: dict[int, closure_timing.InstrumentedFunction] = {}
        self._ids = itertools.count()
        self._pending: collections.deque[_Pending] = collections.deque()
        self._cv = threading.Condition()
        self._closing = False
        self._disabled = False
        self.closures_recorded = 0
        self._thread = threading.Thread(target=self._track, name="tfdiag-closures", daemon=True)
        self._thread.start()
        heartbeat.track_in_flight(self._writer, self._in_flight)
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
            function = instrumented.function_for(args, kwargs)
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            return self._disable(error, fn, args, kwargs)
        dispatch_ns = time.time_ns()
        try:
            remote = self._coordinator.schedule(function, args=args, kwargs=kwargs)
        except Exception as error:  # noqa: BLE001
            if instrumented.traced:
                raise  # fn traced before: this is the coordinator reporting a failure
            return self._disable(error, fn, args, kwargs)
        instrumented.scheduled(args, kwargs, self._coordinator.strategy)
        if not tf_internals.has_remote_value_state(remote):
            logger.warning("tfdiag: this TensorFlow's RemoteValue hides its state; scheduling without step records.")
            self._disabled = True
            return closure_timing.user_remote_value(remote)
        view = closure_timing.user_remote_value(remote)
        pending = _Pending(next(self._ids), dispatch_ns, remote)
        _watch_result(remote, view, pending)
        with self._cv:
            self._pending.append(pending)
        return view

    def record_placement(self, variables) -> list[dict]:
        """Records where ``variables`` (a model, module or list) live: one ``placement`` record each."""
        return record_placement(variables, writer=self._writer)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Waits (up to ``timeout_s``) for closures in flight, writes their records, closes the file.

        Never waits on a task that stopped answering beyond the collectors' own bounds:
        ``FETCH_TIMEOUT_S`` per worker for the last timings, the probe's
        ``PROBE_TIMEOUT_S``, and the writer's ``CLOSE_TIMEOUT_S``.
        """
        with self._cv:
            if self._closing:
                return
            self._closing = True
            self._close_deadline = time.monotonic() + timeout_s
            self._cv.notify_all()  # the result thread, and a live evaluation waiting in flush_records
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
    def abandoned_fetches(self) -> int:
        """Copies of timings from a worker that did not return within ``FETCH_TIMEOUT_S``."""
        return self._fetches.abandoned

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
        cluster = identity.resolve_cluster(strategy)
        if system_interval_s:
            starters.append(("system", lambda: SystemSampler(self._writer, self.task, system_interval_s, cluster=cluster)))
        if probe_interval_s:
            targets = cluster_tasks(cluster, jobs=("worker", "ps"))
            ps_tasks = cluster_tasks(cluster, jobs=("ps",))
            workers = cluster_tasks(cluster, jobs=("worker",))
            relays = [(w, ps) for w in workers for ps in ps_tasks] if probe_workers else []
            faults = self._faults
            starters.append(("rpc", lambda: RpcProber(self._writer, self.task, targets, probe_interval_s,
                                                      relays=relays, paused=(faults.recovering if faults else None))))
        for name, make in starters:
            try:
                collector = make()
                if name == "system":
                    collector.start()
                else:
                    # Here, before training dispatches anything: tracing a probe function
                    # registers it with every task (see rpc_probe).
                    collector.prepare()
            except Exception as error:  # noqa: BLE001 - a collector never breaks training
                logger.warning("tfdiag: cannot start the %s collector (%r); it is off.", name, error)
                continue
            self._named[name] = collector
            self._background.append(collector)
        # The probe thread starts once the first closure has come back: while the
        # coordinator creates per-worker resources and traces the first closures, a probe
        # from another thread once hung the warm-up join (slow-ps run).
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

    def _instrumented(self, fn) -> closure_timing.InstrumentedFunction:
        entry = self._functions.get(id(fn))
        if entry is None or entry.fn is not fn:
            entry = self._functions[id(fn)] = closure_timing.InstrumentedFunction(fn)
        return entry

    def _disable(self, error, fn, args, kwargs):
        logger.warning("tfdiag: cannot instrument %r (%r); scheduling it without step records.", fn, error)
        self._disabled = True
        return self._coordinator.schedule(fn, args=args, kwargs=kwargs)

    def _track(self) -> None:
        """Every ``RECORD_EVERY_S`` (``POLL_S`` until the first record and at close), records
        the closures finished since; every ``FETCH_EVERY_S``, and at close, their timings."""
        while True:
            with self._cv:
                if not (self._closing or self._flush_asked):
                    self._cv.wait(RECORD_EVERY_S if self._probes_started else POLL_S)
                closing, flush_asked = self._closing, self._flush_asked
                finished = self._take_finished()
                in_flight = len(self._pending)
            with charged("results"):
                if finished:
                    self._record(finished)
                if self._unread and (closing or flush_asked or self._timings_due()):
                    self._read_timings()
                    if time.monotonic() - self._shard_written_at >= SHARD_EVERY_S:
                        self._write_shards()
            if flush_asked:
                with self._cv:
                    self._flush_asked = False
                    self._cv.notify_all()
            if closing:
                if not in_flight:
                    return
                if time.monotonic() > self._close_deadline:
                    logger.warning("tfdiag: %d closures still running at close; their records are dropped.", in_flight)
                    return
                time.sleep(POLL_S)

    def flush_records(self, timeout_s: float = FETCH_TIMEOUT_S + 5) -> None:
        """Has the result thread record every closure finished so far, timings included, and
        waits for it (at most ``timeout_s``; not at all once closing). Live findings call it
        before each evaluation, so their window is not up to ``FETCH_EVERY_S`` behind;
        ``benchmarks/overhead_ab.py`` at each phase's end, to charge the phase its records."""
        with self._cv:
            if self._closing or not self._thread.is_alive():
                return
            self._flush_asked = True
            self._cv.notify_all()
            self._cv.wait_for(lambda: not self._flush_asked or self._closing, timeout_s)

    def _timings_due(self) -> bool:
        return (len(self._unread) >= MAX_UNREAD_TIMINGS
                or time.monotonic() - self._unread_since >= FETCH_EVERY_S)

    def _take_finished(self) -> list[_Finished]:
        """Takes the finished closures out of ``_pending`` (the caller holds ``_cv``).

        A success's result time was stamped as it came in; a failure's is now.
        """
        now_ns = time.time_ns()
        finished, in_flight = [], collections.deque()
        for item in self._pending:
            if tf_internals.closure_finished(item.remote):
                finished.append(_Finished(item, item.result_ns or now_ns, tf_internals.closure_error(item.remote)))
            else:
                in_flight.append(item)
        self._pending = in_flight
        return finished

    def _record(self, finished: list[_Finished]) -> None:
        """Writes the ``closure`` records of finished closures; keeps the successes' timings to read."""
        for item, result_ns, error in finished:
            try:
                worker = ""
                if error is None:
                    worker = self._worker_of(closure_timing.stats_handle(item.remote).device)
                    if not self._unread:
                        self._unread_since = time.monotonic()
                    self._unread.append(_Unread(item.closure_id, worker, closure_timing.timing_of(item.remote)))
                self._writer.append(
                    "closure",
                    worker=worker,
                    closure_id=item.closure_id,
                    dispatch_ns=item.dispatch_ns,
                    result_ns=result_ns,
                    ok=error is None,
                    error="" if error is None else _shortened(f"{type(error).__name__}: {error}"),
                )
                self.closures_recorded += 1
                if worker:
                    heartbeat.progress(self._writer, worker).count += 1
                    if not self._probes_started:
                        self._start_probes()
            except Exception as exc:  # noqa: BLE001 - never let bookkeeping die
                logger.warning("tfdiag: cannot record closure %d: %r", item.closure_id, exc)

    def _worker_of(self, device: str) -> str:
        worker = self._workers.get(device)
        if worker is None:
            worker = self._workers[device] = task_of_device(device) or ""
        return worker

    def _read_timings(self) -> None:
        """Copies the timings of the closures recorded since the last copy; writes their ``step`` records."""
        unread, self._unread = self._unread, []
        try:
            rows = closure_timing.fetch_stats([u.timing for u in unread], self._fetches, FETCH_TIMEOUT_S,
                                              on_failure=self._timings_lost)
        except Exception as error:  # noqa: BLE001 - never let bookkeeping die
            logger.warning("tfdiag: cannot read closure timings (%r).", error)
            return
        for closure, row in zip(unread, rows):
            if row is None:
                continue
            try:
                self._write_step(closure.closure_id, closure.worker, row)
            except Exception as exc:  # noqa: BLE001
                logger.warning("tfdiag: cannot record the step of closure %d: %r", closure.closure_id, exc)

    def _in_flight(self) -> tuple[int, int | None]:
        """Closures scheduled and not yet recorded, and the oldest one's dispatch time (for the heartbeat)."""
        with self._cv:
            return len(self._pending), (self._pending[0].dispatch_ns if self._pending else None)

    def _timings_lost(self, device: str, closures: int, error: BaseException) -> None:
        """Logs and notes, once per worker, that the timings of its closures could not be read."""
        worker = task_of_device(device) or device
        if worker in self._unreadable_workers:
            return
        self._unreadable_workers.add(worker)
        message = (f"tfdiag: cannot read the timings of {closures} closures from {worker} ({error!r}); "
                   f"their step records are skipped (reported once per worker)")
        logger.warning("%s", message)
        self._writer.append("note", task=self.task, time_ns=time.time_ns(), level="warning", message=message)

    def _write_step(self, closure_id: int, worker: str, row: list[float]) -> None:
        begin, end, wait, examples, steps = row  # closure_timing.STATS
        # What the worker's elements held, counted in-graph, wins: under tf-keras
        # ``model.fit`` each worker's dataset function sets its own batch, which the
        # examples_per_step a user passes (one batch size) need not be.
        examples = int(examples) if examples >= 0 else (self.examples_per_step or 0)
        self._writer.append(
            "step",
            task=worker,
            step=closure_id,
            begin_ns=int(round(begin * 1e9)),
            end_ns=int(round(end * 1e9)),
            input_wait_ns=int(round(wait * 1e9)),
            examples=max(examples, 0),
            clock_task=worker,
            steps=int(steps),
        )
        self._examples[worker] += max(examples, 0)


def instrument_coordinator(coordinator, logdir, examples_per_step: int | None = None, *,
                           probe_interval_s: float | None = DEFAULT_INTERVAL_S,
                           system_interval_s: float | None = SAMPLE_EVERY_S, capture_faults: bool = True,
                           variables=None, live_interval_s: float | None = None) -> InstrumentedCoordinator:
    """Wraps a ``tf.distribute.coordinator.ClusterCoordinator`` so that its closures are recorded.

    Args:
        coordinator: the ``ClusterCoordinator``.
        logdir: the run directory; the coordinator's task file and the manifest go to
            ``logdir/plugins/tfdiag/``.
        examples_per_step: examples one closure consumes where its elements do not
            say; the leading dimension of the elements its iterators yield, counted
            in-graph on the worker, is used wherever it is known.
        probe_interval_s: seconds between RPC probe rounds; after three rounds of
            every link, each round probes the next link in turn (coordinator → every
            task, worker → every ps), so each link is probed every
            ``probe_interval_s * links`` seconds; ``None`` or 0 turns the probe off.
        system_interval_s: seconds between system samples; ``None`` or 0: off.
        capture_faults: turn the coordinator's log lines about failures, retries and
            recoveries into ``fault`` records.
        variables: a model, ``tf.Module`` or list of variables whose placement to record
            now (or call ``record_placement`` on the result later).
        live_interval_s: seconds between live evaluations of the detectors on the run's
            recent records (``collectors/live_thread.py``; findings logged and written as
            ``live_finding`` records); 0: off; None: the ``TFDIAG_LIVE_FINDINGS``
            environment variable, else off.

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
    instrumented = InstrumentedCoordinator(coordinator, logdir, examples_per_step=examples_per_step,
                                           probe_interval_s=probe_interval_s, system_interval_s=system_interval_s,
                                           capture_faults=capture_faults, variables=variables)
    thread = live_thread.start(logdir, instrumented._writer, live_interval_s)
    if thread is not None:
        thread.before_evaluation = instrumented.flush_records
        instrumented._background.append(thread)  # stopped by close(), before the writer is released
    return instrumented
