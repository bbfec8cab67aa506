"""Calls that can hang on a remote task, bounded in time: when late, left behind, not waited for.

A probe of a task that stopped answering, or a copy of timings from a worker stuck in a
closure, can block in TensorFlow for as long as the task is stuck. The collectors make
such calls through :class:`BoundedCalls`: each runs on a daemon thread of its own and
the caller waits at most ``timeout_s``; a late call is abandoned (its thread runs on,
its result is dropped), and a new call with the same key is refused while the late
one is still running, so a stuck task never piles up threads.

Example:
    >>> calls = BoundedCalls("tfdiag-example")
    >>> calls.call("ps:0", lambda: 42, timeout_s=1.0)
    42
"""

from __future__ import annotations

import threading


class LateCallError(TimeoutError):
    """A bounded call did not return in time, or an earlier late one with its key still runs."""


class BoundedCalls:
    """Runs calls with a deadline, one daemon thread per call, keyed by what they reach.

    Args:
        name: the threads' name prefix.
    """

    def __init__(self, name: str):
        self.name = name
        self.abandoned = 0
        self._late: dict[object, threading.Thread] = {}

    def call(self, key, fn, timeout_s: float):
        """``fn()``'s result, or its exception; :class:`LateCallError` when it takes over ``timeout_s``."""
        late = self._late.get(key)
        if late is not None:
            if late.is_alive():
                raise LateCallError(f"an earlier call to {key} has not returned yet")
            del self._late[key]
        outcome: dict = {}

        def run():
            try:
                outcome["value"] = fn()
            except BaseException as error:  # noqa: BLE001 - handed to the caller
                outcome["error"] = error

        thread = threading.Thread(target=run, name=f"{self.name}-{key}", daemon=True)
        thread.start()
        thread.join(timeout_s)
        if thread.is_alive():
            self._late[key] = thread
            self.abandoned += 1
            raise LateCallError(f"the call to {key} did not return within {timeout_s:g} s; abandoned")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]
