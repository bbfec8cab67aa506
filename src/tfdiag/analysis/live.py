"""Findings while a job runs: the detectors on the last seconds of a run, with hysteresis.

``LiveFindings.evaluate()`` reads what the task files gained since its previous call
(``tfdiag.analysis.window_load.WindowLoader``: the loader's incremental reading, keeping only
the records of the last ``window_s`` seconds, so its memory and its cost per evaluation
are bounded by the rate of records, not by the length of the run), runs ``measure``
(keeping the previous window's tables whose records did not change: ``Measurements``),
every detector and the advisor on that window, and returns the transitions: a finding
that two evaluations in a row saw *began* (one, where the caller's cheap screen already
saw it persist: ``confirm``); one that two in a row did not see *cleared*.
A window with too few step records (``MIN_STEP_RECORDS``, ``MIN_SPAN_FRACTION``) is not
judged at all; a window the loader returns unchanged (no record came or aged out since
the last evaluation: a paused or stalled job) is judged as before without running the
analysis again. Only warning and critical findings are announced.

Nothing here runs a thread or imports TensorFlow: ``live_monitor`` calls ``evaluate`` to
confirm a slow link its screen (``live_screen``) flags, and ``live_verdict`` calls
``announced_findings`` on the screen's own records for a straggler or an input stall, from
``tfdiag.collectors.live_thread``'s thread in the one task that writes the manifest, which
writes each transition as a ``live_finding`` record; ``live_finding_windows`` turns those
records into the began/ended table the report and the TensorBoard tab show.

Example:
    >>> live = LiveFindings("logs/run1")  # doctest: +SKIP
    >>> for change in live.evaluate():  # doctest: +SKIP
    ...     print(change.message)
    tfdiag: worker:1 straggler since step 1,200: worker:1 is 1.8x slower per step than the other workers; predicted +22 % if repaired
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tfdiag.analysis.advisor import advise
from tfdiag.analysis import detectors
from tfdiag.analysis.detectors import detect_all
from tfdiag.analysis.findings import Finding, Severity
from tfdiag.analysis.live_transition import Transition, training_step
from tfdiag.analysis.live_transition import message as _line
from tfdiag.analysis.load import LoadedRun
from tfdiag.analysis.measurements import Measurements, measure
from tfdiag.analysis.window_load import WindowLoader, window_of
from tfdiag.store import log_dir

# The window the detectors see. 10 s holds a hundred steps of any job that steps at least
# every 100 ms, and a worker that became 2x slower moves its window's step period past the
# straggler threshold (1.25x; 1.5x on one shared host) once two thirds of the window
# is after its onset (about 7 s; 5.6 s at 2.5x), which sets how soon one can be announced.
WINDOW_S = 10.0
# The window a slow_link candidate is confirmed on holds this many of a link's round trips
# at the probe's recent pace (the detector needs MIN_LINK_SAMPLES, 3, and judges a link by
# its fastest, so the window must lie after the onset): the probe paces itself to its
# budget, and on a loaded host a link may get a round trip every 15 s rather than every
# second. Never shorter than WINDOW_S, nor longer than LINK_WINDOW_MAX_S.
LINK_WINDOW_PROBES = 4
LINK_WINDOW_MAX_S = 90.0


def link_window_s(probe_interval_s: float | None) -> float:
    """The slow_link window for probes ``probe_interval_s`` apart.

    >>> link_window_s(1.0), link_window_s(15.0), link_window_s(None)
    (10.0, 60.0, 10.0)
    """
    return min(max(LINK_WINDOW_PROBES * (probe_interval_s or 0.0), WINDOW_S), LINK_WINDOW_MAX_S)
# A window is judged only when it holds this many step records, spread over at least
# this share of the window (a job that has just started, or a stalled one, is not).
MIN_STEP_RECORDS = 20
MIN_SPAN_FRACTION = 0.5
# Evaluations in a row a finding must be seen to be announced, and missed to be cleared.
PERSIST_EVALUATIONS = 2
# Severities that are announced (an info finding is not worth a line in a training log).
ANNOUNCED = (Severity.WARNING, Severity.CRITICAL)


@dataclass
class _Tracked:
    """A finding being followed from one evaluation to the next."""

    finding: Finding
    onset_ns: int
    step: int | None
    seen: int = 0
    missed: int = 0
    cleared_onset_ns: int = 0
    announced: bool = False


class LiveFindings:
    """The detectors on a running job's recent window, with announce/clear hysteresis.

    Args:
        run_dir: the run directory (``RUN``).
        window_s: seconds of records each evaluation analyses.
        only_confirmed: announce only the findings a screen's candidates name (``confirm``).
    """

    def __init__(self, run_dir: str | os.PathLike, window_s: float = WINDOW_S, only_confirmed: bool = False):
        self.path = Path(run_dir)
        self.window_s = window_s
        self.only_confirmed = only_confirmed  # announce only what ``evaluate``'s ``confirm`` names
        self.evaluations = 0  # windows judged (with enough data)
        self.analyses = 0  # of which the analysis ran on (the others: the window had not changed)
        self.findings: dict[tuple[str, tuple[str, ...]], Finding] = {}  # the last judged window's, announced severities
        self._loader: WindowLoader | None = None
        self._judged: tuple | None = None  # (the last judged window, the kinds judged)
        self._measured: Measurements | None = None  # the last judged window's, for the next to reuse
        self._tracked: dict[tuple[str, tuple[str, ...]], _Tracked] = {}

    def window(self, now_ns: int) -> LoadedRun | None:
        """The records of the window ending at ``now_ns``; None while the run has no log directory."""
        if self._loader is None:
            if not log_dir(self.path).is_dir():  # the writers create it at their first flush
                return None
            self._loader = WindowLoader(self.path, self.window_s)
        return self._loader.refresh(now_ns)

    def announced_keys(self) -> list[tuple[str, tuple[str, ...]]]:
        """The (kind, tasks) of the findings announced and not cleared."""
        return [key for key, tracked in self._tracked.items() if tracked.announced]

    def evaluate(self, now_ns: int | None = None, confirm: dict | None = None,
                 gone: frozenset = frozenset(), window_s: float | None = None) -> list[Transition]:
        """Reads what is new, judges the window ending at ``now_ns`` and returns the transitions.

        ``confirm``: (kind, task) -> ns since a screen saw it, for the candidates it saw
        persist; a finding of that kind naming that task (or the whole job) is announced the
        first time this analysis sees it, its onset the screen's. ``gone``: the (kind, tasks)
        of announced findings a screen has not shown for a while: cleared the first time this
        analysis does not see them either (the screen's absence is the second opinion).
        ``window_s``: judge only the last ``window_s`` seconds, where shorter than the
        window (a slow link's round trips since it turned slow: the detector judges a link
        by its fastest, which one from before the change would be)."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        confirm = confirm or {}
        run = self.window(now_ns)
        if run is None:
            return []
        span_s = self.window_s
        if window_s is not None and window_s < self.window_s:
            run, span_s = window_of(run, now_ns, window_s), window_s
        if not enough_data(run.frame("step"), span_s):
            return []
        self.evaluations += 1
        # Only the detectors of the kinds that may be announced or cleared: those ``confirm``
        # names and those announced (without ``only_confirmed``: all). Each detector reads only
        # Measurements and the advisor holds each finding on its own, so a kind's findings are
        # those of the whole analysis, and the tables no chosen detector reads are not built.
        kinds = None if not self.only_confirmed else frozenset(
            [kind for kind, _ in confirm] + [kind for kind, _ in self.announced_keys()])
        if self._judged is None or run is not self._judged[0] or kinds != self._judged[1]:
            self._measured = measure(run, self._measured)
            self.findings = _announced(self._measured, kinds)
            self._judged = (run, kinds)
            self.analyses += 1
        findings = self.findings
        step = window_step(run)
        transitions = []
        for key, finding in findings.items():
            tracked = self._tracked.setdefault(key, _Tracked(finding, now_ns, step))
            tracked.finding, tracked.seen, tracked.missed = finding, tracked.seen + 1, 0
            since_ns = confirmed(finding, confirm)
            if since_ns is not None and not tracked.announced:
                tracked.onset_ns = min(tracked.onset_ns, since_ns)
            persist = 1 if since_ns is not None else PERSIST_EVALUATIONS
            if since_ns is None and self.only_confirmed:
                continue
            if not tracked.announced and tracked.seen >= persist:
                tracked.announced = True
                transitions.append(_transition("began", tracked, tracked.onset_ns, now_ns, span_s))
        for key in [key for key in self._tracked if key not in findings]:
            tracked = self._tracked[key]
            tracked.seen, tracked.missed = 0, tracked.missed + 1
            if tracked.missed == 1:
                tracked.cleared_onset_ns = now_ns
            if not tracked.announced:
                del self._tracked[key]  # seen once: noise, never announced
            elif tracked.missed >= (1 if key in gone else PERSIST_EVALUATIONS):
                del self._tracked[key]
                transitions.append(_transition("cleared", tracked, tracked.cleared_onset_ns, now_ns, span_s))
        return transitions


def confirmed(finding: Finding, candidates: dict[tuple[str, str], int]) -> int | None:
    """The earliest ``since`` of the (kind, task) ``candidates`` that are ``finding`` (its
    kind, and a task it names, or a finding of the whole job); None when none is."""
    return min((since for (kind, task), since in candidates.items()
                if kind == finding.kind and (not finding.tasks or task in finding.tasks)), default=None)


def announced_findings(run: LoadedRun, kinds: frozenset[str] | None = None) -> dict[tuple[str, tuple[str, ...]], Finding]:
    """The analysis of a window: ``measure``, every detector (or those of ``kinds``) and the
    advisor, as for a whole run; the findings of an announced severity by (kind, tasks)."""
    return _announced(measure(run), kinds)


def window_step(run: LoadedRun) -> int:
    """The job's training step at a window's newest step record (``training_step``)."""
    steps = run.frame("step")
    return training_step(int(steps["step"].max()), steps["steps"].fillna(1).median(),
                         closures=not run.frame("closure").empty)


def _announced(measured: Measurements, kinds: frozenset[str] | None = None) -> dict[tuple[str, tuple[str, ...]], Finding]:
    registry = detectors.DETECTORS  # read at each call: benchmarks/live_latency.py times its entries
    chosen = registry if kinds is None else {kind: detect for kind, detect in registry.items() if kind in kinds}
    return {(f.kind, f.tasks): f for f in advise(detect_all(measured, chosen), measured) if f.severity in ANNOUNCED}


def enough_data(steps: pd.DataFrame, window_s: float) -> bool:
    """Whether a window's step records are enough to judge: ``MIN_STEP_RECORDS`` over at
    least ``MIN_SPAN_FRACTION`` of the window."""
    if len(steps) < MIN_STEP_RECORDS:
        return False
    span_ns = int(steps["end_ns"].max()) - int(steps["begin_ns"].min())
    return span_ns >= MIN_SPAN_FRACTION * window_s * 1e9


def _transition(state: str, tracked: _Tracked, onset_ns: int, now_ns: int, window_s: float) -> Transition:
    finding = tracked.finding
    speedup = finding.recommendation.predicted_speedup
    return Transition(state, finding.kind, finding.tasks, finding.severity.value, onset_ns, tracked.step,
                      speedup, message(state, finding, tracked.step), now_ns, window_s)


def message(state: str, finding: Finding, step: int | None) -> str:
    """The log line of a transition of ``finding`` (``live_transition.message``).

    >>> from tfdiag.analysis.findings import Recommendation
    >>> f = Finding("straggler", Severity.WARNING, "worker:1 is 1.8x slower per step than the other workers",
    ...             "", ("worker:1",), {}, Recommendation("", "", 1.22))
    >>> message("began", f, 41200)
    'tfdiag: worker:1 straggler since step 41,200: worker:1 is 1.8x slower per step than the other workers; predicted +22 % if repaired'
    """
    return _line(state, finding.kind, finding.tasks, finding.title, finding.recommendation.predicted_speedup, step)


def live_finding_windows(records: pd.DataFrame, offsets: dict[str, int] | None = None) -> pd.DataFrame:
    """When each announced finding began and ended, from a run's ``live_finding`` records.

    One row per finding episode: ``kind``, ``tasks``, ``severity``, ``began_ns`` and
    ``ended_ns`` (the onsets; ``ended_ns`` null while it had not cleared when the records
    end), ``step``, ``predicted_speedup`` and ``message``; times moved onto the reference
    clock by ``offsets`` (task -> ns to add) when given. Rows a damaged or foreign log
    makes unusable (no time, onset or kind; a state other than began/cleared; a
    ``cleared`` without its ``began``) are left out.
    """
    columns = ["kind", "tasks", "severity", "began_ns", "ended_ns", "step", "predicted_speedup", "message"]
    records = records.dropna(subset=["time_ns", "onset_ns", "kind", "state"])
    if records.empty:
        return pd.DataFrame(columns=columns).astype({"began_ns": "int64", "ended_ns": "Int64", "step": "Int64"})
    shift = records["task"].astype(str).map((offsets or {})).fillna(0).astype("int64")
    ordered = records.assign(onset_ns=records["onset_ns"] + shift).sort_values(["time_ns", "state"])
    rows, open_rows = [], {}
    for row in ordered.itertuples():
        key = (str(row.kind), "" if pd.isna(row.tasks) else str(row.tasks))
        if row.state == "began":
            open_rows[key] = len(rows)
            rows.append(dict(kind=key[0], tasks=key[1], severity=str(row.severity), began_ns=int(row.onset_ns),
                             ended_ns=None, step=None if pd.isna(row.step) else int(row.step),
                             predicted_speedup=None if pd.isna(row.predicted_speedup) else float(row.predicted_speedup),
                             message=str(row.message)))
        elif row.state == "cleared" and key in open_rows:
            rows[open_rows.pop(key)]["ended_ns"] = int(row.onset_ns)
    return pd.DataFrame(rows, columns=columns).astype({"began_ns": "int64", "ended_ns": "Int64", "step": "Int64"})
