"""Loading a run: every task file of ``RUN/plugins/tfdiag`` into one DataFrame per kind.

The loader is incremental: ``RunLoader.refresh()`` reads only the bytes appended to each
task file since the previous call, so a live run (and the TensorBoard tab) never
re-reads what it already has. Step records are folded into ``step_stats`` as each frame
is read (exact counters, histograms and a bounded set of rows); system and process
samples, heartbeats and probes per file (``FOLDS``): what it holds does not grow with
the run's length. A refresh folds only the new records and rebuilds the frames of kinds
that got some; a large first read folds the files in parallel (``parallel_fold``), and
adopts the folds a previous session saved (``fold_cache``, with ``cache``: the tab's and
``tfdiag analyze``'s), saving its own the same way whether read here or in a fold
process (``_save``). A file
that shrank or was replaced is read again from byte 0. A frame whose payload is one
already loaded (a copied task file, a frame written twice) is counted once.
``window_load.WindowLoader`` keeps only a run's last seconds. Nothing in
the run directory makes ``refresh`` raise: each problem is a counted skip or a warning
naming the file (the only error: ``RunNotFoundError``, not a run). No TensorFlow here.
"""

from __future__ import annotations

import contextlib
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

import pandas as pd
import pyarrow as pa

from tfdiag.analysis.fold_cache import FoldCache, fold_key
from tfdiag.analysis.frames import conform, empty_frame, source_column, to_pandas
from tfdiag.analysis.parallel_fold import parallel_folds
from tfdiag.analysis.probe_fold import ProbeSample, probe_histograms
from tfdiag.analysis.processes import ProcessTable
from tfdiag.analysis.step_stats import StepAccumulator
from tfdiag.analysis.heartbeat_fold import HeartbeatTail
from tfdiag.analysis.system_fold import JobProcessBuckets, SystemBuckets
from tfdiag.errors import RunNotFoundError
from tfdiag.store import MANIFEST_NAME, ManifestRead, SkippedRecords, load_manifest, log_dir, read_task_file, task_files
from tfdiag.store.paths import LOG_SUFFIX
from tfdiag.store.reader import MAX_TASK_FILE_BYTES, ReadResult

# Kinds that state a fact rather than record an event (they have no time column): a task
# restarted after a failure writes the same frame again, byte for byte. Such a copy is
# counted once without a warning; a copy of any other frame is damage and is reported.
RESTATED_KINDS = frozenset({"placement"})

ProgressCallback = Callable[[int, int], None]  # (bytes read so far, bytes to read)

# Skips listed one by one per file; the rest of a badly damaged file is summed in one line.
MAX_LISTED_SKIPS_PER_FILE = 10

# Kinds folded per task file as they are read (``RunLoader``), each by the class that holds them.
FOLDS = {"system": SystemBuckets, "job_process": JobProcessBuckets, "heartbeat": HeartbeatTail, "rpc": ProbeSample}


@dataclass
class LoadedRun:
    """Every record of a run, one long-form DataFrame per record kind.

    Each frame has the kind's columns (``tfdiag.events``) plus ``source``, the task whose
    file held the record. String columns are pandas categoricals. ``warnings`` are
    sentences naming the file (and byte offset) of every problem met while loading.
    The ``step`` frame holds the rows ``step_stats`` kept (every row of a task under its
    cap; past it a sample by step number, the recent rows and the warm-up) and
    ``step_counters`` the exact per-task counters of every step record read.
    """

    path: Path
    manifest: dict | None
    frames: dict[str, pd.DataFrame]
    skipped: list[SkippedRecords] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    step_counters: pd.DataFrame | None = None  # step_stats.StepAccumulator.counters(): exact, whatever was kept
    probe_histograms: pd.DataFrame | None = None  # probe_fold's, of every round trip; None: the rows are all
    processes: ProcessTable | None = None  # this host's, taken before the files were read; None: not asked

    def frame(self, kind: str) -> pd.DataFrame:
        """The records of ``kind``; an empty frame with the right columns if there are none."""
        return self.frames[kind] if kind in self.frames else empty_frame(kind)

    @property
    def skipped_records(self) -> int:
        return sum(item.records for item in self.skipped)

class _Kept(NamedTuple):
    """A record batch the loader holds (``RunLoader``: every kind but steps; ``WindowLoader``: all)."""

    kind: str
    batch: pa.RecordBatch  # with exactly its kind's columns (``frames.conform``)
    source: str
    digest: bytes  # of the frame it came in
    last_ns: int | None  # its newest row's time (``WindowLoader`` only; None: undated or not asked for)


