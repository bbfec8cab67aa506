"""Live findings: a thread that screens the run's recent records while it trains, on by default.

One process of a job runs it: the one that writes the manifest (the chief, the
ParameterServerStrategy coordinator, or worker 0), started by ``DiagnosticsCallback``,
``DiagnosticsHook`` or ``instrument_coordinator`` unless turned off (``live_interval_s=0``
or ``TFDIAG_LIVE_FINDINGS=off``). Every ``interval_s`` or more it calls
``tfdiag.analysis.live_monitor.LiveMonitor.tick``: a screen of per-task windows kept up to
date as records arrive (a few milliseconds), a verdict on the screen's own records where it
flags a straggler or an input stall (tens of milliseconds), and the analysis of a longer
window to confirm a slow link. Each finding that began or cleared is printed once on
stderr (``tfdiag: <task> <kind> since step N: <evidence>; predicted +X % if repaired``) and
written as a ``live_finding`` record.

This module is the one place a collector reaches the analysis, and only from inside the
thread: ``tfdiag.analysis.live_monitor`` is imported there (numpy and pyarrow only), and
pandas with the rest of the analysis on the first judgement, never when
``tfdiag.collectors`` is imported and never on the training thread
(``docs/architecture.md``, "Import rules"). An error stops the thread after one warning;
training never sees it.

Cost: held to the ``live`` share of a core in ``src/tfdiag/collectors/budget.py`` (or
``$TFDIAG_LIVE_CPU_SHARE``) with a credit: the share accrues with the thread's life, up to
``BURST_CPU_S`` ahead, and each tick spends its CPU (``time.thread_time_ns``). Screens run
every ``interval_s``, spaced further (up to ``MAX_PAUSE_S``) when they alone would take
more than ``SCREEN_PART`` of the share; a judgement that may clear a slow link waits for a
positive credit (``live_monitor.CLEAR_OVERDUE_S`` at most), so a spent credit delays those,
never the screen (which names stopped, silent and failed tasks), a verdict nor a slow
link's onset. The thread runs at the lowest scheduling priority
(``NICE``), so on a busy core its CPU comes after training's. Declared: a ``note`` record
at the end, and ``cost()``; ``docs/benchmarks.md`` has the measured figures.

Example:
    >>> thread = LiveThread("logs/run1", writer, interval_s=2.0).start()  # doctest: +SKIP
    >>> thread.stop(); thread.cost()["cpu_share"]  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

from tfdiag.collectors import budget

logger = logging.getLogger("tfdiag")

# Seconds between screens when no interval is given: a screen costs 2-4 ms of CPU
# (docs/benchmarks.md, "Live findings"), so one every 2 s is 0.1-0.2 % of a core, within the
# live budget, and adds at most 2 s (5 s with the 3 s a candidate must stand) to an
# announcement.
DEFAULT_INTERVAL_S = 2.0
# Read when the caller passes no interval: seconds between screens ("on", or unset: the
# default interval); 0 or "off": off.
ENV_VAR = "TFDIAG_LIVE_FINDINGS"
# Read when the thread starts: the share of one core the evaluations may use (a fraction,
# e.g. 0.01), for a user who wants findings every few seconds and will pay for them;
# unset: the ``live`` budget of src/tfdiag/collectors/budget.py.
SHARE_ENV_VAR = "TFDIAG_LIVE_CPU_SHARE"
STOP_TIMEOUT_S = 10.0
# CPU seconds the thread may spend ahead of its share: the confirmations of a slow link's
# onset and its clearing (a few analyses of 100-500 ms each, the costlier on a loaded host)
# and the first one's read of the whole task files, so that a finding is confirmed when the
# screen flags it rather than when the share has paid for it.
BURST_CPU_S = 1.0
# The part of the share the screens may take (their spacing stretches past ``interval_s``
# otherwise); the rest pays for verdicts and confirmations.
SCREEN_PART = 0.5
# Seconds the share may stretch the pause between screens to (unless ``interval_s`` is
# longer): a screen's cost grows with the records it reads, so paced to the share, ticks
# drifted 5-26 s apart on a coordinator, each delaying an announcement that long; at 4 s the
# screens of the PS jobs take 0.1-0.3 % of a core (docs/benchmarks.md, "Live findings").
MAX_PAUSE_S = 4.0
# The thread's nice value: the lowest priority, so that on a core that training keeps busy
# the screens and confirmations wait for it rather than take from it.
NICE = 19


def interval_from(option: float | None) -> float | None:
    """Seconds between screens: ``option``, else ``$TFDIAG_LIVE_FINDINGS`` (a number, or
    ``on``), else ``DEFAULT_INTERVAL_S``: on by default; None when off (``option`` 0, or the
    variable 0 or ``off``).

    >>> interval_from(10), interval_from(0)
    (10.0, None)
    """
    if option is None:
        text = os.environ.get(ENV_VAR, "").strip().lower()
        if text in ("off", "no", "false"):
            option = 0
        elif text in ("", "on", "yes", "true"):
            option = DEFAULT_INTERVAL_S
        else:
            try:
                option = float(text)
            except ValueError:
                logger.warning("tfdiag: %s=%r is not a number of seconds; live findings are off.", ENV_VAR, text)
                option = 0
    return float(option) if option and option > 0 else None


def core_share() -> float:
    """The share of one core live evaluations may use: ``$TFDIAG_LIVE_CPU_SHARE``, else the
    ``live`` budget.

    >>> core_share() == budget.COMPONENTS["live"].core_share  # doctest: +SKIP
    True
    """
    declared = budget.COMPONENTS["live"].core_share
    text = os.environ.get(SHARE_ENV_VAR, "").strip()
    if not text:
        return declared
    try:
        share = float(text)
    except ValueError:
        share = 0.0
    if not 0 < share <= 1:
        logger.warning("tfdiag: %s=%r is not a share of a core in (0, 1]; live findings use %g.", SHARE_ENV_VAR, text,
                       declared)
        return declared
    return share


def announce(line: str) -> None:
    """Writes an announcement (``tfdiag: ...``) to stderr as one line, once, whatever the
    logging set-up (through a handler it would gain a level and a logger name, or appear
    once per handler); the ``tfdiag`` logger gets it at DEBUG for a log file that wants it."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):  # no stderr, or closed: the record still has it
        pass
    logger.debug("%s", line)


