"""The closure recorder: ``closure`` and ``step`` records of the closures a coordinator scheduled.

``InstrumentedCoordinator.schedule`` hands each closure it dispatched to :meth:`ClosureRecorder.add`.
The coordinator's dispatch thread notes when each closure's result comes in
(``_watch_result``); a background thread (the *result thread*) wakes every
``RECORD_EVERY_S`` and writes one ``closure`` record (dispatch and result time on the
coordinator's clock) per closure finished since, into the coordinator's task file; every
``FETCH_EVERY_S`` (and at close) it copies the timings of the closures recorded since
from each worker at once and writes one ``step`` record per closure (task and clock
``worker:<index>``). Every closure gets both records; only the step records come later.
A failed closure is recorded with ``ok=False`` and its error message. A worker that does
not hand back the timings within ``FETCH_TIMEOUT_S`` is left to a daemon thread: its
closures keep their ``closure`` records, lose their ``step`` records, and the loss is
logged and noted once per worker. Every ``SHARD_EVERY_S`` it also writes one cumulative
``shard`` record per worker (examples its closures consumed).

The worker that ran a closure is the device its outputs stay on until they are fetched
(asking in-graph, with ``experimental_get_current_worker_index()``, would feed the
index to every call as an extra input). The task session (``task_session``) starts and
stops the recorder; its first recorded closure starts the collectors that wait for one
(the RPC probe).

Example:
    >>> recorder = ClosureRecorder(writer, "chief:0", on_first_result=start_probe).start()  # doctest: +SKIP
    >>> recorder.add(remote, view, dispatch_ns)  # in schedule()  # doctest: +SKIP
    >>> recorder.stop(timeout_s=30)  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
import weakref
from typing import Callable

from tfdiag.collectors import closure_timing, heartbeat, tf_internals
from tfdiag.collectors.budget import MeteredCalls, charged
from tfdiag.collectors.last_words import shortened
from tfdiag.events import task_of_device

logger = logging.getLogger("tfdiag")

# How often the result thread writes the ``closure`` records of the closures finished
# since (their result times come from the dispatch threads, ``_watch_result``: the thread
# need not poll for them). What the stall check and the heartbeat's progress count read.
RECORD_EVERY_S = 1.0
# How often it copies those closures' timings from the workers (one op and one copy per
# worker) and writes their ``step`` records, which reach the writer at most this much
# later. A copy costs the coordinator a few ms of CPU, nearly the same for 5 closures
# as for 40 (benchmarks/micro.py timing_copy; docs/benchmarks.md, "Collector overhead"):
# every 5 s rather than every second takes a fifth of the copies.
FETCH_EVERY_S = 5.0
# ... or as soon as this many closures' timings wait (bounds the batch and the handles held).
MAX_UNREAD_TIMINGS = 4096
# How often the result thread looks for finished closures until the first one is
# recorded (which starts the RPC probe: a run of a few seconds needs its first rounds)
# and, at close, for the last ones.
POLL_S = 0.05
# How long ``stop()`` waits for closures still in flight before dropping their records.
CLOSE_TIMEOUT_S = 30.0
# How long the result thread waits for one worker's timings: a step record is worth
# little next to a result thread free to record the other workers' closures.
FETCH_TIMEOUT_S = 10.0
# Cumulative per-worker example counts (``shard`` records) are written this often.
SHARD_EVERY_S = 1.0


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


class ClosureRecorder:
    """Records the closures ``add``\\ ed to it from a result thread, until ``stop``.

    Args:
        writer: the coordinator's ``TaskWriter``.
        task: the coordinator's task (for its ``note`` records).
        examples_per_step: examples one closure consumes where its elements do not say.
        on_first_result: called once, on the result thread, when the first closure a
            worker ran is recorded.
    """

    def __init__(self, writer, task: str, examples_per_step: int | None = None,
                 on_first_result: Callable[[], None] = lambda: None):
        self.writer = writer
        self.task = task
        self.examples_per_step = examples_per_step
        self.closures_recorded = 0
        self._on_first_result = on_first_result
        self._results_began = False
        self._examples: collections.Counter = collections.Counter()
        self._shard_written_at = 0.0
        self._fetches = MeteredCalls("tfdiag-timings", "results")
        self._unread: list[_Unread] = []
        self._unread_since = 0.0  # time.monotonic() when the oldest of ``_unread`` was recorded
        self._workers: dict[str, str] = {}  # device -> worker task, as closures come back
        self._flush_asked = False
        self._unreadable_workers: set[str] = set()
        self._ids = itertools.count()
        self._pending: collections.deque[_Pending] = collections.deque()
        self._cv = threading.Condition()
        self._closing = False
        self._close_timeout_s = CLOSE_TIMEOUT_S
        self._close_deadline = 0.0
        self._thread = threading.Thread(target=self._track, name="tfdiag-closures", daemon=True)

    def start(self) -> ClosureRecorder:
        self._thread.start()
        return self

    @property
    def closing(self) -> bool:
        """Whether ``close_soon`` was called: closures scheduled from now on are not recorded."""
        return self._closing

    @property
    def abandoned_fetches(self) -> int:
        """Copies of timings from a worker that did not return within ``FETCH_TIMEOUT_S``."""
        return self._fetches.abandoned

    def add(self, remote, view, dispatch_ns: int) -> None:
        """Records the closure whose RemoteValue is ``remote`` once it finishes; ``view`` is the caller's."""
        pending = _Pending(next(self._ids), dispatch_ns, remote)
        _watch_result(remote, view, pending)
        with self._cv:
            self._pending.append(pending)

    def in_flight(self) -> tuple[int, int | None]:
        """Closures scheduled and not yet recorded, and the oldest one's dispatch time (for the heartbeat)."""
        with self._cv:
            return len(self._pending), (self._pending[0].dispatch_ns if self._pending else None)

    def results_began(self) -> None:
        """From now on the result thread wakes every ``RECORD_EVERY_S``; the first call
        calls ``on_first_result``. (The first recorded closure calls it.)"""
        if self._results_began:
            return
        self._results_began = True
        self._on_first_result()

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

    def close_soon(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Stops taking closures and frees a ``flush_records`` waiting; the closures in
        flight get up to ``timeout_s`` from now (``stop`` waits for them)."""
        with self._cv:
            if self._closing:
                return
            self._closing = True
            self._close_timeout_s = timeout_s
            self._close_deadline = time.monotonic() + timeout_s
            self._cv.notify_all()  # the result thread, and a live evaluation waiting in flush_records

    def stop(self) -> None:
        """Waits for the closures in flight (see ``close_soon``), writes their records and the last shards."""
        self.close_soon()
        self._thread.join(self._close_timeout_s + 5)
        self._write_shards()

    # -- the result thread -------------------------------------------------------------
    def _track(self) -> None:
        """Every ``RECORD_EVERY_S`` (``POLL_S`` until the first record and at close), records
        the closures finished since; every ``FETCH_EVERY_S``, and at close, their timings."""
        while True:
            with self._cv:
                if not (self._closing or self._flush_asked):
                    self._cv.wait(RECORD_EVERY_S if self._results_began else POLL_S)
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
                self.writer.append(
                    "closure",
                    worker=worker,
                    closure_id=item.closure_id,
                    dispatch_ns=item.dispatch_ns,
                    result_ns=result_ns,
                    ok=error is None,
                    error="" if error is None else shortened(f"{type(error).__name__}: {error}"),
                )
                self.closures_recorded += 1
                if worker:
                    heartbeat.progress(self.writer, worker).count += 1
                    self.results_began()
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

    def _timings_lost(self, device: str, closures: int, error: BaseException) -> None:
        """Logs and notes, once per worker, that the timings of its closures could not be read."""
        worker = task_of_device(device) or device
        if worker in self._unreadable_workers:
            return
        self._unreadable_workers.add(worker)
        message = (f"tfdiag: cannot read the timings of {closures} closures from {worker} ({error!r}); "
                   f"their step records are skipped (reported once per worker)")
        logger.warning("%s", message)
        self.writer.append("note", task=self.task, time_ns=time.time_ns(), level="warning", message=message)

    def _write_step(self, closure_id: int, worker: str, row: list[float]) -> None:
        begin, end, wait, examples, steps = row  # closure_timing.STATS
        # What the worker's elements held, counted in-graph, wins: under tf-keras
        # ``model.fit`` each worker's dataset function sets its own batch, which the
        # examples_per_step a user passes (one batch size) need not be.
        examples = int(examples) if examples >= 0 else (self.examples_per_step or 0)
        self.writer.append(
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

    def _write_shards(self) -> None:
        """One cumulative ``shard`` record per worker: examples its closures consumed."""
        self._shard_written_at = time.monotonic()
        now = time.time_ns()
        for worker, examples in sorted(self._examples.items()):
            self.writer.append("shard", task=worker, time_ns=now, examples=int(examples), file="", policy="")
