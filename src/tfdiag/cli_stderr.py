"""What the ``tfdiag`` command writes to stderr: its messages and warnings, a progress bar
while a large run is read, and the library's logged warnings (the fold cache's) as its own.

stdout holds the reports and nothing else (``tfdiag.cli``). Every message is shown with its
control characters and undecodable bytes escaped (``tfdiag.report.safe_text``).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Iterator

from tfdiag.report.safe_text import printable

# Runs with at least this many bytes of logs get a progress bar even when stderr is not a
# terminal (a CI log); on a terminal the bar appears from PROGRESS_TTY_BYTES on.
PROGRESS_LARGE_BYTES = 256 * 1024 * 1024
PROGRESS_TTY_BYTES = 8 * 1024 * 1024


def say(message: str) -> None:
    """``message`` on a line of stderr, escaped (nothing when there is no stderr)."""
    if sys.stderr is not None:
        print(printable(message), file=sys.stderr, flush=True)


def warn(message: str) -> None:
    """``message`` on one line of stderr as ``tfdiag: warning: ...``."""
    say("tfdiag: warning: " + " ".join(str(message).split()))


class ProgressBar:
    """The ``progress`` callback of ``analyze``: a tqdm bar on stderr, for large runs only."""

    def __init__(self, description: str, enabled: bool = True):
        self.description = description
        self.enabled = enabled
        self._bar = None

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            threshold = PROGRESS_TTY_BYTES if _stderr_is_tty() else PROGRESS_LARGE_BYTES
            if total < threshold:
                self.enabled = False
                return
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=self.description, unit="B", unit_scale=True, file=sys.stderr, leave=False)
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


class _Warnings(logging.Handler):
    """The library's logged warnings as the CLI's own lines on stderr; none when ``quiet``."""

    def __init__(self, quiet: bool):
        super().__init__(logging.WARNING)
        self.quiet = quiet

    def emit(self, record: logging.LogRecord) -> None:
        if not self.quiet:
            warn(record.getMessage().removeprefix("tfdiag: "))


def _stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def logged_warnings(quiet: bool) -> Iterator[None]:
    """While it runs, what ``tfdiag``'s loggers warn goes to stderr as ``warn``'s lines (nothing
    if ``quiet``), in place of Python's bare last-resort line."""
    handler, logger = _Warnings(quiet), logging.getLogger("tfdiag")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