def start(logdir, writer, option: float | None) -> LiveThread | None:
    """Starts live findings for ``logdir`` unless ``option`` (see ``interval_from``) turns
    them off; None when off or when the thread cannot start (logged). Never raises."""
    interval_s = interval_from(option)
    if not interval_s:
        return None
    try:
        return LiveThread(logdir, writer, interval_s).start()
    except Exception as error:  # noqa: BLE001 - a collector never breaks training
        logger.warning("tfdiag: live findings are off: cannot start their thread (%r).", error)
        return None


class LiveThread:
    """Runs ``LiveMonitor.tick`` every ``interval_s`` or more (``pause_s``: within the
    ``live`` budget) on a daemon thread until ``stop`` (or until ``writer`` closes)."""

    def __init__(self, logdir, writer, interval_s: float = DEFAULT_INTERVAL_S):
        self.logdir = logdir
        self.writer = writer
        self.interval_s = interval_s
        self.core_share = core_share()
        self.ticks = 0  # screens run (each may have judged)
        self.cpu_ns = 0  # thread CPU time of those ticks, verdicts and confirmations included
        self.setup_cpu_ns = 0  # thread CPU time of the first imports (the screen's; the analysis's)
        self.transitions = 0
        self.monitor = None  # the LiveMonitor, once the thread made it
        self.paused = lambda: False  # ticks are skipped while true (benchmarks/overhead_ab.py's phases)
        # Called before each judgement (verdict or confirmation) to bring this task's records up
        # to date (the coordinator's ``flush_records``: its step records are otherwise up to 5 s late).
        self.before_evaluation = lambda: None
        self._credit_ns = int(BURST_CPU_S * 1e9)  # CPU the thread may still spend ahead of its share
        self._tick_began_ns = 0  # thread CPU clock when the tick in progress began
        self._credited_at_ns = 0
        self._started_ns = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tfdiag-live-findings", daemon=True)

    def start(self) -> LiveThread:
        self._started_ns = self._credited_at_ns = time.monotonic_ns()
        self._thread.start()
        return self

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stops the thread (waits for a tick in progress) and declares its cost in a ``note``."""
        if self._done.is_set():
            return
        self._done.set()
        self._thread.join(timeout_s)
        cost = self.cost()
        sentence = (f"live findings: {cost['evaluations']} evaluations every {self.interval_s:g} s or more "
                    f"(every {cost['seconds_apart']:.1f} s on average, within {self.core_share:.1%} of a core), "
                    f"{cost['cpu_ms_per_evaluation']:.1f} ms CPU each, {cost['cpu_ms_per_minute']:.0f} ms CPU per "
                    f"minute ({cost['cpu_share']:.2%} of a core); {cost['confirmations']} confirmations "
                    f"({cost['cpu_ms_per_confirmation']:.1f} ms CPU each, screens {cost['cpu_ms_per_screen']:.2f} ms "
                    f"each), {cost['verdicts']} verdicts ({cost['cpu_ms_per_verdict']:.1f} ms CPU each), "
                    f"{cost['setup_cpu_ms']:.0f} ms to import the analysis")
        logger.info("tfdiag: %s", sentence)
        try:
            self.writer.append("note", task=self.writer.task, time_ns=time.time_ns(), level="info", message=sentence)
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            logger.warning("tfdiag: cannot record the live findings' cost (%r).", error)

    def pause_s(self) -> float:
        """Seconds until the next tick: ``interval_s``, or longer, up to ``MAX_PAUSE_S``, when
        the screens' mean CPU would take more than ``SCREEN_PART`` of the share at that pace."""
        judged_ns = self.monitor.confirm_cpu_ns + self.monitor.verdict_cpu_ns if self.monitor else 0
        per_screen_s = (self.cpu_ns - judged_ns) / self.ticks / 1e9 if self.ticks else 0.0
        paced = max(self.interval_s, per_screen_s / (self.core_share * SCREEN_PART))
        return min(paced, max(MAX_PAUSE_S, self.interval_s))

    def credit_ns(self) -> int:
        """CPU ns the thread may still spend ahead of its share: the share accrued since the
        last call added, up to ``BURST_CPU_S``, less what the ticks spent."""
        now_ns = time.monotonic_ns()
        accrued = (now_ns - self._credited_at_ns) * self.core_share
        self._credit_ns = min(self._credit_ns + int(accrued), int(BURST_CPU_S * 1e9))
        self._credited_at_ns = now_ns
        return self._credit_ns

    def _may_confirm(self) -> bool:
        return self.credit_ns() - self._tick_ns() > 0

    def _tick_ns(self) -> int:
        """CPU the tick in progress has spent so far (not yet taken from the credit)."""
        return time.thread_time_ns() - self._tick_began_ns if self._tick_began_ns else 0

    def cost(self) -> dict:
        """Ticks so far and their thread CPU time: per tick, per minute of the thread's
        life, as a share of one core; and split into screens, verdicts and confirmations."""
        alive_ns = max(time.monotonic_ns() - self._started_ns, 1)
        monitor = self.monitor
        confirmations, confirm_ns = (monitor.confirmations, monitor.confirm_cpu_ns) if monitor else (0, 0)
        verdicts, verdict_ns = (monitor.verdicts, monitor.verdict_cpu_ns) if monitor else (0, 0)
        return {"evaluations": self.ticks, "cpu_ms_per_evaluation": self.cpu_ns / self.ticks / 1e6 if self.ticks else 0.0,
                "seconds_apart": alive_ns / 1e9 / self.ticks if self.ticks else 0.0,
                "cpu_ms_per_minute": self.cpu_ns / alive_ns * 60e3, "cpu_share": self.cpu_ns / alive_ns,
                "confirmations": confirmations,
                "cpu_ms_per_confirmation": confirm_ns / confirmations / 1e6 if confirmations else 0.0,
                "verdicts": verdicts, "cpu_ms_per_verdict": verdict_ns / verdicts / 1e6 if verdicts else 0.0,
                "cpu_ms_per_screen": (self.cpu_ns - confirm_ns - verdict_ns) / self.ticks / 1e6 if self.ticks else 0.0,
                "setup_cpu_ms": (self.setup_cpu_ns + (monitor.setup_cpu_ns if monitor else 0)) / 1e6,
                "transitions": self.transitions}

    def _run(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)  # this thread only (Linux)
        except (OSError, AttributeError) as error:
            logger.debug("tfdiag: live findings run at the process's priority (%r).", error)
        begin = time.thread_time_ns()
        try:
            from tfdiag.analysis.live_monitor import LiveMonitor  # here only: see the module docstring

            self.monitor = LiveMonitor(self.logdir, self.writer.task, self._before_confirmation, self._may_confirm)
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            logger.warning("tfdiag: live findings are off: cannot start the analysis (%r).", error)
            return
        self.setup_cpu_ns = time.thread_time_ns() - begin
        while not self._done.wait(self.pause_s()) and not self.writer.closed:
            if self.paused():
                continue
            begin = self._tick_began_ns = time.thread_time_ns()
            setup_before = self.monitor.setup_cpu_ns
            transitions = []
            try:
                with budget.charged("live"):
                    transitions = self.monitor.tick()
                for transition in transitions:
                    announce(transition.message)
                    self.writer.append("live_finding", **transition.record(self.writer.task))
            except Exception as error:  # noqa: BLE001
                logger.warning("tfdiag: live findings stopped after an error: %r", error)
                return
            finally:
                # The analysis's first import is set-up, declared apart and not paced.
                spent = time.thread_time_ns() - begin - (self.monitor.setup_cpu_ns - setup_before)
                self.credit_ns()
                self._credit_ns -= spent
                self._tick_began_ns = 0
                self.cpu_ns += spent
                self.ticks += 1
            self.transitions += len(transitions)

    def _before_confirmation(self) -> None:
        """This task's records in its file before a judgement reads the window."""
        self.before_evaluation()
        self.writer.flush()
