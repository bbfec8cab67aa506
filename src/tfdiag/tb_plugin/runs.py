"""The runs the tab shows: discovery under the logdir, and one live analysis per run.

Discovery walks the logdir with ``tfdiag.store.find_runs`` (not TensorBoard's data
provider, so it works with ``--load_fast`` true or false and with run directories that
hold no event files) and is cached for ``DISCOVERY_TTL_S``. A run is a directory inside
the logdir: one whose real path (symbolic links resolved) leaves the logdir is not shown.

Each run keeps one ``RunLoader``; ``RunState.report()`` calls ``refresh()`` at most every
``REFRESH_INTERVAL_S`` (reading only bytes appended since the previous refresh) and runs
the analysis again only when the loader returned a new ``LoadedRun``, i.e. when
something changed on disk. Figures are cached against the Report they were built from.

Every run answers, however damaged: an unexpected exception while loading or analysing
one run is logged (with its traceback) and becomes a warning of that run's report, which
then holds nothing else; other runs are not affected. Each run has its own lock, held
while it loads, so a run that takes long to load delays only requests for that run, and
those wait at most ``LOAD_WAIT_S``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import plotly.io

from tfdiag.analysis import LoadedRun, Report, RunLoader, analyze
from tfdiag.errors import RunNotFoundError
from tfdiag.report import formatting
from tfdiag.report.figures import FIGURES, empty_figure
from tfdiag.report.safe_text import printable
from tfdiag.store import find_runs, log_dir
from tfdiag.tb_plugin.live_view import fault_timeline, now_view
from tfdiag.tb_plugin.responses import BusyError, JsonBody

logger = logging.getLogger(__name__)

# A run created under the logdir shows up in /runs (and activates the tab) within this
# many seconds; one walk of a logdir with a few thousand directories takes a few ms.
DISCOVERY_TTL_S = 5.0

# Live runs flush every 0.5 s (tfdiag.store.writer.DEFAULT_FLUSH_INTERVAL_S); refreshing
# at most once a second keeps a burst of requests (report + figures) to one refresh.
REFRESH_INTERVAL_S = 1.0

# A request for a run that another request is loading waits this long, then answers 503
# (the tab shows the message and retries on its next poll) instead of holding a server
# thread for as long as the load takes.
LOAD_WAIT_S = 30.0

Clock = Callable[[], float]
T = TypeVar("T")


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
        self.logdir = os.path.expanduser(logdir) if logdir else None
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
    """One run's loader, its latest Report, and the JSON answers built from that Report.

    Everything derived from the Report (its JSON, its fault timeline, each figure's JSON)
    is built on first request and cached until the run changes on disk, so repeated
    requests, and the tab's polling, cost a dictionary lookup; ``now`` alone is built on
    every request, from the cached Report and the wall clock.
    """

    def __init__(
        self,
        path: Path,
        name: str,
        refresh_interval_s: float = REFRESH_INTERVAL_S,
        clock: Clock = time.monotonic,
        load_wait_s: float = LOAD_WAIT_S,
    ):
        self.path = path
        self.name = name
        self.loader: RunLoader | None = None  # made on first refresh, under the guard
        self._refresh_interval_s = refresh_interval_s
        self._load_wait_s = load_wait_s
        self._clock = clock
        self._lock = threading.Lock()
        self._refreshed_at: float | None = None
        self._loaded: LoadedRun | None = None
        self._report: Report | None = None
        self._report_body: JsonBody | None = None
        self._faults_body: JsonBody | None = None
        self._figures: dict[str, JsonBody] = {}
        self._logged_error: str | None = None
        self.analyses = 0  # how many times the run was analysed (tests read it)

    def report(self) -> Report:
        """The Report of everything on disk at most ``refresh_interval_s`` ago."""
        with self._locked():
            return self._current()

    def report_body(self) -> JsonBody:
        """``tab_report`` of the current Report, serialised; cached with the Report."""
        with self._locked():
            report = self._current()
            if self._report_body is None:
                self._report_body = JsonBody.of(tab_report(report, self.name, self.path))
            return self._report_body

    def now(self, now_ns: int) -> dict:
        """``live_view.now_view`` of the current Report at wall-clock time ``now_ns``
        (the run's state moves with the clock, so it is built on every request: no analysis)."""
        with self._locked():
            report = self._current()
            return self._guarded("state now", lambda: now_view(report, self._run(), now_ns),
                                 lambda why: {"state": "unknown", "reason": why, "progress": [], "findings": [],
                                              "silent": [], "time_ns": now_ns})

    def faults_body(self) -> JsonBody:
        """``live_view.fault_timeline`` of the current Report, serialised; cached with the Report."""
        with self._locked():
            report = self._current()
            if self._faults_body is None:
                self._faults_body = JsonBody.of(self._guarded(
                    "fault timeline", lambda: fault_timeline(report, self._run()),
                    lambda why: {"events": [], "roots": [], "victims": [], "error": why}))
            return self._faults_body

    def figure_body(self, name: str) -> JsonBody:
        """The plotly JSON (``plotly.io.to_json``) of figure ``name`` (a key of FIGURES)."""
        with self._locked():
            report = self._current()
            if name not in self._figures:
                self._figures[name] = JsonBody.of_text(self._figure_json(name, report))
            return self._figures[name]

    def _run(self) -> LoadedRun:
        """The loaded run the current Report was made from (an empty one if loading failed)."""
        return self._loaded or LoadedRun(path=self.path, manifest=None, frames={})

    def _guarded(self, what: str, build: Callable[[], T], fallback: Callable[[str], T]) -> T:
        """``build()``; on an unexpected exception (a run's data the analysis did not foresee)
        it is logged and ``fallback`` says why, so the run still answers."""
        try:
            return build()
        except Exception as error:  # noqa: BLE001 - the last-resort guard of one run
            logger.error("tfdiag: cannot build the %s of run %r", what, self.name, exc_info=error)
            return fallback(f"cannot build the {what}: internal error {type(error).__name__} (see TensorBoard's log)")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if not self._lock.acquire(timeout=self._load_wait_s):
            raise BusyError(f"run {self.name!r} is still loading; try again shortly")
        try:
            yield
        finally:
            self._lock.release()

    def _current(self) -> Report:
        now = self._clock()
        if self._report is None or now - self._refreshed_at >= self._refresh_interval_s:
            self._refreshed_at = now
            try:
                self._refresh()
            except RunNotFoundError:
                raise
            except Exception as error:  # noqa: BLE001 - the last-resort guard of one run
                self._fail(error)
        return self._report

    def _refresh(self) -> None:
        try:
            if self.loader is None:
                self.loader = RunLoader(self.path)  # RunNotFoundError if the run went away
            loaded = self.loader.refresh()  # reads only bytes appended since the last refresh
        except Exception:
            self.loader, self._loaded = None, None  # its state is unknown: start over
            raise
        if loaded is not self._loaded:  # RunLoader returns the same object when nothing changed
            self._loaded = loaded
            self.analyses += 1
            self._set(analyze(loaded))

    def _fail(self, error: Exception) -> None:
        """Replaces the report by one that says why this run has none (logged once per distinct error)."""
        if not log_dir(self.path).is_dir():
            raise RunNotFoundError(f"{self.path}: no longer a run") from error
        message = f"{type(error).__name__}: {error}"
        if message != self._logged_error:
            logger.error("tfdiag: cannot analyse run %r (%s)", self.name, self.path, exc_info=error)
            self._logged_error = message
        tasks = list(self._loaded.sources) if self._loaded is not None else []
        warnings = list(self._loaded.warnings) if self._loaded is not None else []
        warnings.append(
            f"this run could not be analysed: internal error {message} (the traceback is in TensorBoard's log)"
        )
        self._set(unanalysed_report(self.path, tasks, warnings))

    def _set(self, report: Report) -> None:
        self._report = report
        self._report_body = None
        self._faults_body = None
        self._figures = {}

    def _figure_json(self, name: str, report: Report) -> str:
        try:
            return plotly.io.to_json(FIGURES[name](report), validate=False)
        except Exception as error:  # noqa: BLE001 - one chart must not break the run's page
            logger.error("tfdiag: cannot draw figure %r of run %r", name, self.name, exc_info=error)
            message = _named(f"cannot draw this chart: internal error {type(error).__name__}: {error}", self.path, self.name)
            return plotly.io.to_json(empty_figure(name, message), validate=False)


def unanalysed_report(path: Path, tasks: list[str], warnings: list[str]) -> Report:
    """A Report with no measurements: the run's path, the tasks seen, and why there is nothing else."""
    return Report(
        run={"path": str(path), "strategy": None, "tasks": sorted(tasks), "start_time_ns": None,
             "tensorflow_version": None, "tfdiag_version": None, "skipped_records": 0, "warnings": warnings},
        summary={"primary_bottleneck": None, "step_time_ms": None, "examples_per_s": None, "steps": 0, "findings": 0},
        workers=[], rpc=[], shards=[], gpus=[], faults=[], findings=[],
    )


def tab_report(report: Report, name: str, path: Path) -> dict:
    """``report.to_dict()`` as the tab shows it.

    The run's path is its name (the tab never shows where the logdir is), the run
    directory in warnings becomes the name, and each finding's recommendation gets
    ``predicted_speedup_text``, formatted as in every report (``formatting.speedup``).
    """
    data = report.to_dict()
    warnings = [_named(str(warning), path, name) for warning in data["run"].get("warnings") or []]
    data["run"] = {**data["run"], "path": name, "warnings": warnings}
    for finding in data["findings"]:
        recommendation = finding.get("recommendation") or {}
        recommendation["predicted_speedup_text"] = formatting.speedup(recommendation.get("predicted_speedup"))
    return data


def _named(text: str, path: Path, name: str) -> str:
    """``text`` with the run directory (as given, or with links resolved) written as the run's name."""
    for directory in sorted({str(path), os.path.realpath(path)}, key=len, reverse=True):
        text = text.replace(directory, name)
    return text


class RunStates:
    """A ``RunState`` per run directory, made on first use."""

    def __init__(
        self, refresh_interval_s: float = REFRESH_INTERVAL_S, load_wait_s: float = LOAD_WAIT_S, clock: Clock = time.monotonic
    ):
        self._refresh_interval_s = refresh_interval_s
        self._load_wait_s = load_wait_s
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[Path, RunState] = {}

    def get(self, path: Path, name: str) -> RunState:
        """The state of run ``path`` (its first request raises ``RunNotFoundError`` if it is no longer a run)."""
        with self._lock:
            state = self._states.get(path)
            if state is None:
                state = RunState(path, name, self._refresh_interval_s, self._clock, self._load_wait_s)
                self._states[path] = state
            return state

    def forget(self, path: Path) -> None:
        """Drops the state of a run whose directory went away."""
        with self._lock:
            self._states.pop(path, None)


__all__ = ["LOAD_WAIT_S", "RunIndex", "RunState", "RunStates", "inside", "run_name", "tab_report", "unanalysed_report"]
