"""A run's background refresh: the tab's requests ask for it and never wait on it.

``Reloader.ask`` starts a refresh of its run on a thread of its own (the loader folds only
what the task files gained, then the run is analysed again if anything did, and the new
view is published: ``runs.RunState``) when none is running and the last began at least
``interval_s`` ago. The request that asked answers from the view already published, so
a refresh of a large run, or its first read, holds no server thread. A thread lives for
one refresh: a run nobody asks about costs nothing.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class Reloader:
    """Runs ``refresh`` in the background when asked, at most once every ``interval_s``.

    Example:
        >>> reloader = Reloader(lambda: None, "run1", interval_s=1.0)
        >>> reloader.ask(wait_s=5.0)  # started, and waited for (a test's synchronous use)
        True
    """

    def __init__(self, refresh: Callable[[], None], name: str, interval_s: float):
        self._refresh = refresh
        self._name = name
        self._interval_s = interval_s
        self._changed = threading.Condition()
        self._running = False
        self._started_at: float | None = None
        self._finished = 0  # refreshes done

    @property
    def running(self) -> bool:
        return self._running

    def ask(self, wait_s: float = 0.0) -> bool:
        """Starts a refresh if one is due; waits up to ``wait_s`` for the one running (tests
        wait; the tab does not). True when no refresh is running on return."""
        with self._changed:
            now = time.monotonic()
            if not self._running and (self._started_at is None or now - self._started_at >= self._interval_s):
                self._running, self._started_at = True, now
                threading.Thread(target=self._run, name=f"tfdiag-reload {self._name}", daemon=True).start()
            target = self._finished + 1
            if self._running and wait_s > 0:
                self._changed.wait_for(lambda: self._finished >= target, timeout=wait_s)
            return not self._running

    def _run(self) -> None:
        try:
            self._refresh()
        finally:
            with self._changed:
                self._running = False
                self._finished += 1
                self._changed.notify_all()
