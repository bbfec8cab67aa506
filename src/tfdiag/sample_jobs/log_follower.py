"""Follows a task's growing log and hands over the complete lines that start with a prefix.

The launcher relays what tfdiag announces inside the job (``tfdiag: worker:1 straggler
since step ...``, written by the live findings on the task's stderr) to its own
stderr while the job runs, so a user of ``tfdiag sample`` or ``tfdiag demo`` sees it
when it happens rather than in a task log afterwards.

Example:
    >>> follower = LogFollower("logs/run1/tasks/chief-0.log", "tfdiag: ")  # doctest: +SKIP
    >>> follower.new_lines()  # doctest: +SKIP
    ['tfdiag: worker:1 straggler since step 2,000: worker:1 is 3.9x slower per step than the other workers; ...']
"""

from __future__ import annotations

import os
from pathlib import Path

# The most bytes read in one call: a task that floods its log cannot stall the launcher.
MAX_READ_BYTES = 1 << 20


class LogFollower:
    """The lines ``path`` gained since the previous call that start with ``prefix``."""

    def __init__(self, path: str | os.PathLike, prefix: str):
        self.path = Path(path)
        self.prefix = prefix.encode()
        self._offset = 0
        self._partial = b""  # the end of the last read, up to its last newline

    def new_lines(self) -> list[str]:
        """The complete lines written since the last call that start with the prefix; a
        missing or unreadable log has none."""
        try:
            with open(self.path, "rb") as log:
                log.seek(self._offset)
                data = log.read(MAX_READ_BYTES)
        except OSError:
            return []
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        return [line.decode(errors="replace").rstrip("\r") for line in lines if line.startswith(self.prefix)]
