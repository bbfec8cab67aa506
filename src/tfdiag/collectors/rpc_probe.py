"""RPC probe: round-trip time and clock offset through TensorFlow's own gRPC channels.

A probe (``probe_function``) reads the time on this task, on a remote task, and here
again, through TensorFlow's own channels: one ``rpc`` record, a round trip and a clock
offset.

:class:`RpcProber` runs the probes on a background thread: from this process to each
target task, and, for each ``relays`` pair ``(worker, ps)``, a probe whose ``send`` and
``recv`` are read on the worker (the function is partitioned: its worker part talks to
the ps directly, over the worker's own channel), so the coordinator of
ParameterServerStrategy, connected to every task, measures every worker → ps link
without taking a slot in the closure queue (a probe closure would wait behind every
step the loop scheduled ahead).

After ``FULL_PASSES`` rounds of every link, a round probes at most ``legs_per_round``
links, taking them in turn, so the probe's cost per second does not grow with the
cluster: each probe of a link costs 2-3 ms of CPU between the two ends, and all eight
links of 2 workers × 2 ps every second would take 1.3 % of a 2-core machine
(``benchmarks/micro.py probe_cost``). While the links read as before, pass after pass, the
pause between rounds grows up to ``MAX_SLOWDOWN`` times ``interval_s``; a round trip that
moved brings it back (``_Cadence``). When a link may have slowed, the probe looks closer
(``look_closer``, which the liveness checks call when a ps's answers turned slow,
``liveness``): the next ``CLOSER_ROUNDS`` rounds probe the links from this task to every
ps, ``CLOSER_PAUSE_S`` apart (the workers' links to them keep their turns: a probe relayed
through a worker costs as much, and the live judgement needs one source). So a link that turns slow between two of its
turns (every 8-32 s on 2 workers x 2 ps) has, within seconds, the four fresh round trips
beside its peers' that a live slow-link screen needs, while a clean run pays only for the
liveness checks' rare false alarms. Closer looks spend a credit that accrues at the
``probe`` budget's share of a core (``budget``), up to ``CLOSER_BURST_NS``: links that
slow and recover every few seconds cost at most the probe's share again, not a multiple
of it.
Every ``payload_every``-th pass over the links also moves ``payload_bytes`` from each
remote task (a tensor filled there from its timestamp, so nothing can fold it into a
constant); the analysis turns the extra time into bandwidth.

Every probe function (with and without the payload) is traced and run once by
:meth:`RpcProber.prepare`, which the instrumented coordinator calls before training
dispatches its first closure, within a time budget. Tracing a function registers it with
every task, and under ParameterServerStrategy (which turns streaming enqueue off) that is
one blocking call per task made while holding the GIL: a task stopped (SIGSTOP) in that
moment freezes the whole process until it runs again. So a probe asks every task for
``tf.timestamp()`` first (an eager op, which waits without the GIL, so ``prepare``'s
deadline holds), and ``prepare`` stops at the first probe that does not return in
time. After ``prepare`` no probe traces or registers anything; a link whose function
could not be prepared is left out, with a note. Probe functions are called through
``tf_internals.call_uncancelled``, outside ``ClusterCoordinator``'s cancellation: a
probe that failed as a worker died, while a closure was being dispatched, cancelled the
closure queue and ended the run.

A failing target (a dead ps) is recorded once as a ``note`` and then backed off
exponentially, up to ``MAX_BACKOFF_S``; relayed probes skip a worker or ps whose direct
probe failed. A probe that does not return within ``PROBE_TIMEOUT_S`` is abandoned to
its own daemon thread and counts as a failure; its link is not probed again until that
thread returns. Nothing raises into or waits on training.
"""

from __future__ import annotations

import logging
import threading
import time

from tfdiag.collectors import tf_internals
from tfdiag.collectors.bounded import LateCallError
from tfdiag.collectors.budget import COMPONENTS, LEDGER, MeteredCalls, charged
from tfdiag.collectors.probe_function import traced_probe
from tfdiag.errors import InvalidOptionError
from tfdiag.events import device_of