@dataclass
class _TaskFile:
    """What the loader holds of one task file."""

    identity: tuple[int, int]  # (device, inode): a replaced file has a new one
    offset: int = 0
    task: str | None = None  # the task that wrote the first good frame
    records: list[_Kept] = field(default_factory=list)
    folds: dict = field(default_factory=dict)  # kind -> its records folded (``FOLDS``; ``RunLoader`` only)
    sources: set[str] = field(default_factory=set)  # the tasks whose frames the file held
    digests: list[bytes] = field(default_factory=list)
    skipped: list[SkippedRecords] = field(default_factory=list)
    pending: list[SkippedRecords] = field(default_factory=list)  # tail / unread: retried at each refresh
    cached: int = 0  # the bytes of it whose fold is in the fold cache (``fold_cache``)
    fresh: bool = True  # its folds are those a read from byte 0 makes (``_settle``): it may be saved


class FileFold(NamedTuple):
    """What ``RunLoader.fold_file`` read of one task file, for ``refresh`` to adopt."""

    path: Path
    state: _TaskFile
    steps: StepAccumulator  # the file's step records, folded
    seen: dict[bytes, tuple[Path, int]]  # its frames' digests, and where each was read
    kinds: set[str]  # the kinds it held
    changed: bool  # whether the read found anything (``_take``)


