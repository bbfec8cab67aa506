"""Live findings: a thread that runs the detectors on the run's recent records while it trains.

One process of a job runs it: the one that writes the manifest (the chief, the
ParameterServerStrategy coordinator, or worker 0), started by ``DiagnosticsCallback``,
``DiagnosticsHook`` or ``instrument_coordinator``. Every ``interval_s`` or more it calls
``tfdiag.analysis.live.LiveFindings.evaluate`` (the last ``WINDOW_S`` seconds of every
task file, read incrementally), logs each finding that began or cleared on the
``tfdiag`` logger (WARNING, so a default logging setup prints it on stderr), and writes it
as a ``live_finding`` record through the task's writer.

This module is the one place a collector reaches the analysis, and only from inside the
thread: pandas and ``tfdiag.analysis`` are imported there, on first use, never when
``tfdiag.collectors`` is imported and never on the training thread
(``docs/architecture.md``, "Import rules"). An error stops the thread after one warning;
training never sees it.

Cost: held to the ``live`` share of a core in ``collectors/budget.py`` (or
``$TFDIAG_LIVE_CPU_SHARE``): after an
evaluation the thread waits ``interval_s``, or longer where that evaluation's CPU time
(``time.thread_time_ns``) would exceed the share in that time (``pause_s``), so a bigger
window or a slower host makes the findings come less often, never cost more. Declared: a
``note`` record at the end, and ``cost()``; ``docs/benchmarks.md`` has the measured figures.

Example:
    >>> thread = LiveThread("logs/run1", writer, interval_s=5.0).start()  # doctest: +SKIP
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

# Seconds between evaluations when live findings are on and no interval is given, at the
# least: with two evaluations to announce and a 20-s window, a worker that became 2x slower
# is announced within about 20-30 s of its onset where evaluations are cheap enough for
# 10 s; at the 35-45 ms an evaluation took replayed on the 2-core machine, 53-59 ms inside
# a loaded job's coordinator, the budget spaces them 18-30 s apart (docs/benchmarks.md,
# "Where an evaluation's CPU goes").
DEFAULT_INTERVAL_S = 10.0
# Read when the caller passes no interval: seconds between evaluations ("on": the
# default interval); unset, 0 or "off": off. Off by default: the analysis adds pandas to
# the process, and an evaluation costs 35-60 ms of CPU on a two-worker window: a quarter
# to a third reading the window, the rest the tables' and the detectors' pandas calls
# (docs/benchmarks.md, "Where an evaluation's CPU goes").
ENV_VAR = "TFDIAG_LIVE_FINDINGS"
# Read when the thread starts: the share of one core the evaluations may use (a fraction,
# e.g. 0.01), for a user who wants findings every few seconds and will pay for them;
# unset: the ``live`` budget of collectors/budget.py.
SHARE_ENV_VAR = "TFDIAG_LIVE_CPU_SHARE"
STOP_TIMEOUT_S = 10.0


def interval_from(option: float | None) -> float | None:
    """Seconds between evaluations: ``option``, else ``$TFDIAG_LIVE_FINDINGS`` (a number,
    or ``on`` for ``DEFAULT_INTERVAL_S``); None when live findings are off (0, or the
    variable unset, 0 or ``off``).

    >>> interval_from(10), interval_from(0)
    (10.0, None)
    """
    if option is None:
        text = os.environ.get(ENV_VAR, "").strip().lower()
        if text in ("", "off", "no", "false"):
            option = 0
        elif text in ("on", "yes", "true"):
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
    """Runs ``LiveFindings.evaluate`` every ``interval_s`` or more (``pause_s``: within the
    ``live`` budget) on a daemon thread until ``stop`` (or until ``writer`` closes)."""

    def __init__(self, logdir, writer, interval_s: float = DEFAULT_INTERVAL_S):
        self.logdir = logdir
        self.writer = writer
        self.interval_s = interval_s
        self.core_share = core_share()
        self.ticks = 0  # evaluations run (a window with too little data included)
        self.cpu_ns = 0  # thread CPU time of those evaluations
        self._last_cpu_ns = 0  # of the last one, which sets the pause after it
        self.setup_cpu_ns = 0  # thread CPU time of the first import of the analysis
        self.transitions = 0
        self.paused = lambda: False  # evaluations are skipped while true (benchmarks/overhead_ab.py's phases)
        # Called before each evaluation to bring this task's records up to date (the
        # coordinator's ``flush_records``: its step records are otherwise up to 5 s late).
        self.before_evaluation = lambda: None
        self._started_ns = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tfdiag-live-findings", daemon=True)

    def start(self) -> LiveThread:
        self._started_ns = time.monotonic_ns()
        self._thread.start()
        return self

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stops the thread (waits for an evaluation in progress) and declares its cost in a ``note``."""
        if self._done.is_set():
            return
        self._done.set()
        self._thread.join(timeout_s)
        cost = self.cost()
        sentence = (f"live findings: {cost['evaluations']} evaluations every {self.interval_s:g} s or more "
                    f"(every {cost['seconds_apart']:.1f} s on average, within {self.core_share:.1%} of a core), "
                    f"{cost['cpu_ms_per_evaluation']:.1f} ms CPU each, {cost['cpu_ms_per_minute']:.0f} ms CPU per "
                    f"minute ({cost['cpu_share']:.2%} of a core), {cost['setup_cpu_ms']:.0f} ms to import the analysis")
        logger.info("tfdiag: %s", sentence)
        try:
            self.writer.append("note", task=self.writer.task, time_ns=time.time_ns(), level="info", message=sentence)
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            logger.warning("tfdiag: cannot record the live findings' cost (%r).", error)

    def pause_s(self) -> float:
        """Seconds until the next evaluation: ``interval_s``, or longer where the last one
        used more CPU than ``core_share`` allows in that time, so that every evaluation and
        the pause after it stay within the share (an evaluation of 40 ms at the 0.1 % of
        ``collectors/budget.py``: the next one 40 s later)."""
        return max(self.interval_s, self._last_cpu_ns / 1e9 / self.core_share)

    def cost(self) -> dict:
        """Evaluations so far and their thread CPU time: per evaluation, per minute of the
        thread's life, and as a share of one core."""
        alive_ns = max(time.monotonic_ns() - self._started_ns, 1)
        per_evaluation = self.cpu_ns / self.ticks / 1e6 if self.ticks else 0.0
        return {"evaluations": self.ticks, "cpu_ms_per_evaluation": per_evaluation,
                "seconds_apart": alive_ns / 1e9 / self.ticks if self.ticks else 0.0,
                "cpu_ms_per_minute": self.cpu_ns / alive_ns * 60e3, "cpu_share": self.cpu_ns / alive_ns,
                "setup_cpu_ms": self.setup_cpu_ns / 1e6, "transitions": self.transitions}

    def _run(self) -> None:
        begin = time.thread_time_ns()
        try:
            from tfdiag.analysis.live import LiveFindings  # here only: see the module docstring

            live = LiveFindings(self.logdir)
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            logger.warning("tfdiag: live findings are off: cannot start the analysis (%r).", error)
            return
        self.setup_cpu_ns = time.thread_time_ns() - begin
        while not self._done.wait(self.pause_s()) and not self.writer.closed:
            if self.paused():
                continue
            begin = time.thread_time_ns()
            try:
                with budget.charged("live"):
                    self.before_evaluation()
                    self.writer.flush()  # what this task appended so far, in its file for the window
                    transitions = live.evaluate()
                for transition in transitions:
                    announce(transition.message)
                    self.writer.append("live_finding", **transition.record(self.writer.task))
            except Exception as error:  # noqa: BLE001
                logger.warning("tfdiag: live findings stopped after an error: %r", error)
                return
            finally:
                self._last_cpu_ns = time.thread_time_ns() - begin
                self.cpu_ns += self._last_cpu_ns
                self.ticks += 1
            self.transitions += len(transitions)
