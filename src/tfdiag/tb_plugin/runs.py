"""The runs the tab shows: discovery under the logdir, and one live analysis per run.

Discovery walks the logdir with ``tfdiag.store.find_runs`` (not TensorBoard's data
provider, so it works with ``--load_fast`` true or false and with run directories that
hold no event files) and is cached for ``DISCOVERY_TTL_S``. A run is a directory inside
the logdir: one whose real path (symbolic links resolved) leaves the logdir is not shown.

Each run keeps one ``RunLoader``, refreshed in the background (``RunState``,
``reloader.Reloader``): a request answers from the view the last refresh published
(``run_view.RunView``), or 202 with the first read's progress, and never waits on a
read or an analysis, so a large run holds no server thread. A refresh reads only bytes
appended since the previous one, adopts on a first read the folds a previous session
saved (``tfdiag.analysis.fold_cache``), and analyses the run again only when something
changed on disk.

Every run answers, however damaged: an unexpected exception while loading or analysing
one run is logged (with its traceback) and becomes a warning of that run's report, which
then holds nothing else; other runs are not affected.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

from tfdiag.analysis import LoadedRun, RunLoader, analyze
from tfdiag.analysis.fold_cache import FoldCache
from tfdiag.errors import RunNotFoundError
from tfdiag.report.safe_text import printable
from tfdiag.store import find_runs, log_dir, task_files
from tfdiag.tb_plugin.reloader import Reloader
from tfdiag.tb_plugin.responses import Loading
from tfdiag.tb_plugin.run_view import RunView, SavedView, unanalysed_report
from tfdiag.tb_plugin.view_cache import ViewCache, fingerprint

logger = logging.getLogger(__name__)

# A run created under the logdir shows up in /runs (and activates the tab) within this
# many seconds; one walk of a logdir with a few thousand directories takes a few ms.
DISCOVERY_TTL_S = 5.0

# Live runs flush every 0.5 s (tfdiag.store.writer.DEFAULT_FLUSH_INTERVAL_S); refreshing
# at most once a second keeps a burst of requests (report + figures) to one refresh.
REFRESH_INTERVAL_S = 1.0

Clock = Callable[[], float]


def run_name(logdir: str, run_dir: Path) -> str:
    """The name a run is shown under: its path relative to the logdir, "." for the logdir.

    Control characters and bytes that are not UTF-8 are written as escapes
    (``tfdiag.report.safe_text.printable``), so every name can be shown, sent in a URL
    and looked up again: ``run-\\xff`` is the directory whose name ends in byte 0xff.
    """
    relative = os.path.relpath(run_dir, logdir)
    return printable(Path(relative).as_posix())


def inside(path: str | os.PathLike, root: str) -> bool:
    """Whether the real path of ``path`` (links resolved) is ``root`` or below it (``root`` is real)."""
    real = os.path.realpath(path)
    return os.path.commonpath([real, root]) == root


class RunIndex:
    """Runs under a logdir, by name, re-discovered at most every ``ttl_s`` seconds.

    Lookups go through the discovered mapping only: a name that is not a discovered run
    (``..``, an absolute path, anything else) is unknown, and never becomes a path.
    """

    def __init__(self, logdir: str | None, ttl_s: float = DISCOVERY_TTL_S, clock: Clock = time.monotonic):
        # absolute, as ``tfdiag analyze`` spells a run: the fold cache's entries are per path
        self.logdir = os.path.abspath(os.path.expanduser(logdir)) if logdir else None
        self._ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._runs: dict[str, Path] = {}
        self._checked_at: float | None = None

    def runs(self, max_age_s: float | None = None) -> dict[str, Path]:
        """Name -> run directory, sorted by name; at most ``max_age_s`` (default: ttl) old."""
        max_age_s = self._ttl_s if max_age_s is None else max_age_s
        with self._lock:
            now = self._clock()
            if self._checked_at is None or now - self._checked_at >= max_age_s:
                self._runs = self._discover()
                self._checked_at = now
            return self._runs

    def lookup(self, name: str) -> Path | None:
        """The directory of run ``name``, or None if no such run was discovered.

        A name missing from the cached mapping triggers one re-discovery if the cache is
        older than a second, so a run created moments ago is found.
        """
        path = self.runs().get(name)
        if path is None:
            path = self.runs(max_age_s=1.0).get(name)
        return path

    def _discover(self) -> dict[str, Path]:
        if not self.logdir or not os.path.isdir(self.logdir):
            return {}
        root = os.path.realpath(self.logdir)
        try:
            found = find_runs(self.logdir)
        except OSError as error:  # the logdir went away or became unreadable mid-walk
            logger.warning("tfdiag: cannot list the runs under %s: %s", self.logdir, error)
            return {}
        runs = {
            run_name(self.logdir, path): path
            for path in found
            if inside(path, root) and inside(log_dir(path), root)
        }
        return dict(sorted(runs.items()))


class RunState:
    """One run's loader, its background refresh, and the view it last published.

    Requests read the published view (``view``) and never wait on a read or an analysis:
    each asks the reloader (``reloader.Reloader``) for a refresh, which runs on a thread
    of its own at most every ``refresh_interval_s``; until the first read is done they
    answer 202 with its progress (``responses.Loading``). A refresh reads only what the
    task files gained (the first one adopts what the fold cache saved of each file) and
    analyses the run again only when the loader returned a new ``LoadedRun``.
    """

    def __init__(self, path: Path, name: str, refresh_interval_s: float = REFRESH_INTERVAL_S,
                 view_wait_s: float = 0.0, cache: FoldCache | None = None):
        self.path = path
        self.name = name
        self.loader: RunLoader | None = None  # made on the first refresh
        self._cache = cache
        self._view_wait_s = view_wait_s  # how long a request waits for the refresh it asked for (tests)
        self._reloader = Reloader(self._refresh, name, refresh_interval_s)
        self._view: RunView | SavedView | None = None
        self._views = ViewCache(cache) if cache is not None else None  # the answers saved between sessions
        self._taken: list | None = None  # the run's fingerprint before the read the view came from
        self._saved = 0  # how many of the view's answers are saved
        self._reading_taken: list | None = None  # the fingerprint before the current read
        self._progress = {"stage": "reading", "files_read": 0, "files": None, "bytes_read": 0, "bytes": None}
        self._gone = False
        self._logged_error: str | None = None
        self.analyses = 0  # how many times the run was analysed (tests read it)

    def view(self) -> RunView | SavedView:
        """The view last published; ``Loading`` before the first, ``RunNotFoundError`` once the run went away."""
        self._reloader.ask(self._view_wait_s)
        if self._gone:
            raise RunNotFoundError(f"{self.path}: no longer a run")
        view = self._view
        if view is None:
            raise Loading(self.status())
        return view

    def status(self) -> dict:
        """Where the run's reading stands: ``stage`` (``reading``, ``analysing``, ``ready``,
        ``refreshing``), the task files and bytes read of the current read, ``analyses``."""
        stage = self._progress["stage"] if self._view is None else "refreshing" if self._reloader.running else "ready"
        return {"run": self.name, **self._progress, "stage": stage, "analyses": self.analyses}

    def _reading(self, done: int, total: int) -> None:
        """``RunLoader.refresh``'s progress: a task file read, ``done`` of ``total`` bytes."""
        self._progress = {**self._progress, "files_read": self._progress["files_read"] + 1, "bytes_read": done,
                          "bytes": total}

    def _refresh(self) -> None:
        """On the reloader's thread: reads what is new, analyses it if anything was, publishes."""
        try:
            try:
                view = self._read()
            except RunNotFoundError:
                raise
            except Exception as error:  # noqa: BLE001 - the last-resort guard of one run
                self.loader, self._reading_taken = None, None  # its state is unknown: start over, save nothing
                view = self._failed(error, None)
        except RunNotFoundError:
            self._gone = True
            return
        if view is None:
            return
        view.prepare(self._view)
        self._view, self._taken, self._saved = view, self._reading_taken, 0

    def _read(self) -> RunView | None:
        """The view of what the loader reads now; None when nothing changed."""
        if self.loader is None:
            self.loader = RunLoader(self.path, cache=self._cache)  # RunNotFoundError if the run went away
        self._progress = {"stage": "reading", "files_read": 0, "files": len(task_files(self.path)[0]),
                          "bytes_read": 0, "bytes": None}
        taken = self._reading_taken = fingerprint(self.path) if self._views is not None else None
        if self._view is None and taken is not None and (saved := self._views.load(self.path, taken)):
            self._view = SavedView(saved, self.status)  # shown while this session reads the run
        loaded = self.loader.refresh(self._reading)  # reads only bytes appended since the last refresh
        if self._view is not None and loaded is self._view.run:  # the same object: nothing changed
            self._save(taken)
            return None
        self._progress = {**self._progress, "stage": "analysing"}
        self.analyses += 1
        try:
            return RunView(self.name, self.path, analyze(loaded), loaded)
        except Exception as error:  # noqa: BLE001 - the last-resort guard of one run
            return self._failed(error, loaded)

    def _save(self, taken: list | None) -> None:
        """Saves the view's answers (``view_cache``) when it has more than were saved and the
        run is as it was before the read the view came from."""
        built = self._view.built
        if taken is not None and taken == self._taken and len(built) > self._saved:
            self._views.save(self.path, taken, built)
            self._saved = len(built)

    def _failed(self, error: Exception, loaded: LoadedRun | None) -> RunView:
        """A view that says why this run has none (logged once per distinct error), with the
        tasks and warnings of what was read; ``RunNotFoundError`` if the run went away."""
        if not log_dir(self.path).is_dir():
            raise RunNotFoundError(f"{self.path}: no longer a run") from error
        message = f"{type(error).__name__}: {error}"
        if message != self._logged_error:
            logger.error("tfdiag: cannot analyse run %r (%s)", self.name, self.path, exc_info=error)
            self._logged_error = message
        tasks = list(loaded.sources) if loaded is not None else []
        warnings = list(loaded.warnings) if loaded is not None else []
        warnings.append(
            f"this run could not be analysed: internal error {message} (the traceback is in TensorBoard's log)"
        )
        return RunView(self.name, self.path, unanalysed_report(self.path, tasks, warnings), loaded)


class RunStates:
    """A ``RunState`` per run directory, made on first use, sharing the user's fold cache."""

    def __init__(self, refresh_interval_s: float = REFRESH_INTERVAL_S, view_wait_s: float = 0.0,
                 cache: FoldCache | None = None):
        self._refresh_interval_s = refresh_interval_s
        self._view_wait_s = view_wait_s
        self._cache = cache
        self._lock = threading.Lock()
        self._states: dict[Path, RunState] = {}

    def get(self, path: Path, name: str) -> RunState:
        """The state of run ``path``."""
        with self._lock:
            state = self._states.get(path)
            if state is None:
                state = RunState(path, name, self._refresh_interval_s, self._view_wait_s, self._cache)
                self._states[path] = state
            return state

    def all(self) -> list[RunState]:
        """Every run's state made so far."""
        with self._lock:
            return list(self._states.values())

    def forget(self, path: Path) -> None:
        """Drops the state of a run whose directory went away."""
        with self._lock:
            self._states.pop(path, None)


__all__ = ["RunIndex", "RunState", "RunStates", "inside", "run_name"]
