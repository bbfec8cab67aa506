"""Live verdicts: a straggler or an input stall judged on the screen's own records, in tens of ms.

``Verdicts.judge(kept, now_ns, due, gone, from_ns)`` builds a window from the record
batches the screen keeps as it reads them (``LiveScreen.kept``: no file is read again),
runs ``measure``, the ``straggler`` and ``input_bound`` detectors and the advisor on it
(``live.announced_findings``, the analysis a whole run gets: so the announced title,
evidence and predicted speed-up are the post-run analysis's of the same window), and
returns the transitions:

- a finding that names a ``due`` candidate (kind, task) *began*, its onset the first
  screen that showed the candidate, judged on the records since that screen's window
  began (``verdict_window_s``: 4 to 10 s);
- an announced finding in ``gone`` (its candidate has not been screened for a while) that
  the last ``live.WINDOW_S`` do not show either *cleared*.

A window with too few step records (``live.enough_data``) is not judged. Its cost (about
50 ms on a two-worker window) lets ``live_monitor`` judge a candidate on every screen that
shows it, whatever the thread's CPU credit, which only paces the longer window's analysis
(``live.LiveFindings``: ``slow_link``).

Example:
    >>> verdicts = Verdicts("logs/run1")  # doctest: +SKIP
    >>> verdicts.judge(screen.kept, now_ns, {("straggler", "worker:1"): since_ns})  # doctest: +SKIP
    [Transition(state='began', kind='straggler', tasks=('worker:1',), ...)]
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from tfdiag.analysis.frames import conform, source_column, to_pandas
from tfdiag.analysis.live import WINDOW_S, announced_findings, confirmed, enough_data, window_step
from tfdiag.analysis.live_screen import RECENT_S, VERDICT_KINDS
from tfdiag.analysis.live_transition import Transition, message
from tfdiag.analysis.load import LoadedRun
from tfdiag.analysis.window_load import WINDOW_TIME_COLUMNS
from tfdiag.store import load_manifest

Key = tuple[str, tuple[str, ...]]  # (kind, tasks) of a finding


def verdict_window_s(from_ns: int | None, now_ns: int) -> float:
    """The seconds of records a candidate is judged on at ``now_ns``: from ``from_ns``, where
    the screen's window that first showed it began, at least the screen's ``RECENT_S``
    and at most ``WINDOW_S``; ``WINDOW_S`` when unknown.

    Judged from where the screen saw the change, a window holds the records after an
    onset, not the seconds before it that dilute them: a 2.5x straggler's 10-s window
    passes the detector's bar about 6 s after the onset, its own window when the screen
    first shows it (2-4 s).

    >>> S = 10**9
    >>> verdict_window_s(10 * S, 12 * S), verdict_window_s(10 * S, 16 * S), verdict_window_s(None, 16 * S)
    (4.0, 6.0, 10.0)
    """
    if from_ns is None:
        return WINDOW_S
    return min(max((now_ns - from_ns) / 1e9, RECENT_S), WINDOW_S)


def window_run(path: Path, manifest: dict | None, kept: list[tuple], now_ns: int, window_s: float = WINDOW_S) -> LoadedRun:
    """The records of ``kept`` ((file, kind, task, newest time, batch) per batch) dated from
    ``now_ns - window_s`` on, as ``WindowLoader`` would return them: one frame per kind with
    its ``source`` column."""
    cutoff = now_ns - int(window_s * 1e9)
    by_kind = defaultdict(list)
    for _, kind, source, newest, batch in kept:
        if newest >= cutoff:
            by_kind[kind].append((conform(batch, kind), source))
    frames = {}
    for kind, items in by_kind.items():
        batches, sources = zip(*items)
        table = pa.Table.from_batches(batches).combine_chunks()
        table = table.append_column("source", source_column(sources, [len(batch) for batch in batches]))
        table = table.filter(pc.greater_equal(table.column(WINDOW_TIME_COLUMNS.get(kind, "time_ns")), cutoff))
        if len(table):
            frames[kind] = to_pandas(table)
    sources = sorted({source for _, _, source, newest, _ in kept if newest >= cutoff})
    return LoadedRun(path, manifest, frames, sources=sources)


class Verdicts:
    """The straggler and input_bound findings announced from the screen's records, and the next.

    Args:
        run_dir: the run directory (``RUN``; its manifest says the strategy).
    """

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir)
        self.windows = 0  # windows judged (with enough data)
        self.announced: dict[Key, Transition] = {}  # began, not cleared
        self._manifest: dict | None = None
        self._last: tuple | None = None  # ((now_ns, window_s), _judged's answer): a window is judged once

    def judge(self, kept: list[tuple], now_ns: int, due: dict[tuple[str, str], int],
              gone: frozenset[Key] = frozenset(), from_ns: int | None = None) -> list[Transition]:
        """Judges the records up to ``now_ns``: ``due`` (candidate -> the ns since a screen
        shows it) may begin, on the window from ``from_ns`` (``verdict_window_s``); the
        announced findings of ``gone`` may clear, on the last ``WINDOW_S``."""
        if self._manifest is None:
            self._manifest = load_manifest(self.path).manifest
        transitions = []
        if due:
            window_s = verdict_window_s(from_ns, now_ns)
            judged = self._judged(kept, now_ns, window_s)
            for key, finding in (judged[0] if judged else {}).items():
                since_ns = confirmed(finding, due)
                if since_ns is not None and key not in self.announced:
                    speedup = finding.recommendation.predicted_speedup
                    began = Transition("began", finding.kind, finding.tasks, finding.severity.value, since_ns,
                                       judged[1], speedup,
                                       message("began", finding.kind, finding.tasks, finding.title, speedup, judged[1]),
                                       now_ns, window_s)
                    self.announced[key] = began
                    transitions.append(began)
        gone = [key for key in gone if key in self.announced]
        judged = self._judged(kept, now_ns, WINDOW_S) if gone else None
        for key in [key for key in gone if judged and key not in judged[0]]:
            began = self.announced.pop(key)
            transitions.append(Transition("cleared", began.kind, began.tasks, began.severity, now_ns, began.step,
                                          began.predicted_speedup,
                                          message("cleared", began.kind, began.tasks, "", None, began.step), now_ns,
                                          WINDOW_S))
        return transitions

    def _judged(self, kept: list[tuple], now_ns: int, window_s: float) -> tuple[dict, int] | None:
        """The announced findings of the window of ``window_s`` up to ``now_ns`` and the job's
        step at its end; None when it holds too few step records to judge."""
        if self._last is not None and self._last[0] == (now_ns, window_s):
            return self._last[1]
        run = window_run(self.path, self._manifest, kept, now_ns, window_s)
        judged = None
        if enough_data(run.frame("step"), window_s):
            self.windows += 1
            judged = (announced_findings(run, VERDICT_KINDS), window_step(run))
        self._last = ((now_ns, window_s), judged)
        return judged
