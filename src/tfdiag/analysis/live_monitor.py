"""Live findings: a cheap screen every tick, a judgement only where it flags something.

``LiveMonitor.tick(now_ns)`` brings the screen (``live_screen``) up to date and judges it
(a few milliseconds). A candidate (kind, task) that no announced finding covers is judged:

- ``straggler`` and ``input_bound`` on every tick that shows it, whatever the thread's
  CPU credit, by a verdict (``live_verdict``: the detector and the advisor on the records
  the screen keeps, from where its window first showed the candidate, about 100 ms);
- ``slow_link`` on the first tick that shows it, whatever the credit, by the analysis
  of the window from the candidate's run of slow round
  trips on (``live.LiveFindings``, at most ``live.link_window_s``: tens to hundreds of
  milliseconds).

The judgement announces the finding the first time it sees it, with its own title,
evidence and predicted speed-up (the whole-run analysis's of the same window). A
candidate it rejects is judged again ``CONFIRM_RETRY_S`` later, ``FREE_RETRIES`` times
(a verdict: ``FREE_VERDICT_RETRIES``, while its window grows), then
twice as long each time up to ``MAX_RETRY_S`` (a candidate that comes and goes keeps its
wait until it has been gone that long). An announced finding whose candidate has been
gone ``CLEAR_AFTER_S`` is judged every ``CONFIRM_RETRY_S`` (twice as long each time it is
not cleared) until a judgement clears it; a slow link's while the thread's CPU credit lasts,
or once it has been gone ``CLEAR_OVERDUE_S`` longer, whatever the credit.
Only what a candidate names is announced; stopped, silent and failed tasks
(``live_stops``) are announced from the screen itself. pandas and the analysis are
imported on the first judgement, not before: a job whose screen never flags anything
never imports them.

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

from tfdiag.analysis.live_screen import VERDICT_KINDS, LiveScreen
from tfdiag.analysis.live_stops import typical_periods
from tfdiag.analysis.live_transition import Transition, message

# Seconds before a rejected candidate, or an announced finding the screen no longer shows,
# is judged again; a rejected one waits twice as long each time after FREE_RETRIES tries,
# up to MAX_RETRY_S, so a candidate the detector keeps rejecting (a job slow in a way it
# does not count as a finding) costs a judgement every two minutes, not every screen.
CONFIRM_RETRY_S = 2.0
FREE_RETRIES = 2
# Seconds a slow_link confirmation's window reaches before the oldest round trip the
# screen judged on (the records' times are read on different tasks' clocks), and the
# shortest such window: one of ps_ctl's closer looks is over in 2 s, when 2 s hold too few
# step records (live.MIN_STEP_RECORDS) to judge, and the confirmation waited a tick.
FRESH_MARGIN_S = 0.5
MIN_FRESH_WINDOW_S = 4.0
# A verdict's window begins where the screen first saw the change (live_verdict.
# verdict_window_s), so one at the screen's first sight usually decides; a candidate the
# detector rejects is judged again every CONFIRM_RETRY_S, as its window grows towards
# live.WINDOW_S, that many times before its wait grows (about 100 ms each).
FREE_VERDICT_RETRIES = 4
MAX_RETRY_S = 120.0
# A candidate back on the screen after this long away is a new onset: judged at once,
# whatever wait its rejections had earned (a further rejection waits on as they say). Its
# last streak's records have then left a verdict's longest window (live.WINDOW_S), so the
# verdict judges new evidence; one verdict per onset. (A slow link's screen reads fresh
# round trips, which the probe takes once a link or training slows, so a link is seldom
# a candidate on a clean run.)
NEW_ONSET_GAP_S = 10.0
# Seconds an announced finding's candidate must have been gone before a judgement is asked
# to clear it: its window still holds the change until about half of it is past the end.
CLEAR_AFTER_S = 4.0
# ... and how much longer a judgement that may clear a slow link waits for the thread's CPU
# credit: a line that no longer holds is a false one. Onsets are judged whatever the credit,
# so a run of them can keep it spent for minutes: with clearing waiting on it, ps_tutorial's
# slow-link run at 93ce20b announced its first 6 onsets, then kept one finding open through
# the last 10 (the credit spent from the 7th on), and none of those was announced.
CLEAR_OVERDUE_S = 4.0
# Severity of the findings the screen announces itself.
STOP_SEVERITY = "critical"


class LiveMonitor:
    """The screen every tick, the judgements on demand, and the announced transitions.

    Args:
        run_dir: the run directory (``RUN``).
        own_task: the task running it (never reported silent).
        before_confirmation: called before each judgement (the coordinator's
            ``flush_records``, so that the window holds every closure finished so far).
        may_confirm: asked before a judgement that may clear a slow_link; false: it waits for a later tick,
            ``CLEAR_OVERDUE_S`` at most (verdicts and stopped tasks go on whatever it says).
    """

    def __init__(self, run_dir: str | os.PathLike, own_task: str | None = None,
                 before_confirmation: Callable[[], None] = lambda: None,
                 may_confirm: Callable[[], bool] = lambda: True):
        self.path = run_dir
        self.screen = LiveScreen(run_dir, own_task)
        self.before_confirmation = before_confirmation
        self.may_confirm = may_confirm  # false: a confirmation waits (the thread's CPU credit is spent)
        self.screens = 0
        self.verdicts = 0  # verdicts run (live_verdict)
        self.verdict_cpu_ns = 0  # their thread CPU
        self.confirmations = 0  # slow_link analyses run (live.LiveFindings)
        self.confirm_cpu_ns = 0  # their thread CPU, the first import of the analysis left out
        self.setup_cpu_ns = 0  # thread CPU of the imports of the analysis
        self._verdicts = None  # live_verdict.Verdicts, made on the first verdict
        self._live_links = None  # live.LiveFindings on a window of a few probe round trips
        self._since: dict[tuple[str, str], int] = {}  # standing candidate -> the first screen of its streak
        self._from: dict[tuple[str, str], int] = {}  # standing candidate -> where that screen's window began
        self._retry: dict[tuple[str, str], tuple[int, int]] = {}  # candidate -> (next try ns, rejections)
        self._seen_ns: dict[tuple[str, str], int] = {}  # candidate -> the last screen that showed it
        self._clear_at_ns = {"verdicts": 0, "links": 0}  # the next judgement of each that may clear a finding
        self._clear_wait_s = {"verdicts": CONFIRM_RETRY_S, "links": CONFIRM_RETRY_S}  # and the wait after it
        self._stops: dict[tuple[str, str], Transition] = {}  # announced by the screen, not cleared

    def tick(self, now_ns: int | None = None) -> list[Transition]:
        """Screens what is new at ``now_ns``; judges or clears where the screen asks; returns the transitions."""
        now_ns = time.time_ns() if now_ns is None else now_ns
        self.screen.update(now_ns)
        self.screens += 1
        candidates = self.screen.candidates()
        for key in candidates:
            if key not in self._since and key in self._retry and now_ns - self._seen_ns[key] >= NEW_ONSET_GAP_S * 1e9:
                self._retry[key] = (now_ns, self._retry[key][1])  # a new onset: judged now
        self._since = {key: self._since.get(key, now_ns) for key in candidates}
        self._from = {key: self._from.get(key, self.screen.recent_from_ns) for key in candidates}
        self._seen_ns.update(dict.fromkeys(candidates, now_ns))
        for key, (next_ns, _) in list(self._retry.items()):
            if now_ns - self._seen_ns[key] > max(next_ns - now_ns, 0) + int(MAX_RETRY_S / 2 * 1e9):
                del self._retry[key]  # gone for long enough: a new onset starts afresh
        transitions = self._stop_transitions(now_ns)
        transitions += self._verdict(now_ns)
        # A slow_link candidate is judged at once: the screen's rule already asks for three
        # fresh round trips, a closer look's rounds apart, all slow against the link's peers.
        standing = [key for key in self._since if key[0] not in VERDICT_KINDS]
        due = [key for key in standing if self._due(key, now_ns)]
        announced = self._live_links.announced_keys() if self._live_links else []
        unshown = self._unshown(announced, now_ns)
        overdue = bool(self._unshown(announced, now_ns, CLEAR_AFTER_S + CLEAR_OVERDUE_S))
        # A due candidate is judged whatever the thread's credit, as a verdict is: the screen
        # shows one only on fresh round trips, all slow (a closer look's); clearing waits, a while.
        if due or (unshown and now_ns >= self._clear_at_ns["links"] and (overdue or self.may_confirm())):
            confirmed = self._confirm(now_ns, standing, due, frozenset(unshown))
            self._next_clear("links", now_ns, bool(unshown), confirmed)
            transitions += confirmed
        return transitions

    def _verdict(self, now_ns: int) -> list[Transition]:
        """Straggler and input_bound candidates judged on the screen's records (``live_verdict``)."""
        due = [key for key in self._since if key[0] in VERDICT_KINDS and self._due(key, now_ns)]
        unshown = self._unshown(list(self._verdicts.announced) if self._verdicts else [], now_ns)
        if not due and not (unshown and now_ns >= self._clear_at_ns["verdicts"]):
            return []
        if self._verdicts is None:
            begin = time.thread_time_ns()
            from tfdiag.analysis.live_verdict import Verdicts  # here: only once something needs judging

            self._verdicts = Verdicts(self.path)
            self.setup_cpu_ns += time.thread_time_ns() - begin
        begin = time.thread_time_ns()
        self.before_confirmation()
        self.screen.update(now_ns)  # with what the flush wrote
        transitions = self._verdicts.judge(self.screen.kept, now_ns, {key: self._since[key] for key in due},
                                           frozenset(unshown), min((self._from[key] for key in due), default=None))
        self.verdicts += 1
        self.verdict_cpu_ns += time.thread_time_ns() - begin
        self._rejected(due, now_ns, FREE_VERDICT_RETRIES)
        self._next_clear("verdicts", now_ns, bool(unshown), transitions)
        return transitions

    def _next_clear(self, judge: str, now_ns: int, asked: bool, transitions: list[Transition]) -> None:
        """When ``judge`` may next be asked to clear: ``CONFIRM_RETRY_S`` on, twice as long
        each time it was asked and cleared nothing (a finding its screen no longer shows
        but its window still holds: a slow link probed seldom again), up to ``MAX_RETRY_S``."""
        if not asked:
            return
        cleared = any(transition.state == "cleared" for transition in transitions)
        wait_s = CONFIRM_RETRY_S if cleared else self._clear_wait_s[judge]
        self._clear_at_ns[judge] = now_ns + int(wait_s * 1e9)
        self._clear_wait_s[judge] = CONFIRM_RETRY_S if cleared else min(2 * wait_s, MAX_RETRY_S)

    def _confirm(self, now_ns: int, standing: list[tuple[str, str]], due: list[tuple[str, str]],
                 gone: frozenset = frozenset()) -> list[Transition]:
        begin = time.thread_time_ns()
        from tfdiag.analysis.live import LiveFindings, link_window_s  # here: only once something needs confirming

        self.setup_cpu_ns += time.thread_time_ns() - begin
        begin = time.thread_time_ns()
        window_s = link_window_s(self.screen.probe_interval_s(frozenset(task for _, task in standing) or None))
        current = self._live_links  # made again when the probe's pace changed twofold and no slow link is announced
        if current is None or (not current.announced_keys() and not 0.5 <= window_s / current.window_s <= 2):
            self._live_links = LiveFindings(self.path, window_s, only_confirmed=True)
        self.before_confirmation()
        confirm = {key: self._since[key] for key in standing}
        # Candidates are judged on the round trips the screen saw them on, not on the whole
        # window: the detector judges a link by its fastest, and one from before the link
        # turned slow would reject it until the window had passed the change.
        fresh_ns = min([ns for _, task in due if (ns := self.screen.slow_since_ns(task)) is not None], default=None)
        if fresh_ns is not None:
            window_s = min(window_s, max((now_ns - fresh_ns) / 1e9 + FRESH_MARGIN_S, MIN_FRESH_WINDOW_S))
        transitions = self._live_links.evaluate(now_ns, confirm=confirm, gone=gone,
                                                window_s=window_s if fresh_ns is not None else None)
        self.confirmations += 1
        self.confirm_cpu_ns += time.thread_time_ns() - begin
        # A window that still reaches back before the candidate's first screen holds round
        # trips from before the change, or too few step records to judge: its rejection is no
        # evidence yet, and the candidate is judged again CONFIRM_RETRY_S on.
        early = [key for key in due if now_ns - self._since[key] < window_s * 1e9 and not self._covered(key)]
        for key in early:
            self._retry[key] = (now_ns + int(CONFIRM_RETRY_S * 1e9), self._retry.get(key, (0, 0))[1])
        self._rejected([key for key in due if key not in early], now_ns, FREE_RETRIES)
        return transitions

    def _due(self, key: tuple[str, str], now_ns: int) -> bool:
        return not self._covered(key) and now_ns >= self._retry.get(key, (0, 0))[0]

    def _rejected(self, due: list[tuple[str, str]], now_ns: int, free: int) -> None:
        """The candidates of ``due`` the judgement did not announce wait for their next try."""
        for key in due:
            if not self._covered(key):
                rejections = self._retry.get(key, (0, 0))[1] + 1
                wait_s = min(CONFIRM_RETRY_S * 2 ** max(rejections - free, 0), MAX_RETRY_S)
                self._retry[key] = (now_ns + int(wait_s * 1e9), rejections)

    def _unshown(self, announced: list[tuple[str, tuple[str, ...]]], now_ns: int,
                 after_s: float = CLEAR_AFTER_S) -> list[tuple[str, tuple[str, ...]]]:
        """The ``announced`` findings no screen has shown for ``after_s``."""
        gone_ns = int(after_s * 1e9)
        return [key for key in announced
                if all(now_ns - seen >= gone_ns for c, seen in self._seen_ns.items() if self._matches(key, c))]

    def _announced(self) -> list[tuple[str, tuple[str, ...]]]:
        return (list(self._verdicts.announced) if self._verdicts else []) + \
            (self._live_links.announced_keys() if self._live_links else [])

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
