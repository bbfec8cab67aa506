"""``instrument_coordinator``: step and closure records for ParameterServerStrategy loops.

A ``ClusterCoordinator`` runs each scheduled function (a *closure*) on one worker. The
instrumented coordinator schedules, instead of the user's ``fn``, a ``tf.function`` that
calls ``fn`` and also returns its begin and end time, input wait and examples, measured
in-graph on the worker (``closure_timing``); once the same arguments come twice in a
row, the concrete function traced for them, which spares ``schedule`` a trace-cache
lookup per closure (``closure_timing.InstrumentedFunction``). The caller gets back a
RemoteValue of ``fn``'s own outputs, and the closure recorder (``closure_recorder``)
writes each closure's ``closure`` and ``step`` records from its result thread.

Everything else runs in the coordinator's task session (``task_session``), each on its
own daemon thread and off the training thread:

* the RPC probe (``rpc_probe``): from the coordinator to every worker and ps, and from
  every worker to every ps (a function the coordinator runs with its timestamps on the
  worker, outside the closure queue), a few links every ``probe_interval_s``; its
  functions are traced and run once here, before the first closure is dispatched
  (within ``rpc_probe.PREPARE_BUDGET_S``), and the probe thread starts once the first
  closure is back;
* the system sampler (``system``) of the coordinator's host, every ``system_interval_s``;
* fault capture (``fault_log``): the coordinator's own log lines about failed workers,
  re-scheduled closures and recoveries become ``fault`` records;
* live findings (``live_thread``), when asked for;
* and ``placement``: the variables each scheduled function reads, recorded when
  ``schedule`` traces it (``closure_timing.InstrumentedFunction``: the variables of its
  graph, read as it is traced; once per function and signature), each variable once
  (``placement.PlacementLog``), with those of ``variables`` or ``record_placement``.
"""

from __future__ import annotations

import atexit
import logging
import time

from tfdiag.collectors import closure_timing, tf_internals
from tfdiag.collectors.closure_recorder import CLOSE_TIMEOUT_S, FETCH_TIMEOUT_S
from tfdiag.collectors.rpc_probe import DEFAULT_INTERVAL_S
from tfdiag.collectors.system import PROBE_WAKE_S, SAMPLE_EVERY_S
from tfdiag.collectors.task_session import TaskSession, Wants

logger = logging.getLogger("tfdiag")


class InstrumentedCoordinator:
    """A ``ClusterCoordinator`` whose ``schedule`` records steps and closures.

    Everything but ``schedule`` and ``close`` passes through to the wrapped coordinator
    (``join``, ``done``, ``create_per_worker_dataset``, ``fetch``, ``strategy``, ...).
    Made by :func:`instrument_coordinator`; ``task_session`` is its task session (its writer
    and collectors).
    """

    def __init__(self, coordinator, logdir, examples_per_step: int | None = None, task: str | None = None, *,
                 probe_interval_s: float | None = DEFAULT_INTERVAL_S, system_interval_s: float | None = SAMPLE_EVERY_S,
                 capture_faults: bool = True, variables=None, probe_workers: bool = True,
                 live_interval_s: float | None = None):
        self._coordinator = coordinator
        self.logdir = logdir
        self.examples_per_step = examples_per_step
        # Timed wake-ups: its workers run no collector, so their stops show only in its probes of them.
        wants = Wants(system_interval_s=system_interval_s, wake_s=PROBE_WAKE_S, probe_interval_s=probe_interval_s,
                      probe_workers=probe_workers, capture_faults=capture_faults, last_words=True, stacks=True,
                      unwatched_jobs=("worker", "ps"), variables=variables, closures=True,
                      examples_per_step=examples_per_step, live_interval_s=live_interval_s)
        self.task_session = TaskSession(logdir, wants, strategy=getattr(coordinator, "strategy", None), task=task,
                                   default_task="chief:0")
        self.task = self.task_session.task
        self._recorder = self.task_session.closures
        self._functions: dict[int, closure_timing.InstrumentedFunction] = {}
        self._disabled = False
        atexit.register(self.close)

    def __getattr__(self, name):
        return getattr(self._coordinator, name)

    @property
    def coordinator(self):
        """The wrapped ``ClusterCoordinator``."""
        return self._coordinator

    def schedule(self, fn, args=None, kwargs=None):
        """Like ``ClusterCoordinator.schedule``; the result behaves as ``fn``'s RemoteValue."""
        if self._disabled or self._recorder.closing:
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
        if instrumented.captured:  # traced in this schedule: once per function and signature
            self.task_session.placement.record(instrumented.take_captured())
        if not tf_internals.has_remote_value_state(remote):
            logger.warning("tfdiag: this TensorFlow's RemoteValue hides its state; scheduling without step records.")
            self._disabled = True
            return closure_timing.user_remote_value(remote)
        view = closure_timing.user_remote_value(remote)
        self._recorder.add(remote, view, dispatch_ns)
        return view

    def record_placement(self, variables) -> list[dict]:
        """Records where ``variables`` (a model, module or list) live: one ``placement`` record each."""
        return self.task_session.placement.record(variables)

    def flush_records(self, timeout_s: float = FETCH_TIMEOUT_S + 5) -> None:
        """Has the result thread record every closure finished so far, timings included
        (``ClosureRecorder.flush_records``)."""
        self._recorder.flush_records(timeout_s)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Waits (up to ``timeout_s``) for closures in flight, writes their records, closes the file.

        Never waits on a task that stopped answering beyond the collectors' own bounds:
        ``FETCH_TIMEOUT_S`` per worker for the last timings, the probe's
        ``PROBE_TIMEOUT_S``, and the writer's ``CLOSE_TIMEOUT_S``.
        """
        self.task_session.close(timeout_s)
        atexit.unregister(self.close)

    @property
    def closures_recorded(self) -> int:
        """Closures whose ``closure`` record was written."""
        return self._recorder.closures_recorded

    @property
    def abandoned_fetches(self) -> int:
        """Copies of timings from a worker that did not return within ``FETCH_TIMEOUT_S``."""
        return self._recorder.abandoned_fetches

    @property
    def collectors(self) -> dict:
        """The side collectors running, by name (for tests and introspection)."""
        return dict(self.task_session.collectors)

    # -- internals -------------------------------------------------------------------
    def _instrumented(self, fn) -> closure_timing.InstrumentedFunction:
        entry = self._functions.get(id(fn))
        if entry is None or entry.fn is not fn:
            entry = self._functions[id(fn)] = closure_timing.InstrumentedFunction(fn)
        return entry

    def _disable(self, error, fn, args, kwargs):
        logger.warning("tfdiag: cannot instrument %r (%r); scheduling it without step records.", fn, error)
        self._disabled = True
        return self._coordinator.schedule(fn, args=args, kwargs=kwargs)


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
            now (or call ``record_placement`` on the result later). Not needed for the
            variables the scheduled functions read: their placement is recorded as
            ``schedule`` traces each function; each variable is recorded once.
        live_interval_s: seconds between live screens of the run's recent records
            (``src/tfdiag/collectors/live_thread.py``; findings printed on stderr and written as
            ``live_finding`` records); 0: off; None (the default): the ``TFDIAG_LIVE_FINDINGS``
            environment variable (``off`` turns them off), else on, every 2 s.

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
                                   capture_faults=capture_faults, variables=variables, live_interval_s=live_interval_s)
