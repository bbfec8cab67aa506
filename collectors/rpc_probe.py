"""RPC probe: round-trip time and clock offset through TensorFlow's own gRPC channels.

A probe is a ``tf.function`` that reads ``tf.timestamp()`` on this task (``send``),
then, under ``tf.device`` of a remote task, ``tf.timestamp()`` there (``remote``), then
locally again (``recv``); control dependencies order the three reads, so the remote
read happens after ``send`` left and ``recv`` after the remote value arrived. That is
one ``rpc`` record: ``recv - send`` is the round trip through the same channels the
training uses, ``remote - (send + recv) / 2`` the clock offset (Cristian's method, good
to within half the round trip).

:class:`RpcProber` runs the probes on a background thread: from this process to each
target task, and, for each ``relays`` pair ``(worker, ps)``, a probe whose ``send`` and
``recv`` are read on the worker (the function is partitioned: its worker part talks to
the ps directly, over the worker's own channel), so the coordinator of
ParameterServerStrategy, connected to every task, measures every worker → ps link
without taking a slot in the closure queue (a probe closure would wait behind every
step the loop scheduled ahead).

Every ``payload_every``-th probe of a target also moves ``payload_bytes`` from the
remote task (a tensor filled there from its timestamp, so nothing can fold it into a
constant); the analysis turns the extra time into bandwidth.

A failing target (a dead ps) is recorded once as a ``note`` and then backed off
exponentially, up to ``MAX_BACKOFF_S``; relayed probes skip a worker or ps whose direct
probe failed. Nothing raises into training.
"""

from __future__ import annotations

import logging
import threading
import time

from tfdiag.errors import InvalidOptionError

logger = logging.getLogger("tfdiag")

DEFAULT_INTERVAL_S = 1.0
# Every 10th probe carries 1 MB: at 1 Hz that is 0.1 MB/s per link, far below any link
# the analysis would call slow, and the bandwidth estimate still gets ~6 samples a minute.
DEFAULT_PAYLOAD_EVERY = 10
DEFAULT_PAYLOAD_BYTES = 1 << 20
MAX_BACKOFF_S = 60.0


def device_of(task: str) -> str:
    """The CPU device of a task: ``device_of("ps:1") == "/job:ps/replica:0/task:1/device:CPU:0"``."""
    job, _, index = task.partition(":")
    return f"/job:{job}/replica:0/task:{int(index or 0)}/device:CPU:0"


def task_of_device(device: str) -> str | None:
    """The task of a device string: ``"/job:ps/replica:0/task:1/device:CPU:0"`` → ``"ps:1"``.

    >>> task_of_device("/job:ps/replica:0/task:1/device:CPU:0")
    'ps:1'
    >>> task_of_device("/device:CPU:0") is None
    True
    """
    job = index = None
    for part in (device or "").split("/"):
        key, _, value = part.partition(":")
        if key == "job":
            job = value
        elif key == "task":
            index = value
    if not job:
        return None
    return f"{job}:{int(index or 0)}"


def cluster_tasks(cluster: dict, jobs=("worker", "ps", "chief", "evaluator")) -> list[str]:
    """Task names of ``cluster`` (``{job: [address, ...]}``) for ``jobs``, in that order."""
    tasks = []
    for job in jobs:
        tasks.extend(f"{job}:{i}" for i in range(len(cluster.get(job) or ())))
    return tasks


def _tf():
    import tensorflow as tf  # lazy: only probers that run need TensorFlow

    return tf


def probe_chain(tf, remote_devices, payload_elements: int = 0, local_device: str | None = None):
    """Traces, inside a ``tf.function``, one probe per remote device, one after another.

    Returns a float64 vector ``[send_0, remote_0, recv_0, send_1, ...]`` in seconds. With
    ``payload_elements`` > 0 each remote task also fills that many float64 and ships
    them to this task before ``recv`` is read. ``local_device`` moves "this task" to
    another device (a worker, when the coordinator probes worker → ps).
    """
    import contextlib

    def local():
        return tf.device(local_device) if local_device else contextlib.nullcontext()

    times = []
    previous = []
    for device in remote_devices:
        with local(), tf.control_dependencies(previous):
            send = tf.timestamp()
        with tf.device(device), tf.control_dependencies([send]):
            remote = tf.timestamp()
            payload = tf.fill([payload_elements], remote) if payload_elements else None
        arrived = [remote]
        with local():
            if payload is not None:
                arrived.append(tf.identity(payload))  # placed here: the bytes cross the link
            with tf.control_dependencies(arrived):
                recv = tf.timestamp()
        times.extend([send, remote, recv])
        previous = [recv]
    return tf.stack(times)


class _ProbeFn:
    """The Python body of one probe ``tf.function``.

    A callable object, not a lambda: ``tf.function`` counts traces per code object, so
    the probes of several targets made from one lambda would trip its "excessive
    retracing" warning although each traces once.
    """

    def __init__(self, devices, payload_elements: int, worker_index: bool = False, local_device: str | None = None):
        self.devices = list(devices)
        self.payload_elements = payload_elements
        self.worker_index = worker_index
        self.local_device = local_device

    def __call__(self):
        tf = _tf()
        times = probe_chain(tf, self.devices, self.payload_elements, self.local_device)
        if not self.worker_index:
            return times
        index = tf.cast(tf.distribute.coordinator.experimental_get_current_worker_index(), tf.float64)
        return tf.concat([[index], times], axis=0)


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


