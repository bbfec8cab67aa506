"""Loading a run: every task file of ``RUN/plugins/tfdiag`` into one DataFrame per kind.

The loader is incremental: ``RunLoader.refresh()`` reads only the bytes appended to each
task file since the previous call, so a live run (and the TensorBoard tab) never
re-reads what it already has. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd
import pyarrow as pa

from tfdiag.errors import RunNotFoundError
from tfdiag.events import KINDS
from tfdiag.store import MANIFEST_NAME, SkippedRecords, log_dir, read_manifest, read_task_file
from tfdiag.store.paths import LOG_SUFFIX

ProgressCallback = Callable[[int, int], None]  # (bytes read so far, bytes to read)


@dataclass
class LoadedRun:
    """Every record of a run, one long-form DataFrame per record kind.

    Each frame has the kind's columns (``tfdiag.events``) plus ``source``, the task whose
    file held the record. String columns are pandas categoricals.
    """

    path: Path
    manifest: dict | None
    frames: dict[str, pd.DataFrame]
    skipped: list[SkippedRecords] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)

    def frame(self, kind: str) -> pd.DataFrame:
        """The records of ``kind``; an empty frame with the right columns if there are none."""
        if kind in self.frames:
            return self.frames[kind]
        return _empty_frame(kind)

    @property
    def skipped_records(self) -> int:
        return sum(item.records for item in self.skipped)


class RunLoader:
    """Reads a run directory, and on each ``refresh`` only what was appended since.

    Example:
        >>> loader = RunLoader("logs/run1")  # doctest: +SKIP
        >>> run = loader.refresh()  # doctest: +SKIP
        >>> run.frame("step").groupby("task").size()  # doctest: +SKIP
    """

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir)
        if not log_dir(self.path).is_dir():
            raise RunNotFoundError(f"{self.path}: not a tfdiag run (no {log_dir(self.path)} directory)")
        self._offsets: dict[Path, int] = {}
        self._batches: dict[str, list[pa.RecordBatch]] = {}
        self._sources: dict[str, list[str]] = {}
        self._skipped: list[SkippedRecords] = []
        self._tails: dict[Path, SkippedRecords] = {}
        self._file_tasks: dict[Path, str] = {}
        self._manifest_mtime_ns: int | None = None
        self._run: LoadedRun | None = None

    def refresh(self, progress: ProgressCallback | None = None) -> LoadedRun:
        """Reads new bytes of every task file and returns the whole run so far.

        An incomplete frame at the end of a file is counted as skipped in the returned
        run (it is lost if the task has stopped) and read again at the next refresh.
        """
        files = sorted(log_dir(self.path).glob("*" + LOG_SUFFIX))
        sizes = {path: path.stat().st_size for path in files}
        total = sum(max(sizes[path] - self._offsets.get(path, 0), 0) for path in files)
        done = 0
        changed = False
        for path in files:
            offset = self._offsets.get(path, 0)
            if sizes[path] == offset and path in self._offsets:
                continue
            result = read_task_file(path, offset)
            for kind, batches in result.batches.items():
                self._batches.setdefault(kind, []).extend(batches)
                self._sources.setdefault(kind, []).extend(_writer_task(batch, path) for batch in batches)
                self._file_tasks.setdefault(path, _writer_task(batches[0], path))
                changed = True
            self._skipped.extend(result.skipped)
            changed = changed or bool(result.skipped) or (self._tails.get(path) != result.truncated_tail)
            if result.truncated_tail is None:
                self._tails.pop(path, None)
            else:
                self._tails[path] = result.truncated_tail
            self._offsets[path] = result.end_offset
            done += sizes[path] - offset
            if progress is not None:
                progress(done, total)
        manifest_mtime_ns = _mtime_ns(log_dir(self.path) / MANIFEST_NAME)
        if self._run is None or changed or manifest_mtime_ns != self._manifest_mtime_ns:
            self._manifest_mtime_ns = manifest_mtime_ns
            self._run = self._build(files)
        return self._run

    def _build(self, files: list[Path]) -> LoadedRun:
        frames = {kind: self._frame(kind) for kind in self._batches if kind in KINDS}
        skipped = self._skipped + list(self._tails.values())
        unknown = sorted(set(self._batches) - set(KINDS))
        warnings = [item.sentence() for item in skipped]
        warnings += [f"records of unknown kind {kind!r} ignored (written by a newer tfdiag?)" for kind in unknown]
        sources = sorted(self._file_tasks.get(path) or _task_from_file_name(path) for path in files)
        return LoadedRun(self.path, read_manifest(self.path), frames, skipped, warnings, sources)

    def _frame(self, kind: str) -> pd.DataFrame:
        schema = KINDS[kind].arrow_schema()
        tables = []
        for batch, source in zip(self._batches[kind], self._sources[kind]):
            table = pa.Table.from_batches([batch])
            # Columns a newer writer added are dropped; columns an older writer lacks become null.
            columns = [
                table.column(name) if name in table.column_names else pa.nulls(len(table), schema.field(name).type)
                for name in schema.names
            ]
            table = pa.Table.from_arrays(columns, schema=schema.remove_metadata())
            tables.append(table.append_column("source", pa.array([source] * len(table), pa.string())))
        table = pa.concat_tables(tables)
        string_columns = [name for name in table.column_names if pa.types.is_string(table.schema.field(name).type)]
        for name in string_columns:
            index = table.column_names.index(name)
            table = table.set_column(index, name, table.column(name).dictionary_encode())
        return table.to_pandas()


def _mtime_ns(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None


def _writer_task(batch: pa.RecordBatch, path: Path) -> str:
    """The task that wrote a frame: from its metadata, else from the file name."""
    task = (batch.schema.metadata or {}).get(b"task")
    return task.decode() if task else _task_from_file_name(path)


def _task_from_file_name(path: Path) -> str:
    return path.name[: -len(LOG_SUFFIX)].replace("-", ":", 1)


def load_run(run_dir: str | os.PathLike, progress: ProgressCallback | None = None) -> LoadedRun:
    """Loads a whole run once. Raises ``RunNotFoundError`` if ``run_dir`` is not a run."""
    return RunLoader(run_dir).refresh(progress)


def _empty_frame(kind: str) -> pd.DataFrame:
    schema = KINDS[kind].arrow_schema()
    frame = schema.empty_table().to_pandas()
    frame["source"] = pd.Series([], dtype="object")
    return frame
