"""Python stacks of a task that is alive but stuck: ``RUN/plugins/tfdiag/<task>.stacks``.

A hung job's first question is where each task waits. :class:`StackDumps` writes every
thread's Python stack (``faulthandler``) to the task's stacks file:

* when the task's own progress (the heartbeat's step counter) has not moved for
  ``STUCK_AFTER_S`` since its last step while its process runs (checked every
  ``CHECK_EVERY_S`` on a daemon thread): once per stall, again after it moved;
* on ``SIGNAL`` (``kill -USR1 <pid>``), at any time, from the signal handler itself, so
  it works while every Python thread is blocked. A handler installed before is chained;
  without one the signal does nothing else (its default would end the process).

A frozen (SIGSTOP) or killed process cannot write: its heartbeats say so instead.

Example:
    >>> dumps = StackDumps(logdir, "worker:0", progress).start()  # doctest: +SKIP
    >>> dumps.dump("asked")  # doctest: +SKIP
"""

from __future__ import annotations

import faulthandler
import logging
import signal
import threading
import time

from tfdiag.store.paths import stacks_path

logger = logging.getLogger("tfdiag")

SIGNAL = signal.SIGUSR1
# As long as the analysis waits before calling a worker stalled (stalled.STALL_FLOOR_S):
# the stacks are there when the finding is.
STUCK_AFTER_S = 30.0
CHECK_EVERY_S = 5.0


class StackDumps:
    """Dumps ``task``'s Python stacks when ``progress.count`` stops moving, or on ``SIGNAL``.

    Args:
        logdir: the run directory.
        task: this task's name.
        progress: the heartbeat's counter of this task's steps (``heartbeat.progress``);
            None: on the signal only.
    """

    def __init__(self, logdir, task: str, progress=None, stuck_after_s: float = STUCK_AFTER_S,
                 check_every_s: float = CHECK_EVERY_S):
        self.path = stacks_path(logdir, task)
        self.task = task
        self.progress = progress
        self.stuck_after_s = stuck_after_s
        self.check_every_s = check_every_s
        self.dumps = 0
        self._file = None
        self._signal_registered = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="tfdiag-stacks", daemon=True)

    def start(self) -> StackDumps:
        """Opens the file, registers the signal (main thread only) and starts the watch. Never raises."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open until stop()
            if threading.current_thread() is threading.main_thread():
                chained = signal.getsignal(SIGNAL) not in (signal.SIG_DFL, None)
                faulthandler.register(SIGNAL, file=self._file, all_threads=True, chain=chained)
                self._signal_registered = True
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            logger.warning("tfdiag: stack dumps are off (%r).", error)
            return self
        if self.progress is not None:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(self.check_every_s + 1)
        if self._signal_registered:
            faulthandler.unregister(SIGNAL)
            self._signal_registered = False
        if self._file is not None:
            self._file.close()
            self._file = None

    def dump(self, reason: str) -> None:
        """Appends a header line and every thread's stack to the file. Never raises."""
        if self._file is None:
            return
        try:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            self._file.write(f"--- tfdiag: stacks of {self.task} ({reason}) at {stamp} ---\n")
            self._file.flush()
            faulthandler.dump_traceback(self._file, all_threads=True)
            self.dumps += 1
        except Exception as error:  # noqa: BLE001
            logger.warning("tfdiag: cannot write the stacks of %s (%r).", self.task, error)

    def _watch(self) -> None:
        """From the first step on (before it, a task may wait for its chief by design)."""
        count, since, dumped = self.progress.count, time.monotonic(), False
        while not self._done.wait(self.check_every_s):
            if self.progress.count != count:
                count, since, dumped = self.progress.count, time.monotonic(), False
            elif count and not dumped and time.monotonic() - since >= self.stuck_after_s:
                self.dump(f"no progress for {time.monotonic() - since:.0f} s")
                dumped = True