class _ProberBase:
    """A daemon thread that calls ``_probe_once`` every ``interval_s`` until stopped."""

    thread_name = "tfdiag-rpc-probe"

    def __init__(self, writer, src: str, interval_s: float = DEFAULT_INTERVAL_S,
                 payload_every: int = DEFAULT_PAYLOAD_EVERY, payload_bytes: int = DEFAULT_PAYLOAD_BYTES):
        if interval_s is None or interval_s <= 0:
            raise InvalidOptionError(f"Invalid value for argument `probe_interval_s`. Expected > 0. Received: {interval_s!r}")
        self.writer = writer
        self.src = src
        self.interval_s = float(interval_s)
        self.payload_every = int(payload_every or 0)
        self.payload_elements = max(int(payload_bytes or 0) // 8, 0)
        self.probes = 0
        self.records = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._noted: set[str] = set()

    def start(self) -> "_ProberBase":
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stops the thread (waits up to ``timeout_s`` for a probe in flight)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        # The first probe waits one interval: training setup (tracing, the first closures)
        # comes first, and a probe then measures the steady state.
        while not self._stop.wait(self.interval_s):
            try:
                self._probe_once()
            except Exception as error:  # noqa: BLE001 - a collector never breaks training
                self._note_once("probe", f"tfdiag: RPC probe from {self.src} failed: {error!r}; retrying later")
                if self._stop.wait(min(MAX_BACKOFF_S, 10 * self.interval_s)):
                    return
            self.probes += 1

    def _payload_now(self) -> bool:
        return bool(self.payload_every and self.payload_elements and self.probes % self.payload_every
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

    def _probe_once(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class RpcProber(_ProberBase):
    """Probes ``targets`` (task names) from this process, one ``tf.function`` per target.

    Args:
        writer: the ``TaskWriter`` of this task.
        src: this task's name (the records' ``src``).
        targets: task names to probe, e.g. ``["worker:0", "ps:0", "ps:1"]``.
        interval_s: seconds between probe rounds (each round probes every target once).
        payload_every: every this many rounds, probes also move ``payload_bytes``; 0: never.
        payload_bytes: the payload size.

    Example:
        >>> prober = RpcProber(writer, "chief:0", ["ps:0", "worker:0"]).start()  # doctest: +SKIP
        >>> prober.stop()  # doctest: +SKIP
    """

    def __init__(self, writer, src: str, targets, interval_s: float = DEFAULT_INTERVAL_S,
                 payload_every: int = DEFAULT_PAYLOAD_EVERY, payload_bytes: int = DEFAULT_PAYLOAD_BYTES,
                 relays=(), paused=None):
        super().__init__(writer, src, interval_s, payload_every, payload_bytes)
        # While ``paused()`` is true (the coordinator is recovering from a failed task and
        # re-creating its remote contexts) no probe runs.
        self.paused = paused or (lambda: False)
        self.targets = [t for t in targets if t != src]
        # (relay, dst): probes that run on `relay` (a worker) towards `dst` (a ps), driven
        # from here; their timestamps are on the relay's clock and src is the relay.
        self.relays = [(relay, dst) for relay, dst in relays if relay != dst]
        self._functions: dict[tuple, object] = {}
        self._backoff = {target: _Backoff() for target in self.targets}
        self._backoff.update({pair: _Backoff() for pair in self.relays})
        self._reached: set[str] = set()

    def reachable(self, target: str) -> bool:
        """Whether the last probe of ``target`` succeeded."""
        return target in self._reached

    def probe(self, target: str, payload: bool = False, relay: str | None = None) -> tuple[float, float, float]:
        """Runs one probe to ``target`` (from ``relay`` if given) now; returns ``(send, remote, recv)`` in s."""
        key = (target, payload, relay)
        function = self._functions.get(key)
        if function is None:
            elements = self.payload_elements if payload else 0
            local = device_of(relay) if relay else None
            function = self._functions[key] = _tf().function(_ProbeFn([device_of(target)], elements, local_device=local))
        send, remote, recv = function().numpy().tolist()
        return send, remote, recv

    def _probe_once(self) -> None:
        if self.paused():
            return
        payload = self._payload_now()
        for relay, target in [(None, t) for t in self.targets] + self.relays:
            if self._stop.is_set():
                return
            if relay is not None and not (self.reachable(relay) and self.reachable(target)):
                continue  # a dead relay or target: its direct probe is already backing off
            key = target if relay is None else (relay, target)
            src = relay or self.src
            backoff = self._backoff[key]
            if time.monotonic() < backoff.next_try:
                continue
            try:
                send, remote, recv = self.probe(target, payload, relay)
            except Exception as error:  # noqa: BLE001 - a dead task must not stop the others
                if relay is None:
                    self._reached.discard(target)
                delay = backoff.failed(time.monotonic(), self.interval_s)
                self._note_once(f"target:{key}", f"tfdiag: RPC probe {src} -> {target} failed "
                                f"({type(error).__name__}: {str(error)[:300]}); backing off (next try in {delay:.0f} s)")
                continue
            if backoff.failures:
                self._noted.discard(f"target:{key}")
            backoff.ok()
            if relay is None:
                self._reached.add(target)
            self._write(src, target, send, remote, recv, payload)
