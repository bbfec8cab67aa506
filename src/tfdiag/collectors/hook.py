"""``DiagnosticsHook``: step records and traced tensor transfers for TF1 sessions.

A ``tf.compat.v1.train.SessionRunHook`` for ``MonitoredTrainingSession`` (and
Estimator-era code on TensorFlow < 2.16, which attaches the same hooks). Per
``session.run`` the training thread reads the clock twice and appends one ``step``
record. Every ``trace_every`` steps the run is traced (``RunOptions(trace_level=
FULL_TRACE)``); its ``RunMetadata`` goes to a background thread that turns the
``RecvTensor`` pseudo-nodes of the step stats into ``transfer`` records: one per
tensor moved between tasks, with source, destination, bytes, start time and duration
(``tf_internals.transfer_rows``). Their ``timeline_label`` names the tensor and both devices (TF 2.21)::

    [8192B] [595.78Mb/s] edge_5_matmul/ReadVariableOp from /job:ps/replica:0/task:0/device:CPU:0
        to /job:worker/replica:0/task:0/device:CPU:0

The label's size is exact only in bytes: from 0.1 MiB on it reads ``[4.0MB]`` (MiB rounded
to 0.1). The exact size is the entry's output allocation (``requested_bytes``), which
TensorFlow's ``WorkerCacheLogger`` sets on every RecvTensor entry, so sizes come from there.

A traced step is slower than a plain one (the step stats of every partition travel to
the master), so the default traces one step in ``DEFAULT_TRACE_EVERY``.

Each step's ``input_wait_ns`` is its wait for its batch (``src/tfdiag/collectors/session_input.py``):
the in-graph ``IteratorGetNext`` bracketed with ``tf.timestamp()`` ops fetched with the
step, or, for a run that feeds data, the time since the previous run ended (the step's
``begin_ns`` then starts there, so the wait is inside the step).

At ``begin()`` the hook opens its task session (``task_session``), which records where
the graph's global variables live (``placement``) and runs the system sampler, the task's
last words and, in the chief, the ps liveness checks and live findings until ``end()``; once
the TF session is ready the hook writes a ``session`` record with both times: on a non-chief
worker the gap is its wait for the chief to initialise the model.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

import tensorflow as tf

from tfdiag.collectors.arguments import check_count, check_logdir
from tfdiag.collectors.session_input import InputTimer
from tfdiag.collectors.system import PROBE_WAKE_S, SAMPLE_EVERY_S
from tfdiag.collectors.task_session import TaskSession, Wants
from tfdiag.collectors.tf_internals import transfer_rows

logger = logging.getLogger("tfdiag")

# One traced step in 100: a full trace of a small step costs a few ms (measured on the
# 1 ps + 1 worker test job), so 1 % of the steps traced stays well under 1 % of the time.
DEFAULT_TRACE_EVERY = 100
# Traced steps waiting for the parser; more are dropped (never block training).
MAX_QUEUED_TRACES = 8

class DiagnosticsHook(tf.compat.v1.train.SessionRunHook):
    """Records steps, and every ``trace_every`` steps the tensors moved between tasks.

    Args:
        logdir: the run directory; records go to ``logdir/plugins/tfdiag/<task>``.
        task: this task's name; by default from ``TF_CONFIG`` (else ``worker:0``).
        examples_per_step: examples one ``session.run`` consumes, if known.
        trace_every: trace one step in this many (0: never).
        system_interval_s: seconds between system samples of this host (``None``: off).
        live_interval_s: seconds between live screens of the run's recent records, in the
            chief (the task that writes the manifest; ``src/tfdiag/collectors/live_thread.py``); 0: off;
            None (the default): the ``TFDIAG_LIVE_FINDINGS`` environment variable (``off``
            turns them off), else on, every 2 s.

    Example:
        >>> hooks = [DiagnosticsHook("logs/run1", examples_per_step=64)]  # doctest: +SKIP
        >>> with tf.compat.v1.train.MonitoredTrainingSession(master=server.target, hooks=hooks) as sess:
        ...     while not sess.should_stop():
        ...         sess.run(train_op)  # doctest: +SKIP
    """

    def __init__(self, logdir, task: str | None = None, examples_per_step: int | None = None,
                 trace_every: int = DEFAULT_TRACE_EVERY, system_interval_s: float | None = SAMPLE_EVERY_S,
                 live_interval_s: float | None = None):
        check_logdir(logdir)
        check_count("trace_every", trace_every)
        check_count("examples_per_step", examples_per_step, optional=True)
        self.logdir = logdir
        self.task = task
        self.examples_per_step = examples_per_step
        self.trace_every = trace_every
        self.system_interval_s = system_interval_s
        self.live_interval_s = live_interval_s
        self.steps_recorded = 0
        self.traces_parsed = 0
        self.transfers_recorded = 0
        self.task_session: TaskSession | None = None  # from begin() to close()
        self._writer = None  # the task session's
        self._progress = None  # the heartbeat's step counter (src/tfdiag/collectors/heartbeat.py)
        self._queue: queue.Queue | None = None
        self._parser: threading.Thread | None = None
        self._failed = False
        self._tracing = False
        self._begin_ns = 0
        self._feed_wait_ns = 0
        self._previous_end_ns: int | None = None
        self._input_timer: InputTimer | None = None
        self._begin_wall_ns = 0  # when begin() ran: the session's creation started
        self._trace_options = None

    # -- SessionRunHook --------------------------------------------------------------
    def begin(self):
        # Before the writer opens: its first heartbeat then belongs to this session, which is
        # how a restarted task's new session is told from the killed one (analysis/restarts.py).
        self._begin_wall_ns = time.time_ns()
        try:
            # Timed wake-ups: a stopped worker shows in its own late ones and its peers' probes of it.
            wants = Wants(system_interval_s=self.system_interval_s, wake_s=PROBE_WAKE_S, last_words=True, stacks=True,
                          unwatched_jobs=("ps",), variables=tf.compat.v1.global_variables(),
                          live_interval_s=self.live_interval_s)
            self.task_session = TaskSession(self.logdir, wants, task=self.task, manifest={"api": "tf1_session"})
            self.task, self._writer = self.task_session.task, self.task_session.writer
            self._progress = self.task_session.progress()
            self._input_timer = self._make_input_timer()
            self._trace_options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
            self._queue = queue.Queue(MAX_QUEUED_TRACES)
            self._parser = threading.Thread(target=self._parse_loop, name="tfdiag-trace-parser", daemon=True)
            self._parser.start()
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            self._fail(error)

    def after_create_session(self, session, coord):
        """Records when the session became ready: on a non-chief, after the chief initialised the model."""
        if self._failed or self._writer is None:
            return
        try:
            self._writer.append("session", task=self.task, begin_ns=self._begin_wall_ns, ready_ns=time.time_ns())
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            self._fail(error)

    def before_run(self, run_context):
        self._begin_ns = time.time_ns()
        if self._failed:
            return None
        self._tracing = bool(self.trace_every) and self.steps_recorded % self.trace_every == self.trace_every - 1
        fetches = None
        try:
            args = run_context.original_args
            self._feed_wait_ns = InputTimer.feed_wait_ns(args, self._previous_end_ns, self._begin_ns)
            if self._input_timer is not None:
                fetches = self._input_timer.fetches(args)
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            self._fail(error)
            return None
        if fetches is None and not self._tracing:
            return None
        return tf.compat.v1.train.SessionRunArgs(fetches=fetches, options=self._trace_options if self._tracing else None)

    def after_run(self, run_context, run_values):
        end_ns = time.time_ns()
        if self._failed:
            return
        try:
            # A fed step waited for its batch before session.run: the step starts where the last one ended.
            begin_ns = self._begin_ns - self._feed_wait_ns
            input_wait_ns = self._feed_wait_ns + InputTimer.graph_wait_ns(run_values.results)
            self._writer.append("step", task=self.task, step=self.steps_recorded, begin_ns=begin_ns, end_ns=end_ns,
                                input_wait_ns=min(input_wait_ns, end_ns - begin_ns),
                                examples=self.examples_per_step or 0, clock_task=self.task)
            self._previous_end_ns = end_ns
            self.steps_recorded += 1
            self._progress.count = self.steps_recorded
            if self._tracing and run_values.run_metadata is not None:
                try:
                    self._queue.put_nowait(run_values.run_metadata)
                except queue.Full:
                    pass
        except Exception as error:  # noqa: BLE001
            self._fail(error)

    def end(self, session):
        self.close()

    # -- lifecycle -------------------------------------------------------------------
    def close(self) -> None:
        """Parses the traces still queued, then closes the task session (its collectors and writer)."""
        if self._parser is not None:
            self._queue.put(None)
            self._parser.join(30)
            self._parser = None
        task_session, self.task_session = self.task_session, None
        if task_session is not None:
            task_session.close()
            self._writer = None

    def _make_input_timer(self) -> InputTimer | None:
        """Brackets the graph's ``GetNext`` ops; without it steps record no in-graph input wait."""
        try:
            return InputTimer(tf.compat.v1.get_default_graph())
        except Exception as error:  # noqa: BLE001 - e.g. an already finalized graph
            logger.warning("tfdiag: cannot time this graph's input waits (%r).", error)
            return None

    def _parse_loop(self) -> None:
        while True:
            metadata = self._queue.get()
            if metadata is None:
                return
            try:
                for row in transfer_rows(metadata.step_stats):
                    self._writer.append("transfer", **row)
                    self.transfers_recorded += 1
                self.traces_parsed += 1
            except Exception as error:  # noqa: BLE001
                logger.warning("tfdiag: cannot parse a traced step (%r); tracing is off.", error)
                self.trace_every = 0

    def _fail(self, error: BaseException) -> None:
        if not self._failed:
            logger.warning("tfdiag: DiagnosticsHook stopped recording after an error: %r", error)
        self._failed = True
