"""A task's last words: an ``exit`` record when its process ends with the collectors open.

When training dies, the task that saw the error is seldom the one that caused it. Under
MultiWorkerMirroredStrategy a worker whose peer froze aborts seconds later with
``UnavailableError ... The following tasks are unhealthy (stopped sending heartbeats):
/job:worker/replica:0/task:1``; one whose peer was killed, with ``... from remote target
/job:worker/replica:0/task:1``. :class:`LastWords` writes what the task last said:

* an exception that leaves the program (``sys.excepthook``, chained: the hook that was
  installed before, the user's or Python's, still runs after, with the same arguments):
  its class, its text (head and tail: TensorFlow puts the op's cause after its traces),
  and the tasks the text names as failed (``tf_internals.tasks_blamed``);
* the process ending while the collectors are open without one (``atexit``, which runs
  before the writer's own exit handler closes the file): reason ``exit``.

Either is flushed to the file at once: nothing runs after. Where live findings are on
(``announces``), an exception also gets its line in the training log before Python's
traceback, naming the task to blame: ``tfdiag: ps:0 task_failure: chief:0 ends on
UnavailableError, which names ps:0 as failed`` (or the task itself, for an error of its
own), so the on-call reading the log of the task that died learns which task to look at.
A process that is killed
(SIGKILL, the OOM killer) or frozen (SIGSTOP) says nothing; its heartbeats stop without a
close marker, which is how the analysis tells it from one that exited.

Example:
    >>> words = LastWords(writer).start()  # doctest: +SKIP
    >>> words.stop()  # training ended normally: nothing to say  # doctest: +SKIP
"""

from __future__ import annotations

import atexit
import logging
import sys
import time

from tfdiag.collectors import tf_internals
from tfdiag.collectors.live_thread import announce

logger = logging.getLogger("tfdiag")

# An error's text is kept to this many characters, its head and its tail: TensorFlow puts
# the op's own message after the "Detected at node" traces.
MAX_ERROR_CHARS = 2000
# The announced line quotes an error of the task's own to this many characters of its first line.
ANNOUNCED_ERROR_CHARS = 160


def shortened(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text`` cut to ``limit`` characters, keeping its head and tail.

    >>> short = shortened("a" * 1500 + "b" * 1500)
    >>> len(short), short[995:1004]
    (1999, 'a [...] b')
    """
    if len(text) <= limit:
        return text
    half = (limit - len(" [...] ")) // 2
    return text[:half] + " [...] " + text[-half:]


def error_text(error: BaseException) -> str:
    """The text of ``error`` and of the errors it was raised from, outermost first."""
    parts, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        parts.append(str(error))
        error = error.__cause__ or error.__context__
    return "\n".join(part for part in parts if part)


class LastWords:
    """Writes the task's ``exit`` record if its process ends while this is started.

    Args:
        writer: the task's ``TaskWriter``.
        announces: whether an exception also gets its ``tfdiag: ...`` line on stderr
            (``failure_line``): where live findings are on.
    """

    def __init__(self, writer, announces: bool = False):
        self.writer = writer
        self.announces = announces
        self._started = False
        self._said = False
        self._chained = None  # the excepthook that was installed before ours

    def start(self) -> LastWords:
        """Chains the excepthook and registers the exit handler. Never raises."""
        if self._started:
            return self
        self._started = True
        self._chained = sys.excepthook
        sys.excepthook = self._excepthook
        atexit.register(self._at_exit)
        return self

    def stop(self) -> None:
        """Training ended with the collectors closed: nothing will be said. Restores the
        excepthook where nothing replaced ours since (else ours just passes through)."""
        if not self._started:
            return
        self._started = False
        atexit.unregister(self._at_exit)
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._chained

    def _excepthook(self, error_type, error, traceback) -> None:
        if self._started and not issubclass(error_type, KeyboardInterrupt):
            self._say("exception", error_type.__name__, error_text(error) if error is not None else "")
        self._chained(error_type, error, traceback)

    def _at_exit(self) -> None:
        if self._started:
            self._say("exit", "", "")

    def _say(self, reason: str, error_type: str, text: str) -> None:
        """Appends the ``exit`` record and writes it to the file; once. Never raises."""
        if self._said:
            return
        self._said = True
        try:
            task = self.writer.task
            blamed = tf_internals.tasks_blamed(text, own_task=task)
            if self.announces and reason == "exception":
                announce(failure_line(task, error_type, text, blamed))
            self.writer.append("exit", task=task, time_ns=time.time_ns(), reason=reason, error_type=error_type,
                               message=shortened(text), blamed=",".join(blamed))
            self.writer.flush()
        except Exception as failure:  # noqa: BLE001 - the process is ending: say why, never raise
            logger.warning("tfdiag: cannot record this task's last words (%r).", failure)


def failure_line(task: str, error_type: str, text: str, blamed: list[str]) -> str:
    """The announced line of ``task`` ending on an exception: the tasks its text blames, else ``task``.

    >>> failure_line("chief:0", "UnavailableError", "...", ["ps:0"])
    'tfdiag: ps:0 task_failure: chief:0 ends on UnavailableError, which names ps:0 as failed'
    >>> failure_line("worker:1", "ValueError", "bad batch\\nmore", [])
    'tfdiag: worker:1 task_failure: worker:1 ends on ValueError: bad batch'
    """
    if blamed:
        return f"tfdiag: {', '.join(blamed)} task_failure: {task} ends on {error_type}, which names " \
               f"{', '.join(blamed)} as failed"
    first_line = text.strip().splitlines()[0] if text.strip() else ""
    said = f": {first_line[:ANNOUNCED_ERROR_CHARS]}" if first_line else ""
    return f"tfdiag: {task} task_failure: {task} ends on {error_type}{said}"
