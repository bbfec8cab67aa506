"""Liveness of the tasks that run no collector: is each one's TensorFlow server answering?

A task that runs tfdiag says it is alive with its heartbeats. A parameter server of a
TF1 session job runs none, nor do the workers and ps of a ParameterServerStrategy job
(only the coordinator does): when one freezes, the tasks that wait on it stop and the
only sign in the log would be tasks that stopped. :class:`LivenessProbe` asks each such task's
gRPC server for its status (``tf_internals.server_status``) every ``interval_s``, from
a daemon thread, and writes one ``liveness`` row per check: answered (the process runs),
no answer within ``timeout_s`` (frozen or hung: the kernel still accepts the
connection), or refused (nothing listens: the process is gone).

A check of a ps is also a round trip to it over the network path the workers use
(through whatever delays that path), at a fifth of an RPC probe's cost: two answers in a
row that took ``SLOW_RATIO`` times the ps's usual and ``SLOW_FLOOR_S`` more
(``onsets.Onsets``), each in a round where a peer ps (if there is one) answered in its
usual band, are handed to ``on_link_change`` (the probe's ``look_closer``), again
every ``SLOW_AGAIN_EVERY`` slow answers while they stay slow, and once more at the first
answer back at the usual: a link that turns slow has the probe's round trips within
seconds, and one that is fast again has them for the live finding to clear, while the
probe's own turn comes every 8-32 s. A ps whose answer read slow is asked again
``RECHECK_AFTER_S`` later, not a round later: a spike of jitter is over by then, a slow
link is not; its peers are asked again with it. A round in which every peer's answer was
slow too says nothing about the link (the host was busy: a clean ps_ctl run's answers
read 10-16 ms at the 90th percentile, 1 ms at the median; judged alone, that run's
answers call a closer look 7.4 times a minute, beside their peers 3.1 times:
``python benchmarks/micro.py liveness_calls RUN``; a 10 ms delay in front of one ps
leaves its peers' answers fast). A worker's answers are not read so: its server answers
from the threads its training keeps busy, and read 3x its usual twice in a row about
every 10 s on a clean ps_ctl run (the slow-link detector leaves links to workers out for
the same reason).

A check costs one small RPC on the target (its device list) and none on the training
thread, but about ``CHECK_CPU_S`` of this process's CPU (the call and gRPC's own threads:
``python -m benchmarks.micro collector_cost --only liveness``). Rounds come every
``interval_s``, or further apart when a round of many tasks would cost more than the
``liveness`` share of a core (``budget``): a coordinator of 100 workers checks each one
every 100 s, not every 5 s, and so names a frozen one later.

Example:
    >>> probe = LivenessProbe(writer, {"ps:0": "127.0.0.1:2222"}).start()  # doctest: +SKIP
    >>> probe.stop()  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from tfdiag.collectors import tf_internals
from tfdiag.collectors.budget import COMPONENTS, charged
from tfdiag.collectors.onsets import Onsets
from tfdiag.events import task_name

logger = logging.getLogger("tfdiag")

# Checks come more often than heartbeats (5 s): a silent ps is seen as soon as a stopped
# worker, and a link that turned slow within seconds.
LIVENESS_EVERY_S = 2.0
# A live server answers a status request in milliseconds, even under load; one that has
# not answered in this long is not running.
LIVENESS_TIMEOUT_S = 2.0
STOP_TIMEOUT_S = LIVENESS_TIMEOUT_S + 1.0
# Process CPU of one check with its row written: 502 µs over 1,503 checks of 4 local servers
# by a running probe (272 µs of it on the checking thread, the rest on gRPC's); the call alone
# 290-305 µs (benchmarks/costs/collectors.py). 4 tasks every 2 s take 0.1 % of a core.
CHECK_CPU_S = 0.0005
# A link turned slow: SLOW_AFTER answers in a row took SLOW_RATIO times the task's usual
# and SLOW_FLOOR_S more (the RPC probe's band, rpc_probe.MOVE_RATIO and MOVE_FLOOR_S, the
# slow-link detector's bars), the second asked RECHECK_AFTER_S after the first. One is
# jitter: a clean ps_ctl run's checks take 1 ms at the median and 10-16 ms at the 90th
# percentile on a 2-core host (85da869); behind a 10 ms delay, at least 11.8.
SLOW_RATIO = 3.0
SLOW_FLOOR_S = 0.002
SLOW_AFTER = 2
RECHECK_AFTER_S = 0.2
# ... and handed on again at every third slow answer while they stay slow (about 6 s on):
# a pair of slow answers of jitter just before a delay begins starts a spell the delay
# continues, and the one closer look it called saw the link before the delay (a missed
# onset of ps_ctl's slow-link run at f1e9332). Not at every answer: each closer
# look spends the probe's credit, and a spent credit cuts the next one short.
SLOW_AGAIN_EVERY = 3


def round_every_s(tasks: int, interval_s: float = LIVENESS_EVERY_S) -> float:
    """Seconds between rounds of checks of ``tasks`` tasks: ``interval_s``, or longer when a
    round would take more than the ``liveness`` share of a core.

    >>> round_every_s(4), round_every_s(100)
    (2.0, 50.0)
    """
    return max(interval_s, tasks * CHECK_CPU_S / COMPONENTS["liveness"].core_share)


def unwatched_tasks(cluster: dict, jobs: tuple[str, ...] = ("ps",)) -> dict[str, str]:
    """``{task: address}`` of the tasks of ``cluster`` in ``jobs``: those that run no collector.

    >>> unwatched_tasks({"ps": ["h:1", "h:2"], "worker": ["h:3"]})
    {'ps:0': 'h:1', 'ps:1': 'h:2'}
    >>> unwatched_tasks({"ps": ["h:1"], "worker": ["h:3"], "chief": ["h:4"]}, jobs=("worker", "ps"))
    {'worker:0': 'h:3', 'ps:0': 'h:1'}
    """
    return {task_name(job, index): address for job in jobs for index, address in enumerate(cluster.get(job) or ())}


class LivenessProbe:
    """Checks every task of ``targets`` (``{task: address}``) every ``interval_s`` (or as
    ``round_every_s`` spaces the rounds); one ``liveness`` row per check, through ``writer``.

    ``on_link_change`` (an attribute, set once the RPC probe exists) is called on the checking
    thread with a ps whose answers turned slow, stayed slow, or came back to its usual.
    """

    def __init__(self, writer, targets: dict[str, str], interval_s: float = LIVENESS_EVERY_S,
                 timeout_s: float = LIVENESS_TIMEOUT_S):
        self.writer = writer
        self.targets = dict(targets)
        self.interval_s = round_every_s(len(self.targets), interval_s)
        self.timeout_s = timeout_s
        self.checks = 0
        self.on_link_change: Callable[[str], None] | None = None
        self._answers = Onsets(SLOW_RATIO, SLOW_FLOOR_S, after=SLOW_AFTER, again_every=SLOW_AGAIN_EVERY, warm_up=3)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tfdiag-liveness", daemon=True)

    def start(self) -> LivenessProbe:
        if self.targets:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join(STOP_TIMEOUT_S)

    def _run(self) -> None:
        try:
            checkers = {task: tf_internals.server_status(address) for task, address in self.targets.items()}
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            logger.warning("tfdiag: the liveness check of %s is off (%r).", ", ".join(self.targets), error)
            return
        parameter_servers = [task for task in checkers if task.startswith("ps:")]
        while not self._done.is_set():
            self._round(checkers)
            if any(0 < self._answers.slow_in_a_row(task) < SLOW_AFTER for task in parameter_servers) \
                    and not self._done.wait(RECHECK_AFTER_S):
                self._round({task: checkers[task] for task in parameter_servers})  # beside its peers again
            self._done.wait(self.interval_s)

    def _round(self, checkers: dict) -> None:
        """Checks each task of ``checkers``, then judges the ps answers of the round."""
        answers = {}
        with charged("liveness"):
            for task, check in checkers.items():
                if self._done.is_set():
                    return
                took_s = self._check(task, check)
                if took_s is not None and task.startswith("ps:"):
                    answers[task] = took_s
        self._judge(answers)

    def _check(self, task: str, check) -> float | None:
        """One check, recorded; its answer's seconds where the server answered."""
        sent_ns = time.time_ns()
        begin = time.perf_counter_ns()
        status = check(self.timeout_s)
        took_ns = time.perf_counter_ns() - begin
        try:
            self.writer.append("liveness", task=self.writer.task, time_ns=sent_ns, target=task,
                               status=status, duration_ns=took_ns)
            self.checks += 1
        except Exception as error:  # noqa: BLE001 - a collector never breaks training
            logger.warning("tfdiag: cannot record a liveness check (%r); the check is off.", error)
            self._done.set()
            return None
        return took_ns / 1e9 if status == "OK" else None

    def _judge(self, answers: dict[str, float]) -> None:
        """Folds a round's ps answers (``{ps: seconds}``) into their onsets, each beside its
        peers: where every peer's answer was slow too, the host was busy, and the round says
        nothing about the link."""
        slow = {task: self._answers.is_slow(task, took_s) for task, took_s in answers.items()}  # before folding any
        for task, took_s in answers.items():
            if len(answers) > 1 and all(slow[peer] for peer in answers if peer != task):
                continue
            if self._answers.change(task, took_s) and self.on_link_change is not None:
                try:
                    self.on_link_change(task)
                except Exception as error:  # noqa: BLE001
                    logger.warning("tfdiag: cannot hand on a link's change to %s (%r).", task, error)