logger = logging.getLogger("tfdiag")

DEFAULT_INTERVAL_S = 1.0
# One link a round: every link of a 2 x 2 ps cluster (8 links) is probed every 8 s, at
# 0.1 % of a 2-core machine's CPU on idle servers (benchmarks/micro.py probe_cost); with it,
# ps_ctl's collectors cost 0.3 % of throughput (benchmarks/overhead_ab.py).
DEFAULT_LEGS_PER_ROUND = 1
# The first rounds probe every link, so that a run of a few seconds still gets this many
# round trips per link (what the slow-link detector needs to judge one).
FULL_PASSES = 3
# After the first passes the pause between rounds grows while the links read as before:
# each pass over the links in which no link moved doubles the pause, up to MAX_SLOWDOWN
# times ``interval_s``; a link moved when MOVED_AFTER of its round trips in a row read
# MOVE_RATIO times its typical reading or more (or 1/MOVE_RATIO or less) and at least
# MOVE_FLOOR_S away from it (fewer are jitter), and that brings the pause back at once.
# The band is the slow-link detector's own notion of a slow link (3x its peers' round
# trip and 2 ms more, analysis/detectors/slow_link.py): a busy job's own jitter is wide
# (ps_ctl's links under its load read 3-5 ms at the median and 11-24 ms at the 90th
# percentile), and a narrower band would read that jitter as moves and keep the pause near
# ``interval_s`` (``benchmarks/micro.py probe_cadence`` replays a run's round trips through the rule). On a
# steady cluster of 8 links each link is then probed every 32 s, at a quarter of the
# cost; a link that turns slow is probed at the full rate again from its third slow probe.
MAX_SLOWDOWN = 4
MOVE_RATIO = 3.0
MOVE_FLOOR_S = 0.002
MOVED_AFTER = 3
# Rounds that probe the links to a ps and its peers once one may have slowed
# (``look_closer``), CLOSER_PAUSE_S apart, within about two seconds: at least the four
# fresh round trips of each that the live screen judges a link on (analysis/live_screen.py
# LINK_SAMPLES). Five, because each link is judged by its fastest: on a loaded 2-core host
# the fastest of a peer's three read 6-13 ms on some closer looks of ps_ctl's slow-link
# run, against 1-2 ms usually, hiding a 10 ms delay (3x its peers is the bar).
CLOSER_ROUNDS = 5
CLOSER_PAUSE_S = 0.5
# The most CPU closer looks may spend ahead of their share: a few closer looks at 2 ps (5
# rounds of a probe to each, 1-2 ms of this process's CPU apiece, more on a busy
# coordinator, with the round's own thread). At 120 ms, ps_ctl's slow-link run at 198bdbe
# cut two of its closer looks short after two rounds (a delay coming on every 30 s, and the
# rare false alarms of the liveness checks between); the share (0.2 %) accrues 200 ms in
# under two minutes.
CLOSER_BURST_NS = 200_000_000
# Every 10th probe of a link carries 1 MB: far below any link the analysis would call
# slow, and the bandwidth estimate still gets a sample per link every 10 passes.
DEFAULT_PAYLOAD_EVERY = 10
DEFAULT_PAYLOAD_BYTES = 1 << 20
MAX_BACKOFF_S = 60.0
# A probe that has not returned after this long is abandoned to its thread and its link
# treated as down (a round trip takes milliseconds; a 1 MB payload, well under a second).
PROBE_TIMEOUT_S = 5.0
# ``prepare`` runs on the thread that instruments the coordinator, before training: it
# never takes longer.
PREPARE_BUDGET_S = 15.0


