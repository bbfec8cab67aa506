"""Live findings: a cheap screen every tick, the full analysis only to confirm what it flags.

``LiveMonitor.tick(now_ns)`` brings the screen (``live_screen``) up to date and judges it
(a few milliseconds); the full analysis of the last ``live.WINDOW_S`` seconds
(``live.LiveFindings``: measure, every detector, the advisor; for a slow link, a window of
a few round trips at the probe's pace, ``live.link_window_s``) runs only when:

- a candidate (kind, task) stood ``SCREEN_PERSIST_S`` and no announced finding covers
  it: that analysis announces the finding the first time it sees it, with its own title,
  evidence and predicted speed-up (so the announced prediction is the one the whole-run
  analysis makes of the same window); a candidate it rejects is tried again
  ``CONFIRM_RETRY_S`` later, twice, then twice as long each time up to ``MAX_RETRY_S``
  (a candidate that comes and goes keeps its wait until it has been gone that long);
- an announced finding's candidate has been gone ``CLEAR_AFTER_S``: every
  ``CONFIRM_RETRY_S`` until the analysis clears it (the first evaluation without it: the
  screen's absence is the second opinion).

Only what a candidate names is announced (an analysis run to confirm one straggler can
see other findings in a window of a few seconds: the report after the run judges those).
Stopped, silent and failed tasks (``live_stops``) are announced from the screen itself.
pandas and the analysis are imported on the first confirmation, not before: a job whose
screen never flags anything never imports them.

Example:
    >>> monitor = LiveMonitor("logs/run1", own_task="chief:0")  # doctest: +SKIP
    >>> for change in monitor.tick(time.time_ns()):  # doctest: +SKIP
    ...     print(change.message)
    tfdiag: worker:1 straggler since step 1,200: worker:1 is 2.4x slower per step than the other workers; predicted +40 % if repaired
"""

from __future__ import annotations

import os
import time
from typing import Callable

from tfdiag.analysis.live_screen import LiveScreen
from tfdiag.analysis.live_stops import typical_periods
from tfdiag.analysis.live_transition import Transition, message

# Seconds a candidate must stand before the analysis confirms it: one screen's window can
# hold a single late batch of records, and the analysis's window (live.WINDOW_S) shows a
# change once about half of it is past the change's onset, which the screen (a window of
# live_screen.RECENT_S) sees about two seconds in.
SCREEN_PERSIST_S = 3.0
# Seconds before a rejected candidate, or an announced finding the screen no longer shows,
# is analysed again; a rejected one waits twice as long each time after two tries, up to
# MAX_RETRY_S, so a candidate the analysis keeps rejecting (a job slow in a way the
# detector does not count as a finding) costs a confirmation every two minutes, not every screen.
CONFIRM_RETRY_S = 2.0
MAX_RETRY_S = 120.0
# Seconds an announced finding's candidate must have been gone before the analysis is asked
# to clear it: its window still holds the change until about half of it is past the end.
CLEAR_AFTER_S = 4.0
# Severity of the findings the screen announces itself.
STOP_SEVERITY = "critical"


