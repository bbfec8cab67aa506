"""The per-task log writer: buffered appends, flushed in frames by a background thread."""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections import defaultdict

import pyarrow as pa

from tfdiag.events import KINDS, task_file_stem
from tfdiag.store.framing import encode_frame
from tfdiag.store.paths import LOG_SUFFIX, log_dir

logger = logging.getLogger("tfdiag")

# A killed task loses what it appended since the last flush; the design promises at most
# one second, so flush twice a second.
DEFAULT_FLUSH_INTERVAL_S = 0.5


class TaskWriter:
    """Appends records of one task to ``RUN/plugins/tfdiag/<task>.tfdiag``.

    ``append`` only puts a dict on a list under a lock, so it is cheap enough for the
    training thread; a daemon thread turns the buffered rows into one Arrow frame per
    record kind every ``flush_interval_s`` and appends them to the file. The file is
    opened lazily by that thread. Any error while writing (an unwritable logdir, a full
    disk) is logged once and the writer then drops records: it never raises into training.

    Example:
        >>> writer = TaskWriter("logs/run1", "worker:0")  # doctest: +SKIP
        >>> writer.append("step", task="worker:0", step=1, begin_ns=0, end_ns=5_000_000)  # doctest: +SKIP
        >>> writer.close()  # doctest: +SKIP
    """

    def __init__(self, run_dir: str | os.PathLike, task: str, flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S):
        self.task = task
        self.path = log_dir(run_dir) / (task_file_stem(task) + LOG_SUFFIX)
        self.dropped_records = 0
        self._flush_interval_s = flush_interval_s
        self._pending: dict[str, list[dict]] = defaultdict(list)
        self._lock = threading.Lock()
        self._file_lock = threading.Lock()
        self._file = None
        self._failed = False
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tfdiag-writer-{task}", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def append(self, kind: str, /, **values) -> None:
        """Buffers one record of ``kind`` (a name in ``tfdiag.events.KINDS``)."""
        if self._failed:
            self.dropped_records += 1
            return
        with self._lock:
            self._pending[kind].append(values)

    def flush(self) -> None:
        """Writes everything appended so far (the background thread calls this)."""
        with self._lock:
            pending, self._pending = self._pending, defaultdict(list)
        if not pending or self._failed:
            return
        with self._file_lock:
            try:
                frames = b"".join(
                    encode_frame(pa.RecordBatch.from_pylist(rows, schema=KINDS[kind].arrow_schema(self.task)))
                    for kind, rows in pending.items()
                )
                if self._file is None:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    self._file = open(self.path, "ab")
                self._file.write(frames)
                self._file.flush()
            except Exception as error:  # noqa: BLE001 - a collector never breaks training
                self._failed = True
                self.dropped_records += sum(len(rows) for rows in pending.values())
                logger.warning("tfdiag: cannot write %s (%s); diagnostics for %s are off.", self.path, error, self.task)

    def close(self) -> None:
        """Flushes, stops the background thread and closes the file. Safe to call twice."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._thread.join()
        self.flush()
        with self._file_lock:
            if self._file is not None:
                self._file.close()
                self._file = None
        atexit.unregister(self.close)

    def _run(self) -> None:
        while not self._closed.wait(self._flush_interval_s):
            self.flush()
