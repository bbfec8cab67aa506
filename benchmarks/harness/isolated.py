"""A worker process that answers requests with JSON lines, replaced after a crash or a hang,
so that what it runs can die or stall without taking the benchmark with it."""

from __future__ import annotations

import json
import os
import select
import subprocess
import time


class IsolatedWorker:
    """One worker process at a time, started from ``command``; a new one after a crash or a hang.

    The worker reads one request a line on stdin and answers JSON lines on stdout, merged
    into one outcome until a line carries ``"outcome"``: a worker may announce what it is
    about to run first, so that a crash still says which request caused it.
    """

    def __init__(self, command: list[str], timeout_s: float):
        self.command = command
        self.timeout_s = timeout_s
        self.process = None
        self.pending = b""

    def ask(self, request: str, outcome: dict) -> dict:
        """``outcome`` updated with the worker's answers to ``request``; ``"hang"`` or ``"crash"`` where none came."""
        if self.process is None:
            self.process = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            self.pending = b""
        self.process.stdin.write(f"{request}\n".encode())
        self.process.stdin.flush()
        deadline = time.monotonic() + self.timeout_s
        while (line := self._line(deadline)) is not None:
            outcome.update(json.loads(line))
            if "outcome" in outcome:
                return outcome
        if time.monotonic() >= deadline:
            self.process.kill()
            outcome.update(outcome="hang", error=f"no answer in {self.timeout_s} s")
        else:  # the worker's stdout closed: it died
            outcome.update(outcome="crash", error=f"worker died with status {self.process.wait()}")
        self.process.wait()
        self.process = None
        return outcome

    def _line(self, deadline: float) -> bytes | None:
        """The worker's next line, or None at the deadline or when it died."""
        stdout = self.process.stdout.fileno()
        while b"\n" not in self.pending:
            ready, _, _ = select.select([stdout], [], [], max(deadline - time.monotonic(), 0))
            chunk = os.read(stdout, 1 << 16) if ready else b""
            if not chunk:
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line

    def close(self) -> None:
        if self.process is not None:
            self.process.stdin.close()
            self.process.wait()