class LiveMonitor:
    """The screen every tick, the analysis on demand, and the announced transitions.

    Args:
        run_dir: the run directory (``RUN``).
        own_task: the task running it (never reported silent).
        before_confirmation: called before each confirming analysis (the coordinator's
            ``flush_records``, so that the window holds every closure finished so far).
        may_confirm: asked before a confirmation; false: the candidates wait for a later tick
            (stopped tasks are announced from the screen whatever it says).
    """

    def __init__(self, run_dir: str | os.PathLike, own_task: str | None = None,
                 before_confirmation: Callable[[], None] = lambda: None,
                 may_confirm: Callable[[], bool] = lambda: True):
        self.path = run_dir
        self.screen = LiveScreen(run_dir, own_task)
        self.before_confirmation = before_confirmation
        self.may_confirm = may_confirm  # false: a confirmation waits (the thread's CPU credit is spent)
        self.screens = 0
        self.confirmations = 0
        self.confirm_cpu_ns = 0  # thread CPU of the confirmations, the first import of the analysis left out
        self.setup_cpu_ns = 0  # thread CPU of that import
        self._live = None  # live.LiveFindings, made on the first confirmation
        self._live_links = None  # the same on a window of a few probe round trips, for slow_link
        self._since: dict[tuple[str, str], int] = {}  # standing candidate -> the first screen of its streak
        self._retry: dict[tuple[str, str], tuple[int, int]] = {}  # candidate -> (next try ns, rejections)
        self._seen_ns: dict[tuple[str, str], int] = {}  # candidate -> the last screen that showed it
        self._clear_at_ns = 0  # the next analysis that may clear an announced finding
        self._stops: dict[tuple[str, str], Transition] = {}  # announced by the screen, not cleared

    def tick(self, now_ns: int | None = None) -> list[Transition]:
        """Screens what is new at ``now_ns``; confirms or clears where the screen asks; returns the transitions."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        self.screen.update(now_ns)
        self.screens += 1
        candidates = self.screen.candidates()
        self._since = {key: self._since.get(key, now_ns) for key in candidates}
        self._seen_ns.update(dict.fromkeys(candidates, now_ns))
        for key, (next_ns, _) in list(self._retry.items()):
            if now_ns - self._seen_ns[key] > max(next_ns - now_ns, 0) + MAX_RETRY_S / 2:
                del self._retry[key]  # gone for long enough: a new onset starts afresh
        transitions = self._stop_transitions(now_ns)
        standing = [key for key, since in self._since.items() if now_ns - since >= SCREEN_PERSIST_S * 1e9]
        due = [key for key in standing if not self._covered(key) and now_ns >= self._retry.get(key, (0, 0))[0]]
        gone_ns = int(CLEAR_AFTER_S * 1e9)
        unshown = [key for key in self._announced()
                   if all(now_ns - seen >= gone_ns for c, seen in self._seen_ns.items() if self._matches(key, c))]
        if (due or (unshown and now_ns >= self._clear_at_ns)) and self.may_confirm():
            transitions += self._confirm(now_ns, standing, due, frozenset(unshown))
            self._clear_at_ns = now_ns + int(CONFIRM_RETRY_S * 1e9)
        return transitions

    def _confirm(self, now_ns: int, standing: list[tuple[str, str]], due: list[tuple[str, str]],
                 gone: frozenset = frozenset()) -> list[Transition]:
        if self._live is None:
            begin = time.thread_time_ns()
            from tfdiag.analysis.live import LiveFindings  # here: only once something needs confirming

            self._live = LiveFindings(self.path, only_confirmed=True)
            self.setup_cpu_ns = time.thread_time_ns() - begin
        begin = time.thread_time_ns()
        self._pace_link_window()
        self.before_confirmation()
        screened = {(kind, (task,)) for kind, task in self._stops}  # announced from the screen already
        transitions = []
        for live, links in ((self._live, False), (self._live_links, True)):
            if any((kind == "slow_link") == links for kind, _ in due) or live.announced_keys():
                confirm = {key: self._since[key] for key in standing if (key[0] == "slow_link") == links}
                transitions += [t for t in live.evaluate(now_ns, confirm=confirm, gone=gone) if (t.kind, t.tasks) not in screened]
        self.confirmations += 1
        self.confirm_cpu_ns += time.thread_time_ns() - begin
        for key in due:
            if not self._covered(key):
                rejections = self._retry.get(key, (0, 0))[1] + 1
                wait_s = min(CONFIRM_RETRY_S * 2 ** max(rejections - 2, 0), MAX_RETRY_S)
                self._retry[key] = (now_ns + int(wait_s * 1e9), rejections)
        return transitions

    def _pace_link_window(self) -> None:
        """A slow_link window of a few round trips at the probe's pace (``live.link_window_s``),
        made again when the pace changed twofold and no slow link is announced."""
        from tfdiag.analysis.live import LiveFindings, link_window_s

        window_s = link_window_s(self.screen.probe_interval_s())
        current = self._live_links
        if current is None or (not current.announced_keys() and not 0.5 <= window_s / current.window_s <= 2):
            self._live_links = LiveFindings(self.path, window_s, only_confirmed=True)

    def _announced(self) -> list[tuple[str, tuple[str, ...]]]:
        if self._live is None:
            return []
        return self._live.announced_keys() + self._live_links.announced_keys()

    @staticmethod
    def _matches(key: tuple[str, tuple[str, ...]], candidate: tuple[str, str]) -> bool:
        kind, tasks = key
        return kind == candidate[0] and (not tasks or candidate[1] in tasks)

    def _covered(self, candidate: tuple[str, str]) -> bool:
        """Whether an announced finding already says what ``candidate`` flags."""
        return any(self._matches(key, candidate) for key in self._announced())

    def _stop_transitions(self, now_ns: int) -> list[Transition]:
        rows = self.screen.worker_rows()
        holding = self.screen.stops.judge(now_ns, typical_periods(rows))
        transitions = []
        for (kind, task), title in holding.items():
            if (kind, task) not in self._stops:
                step = self.screen.training_step(task)
                began = Transition("began", kind, (task,), STOP_SEVERITY, now_ns, step, None,
                                   message("began", kind, (task,), title, None, step), now_ns)
                self._stops[(kind, task)] = began
                transitions.append(began)
        for key in [key for key in self._stops if key not in holding]:
            began = self._stops.pop(key)
            transitions.append(Transition("cleared", began.kind, began.tasks, began.severity, now_ns, began.step,
                                          None, message("cleared", began.kind, began.tasks, "", None, began.step),
                                          now_ns))
        return transitions