class RunLoader:
    """Reads a run directory, and on each ``refresh`` only what was appended since.

    Example:
        >>> loader = RunLoader("logs/run1")  # doctest: +SKIP
        >>> run = loader.refresh()  # doctest: +SKIP
        >>> run.frame("step").groupby("task").size()  # doctest: +SKIP
    """

    _folds = True  # step records go to step_stats and ``FOLDS`` kinds to their folds rather than being kept as batches

    def __init__(self, run_dir: str | os.PathLike, steps: StepAccumulator | None = None,
                 caps: dict[str, int] | None = None, processes: int | None = None, cache: FoldCache | None = None):
        self.path = Path(run_dir)
        self.cache = cache  # task files' folds saved between sessions; None: every file is read
        self._steps = steps or StepAccumulator()
        self.caps = caps or {}  # kind -> rows a file keeps as they are before ``FOLDS`` folds them
        self._caps = dict(self.caps)  # ... with the defaults for the run's width (``RowFold.cap_for``)
        self.processes = processes  # folding a large first read; None: a process per core, 1: serial
        self._changed_kinds: set[str] = set()
        if not log_dir(self.path).is_dir():
            raise RunNotFoundError(f"{self.path}: not a tfdiag run (no {log_dir(self.path)} directory)")
        self._files: dict[Path, _TaskFile] = {}
        self._seen: dict[bytes, tuple[Path, int]] = {}  # payload digest -> where it was first read
        self._notes: dict[Path, str] = {}  # warnings that stay: the last time each file was read again from 0
        self._manifest_key: tuple | None = None
        self._manifest = ManifestRead(None)
        self._frames: dict[str, pd.DataFrame] = {}
        self._step_counters: pd.DataFrame | None = None
        self._run: LoadedRun | None = None
        self._processes: ProcessTable | None = None  # taken before the last read (``processes``)
        self._named: tuple[pd.DataFrame | None, list[int]] = (None, [])  # the system frame -> the pids it names here
        self._named_states: dict = {}  # what the last run's process table said of them

    @property
    def _offsets(self) -> dict[Path, int]:
        """Where the next refresh reads each file from."""
        return {path: state.offset for path, state in self._files.items()}

    def refresh(self, progress: ProgressCallback | None = None) -> LoadedRun:
        """Reads new bytes of every task file and returns the whole run so far.

        An incomplete frame at the end of a file is counted as skipped in the returned
        run (it is lost if the task has stopped) and read again at the next refresh.
        Returns the same object as the previous call when nothing changed. A run
        directory that went away keeps what was read, with a warning.
        """
        return self._result(*self._read(progress))

    def _read(self, progress: ProgressCallback | None) -> tuple[list[Path], list[str], bool]:
        """Reads what every task file gained: (the files, the rejected paths' sentences, whether anything changed)."""
        self._processes = ProcessTable.take()  # before the files: a process gone now wrote all it would
        files, rejected = task_files(self.path)
        stats = {path: stat for path in files if (stat := _stat(path)) is not None}
        self._caps = {kind: self.caps.get(kind) or fold.cap_for(len(stats)) for kind, fold in FOLDS.items()}
        total = sum(max(min(stat.st_size, MAX_TASK_FILE_BYTES) - self._offset(path), 0) for path, stat in stats.items())
        done = 0
        changed = saved = False
        unread = []
        for path, stat in stats.items():
            state = self._files.get(path)
            if state is not None and ((stat.st_dev, stat.st_ino) != state.identity or stat.st_size < state.offset):
                self._notes[path] = (f"{path}: shrank or was replaced since it was read (byte {state.offset}); "
                                     "read again from byte 0")
                self._forget(path)
                state = None
            if state is None or stat.st_size != state.offset:
                unread.append((path, (stat.st_dev, stat.st_ino), min(stat.st_size, MAX_TASK_FILE_BYTES)))
        new = [item for item in unread if item[0] not in self._files]
        cached = self._cached(new)
        folded = [item for item in new if item[0] not in cached] if self._folds else []
        folds = parallel_folds(self, folded, sum(size for *_, size in folded))
        parallel = {path for path, *_ in folded} if folds is not None else set()
        for path, identity, size in unread:
            offset = self._offset(path)
            fold = self._saved(path) if path in cached else next(folds) if path in parallel else None
            adopted = fold is not None and self._adopt(fold)
            state = self._files.setdefault(path, _TaskFile(identity))
            changed |= adopted and fold.changed
            if not adopted or state.offset < size:  # read here: not folded elsewhere, or grown since
                changed |= self._take(path, state, read_task_file(path, state.offset))
                saved |= self._save(path, state)
            self._settle(state)
            done += max(size - offset, 0)
            if progress is not None:
                progress(done, total)
        if self.cache is not None and (saved or parallel):  # fold processes save what they fold
            self.cache.trim()
        return list(stats), [item.sentence() for item in rejected], changed

    def fresh(self) -> RunLoader:
        """A loader of the same run and caps that has read nothing."""
        return RunLoader(self.path, self._steps.empty_like(), self._caps, self.processes, self.cache)

    def fold_file(self, path: Path, identity: tuple[int, int]) -> FileFold:
        """What this loader, ``fresh`` (it has read nothing), holds of ``path`` read from byte 0:
        the map step of a parallel (or distributed) read, adopted by ``refresh`` in file order;
        saved in the fold cache when it wants it."""
        state = self._files[path] = _TaskFile(identity)
        changed = self._take(path, state, read_task_file(path, 0))
        fold = FileFold(path, state, self._steps, self._seen, self._changed_kinds, changed)
        self._save(path, state, fold)
        self._settle(state)
        return fold

    def _cached(self, unread: list[tuple[Path, tuple[int, int], int]]) -> set[Path]:
        """The files of ``unread`` whose saved fold the fold cache holds, by the entries'
        headers: each is read in its turn (``_saved``), so only one unsettled fold is held."""
        if self.cache is None or not self._folds:
            return set()
        key = fold_key(self._caps, self._steps)
        return {path for path, *_ in unread if self.cache.holds(path, key)}

    def _saved(self, path: Path) -> FileFold | None:
        """The saved fold of ``path``; None if it cannot be read (the file is then read here)."""
        return self.cache.load(path, fold_key(self._caps, self._steps))

    def _save(self, path: Path, state: _TaskFile, fold: FileFold | None = None) -> bool:
        """Saves the fold of ``path`` if the fold cache wants it (``FoldCache.worth``): ``fold``
        (a fold process's, ``fold_file``), else what this loader holds of the file; the one
        way the serial read and the fold processes save. Saved before ``_settle``, and only
        while no settle compacted it, so the next session folds appended records as a
        fresh read of the whole file does."""
        if (self.cache is None or not self._folds or not state.fresh
                or not self.cache.worth(state.offset, state.cached)):
            return False
        if fold is None:
            kinds = {kept.kind for kept in state.records} | set(state.folds)
            steps = self._steps.of_file(str(path))
            fold = FileFold(path, state, steps, {digest: self._seen[digest] for digest in state.digests},
                            kinds | ({"step"} if steps.groups else set()), True)
        self.cache.save(fold, fold_key(self._caps, self._steps))
        return True

    def _settle(self, state: _TaskFile) -> None:
        """Brings a file's folds back under their caps after a read (``RowFold.settle``). A fold
        compacted here folds later records unlike a read from byte 0 does: no longer ``fresh``."""
        compacted = [fold.settle() for fold in state.folds.values()]
        state.fresh = state.fresh and not any(compacted)

    def _adopt(self, fold: FileFold) -> bool:
        """Takes ``fold`` (``fold_file``'s) as its file's state; False, taking nothing, when
        one of its frames was already read from another file (the serial read then counts
        the duplicate where it always does)."""
        if any(digest in self._seen for digest in fold.seen):
            return False
        self._files[fold.path] = fold.state
        self._seen.update(fold.seen)
        self._steps.adopt(fold.steps)
        self._changed_kinds |= fold.kinds
        return True

    def _result(self, files: list[Path], rejected: list[str], changed: bool) -> LoadedRun:
        """The run after a read: frames rebuilt where they changed; the previous object if nothing did."""
        manifest_changed = self._refresh_manifest()
        rebuilt = bool(self._changed_kinds)
        if rebuilt:
            self._rebuild_frames()
        run = self._build(files, rejected)
        named_states = self._processes.states(self._named_pids())
        if (self._run is None or changed or rebuilt or manifest_changed or run.warnings != self._run.warnings
                or named_states != self._named_states):
            self._run = run
            self._named_states = named_states
        return self._run

    def _named_pids(self) -> list[int]:
        """The pids this host's processes have in the system samples: where one ended or
        stopped since the last read, the run reads differently though no file changed."""
        system = self._frames.get("system")
        if system is not self._named[0]:
            here = system is not None and {"host", "pid"} <= set(system.columns)
            pids = system.loc[system["host"] == self._processes.host, "pid"].dropna().unique() if here else []
            self._named = (system, sorted(int(pid) for pid in pids))
        return self._named[1]

    def _rebuild_frames(self) -> None:
        """Rebuilds the frames of the kinds that got records (or lost a file's) since the last refresh."""
        folded = {"step"} if self._folds else set()
        for kind in self._changed_kinds - folded:
            self._frames.pop(kind, None)
            if any(self._batches(kind)):
                self._frames[kind] = self._frame(kind)
        if self._changed_kinds & folded:
            rows = self._steps.rows()
            self._frames.pop("step", None)
            if rows is not None:
                self._frames["step"] = to_pandas(rows)
            self._step_counters = self._steps.counters()
        self._changed_kinds = set()

    def _offset(self, path: Path) -> int:
        return self._files[path].offset if path in self._files else 0

    def _take(self, path: Path, state: _TaskFile, result: ReadResult) -> bool:
        """Adds a read's frames to ``state``, counting a frame seen before only once."""
        for frame in result.frames:
            first = self._seen.get(frame.digest)
            if first is not None:
                if frame.kind not in RESTATED_KINDS:
                    reason = f"duplicate of the frame at {first[0]} byte {first[1]}; counted once"
                    state.skipped.append(SkippedRecords(str(path), frame.offset, reason, frame.records, str(first[0])))
                continue
            self._seen[frame.digest] = (path, frame.offset)
            state.digests.append(frame.digest)
            source = frame.task or _task_from_file_name(path)
            state.task = state.task or source
            state.sources.add(source)
            if frame.kind == "step" and self._folds:  # only what step_stats keeps stays in memory
                for batch in frame.batches:
                    self._steps.add(str(path), source, conform(batch, "step"))
            elif frame.kind in FOLDS and self._folds:  # only what the fold keeps past its cap
                fold = state.folds.setdefault(frame.kind, FOLDS[frame.kind](self._caps.get(frame.kind)))
                for batch in frame.batches:
                    fold.add(conform(batch, frame.kind), source)
            else:  # conformed once, here, not at every rebuild of the kind's frame
                conformed = [conform(batch, frame.kind) for batch in frame.batches]
                state.records.extend(_Kept(frame.kind, batch, source, frame.digest, self._last_ns(frame.kind, batch))
                                     for batch in conformed)
            self._changed_kinds.add(frame.kind)
        self._steps.settle()  # frames let go; the file's own folds settle after a save (``_settle``)
        state.skipped.extend(result.skipped)
        pending = [item for item in (result.truncated_tail, result.unread) if item is not None]
        changed = bool(result.frames or result.skipped) or pending != state.pending
        state.pending = pending
        state.offset = result.end_offset
        return changed

    def _forget(self, path: Path) -> None:
        state = self._files.pop(path)
        self._steps.forget(str(path))
        self._changed_kinds |= {kept.kind for kept in state.records} | {"step"} | set(state.folds)
        for digest in state.digests:
            if self._seen.get(digest, (None,))[0] == path:
                del self._seen[digest]

    def _refresh_manifest(self) -> bool:
        manifest_path = log_dir(self.path) / MANIFEST_NAME
        stat = _stat(manifest_path)
        key = None if stat is None else (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if key == self._manifest_key and self._run is not None:
            return False
        self._manifest_key = key
        self._manifest = load_manifest(self.path)
        return True

    def _batches(self, kind: str):
        for state in self._files.values():
            if kind in state.folds:
                yield from state.folds[kind].batches()
            yield from ((kept.batch, kept.source) for kept in state.records if kept.kind == kind)

    def _build(self, files: list[Path], rejected: list[str]) -> LoadedRun:
        skipped = [item for state in self._files.values() for item in state.skipped + state.pending]
        warnings = list(self._notes.values()) + rejected + self._manifest.warnings + _skip_warnings(skipped)
        present = set(files)  # a set: a list's ``in`` is a million Path comparisons for 1,024 files
        warnings += [f"{path}: no longer readable; the records read from it before are kept"
                     for path in self._files if path not in present]
        warnings += self._shared_writer_warnings()
        sources = sorted({self._files[path].task or _task_from_file_name(path) for path in files
                          if path in self._files})
        probes = probe_histograms([state.folds["rpc"] for state in self._files.values() if "rpc" in state.folds])
        return LoadedRun(self.path, self._manifest.manifest, dict(self._frames), skipped, warnings, sources,
                         self._step_counters, probes, self._processes)

    def _shared_writer_warnings(self) -> list[str]:
        files_of_task = defaultdict(list)
        for path, state in sorted(self._files.items()):
            for task in sorted(state.sources):
                files_of_task[task].append(path.name)
        return [f"{self.path}: frames written by {task} are in {len(names)} files ({', '.join(names)}): "
                "a copied or renamed file?" for task, names in files_of_task.items() if len(names) > 1]

    def _last_ns(self, kind: str, batch: pa.RecordBatch) -> int | None:
        """Only ``WindowLoader`` dates its batches."""
        return None

    def _frame(self, kind: str) -> pd.DataFrame:
        return to_pandas(self._table(kind))

    def _table(self, kind: str) -> pa.Table:
        batches, sources = zip(*self._batches(kind))
        table = pa.Table.from_batches(batches)
        return table.append_column("source", source_column(sources, [len(batch) for batch in batches]))


def _skip_warnings(skipped: list[SkippedRecords]) -> list[str]:
    """A sentence per skip, at most ``MAX_LISTED_SKIPS_PER_FILE`` per file and a sum of the rest;
    the duplicates of one file's frames in another are summed in one sentence."""
    by_file: dict[str, list[SkippedRecords]] = defaultdict(list)
    duplicates: dict[tuple[str, str], list[SkippedRecords]] = defaultdict(list)
    for item in skipped:
        if item.duplicate_of is None:
            by_file[item.file].append(item)
        else:
            duplicates[(item.file, item.duplicate_of)].append(item)
    warnings = []
    for (file, first), items in duplicates.items():
        records = sum(item.records for item in items)
        warnings.append(f"{file}: skipped {records} records in {len(items)} frames from byte {items[0].offset}: "
                        f"duplicates of frames of {first}; counted once")
    for file, items in by_file.items():
        warnings += [item.sentence() for item in items[:MAX_LISTED_SKIPS_PER_FILE]]
        rest = items[MAX_LISTED_SKIPS_PER_FILE:]
        if rest:
            warnings.append(f"{file}: {len(rest)} more skips ({sum(item.records for item in rest)} records) not listed")
    return warnings


def _stat(path: Path) -> os.stat_result | None:
    with contextlib.suppress(OSError):
        return path.stat()


def _task_from_file_name(path: Path) -> str:
    return path.name[: -len(LOG_SUFFIX)].replace("-", ":", 1)


def load_run(run_dir: str | os.PathLike, progress: ProgressCallback | None = None,
             cache: FoldCache | None = None) -> LoadedRun:
    """Loads a whole run once, adopting and saving folds in ``cache`` (None: none). Raises
    ``RunNotFoundError`` if ``run_dir`` is not a run."""
    return RunLoader(run_dir, cache=cache).refresh(progress)