class _Cadence:
    """The pause between probe rounds, adapted to how much the links' readings still change."""

    def __init__(self, interval_s: float):
        self.interval_s = interval_s
        self.slowdown = 1
        self._typical: dict = {}  # leg -> typical round trip (s): a moving geometric mean of its readings in band
        self._outlying: dict = {}  # leg -> its readings out of band in a row, up to now
        self._moved = False

    def observe(self, leg, rtt_s: float) -> None:
        """A round trip without payload of ``leg``. ``MOVED_AFTER`` in a row out of its
        typical band mean the link changed: the pause goes back to ``interval_s``."""
        if rtt_s <= 0:  # below the clock's resolution: says nothing
            return
        typical = self._typical.get(leg)
        if typical is None:
            self._typical[leg] = rtt_s
        elif not _out_of_band(typical, rtt_s):
            self._typical[leg] = typical ** 0.75 * rtt_s ** 0.25
            self._outlying.pop(leg, None)
        elif self._outlying.get(leg, 0) + 1 >= MOVED_AFTER:
            self._typical[leg] = rtt_s
            self._outlying.pop(leg, None)
            self._moved = True
            self.slowdown = 1
        else:
            self._outlying[leg] = self._outlying.get(leg, 0) + 1

    def pass_done(self) -> None:
        """A pass over every link ended: slow down if none of its readings moved."""
        if not self._moved:
            self.slowdown = min(2 * self.slowdown, MAX_SLOWDOWN)
        self._moved = False

    def pause_s(self) -> float:
        return self.interval_s * self.slowdown


def _out_of_band(typical_s: float, rtt_s: float) -> bool:
    """Whether one round trip reads out of its link's typical band (``MOVE_RATIO``, ``MOVE_FLOOR_S``).

    >>> [_out_of_band(0.003, rtt_s) for rtt_s in (0.012, 0.008, 0.0009, 0.004)]
    [True, False, True, False]
    >>> _out_of_band(0.0005, 0.002)  # 4x, but under 2 ms away
    False
    """
    if abs(rtt_s - typical_s) < MOVE_FLOOR_S:
        return False
    return rtt_s >= MOVE_RATIO * typical_s or rtt_s * MOVE_RATIO <= typical_s


def _ns(seconds: float) -> int:
    return int(round(float(seconds) * 1e9))


class _Backoff:
    """Per-target failure state: next time to try, and whether the failure was logged."""

    def __init__(self):
        self.failures = 0
        self.next_try = 0.0

    def failed(self, now: float, interval_s: float) -> float:
        self.failures += 1
        delay = min(MAX_BACKOFF_S, interval_s * (2 ** self.failures))
        self.next_try = now + delay
        return delay

    def ok(self) -> None:
        self.failures = 0
        self.next_try = 0.0


