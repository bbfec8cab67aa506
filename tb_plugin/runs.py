"""The runs the tab shows: discovery under the logdir, and one live analysis per run.

Discovery walks the logdir with ``tfdiag.store.find_runs`` (not TensorBoard's data
provider, so it works with ``--load_fast`` true or false and with run directories that
hold no event files) and is cached for ``DISCOVERY_TTL_S``.

Each run keeps one ``RunLoader``; ``RunState.report()`` calls ``refresh()`` at most every
``REFRESH_INTERVAL_S`` (reading only bytes appended since the previous refresh) and runs
the analysis again only when the loader returned a new ``LoadedRun``, i.e. when
something changed on disk. Figures are cached against the Report they were built from.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable

import plotly.io

from tfdiag.analysis import LoadedRun, Report, RunLoader, analyze
from tfdiag.report.figures import FIGURES
from tfdiag.tb_plugin.responses import JsonBody
from tfdiag.store import find_runs

# A run created under the logdir shows up in /runs (and activates the tab) within this
# many seconds; one walk of a logdir with a few thousand directories takes a few ms.
DISCOVERY_TTL_S = 5.0

# Live runs flush every 0.5 s (tfdiag.store.writer.DEFAULT_FLUSH_INTERVAL_S); refreshing
# at most once a second keeps a burst of requests (report + figures) to one refresh.
REFRESH_INTERVAL_S = 1.0

Clock = Callable[[], float]


def run_name(logdir: str, run_dir: Path) -> str:
    """The name a run is shown under: its path relative to the logdir, "." for the logdir."""
    relative = os.path.relpath(run_dir, logdir)
    return Path(relative).as_posix()


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
        found = {run_name(self.logdir, path): path for path in find_runs(self.logdir)}
        return dict(sorted(found.items()))


class RunState:
    """One run's loader, its latest Report, and the JSON answers built from that Report.

    Everything derived from the Report (its JSON, each figure's JSON) is built on first
    request and cached until the run changes on disk, so repeated requests, and the
    tab's polling, cost a dictionary lookup.
    """

    def __init__(self, path: Path, refresh_interval_s: float = REFRESH_INTERVAL_S, clock: Clock = time.monotonic):
        self.path = path
        self.loader = RunLoader(path)
        self._refresh_interval_s = refresh_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._refreshed_at: float | None = None
        self._loaded: LoadedRun | None = None
        self._report: Report | None = None
        self._report_body: JsonBody | None = None
        self._figures: dict[str, JsonBody] = {}
        self.analyses = 0  # how many times the run was analysed (tests read it)

    def report(self) -> Report:
        """The Report of everything on disk at most ``refresh_interval_s`` ago."""
        with self._lock:
            return self._current()

    def report_dict(self) -> dict:
        """``report().to_dict()`` (the JSON contract)."""
        return self.report().to_dict()

    def report_body(self) -> JsonBody:
        """``report().to_dict()`` serialised, cached with the Report."""
        with self._lock:
            report = self._current()
            if self._report_body is None:
                self._report_body = JsonBody.of(report.to_dict())
            return self._report_body

    def figure_body(self, name: str) -> JsonBody:
        """The plotly JSON (``plotly.io.to_json``) of figure ``name`` (a key of FIGURES)."""
        with self._lock:
            report = self._current()
            if name not in self._figures:
                self._figures[name] = JsonBody.of_text(plotly.io.to_json(FIGURES[name](report), validate=False))
            return self._figures[name]

    def figure_json(self, name: str) -> str:
        return self.figure_body(name).text

    def _current(self) -> Report:
        now = self._clock()
        if self._refreshed_at is None or now - self._refreshed_at >= self._refresh_interval_s:
            loaded = self.loader.refresh()  # reads only bytes appended since the last refresh
            self._refreshed_at = now
            if loaded is not self._loaded:  # RunLoader returns the same object when nothing changed
                self._loaded = loaded
                self._report = analyze(loaded)
                self._report_body = None
                self._figures = {}
                self.analyses += 1
        if self._report is None:
            raise RuntimeError(f"{self.path}: no report after a refresh")  # unreachable: refresh always loads
        return self._report


class RunStates:
    """A ``RunState`` per run directory, made on first use."""

    def __init__(self, refresh_interval_s: float = REFRESH_INTERVAL_S, clock: Clock = time.monotonic):
        self._refresh_interval_s = refresh_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._states: dict[Path, RunState] = {}

    def get(self, path: Path) -> RunState:
        """The state of run ``path``; ``RunLoader`` raises ``RunNotFoundError`` if it is no longer a run."""
        with self._lock:
            state = self._states.get(path)
            if state is None:
                state = RunState(path, self._refresh_interval_s, self._clock)
                self._states[path] = state
            return state

    def forget(self, path: Path) -> None:
        """Drops the state of a run whose directory went away."""
        with self._lock:
            self._states.pop(path, None)


__all__ = ["RunIndex", "RunState", "RunStates", "run_name"]
