"""The task session: everything a task runs beside training, started in one order and stopped in reverse.

``DiagnosticsCallback``, ``DiagnosticsHook`` and ``instrument_coordinator`` are adapters
over it: each says in a :class:`Wants` which collectors its task runs, and the session
starts them, in this order:

1. the TensorFlow version check (``tf_internals.check_tf_version``), the task's name and
   the run manifest (``identity``);
2. the task's writer (``writers.acquire``, which starts the task's heartbeat);
3. last words (``last_words``): the ``exit`` record if the process ends while training
   (and, where live findings are on, a line naming the task to blame for an exception);
   and the stack dumps (``stacks``): every thread's stack when the task's own progress
   stops, or on ``SIGUSR1``;
4. fault capture (``fault_log``): before the RPC probe, which pauses while a task recovers;
5. the placement of ``variables``: one record each (``placement.PlacementLog``, which
   later records of the same variables skip);
6. the closure recorder (``closure_recorder``, the coordinator's result thread), whose
   closures in flight the heartbeat reads;
7. the system sampler (``system``);
8. the RPC probe (``rpc_probe``): its functions are traced here, before training
   dispatches anything (tracing one registers it with every task), and its thread
   starts on :meth:`TaskSession.start_deferred`, which the closure recorder calls once
   the first closure is back (a probe from another thread while the coordinator traced
   its first closures once hung the warm-up join, slow-ps run);
9. the liveness checks (``liveness``) of the tasks that run no collector, in the task
   that writes the manifest; a ps whose answers turn slow (or fast again) has the probe look closer;
10. the live findings thread (``live_thread``), in the task that writes the manifest,
   last: it evaluates what the others write (under the coordinator it first has the
   closure recorder flush its records).

:meth:`TaskSession.close` tells the closure recorder first that the session closes (a
live evaluation waiting on it returns), then stops them in the reverse order, the writer
last. A collector whose start fails is logged once and stays off; training never sees
it. Each collector's own thread charges its CPU to its component of the cost ledger
(``budget``); the session itself adds nothing to the training thread beyond the starts.

A new collector goes here: a field of :class:`Wants`, and one ``_run`` line in
``_start`` at its place in the order.

Example:
    >>> session = TaskSession("logs/run1", Wants(system_interval_s=2.0), strategy=strategy)  # doctest: +SKIP
    >>> session.writer.append("step", ...)  # doctest: +SKIP
    >>> session.close()  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable

from tfdiag.collectors import heartbeat, identity, live_thread, tf_internals, writers
from tfdiag.collectors.closure_recorder import CLOSE_TIMEOUT_S, ClosureRecorder
from tfdiag.collectors.fault_log import FaultCapture
from tfdiag.collectors.last_words import LastWords
from tfdiag.collectors.liveness import LivenessProbe, unwatched_tasks
from tfdiag.collectors.placement import PlacementLog
from tfdiag.collectors.rpc_probe import RpcProber
from tfdiag.collectors.stacks import StackDumps
from tfdiag.collectors.system import SystemSampler
from tfdiag.events import cluster_tasks

logger = logging.getLogger("tfdiag")


@dataclasses.dataclass(frozen=True)
class Wants:
    """What a task runs beside training; every collector is off unless asked for.

    Attributes:
        system_interval_s: seconds between system samples; ``None`` or 0: no sampler.
        wake_s: the sampler's timed wake-ups (``system.WAKE_S``: this process's stops, and
            its job's workers' on this host, ``SystemSampler``); ``None``: none.
        probe_interval_s: seconds between RPC probe rounds from this task to every worker
            and ps; ``None`` or 0: no probe.
        probe_workers: the probe also runs from every worker to every ps.
        capture_faults: TensorFlow's log lines about failed tasks become ``fault`` records.
        last_words: an ``exit`` record if the process ends while training.
        stacks: the task's Python stacks to ``RUN/plugins/tfdiag/<task>.stacks`` when its
            progress counter stops moving, or on ``SIGUSR1``.
        unwatched_jobs: in the task that writes the manifest, check that every task of these
            jobs answers: the tasks that run no collector (a TF1 job's ps; a
            ParameterServerStrategy job's workers and ps).
        variables: a model, ``tf.Module`` or list of variables whose placement to record.
        closures: record the closures of an instrumented coordinator (``session.closures``).
        examples_per_step: examples one closure consumes where its elements do not say.
        live_interval_s: live findings in the task that writes the manifest
            (``live_thread.interval_from``: 0 off, None the environment's, else on).
    """

    system_interval_s: float | None = None
    wake_s: float | None = None
    probe_interval_s: float | None = None
    probe_workers: bool = True
    capture_faults: bool = False
    last_words: bool = False
    stacks: bool = False
    unwatched_jobs: tuple[str, ...] = ()
    variables: object = None
    closures: bool = False
    examples_per_step: int | None = None
    live_interval_s: float | None = 0


class TaskSession:
    """Starts what ``wants`` asks for beside this task's training; ``close()`` stops it.

    Args:
        logdir: the run directory.
        wants: the collectors to run.
        strategy: the ``tf.distribute`` strategy, where there is one (names the task and the cluster).
        task: this task's name; by default from ``strategy``, ``TF_CONFIG``, else ``default_task``.
        manifest: more fields of the run manifest (``api``).

    Raises what naming the task or opening its writer raises (the adapters turn it into
    "not recording"); nothing after.
    """

    def __init__(self, logdir, wants: Wants, *, strategy=None, task: str | None = None,
                 default_task: str = "worker:0", manifest: dict | None = None):
        self.logdir = logdir
        self.wants = wants
        tf_internals.check_tf_version()
        self.task = task or identity.resolve_task(strategy, default=default_task)
        self.writes_manifest = identity.write_run_manifest(logdir, self.task, strategy, **(manifest or {}))
        self.cluster = identity.resolve_cluster(strategy)
        self.writer = writers.acquire(logdir, self.task)
        self.collectors: dict[str, object] = {}  # the side collectors running, by name
        self.closures: ClosureRecorder | None = None
        self.placement = PlacementLog(self.writer)  # every variable once, whoever shows it
        self._stops: list[tuple[str, Callable[[], None]]] = []  # in start order
        self._deferred: list[tuple[str, object]] = []  # started by start_deferred
        self._deferred_started = False
        self._closed = False
        self._start()

    def _start(self) -> None:
        wants = self.wants
        announces = live_thread.interval_from(wants.live_interval_s) is not None  # live findings' lines are on
        self._run("last_words", wants.last_words, lambda: LastWords(self.writer, announces).start(), LastWords.stop)
        # The coordinator counts its workers' closures, not steps of its own: its stacks come on the signal only
        # (a counter of its own would read as a task that never progresses).
        own_progress = None if wants.closures else self.progress()
        self._run("stacks", wants.stacks, lambda: StackDumps(self.logdir, self.task, own_progress).start(),
                  StackDumps.stop)
        faults = self._run("faults", wants.capture_faults, lambda: FaultCapture(self.writer).install(),
                           FaultCapture.uninstall)
        if wants.variables is not None:
            self.placement.record(wants.variables)
        if wants.closures:
            self.closures = ClosureRecorder(self.writer, self.task, wants.examples_per_step,
                                            on_first_result=self.start_deferred).start()
            self._stops.append(("closures", self.closures.stop))
            heartbeat.track_in_flight(self.writer, self.closures.in_flight)
        self._run("system", wants.system_interval_s, lambda: SystemSampler(
            self.writer, self.task, wants.system_interval_s, cluster=self.cluster, wake_s=wants.wake_s).start(),
            SystemSampler.stop)
        prober = self._run("rpc", wants.probe_interval_s, lambda: self._prepared_prober(faults), RpcProber.stop)
        if prober is not None:
            self._deferred.append(("rpc", prober))
        liveness = self._run("liveness", wants.unwatched_jobs and self.writes_manifest, lambda: LivenessProbe(
            self.writer, unwatched_tasks(self.cluster, wants.unwatched_jobs)).start(), LivenessProbe.stop)
        if liveness is not None and prober is not None:
            ps_tasks = frozenset(cluster_tasks(self.cluster, jobs=("ps",)))
            liveness.on_link_change = lambda ps: prober.look_closer(ps_tasks)  # the link and its peers
        live = self._run("live", self.writes_manifest,
                         lambda: live_thread.start(self.logdir, self.writer, wants.live_interval_s),
                         live_thread.LiveThread.stop)
        if live is not None and self.closures is not None:
            live.before_evaluation = self.closures.flush_records

    def _run(self, name: str, wanted, start: Callable[[], object], stop: Callable[[object], None]):
        """Starts the collector ``name`` if ``wanted``; returns it, or None when off or failed
        (logged once: a collector never breaks training). ``start`` may return None (off)."""
        if not wanted:
            return None
        try:
            collector = start()
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            logger.warning("tfdiag: cannot start the %s collector (%r); it is off.", name, error)
            return None
        if collector is not None:
            self.collectors[name] = collector
            self._stops.append((name, lambda: stop(collector)))
        return collector

    def _prepared_prober(self, faults: FaultCapture | None) -> RpcProber:
        """The RPC probe from this task to every worker and ps (and from every worker to every ps), prepared."""
        workers = cluster_tasks(self.cluster, jobs=("worker",))
        ps_tasks = cluster_tasks(self.cluster, jobs=("ps",))
        relays = [(w, ps) for w in workers for ps in ps_tasks] if self.wants.probe_workers else []
        prober = RpcProber(self.writer, self.task, cluster_tasks(self.cluster, jobs=("worker", "ps")),
                           self.wants.probe_interval_s, relays=relays,
                           paused=faults.recovering if faults is not None else None)
        prober.prepare()
        return prober

    def progress(self) -> heartbeat.Progress:
        """This task's progress counter in its heartbeats (``progress.count = steps``)."""
        return heartbeat.progress(self.writer)

    def start_deferred(self) -> None:
        """Starts the collectors that wait for training's first result (the RPC probe); once."""
        if self._deferred_started or self._closed:
            return
        self._deferred_started = True
        for name, collector in self._deferred:
            try:
                collector.start()
            except Exception as error:  # noqa: BLE001 - a collector never breaks training
                logger.warning("tfdiag: cannot start the %s collector (%r); it is off.", name, error)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Stops every collector, in the reverse order of their start, and releases the writer.

        The closure recorder waits up to ``timeout_s`` for closures in flight; nothing else
        waits beyond its own bound. Never raises.
        """
        if self._closed:
            return
        self._closed = True
        if self.closures is not None:
            self.closures.close_soon(timeout_s)
        for name, stop in reversed(self._stops):
            try:
                stop()
            except Exception as error:  # noqa: BLE001 - a collector never breaks training
                logger.warning("tfdiag: cannot stop the %s collector (%r).", name, error)
        try:
            writers.release(self.writer)
        except Exception as error:  # noqa: BLE001
            logger.warning("tfdiag: cannot close the %s task file (%r).", self.task, error)
