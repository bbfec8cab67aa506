"""A run's last seconds, read as ``RunLoader`` reads a whole run (``tfdiag.analysis.live``)."""

from __future__ import annotations

import os

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from tfdiag.analysis.frames import to_pandas
from tfdiag.analysis.load import LoadedRun, ProgressCallback, RunLoader

# The column that dates a kind's rows for ``WindowLoader`` (default ``time_ns``); None: a
# fact with no time (``placement``), kept whatever its age.
WINDOW_TIME_COLUMNS = {"step": "end_ns", "closure": "result_ns", "rpc": "recv_ns", "session": "ready_ns",
                       "placement": None}


class WindowLoader(RunLoader):
    """The records of a run's last ``window_s`` seconds, read as ``RunLoader`` reads them.

    Each ``refresh(now_ns)`` reads only the bytes appended since the previous one (a file
    that shrank or was replaced is read again, a duplicate frame is counted once, a frame
    the reader rejects is a reported skip: all as ``RunLoader``), then forgets every
    batch whose newest row is older than ``now_ns - window_s`` and leaves out the older
    rows of the rest. What it holds is bounded by the rate of records, not by the run's
    length. Step records are kept as rows (no ``step_counters``), so every table of the
    window is computed from its rows. It returns the same object as the previous call
    when the window did not change (no new record, none aged out).

    Example:
        >>> loader = WindowLoader("logs/run1", window_s=20)  # doctest: +SKIP
        >>> loader.refresh(time.time_ns()).frame("step")["end_ns"].min()  # doctest: +SKIP
    """

    _folds = False

    def __init__(self, run_dir: str | os.PathLike, window_s: float):
        super().__init__(run_dir)
        self.window_ns = int(window_s * 1e9)
        self._cutoff_ns = 0
        self._first_ns: dict[str, int] = {}  # kind -> its frame's oldest dated row

    def refresh(self, now_ns: int, progress: ProgressCallback | None = None) -> LoadedRun:
        """Reads what is new and returns the window ending at ``now_ns`` (ns since the epoch)."""
        files, rejected, changed = self._read(progress)
        self._forget_before(now_ns - self.window_ns)
        return self._result(files, rejected, changed)

    def _forget_before(self, cutoff_ns: int) -> None:
        """Drops the batches older than ``cutoff_ns`` (and their frames' digests); marks the
        kinds whose frames lose rows."""
        self._cutoff_ns = cutoff_ns
        for path, state in self._files.items():
            kept = [item for item in state.records if item.last_ns is None or item.last_ns >= cutoff_ns]
            if len(kept) == len(state.records):
                continue
            gone = {item.digest for item in state.records} - {item.digest for item in kept}
            self._changed_kinds |= {item.kind for item in state.records if item.digest in gone}
            state.records, state.digests = kept, [digest for digest in state.digests if digest not in gone]
            for digest in gone:
                if self._seen.get(digest, (None,))[0] == path:
                    del self._seen[digest]
        aged = {kind for kind, first_ns in self._first_ns.items() if first_ns < cutoff_ns}
        for kind in aged:  # rebuilt, and dated again if rows are left
            del self._first_ns[kind]
        self._changed_kinds |= aged

    def _last_ns(self, kind: str, batch: pa.RecordBatch) -> int | None:
        column = WINDOW_TIME_COLUMNS.get(kind, "time_ns")
        if column is None:
            return None
        last = pc.max(batch.column(column)).as_py() if column in batch.schema.names else None
        return 0 if last is None else last  # no dated row: nothing of it is in any window

    def _frame(self, kind: str) -> pd.DataFrame:
        table = self._table(kind).combine_chunks()  # one chunk: filtering a batch per flush costs 2-4x more
        column = WINDOW_TIME_COLUMNS.get(kind, "time_ns")
        self._first_ns.pop(kind, None)
        if column is not None:
            table = table.filter(pc.greater_equal(table.column(column), self._cutoff_ns))
            if len(table):
                self._first_ns[kind] = pc.min(table.column(column)).as_py()
        return to_pandas(table)


def window_of(run: LoadedRun, end_ns: int, window_s: float) -> LoadedRun:
    """``run`` cut to the records of the ``window_s`` seconds up to ``end_ns`` (dated as
    ``WINDOW_TIME_COLUMNS`` dates them; an undated kind is kept whole).

    Example:
        >>> window = window_of(load_run("logs/run1"), time.time_ns(), 10.0)  # doctest: +SKIP
    """
    window_ns = int(window_s * 1e9)
    frames = {}
    for name, frame in run.frames.items():
        column = WINDOW_TIME_COLUMNS.get(name, "time_ns")
        if column is None or column not in frame:
            frames[name] = frame
        else:
            frames[name] = frame[frame[column].between(end_ns - window_ns, end_ns)].reset_index(drop=True)
    return LoadedRun(run.path, run.manifest, frames, sources=run.sources, processes=run.processes)