class RpcProber:
    """Probes ``targets`` (task names) from this process, and ``relays``, once per round.

    A round probes every target and relay in the first ``FULL_PASSES`` rounds, then
    the next ``legs_per_round`` in turn (those not backing off), each with a call of its
    own: in one call, a probe that follows a slow one would hide the latency of its
    request (the receiving side posts its request for the remote value when the call
    starts; through a 25 ms link, a second probe of it read 15 ms). After the first
    rounds every link is probed once every ``interval_s * ceil(links / legs_per_round)``
    seconds, up to ``MAX_SLOWDOWN`` times less often while its readings hold still.

    Args:
        writer: the ``TaskWriter`` of this task.
        src: this task's name (the records' ``src``).
        targets: task names to probe, e.g. ``["worker:0", "ps:0", "ps:1"]``.
        interval_s: seconds between probe rounds.
        payload_every: every this many passes over the links, probes also move
            ``payload_bytes``; 0: never.
        payload_bytes: the payload size.
        relays: ``(worker, ps)`` pairs to probe from the worker (see the module docstring).
        paused: a callable; while it returns true no round runs.
        legs_per_round: how many targets and relays one round probes.

    Example:
        >>> prober = RpcProber(writer, "chief:0", ["ps:0", "worker:0"]).start()  # doctest: +SKIP
        >>> prober.stop()  # doctest: +SKIP
    """

    def __init__(self, writer, src: str, targets, interval_s: float = DEFAULT_INTERVAL_S,
                 payload_every: int = DEFAULT_PAYLOAD_EVERY, payload_bytes: int = DEFAULT_PAYLOAD_BYTES,
                 relays=(), paused=None, legs_per_round: int = DEFAULT_LEGS_PER_ROUND):
        if interval_s is None or interval_s <= 0:
            raise InvalidOptionError(f"Invalid value for argument `probe_interval_s`. Expected > 0. Received: {interval_s!r}")
        self.writer = writer
        self.src = src
        self.interval_s = float(interval_s)
        self.payload_every = int(payload_every or 0)
        self.payload_elements = max(int(payload_bytes or 0) // 8, 0)
        self.probes = 0  # rounds run
        self.passes = 0  # passes over every link (a round probes some of them)
        self.records = 0
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() and look_closer(): the pause ends
        self._thread: threading.Thread | None = None
        self._noted: set[str] = set()
        self.prepared = threading.Event()  # set once prepare() has run: no function is made after
        if legs_per_round < 1:
            raise InvalidOptionError(f"Invalid value for argument `legs_per_round`. Expected >= 1. "
                                     f"Received: {legs_per_round!r}")
        self.legs_per_round = legs_per_round
        # While ``paused()`` is true (the coordinator is recovering from a failed task and
        # re-creating its remote contexts) no probe runs.
        self.paused = paused or (lambda: False)
        self.targets = [t for t in targets if t != src]
        self._cluster = list(self.targets)  # every task a new function is registered with
        # (relay, dst): probes that run on `relay` (a worker) towards `dst` (a ps), driven
        # from here; their timestamps are on the relay's clock and src is the relay.
        self.relays = [(relay, dst) for relay, dst in relays if relay != dst]
        self._legs = [(None, target) for target in self.targets] + self.relays
        self._next_leg = 0  # where the next round starts in self._legs
        self._closer: dict[tuple, int] = {}  # leg -> rounds that still probe it beside their turn
        self._asked: frozenset[str] | None = None  # look_closer()'s targets, not yet taken
        self._credit_ns = CLOSER_BURST_NS  # CPU closer looks may still spend (_spend)
        self._credited_at_ns: int | None = None
        self._functions: dict[tuple, object] = {}
        self._backoff = {leg: _Backoff() for leg in self._legs}
        self._reached: set[str] = set()
        self._down: set[str] = set()
        self._calls = MeteredCalls("tfdiag-probe", "probe")
        self._cadence = _Cadence(self.interval_s)

    def start(self) -> "RpcProber":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tfdiag-rpc-probe", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stops the thread (waits up to ``timeout_s`` for a probe in flight)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        # The first round runs at once: the coordinator starts the probe only once its
        # first closure has come back, after the training's set-up.
        while not self._stop.is_set():
            charged_before = LEDGER.charged_ns("probe")  # this thread's and the probe calls' own
            try:
                with charged("probe"):
                    closer_share = self._probe_once()
                pause_s = self._pause_s()
            except Exception as error:  # noqa: BLE001 - a collector never breaks training
                self._note_once("probe", f"tfdiag: RPC probe from {self.src} failed: {error!r}; retrying later")
                pause_s, closer_share = min(MAX_BACKOFF_S, 10 * self.interval_s), 0.0
            self._spend(int((LEDGER.charged_ns("probe") - charged_before) * closer_share))
            self.probes += 1
            self._wake.wait(pause_s)
            self._wake.clear()

    def prepare(self, timeout_s: float = PROBE_TIMEOUT_S, budget_s: float = PREPARE_BUDGET_S) -> int:
        """Traces and runs every probe function once, now; returns how many links are ready.

        Call it before training dispatches work (see the module docstring). Each run is a
        probe like any other and is written as one (a run of a few seconds needs every
        sample it can get). A link whose probe fails is left out, with a note. It takes at
        most ``budget_s``, and stops at the first probe that takes over ``timeout_s``: a
        task that does not answer holds up the registration of every function with the
        cluster, so the links not prepared by then are left out, with one note.
        Afterwards :meth:`probe` runs only the functions prepared here.
        """
        payloads = (False, True) if self.payload_every and self.payload_elements else (False,)
        deadline = time.monotonic() + budget_s
        ready = []
        for position, leg in enumerate(self._legs):
            stopped = None
            if deadline - time.monotonic() <= 0:
                stopped = f"preparing the probes took over {budget_s:g} s"
            else:
                try:
                    samples = [(payload, self._calls.call(
                        leg, lambda leg=leg, payload=payload: self.probe(leg, payload),
                        min(timeout_s, max(deadline - time.monotonic(), 0.0)))) for payload in payloads]
                except LateCallError as error:
                    stopped = f"a probe did not return in time ({error})"
                except Exception as error:  # noqa: BLE001 - a collector never breaks training
                    self._note_once(f"prepare:{leg}", f"tfdiag: RPC probe {leg[0] or self.src} -> {leg[1]} is off: "
                                    f"its probe could not be prepared ({type(error).__name__}: {str(error)[:300]})")
                    continue
            if stopped:
                late = ", ".join(f"{relay or self.src} -> {target}" for relay, target in self._legs[position:])
                self._note_once("prepare", f"tfdiag: RPC probes {late} are off: {stopped}")
                break
            ready.append(leg)
            for payload, times in samples:
                self._succeeded(leg, times, payload)
        self.relays = [leg for leg in self.relays if leg in ready]
        self.targets = [target for target in self.targets if (None, target) in ready]
        self._legs = ready
        self.prepared.set()
        return len(ready)

    def reachable(self, target: str) -> bool:
        """Whether the last probe of ``target`` succeeded."""
        return target in self._reached

    def probe(self, leg, payload: bool = False) -> tuple[float, float, float]:
        """Probes ``leg`` (a ``(relay or None, target)`` pair) now: ``(send, remote, recv)`` in seconds.

        Before :meth:`prepare` has finished, the first probe of a leg traces its function;
        after, a leg it did not prepare raises ``LookupError``.
        """
        key = (leg, payload)
        function = self._functions.get(key)
        if function is None:
            self._check_unprepared(leg, payload)
            # Tracing registers the function with every task, holding the GIL until each
            # has answered (a stopped task froze the whole process): ask each first,
            # without the GIL, where the caller's deadline can abandon the wait.
            self._every_task_answers()
            self._check_unprepared(leg, payload)  # prepare() may have given up meanwhile
            relay, target = leg
            elements = self.payload_elements if payload else 0
            function = traced_probe(device_of(relay) if relay else None, device_of(target), elements)
            self._functions[key] = function
        (times,) = tf_internals.call_uncancelled(function)
        send, remote, recv = times.numpy().tolist()
        return send, remote, recv

    def _check_unprepared(self, leg, payload: bool) -> None:
        if self.prepared.is_set():
            raise LookupError(f"no probe function was prepared for {leg} (payload: {payload})")

    def _every_task_answers(self) -> None:
        """Returns once every task of the cluster has answered ``tf.timestamp()`` (an eager op:
        nothing is registered), with its time or an error (a task gone: registering a
        function with it fails at once, it does not wait). On an executor of its own: a
        task frozen meanwhile holds up this thread only, not the closures' dispatch
        (``tf_internals.own_executor``)."""
        import tensorflow as tf  # lazy: only probers that run need TensorFlow

        for task in self._cluster:
            try:
                with tf_internals.own_executor(), tf.device(device_of(task)):
                    tf.timestamp().numpy()
            except tf.errors.OpError:
                continue

    def look_closer(self, targets) -> None:
        """A link to one of ``targets`` may have slowed: the next ``CLOSER_ROUNDS`` rounds probe
        the links from this task to every task of ``targets`` (the link beside its peers),
        the first at once, while the closer looks' credit lasts. Any thread may call it.

        Example:
            >>> prober.look_closer({"ps:0", "ps:1"})  # a ps answered slowly  # doctest: +SKIP
        """
        self._asked = frozenset(targets)
        self._wake.set()

    def _probe_once(self) -> float:
        """One round; returns the share of its probes that were closer looks."""
        if self.paused():
            return 0.0
        payload = self._payload_now()
        now = time.monotonic()
        turn, closer = self._next_legs()
        legs = [leg for leg in turn + closer if now >= self._backoff[leg].next_try
                and not (leg[0] is not None and {leg[0], leg[1]} & self._down)]  # a dead relay or target
        for leg in legs:
            if self._stop.is_set():
                break
            self._probe_leg(leg, payload)
        return len(closer) / max(len(turn) + len(closer), 1)

    def _next_legs(self) -> tuple[list, list]:
        """The legs of this round: all of them in the first passes, then the next
        ``legs_per_round`` in turn (a pass ends at the last); and those looked at closer."""
        start = self._next_leg
        size = len(self._legs) if self.passes < FULL_PASSES else self.legs_per_round
        legs = self._legs[start:start + size]
        self._next_leg = start + len(legs)
        if self._next_leg >= len(self._legs):
            self._next_leg = 0
            self.passes += 1
            if self.passes > FULL_PASSES:
                self._cadence.pass_done()
        asked, self._asked = self._asked, None
        if asked is not None:
            self._closer.update(dict.fromkeys([(None, target) for target in self.targets if target in asked],
                                              CLOSER_ROUNDS))
        if self._credit_ns <= 0:  # spent: the closer looks pending are dropped
            self._closer = {}
        closer = [leg for leg in self._closer if leg not in legs]
        self._closer = {leg: rounds - 1 for leg, rounds in self._closer.items() if rounds > 1}
        return legs, closer

    def _spend(self, cpu_ns: int) -> None:
        """Takes closer looks' CPU (their share of a round's, charged to ``probe``: this
        thread's and its calls') from their credit, which accrues at the ``probe`` budget's
        share of a core, up to ``CLOSER_BURST_NS`` ahead."""
        now_ns = time.monotonic_ns()
        accrued = (now_ns - (self._credited_at_ns or now_ns)) * COMPONENTS["probe"].core_share
        self._credit_ns = min(self._credit_ns + int(accrued), CLOSER_BURST_NS) - cpu_ns
        self._credited_at_ns = now_ns

    def _pause_s(self) -> float:
        if self._closer and self._credit_ns > 0:
            return min(CLOSER_PAUSE_S, self.interval_s)
        return self._cadence.pause_s() if self.passes >= FULL_PASSES else self.interval_s

    def _probe_leg(self, leg, payload: bool) -> None:
        relay, target = leg
        if relay is not None and {relay, target} & self._down:
            return  # its direct probe failed earlier in this round and is backing off
        try:
            times = self._calls.call(leg, lambda: self.probe(leg, payload), PROBE_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 - a dead or stuck task must not stop the others
            if relay is None:
                self._reached.discard(target)
                self._down.add(target)
            delay = self._backoff[leg].failed(time.monotonic(), self.interval_s)
            self._note_once(f"target:{leg}", f"tfdiag: RPC probe {relay or self.src} -> {target} failed "
                            f"({type(error).__name__}: {str(error)[:300]}); backing off (next try in {delay:.0f} s)")
            return
        self._succeeded(leg, times, payload)

    def _succeeded(self, leg, times: tuple[float, float, float], payload: bool) -> None:
        relay, target = leg
        backoff = self._backoff[leg]
        if backoff.failures:
            self._noted.discard(f"target:{leg}")
        backoff.ok()
        if relay is None:
            self._reached.add(target)
            self._down.discard(target)
        if not payload:
            self._cadence.observe(leg, times[2] - times[0])
        self._write(relay or self.src, target, *times, payload)

    def _payload_now(self) -> bool:
        return bool(self.payload_every and self.payload_elements and self.passes % self.payload_every
                    == self.payload_every - 1)

    def _write(self, src: str, dst: str, send: float, remote: float, recv: float, payload: bool) -> None:
        self.writer.append(
            "rpc", src=src, dst=dst, send_ns=_ns(send), remote_ns=_ns(remote), recv_ns=_ns(recv),
            payload_bytes=self.payload_elements * 8 if payload else 0,
        )
        self.records += 1

    def _note_once(self, key: str, message: str, level: str = "warning") -> None:
        if key in self._noted:
            return
        self._noted.add(key)
        logger.warning("%s", message)
        try:
            self.writer.append("note", task=self.src, time_ns=time.time_ns(), level=level, message=message)
        except Exception:  # noqa: BLE001
            pass
