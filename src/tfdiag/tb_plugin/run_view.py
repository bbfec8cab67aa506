"""One published analysis of a run, and the tab's JSON answers built from it.

A ``RunView`` is what the tab shows of a run until the next refresh publishes another:
its Report, the loaded run it came from, and each answer (the report's JSON, the fault
timeline, every figure) built on first request and kept with the view, so repeated
requests and the tab's polling cost a dictionary lookup. ``now`` alone is built on every
request, from the view and the wall clock. A refresh builds, before publishing its view,
the answers the previous view had been asked for (``prepare``), so the tab's polls of a
changed run find them ready. ``SavedView`` answers from what a previous session saved.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Callable, TypeVar

import plotly.io

from tfdiag.analysis import LoadedRun, Report
from tfdiag.report import formatting
from tfdiag.report.figures import FIGURES, empty_figure
from tfdiag.tb_plugin.live_view import fault_timeline, now_view
from tfdiag.tb_plugin.responses import JsonBody, Loading

logger = logging.getLogger(__name__)

T = TypeVar("T")


class RunView:
    """A run's Report and the answers built from it (module docstring)."""

    def __init__(self, name: str, path: Path, report: Report, run: LoadedRun | None):
        self.name = name
        self.path = path
        self.report = report
        self.run = run or LoadedRun(path=path, manifest=None, frames={})  # empty when loading failed
        self._lock = threading.Lock()  # one answer built at a time
        self._bodies: dict[str, JsonBody] = {}  # "report", "faults", "figure:<name>"

    def report_body(self) -> JsonBody:
        """``tab_report`` of the Report, serialised."""
        return self._body("report", lambda: JsonBody.of(tab_report(self.report, self.name, self.path)))

    def faults_body(self) -> JsonBody:
        """``live_view.fault_timeline`` of the Report, serialised."""
        return self._body("faults", lambda: JsonBody.of(self._guarded(
            "fault timeline", lambda: fault_timeline(self.report, self.run),
            lambda why: {"events": [], "roots": [], "victims": [], "error": why})))

    def figure_body(self, name: str) -> JsonBody:
        """The plotly JSON (``plotly.io.to_json``) of figure ``name`` (a key of FIGURES)."""
        return self._body(f"figure:{name}", lambda: JsonBody.of_text(self._figure_json(name)))

    def now(self, now_ns: int) -> dict:
        """``live_view.now_view`` of the Report at wall-clock time ``now_ns`` (no analysis)."""
        return self._guarded("state now", lambda: now_view(self.report, self.run, now_ns),
                             lambda why: {"state": "unknown", "reason": why, "progress": [], "findings": [],
                                          "silent": [], "time_ns": now_ns})

    @property
    def built(self) -> dict[str, JsonBody]:
        """The answers built so far, by ``report``, ``faults``, ``figure:<name>``."""
        with self._lock:
            return dict(self._bodies)

    def prepare(self, previous: RunView | SavedView | None) -> None:
        """Builds the answers ``previous`` was asked for."""
        for key in previous.built if previous is not None else []:
            if key == "report":
                self.report_body()
            elif key == "faults":
                self.faults_body()
            else:
                self.figure_body(key.removeprefix("figure:"))

    def _body(self, key: str, build: Callable[[], JsonBody]) -> JsonBody:
        with self._lock:
            if key not in self._bodies:
                self._bodies[key] = build()
            return self._bodies[key]

    def _guarded(self, what: str, build: Callable[[], T], fallback: Callable[[str], T]) -> T:
        """``build()``; on an unexpected exception (a run's data the analysis did not foresee)
        it is logged and ``fallback`` says why, so the run still answers."""
        try:
            return build()
        except Exception as error:  # noqa: BLE001 - the last-resort guard of one run
            logger.error("tfdiag: cannot build the %s of run %r", what, self.name, exc_info=error)
            return fallback(f"cannot build the {what}: internal error {type(error).__name__} (see TensorBoard's log)")

    def _figure_json(self, name: str) -> str:
        try:
            return plotly.io.to_json(FIGURES[name](self.report), validate=False)
        except Exception as error:  # noqa: BLE001 - one chart must not break the run's page
            logger.error("tfdiag: cannot draw figure %r of run %r", name, self.name, exc_info=error)
            message = _named(f"cannot draw this chart: internal error {type(error).__name__}: {error}", self.path, self.name)
            return plotly.io.to_json(empty_figure(name, message), validate=False)


class SavedView:
    """The answers a previous session saved of the same files (``view_cache``), shown while
    this session reads and analyses the run; anything else answers 202 (``loading()``)."""

    run = None  # no loaded run: this session's first read is always analysed

    def __init__(self, bodies: dict[str, JsonBody], loading: Callable[[], dict]):
        self.built = bodies
        self._loading = loading

    @property
    def report(self) -> Report:
        raise Loading(self._loading())

    def report_body(self) -> JsonBody:
        return self._saved("report")

    def faults_body(self) -> JsonBody:
        return self._saved("faults")

    def figure_body(self, name: str) -> JsonBody:
        return self._saved(f"figure:{name}")

    def now(self, now_ns: int) -> dict:
        raise Loading(self._loading())

    def _saved(self, key: str) -> JsonBody:
        if key not in self.built:
            raise Loading(self._loading())
        return self.built[key]


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
