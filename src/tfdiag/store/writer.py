"""The per-task log writer: buffered appends, flushed in frames by a background thread."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import defaultdict

import pyarrow as pa

from tfdiag.events import KINDS, task_file_stem
from tfdiag.store.framing import HEADER, MAGIC, encode_frame
from tfdiag.store.paths import LOG_SUFFIX, log_dir

logger = logging.getLogger("tfdiag")

# A killed task loses what it appended since the last flush: at most one second. Each flush
# costs a fixed CPU per record kind in it (a frame each: 22-79 µs for a row on the
# 2-core test host, benchmarks/micro.py collector_cost), so flushing more often costs more.
DEFAULT_FLUSH_INTERVAL_S = 1.0
# After a failed write the writer tries again this often (not at every flush: each try
# encodes the buffered records, wasted work while the disk stays full).
RETRY_EVERY_S = 5.0
# Records held in memory while the file cannot be written (or the flush thread lags);
# beyond that, new records are dropped and counted. ~400 bytes each: ~20 MB.
MAX_BUFFERED_RECORDS = 50_000
# How long ``close`` waits for a write in progress (training's exit waits on it).
CLOSE_TIMEOUT_S = 10.0


class TaskWriter:
    """Appends records of one task to ``RUN/plugins/tfdiag/<task>.tfdiag``.

    ``append`` only puts a dict on a list under a lock, so it is cheap enough for the
    training thread; a daemon thread turns the buffered rows into one Arrow frame per
    record kind every ``flush_interval_s`` and appends them to the file, which it opens
    lazily. Nothing here raises into training.

    Faults, and what a user gets (``dropped_records`` counts what is lost):

    * The file cannot be written (an unwritable or vanished logdir, a full disk, a file
      size limit): the error is logged once, records stay buffered (up to
      ``MAX_BUFFERED_RECORDS``, then new ones are dropped) and the write is retried
      every ``RETRY_EVERY_S``. When the folder is writable again the writer resumes:
      a user who frees the disk or fixes the folder expects the rest of the run in the
      log, not a log that ended at the first hiccup. Resuming is logged once and leaves
      a ``note`` record naming the gap and the records dropped in it.
    * A write that fails part-way (``EFBIG``, ``ENOSPC``) is cut back to the last whole
      frame, so every later frame is found by the reader; if even that fails, the
      writer stops writing that file for good rather than append after a torn frame.
    * The file is deleted while the task runs: the next flush notices and writes a new
      file at the same path (recreating the folder), logged once.
    * A write that hangs (a stuck network filesystem): ``close`` gives up after
      ``CLOSE_TIMEOUT_S`` and drops what is buffered; training is never held longer.
    * The task is killed (SIGKILL): the records since the last flush began are lost
      (``flush_interval_s`` and that flush's write); a frame torn by the kill is cut off
      when a writer next opens the file.

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
        self._buffered = 0
        self._lock = threading.Lock()
        self._file_lock = threading.Lock()
        self._fd: int | None = None
        self._frames_end = 0  # the file's size up to its last whole frame
        self._failing_since: float | None = None  # time.time() of the first failed write of a fault
        self._dropped_before_fault = 0
        self._next_try = 0.0
        self._given_up = False
        self._bad_kinds: set[str] = set()
        self._schemas: dict[str, tuple[pa.Schema, pa.StructType]] = {}  # per kind, made at its first flush
        self.flush_cpu_ns = 0  # CPU time of the flush thread so far (the collectors' cost budget reads it)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"tfdiag-writer-{task}", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called (later records are dropped)."""
        return self._closed.is_set()

    def append(self, kind: str, /, **values) -> None:
        """Buffers one record of ``kind`` (a name in ``tfdiag.events.KINDS``)."""
        with self._lock:
            if self._buffered >= MAX_BUFFERED_RECORDS or self._given_up or self._closed.is_set():
                self.dropped_records += 1
                return
            self._pending[kind].append(values)
            self._buffered += 1

    def flush(self, *, retry_now: bool = False) -> None:
        """Writes everything appended so far (the background thread calls this).

        While writes fail, records stay buffered until the next retry (``retry_now``:
        try at once).
        """
        with self._file_lock:
            if self._failing_since is not None and not retry_now and time.monotonic() < self._next_try:
                return
            with self._lock:
                pending, self._pending, self._buffered = self._pending, defaultdict(list), 0
            if not pending:
                return
            frames, records = self._encode(pending)
            try:
                if self._given_up:
                    raise OSError(f"{self.path} is not written any more")
                self._write(frames)
            except OSError as error:
                self._write_failed(error, records)
                return
            if self._failing_since is not None:
                self._resumed()

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Flushes (one last try if writes were failing), stops the thread, closes the file.

        Waits at most about ``timeout_s`` for a write in progress (a hung network
        filesystem): past that, what is buffered is dropped and the file left to the
        stuck thread. Safe to call twice.
        """
        if self._closed.is_set():
            return
        self._closed.set()
        atexit.unregister(self.close)
        self._thread.join(timeout_s)
        if self._file_lock.acquire(timeout=timeout_s):
            self._file_lock.release()
            self.flush(retry_now=True)
            with self._file_lock:
                self._close_fd()
        else:
            logger.warning("tfdiag: writing %s did not finish within %g s; %d buffered records of %s are dropped.",
                           self.path, timeout_s, self._buffered, self.task)
        with self._lock:
            self.dropped_records += self._buffered  # what the last try could not write
            self._pending, self._buffered = defaultdict(list), 0

    # -- internals -------------------------------------------------------------------
    def _run(self) -> None:
        while not self._closed.wait(self._flush_interval_s):
            self.flush()
            self.flush_cpu_ns = time.thread_time_ns()  # this thread's CPU: only flushes

    def _batch(self, kind: str, rows: list[dict]) -> pa.RecordBatch:
        """The rows as a record batch of the kind's schema (a missing field is null).

        Converted as one struct array, with the schema made once per kind: a third of
        ``RecordBatch.from_pylist``'s CPU for the few rows of a flush.
        """
        if kind not in self._schemas:
            schema = KINDS[kind].arrow_schema(self.task)
            self._schemas[kind] = schema, pa.struct(list(schema))
        schema, struct = self._schemas[kind]
        return pa.RecordBatch.from_struct_array(pa.array(rows, type=struct)).replace_schema_metadata(schema.metadata)

    def _encode(self, pending: dict[str, list[dict]]) -> tuple[bytes, int]:
        """One frame per kind, and how many records they hold; a kind whose records do not
        fit its schema is dropped (logged once per kind)."""
        frames, records = [], 0
        for kind, rows in pending.items():
            try:
                frames.append(encode_frame(self._batch(kind, rows)))
                records += len(rows)
            except Exception as error:  # noqa: BLE001 - a collector's bad record must not stop the others
                with self._lock:
                    self.dropped_records += len(rows)
                if kind not in self._bad_kinds:
                    self._bad_kinds.add(kind)
                    logger.warning("tfdiag: cannot encode %d %r records for %s (%s); dropped.", len(rows), kind,
                                   self.path, error)
        return b"".join(frames), records

    def _write(self, frames: bytes) -> None:
        """Appends whole frames; on an error cuts the file back to its last whole frame."""
        if self._fd is not None and os.fstat(self._fd).st_nlink == 0:
            logger.warning("tfdiag: %s was deleted while %s ran; writing a new one.", self.path, self.task)
            self._close_fd()
        if self._fd is None:
            self._open()
        view = memoryview(frames)
        try:
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            try:
                os.ftruncate(self._fd, self._frames_end)
            except OSError as error:
                self._given_up = True  # a torn frame would stay in the middle of the file
                logger.warning("tfdiag: cannot cut a partly written frame off %s (%s); it is not written any more.",
                               self.path, error)
            raise
        self._frames_end += len(frames)

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)  # read: to find a torn tail
        try:
            size = os.fstat(fd).st_size
            whole = _whole_frames_end(fd, size)
            if whole < size:
                logger.warning("tfdiag: %s ended in an incomplete frame (%d bytes: a task killed mid-write); "
                               "cut off before appending.", self.path, size - whole)
                os.ftruncate(fd, whole)
        except OSError:
            os.close(fd)
            raise
        self._fd, self._frames_end = fd, whole

    def _close_fd(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def _write_failed(self, error: OSError, records: int) -> None:
        with self._lock:
            self.dropped_records += records
        self._next_try = time.monotonic() + RETRY_EVERY_S
        if self._failing_since is None:
            self._failing_since = time.time()
            self._dropped_before_fault = self.dropped_records - records
            logger.warning("tfdiag: cannot write %s (%s); records of %s are dropped until it can be written "
                           "(retried every %g s).", self.path, error, self.task, RETRY_EVERY_S)
        self._close_fd()  # reopened on the next try: the folder may have been recreated

    def _resumed(self) -> None:
        began, self._failing_since = self._failing_since, None
        lost = self.dropped_records - self._dropped_before_fault
        message = (f"tfdiag: {self.path} could not be written for {time.time() - began:.1f} s; "
                   f"{lost} records of {self.task} were dropped")
        logger.warning("%s; writing again.", message)
        self.append("note", task=self.task, time_ns=time.time_ns(), level="warning", message=message)


def _whole_frames_end(fd: int, size: int) -> int:
    """Where the last whole frame of a task file ends: ``size`` unless its tail is torn.

    Hops from header to header; stops (trusting the rest) at bytes that are not a frame
    header, which the reader resynchronises past on its own.
    """
    position = 0
    while position < size:
        header = os.pread(fd, HEADER.size, position)
        if len(header) < HEADER.size:  # a torn header, unless these bytes are not a header at all
            return position if header[: len(MAGIC)] == MAGIC[: len(header)] else size
        magic, _, length, _, _ = HEADER.unpack(header)
        if magic != MAGIC:
            return size
        if position + HEADER.size + length > size:
            return position
        position += HEADER.size + length
    return size
