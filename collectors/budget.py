"""The collectors' cost budget: what each part may cost, and a ledger of what it did cost.

Every collector component declares its expected CPU cost in :data:`COMPONENTS`, in the
unit that fits how it spends it: work on the training path or per closure scales with
the steps (``per_step_us``: CPU µs per step of ``model.fit`` or per closure of a
``ClusterCoordinator``), a background thread on a cadence does not (``core_share``: a
fraction of one core, whatever the step rate). ``benchmarks/overhead_ab.py`` measures
each component, reports it against its declaration, and exits non-zero when the whole
exceeds the budget. A new collector adds its entry here (and charges the ledger, below);
``live`` is the live findings thread's, which runs the detectors in the chief and
paces itself to stay within it.

The ledger: collector threads charge the CPU time of their own work to their component
(``time.thread_time_ns()`` before and after, about 1 µs a charge, background threads
only), so the accounting needs no quiet machine: it counts CPU, not throughput. What
it cannot see is the work TensorFlow does for a collector on its own threads and on the
remote tasks (a probe's round trip, the in-graph timing ops); the A/B phases of
``overhead_ab.py`` measure that, component by component (``--only``/``--without``).

Example:
    >>> with charged("system"):
    ...     pass  # one sample
    >>> LEDGER.snapshot()["system"] >= 0
    True
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from tfdiag.collectors.bounded import BoundedCalls


@dataclasses.dataclass(frozen=True)
class Budget:
    """One component's declared CPU cost.

    Attributes:
        per_step_us: CPU µs per step (``model.fit``) or per closure (coordinator).
        core_share: fraction of one core its background work takes, at default settings.
        jobs: where it runs: ``"ps"`` (instrumented coordinator), ``"fit"`` (the callback),
            or both.
        what: what the cost is, in a few words.
    """

    per_step_us: float = 0.0
    core_share: float = 0.0
    jobs: tuple[str, ...] = ("ps", "fit")
    what: str = ""


# Measured by benchmarks/overhead_ab.py (docs/benchmarks.md "Collector overhead") and
# rounded up; each entry is a ceiling the component is held to, not its average.
COMPONENTS: dict[str, Budget] = {
    "closure_timing": Budget(per_step_us=150, jobs=("ps",),
                             what="schedule()'s wrapper and the result stamp on the coordinator, in-graph timestamps"),
    # 400 until the timings were copied every 5 s instead of every second (73-151 µs a
    # closure at load 14-33, from 179-216: docs/benchmarks.md).
    "results": Budget(per_step_us=200, jobs=("ps",),
                      what="result thread: closure records every second, the timing copy every 5 s, step records"),
    "probe": Budget(core_share=0.002, jobs=("ps",), what="RPC probe rounds (coordinator side; the tasks' side A/B)"),
    # About 0.1 % for the samples (267-303 µs each alone, from 315-379, in
    # benchmarks/collector_cost.py at load 1-8; 0.09 % of a core on a ps_ctl coordinator in
    # overhead_ab.py); on a worker of a synchronous multi-worker fit 0.1 % more for its 10
    # timed wake-ups a second (90-146 µs each, from 127-185). overhead_ab.py's A phases take
    # no samples and no wake-ups, so its B - A counts both: 0.135 % a worker of mwms_fit in
    # a 20-pair run at load 7.
    # A sample every 2 s instead of every second (system.SAMPLE_EVERY_S): 38 µs a ps_ctl closure
    # from 87, 53 µs an mwms_fit step from 85 (overhead_ab.py, 240 pairs each).
    "system": Budget(core_share=0.002, what="system sampler: a sample every 2 s (and 10 timed wake-ups a second on sync workers)"),
    "heartbeat": Budget(core_share=0.0002, what="heartbeat rows every 5 s"),
    # A status request to each ps every 5 s: a gRPC call of about 1 ms of client CPU.
    "liveness": Budget(core_share=0.0005, jobs=("fit",), what="liveness checks of the ps tasks every 5 s (TF1 sessions)"),
    # A coordinator's flush (system, heartbeat, closure, step and rpc records) encodes in
    # 181-251 µs, from 307-416 (one struct array per kind, its schema made once:
    # collector_cost.py, load 1-8); 0.05 % of a core in overhead_ab.py's 20-pair runs of
    # both jobs at load 4-10; 0.1 % before.
    "writer": Budget(core_share=0.0007, what="flush thread: Arrow frames once a second"),
    # 60 until the all-reduce probe went from every 100 steps to every 5 s: overhead_ab.py
    # --job mwms_fit, both workers' hooks 63.5, 77.9 and 77.1 µs a step against 70.8 and
    # 100.3 before (10- and 20-pair runs, interleaved, load 5-8; docs/benchmarks.md).
    "hooks": Budget(per_step_us=50, jobs=("fit",),
                    what="callback batch hooks, all-reduce probe every 5 s, the stamps' drain once a second"),
    # With the gradients stamp, on a 1 ms step (stamp_cost.py --model-size 16 --batch 16,
    # 200 interleaved rounds of 50 steps): +20 ± 8 µs a step at load 2.8-3.4, +2 ± 38 at
    # 3.8-5.6 (docs/benchmarks.md).
    "step_input": Budget(per_step_us=20, jobs=("fit",),
                         what="in-graph input-arrival and gradients stamps, read in batches"),
    # collectors/live_thread.py spaces its evaluations so that each one's CPU stays within this
    # share. 0.2 % until issue 15's last cut: live findings were 40 % of a ps_ctl
    # coordinator's collector CPU there (docs/benchmarks.md); at 0.1 % an evaluation of
    # 55 ms comes every 55 s (TFDIAG_LIVE_CPU_SHARE gives more for faster findings).
    "live": Budget(core_share=0.001, what="live findings: the detectors in the chief, paced to this share"),
}


class Ledger:
    """CPU nanoseconds charged per component, since the process started.

    ``sources`` adds counts kept elsewhere (the writers' flush threads, in ``tfdiag.store``,
    which may not import the collectors).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._ns: dict[str, int] = {}
        self._sources: dict[str, Callable[[], int]] = {}

    def charge(self, component: str, ns: int) -> None:
        with self._lock:
            self._ns[component] = self._ns.get(component, 0) + ns

    def add_source(self, component: str, read_ns: Callable[[], int]) -> None:
        """``read_ns()`` (cumulative CPU ns) is added to ``component`` in every snapshot."""
        with self._lock:
            self._sources[component] = read_ns

    def snapshot(self) -> dict[str, int]:
        """CPU ns so far per component, every declared one included."""
        with self._lock:
            counts = {name: self._ns.get(name, 0) for name in COMPONENTS} | self._ns
            sources = dict(self._sources)
        for component, read_ns in sources.items():
            counts[component] = counts.get(component, 0) + read_ns()
        return counts


LEDGER = Ledger()


@contextmanager
def charged(component: str) -> Iterator[None]:
    """Charges the CPU time this thread spends in the block to ``component``."""
    start = time.thread_time_ns()
    try:
        yield
    finally:
        LEDGER.charge(component, time.thread_time_ns() - start)


def metered(component: str, fn: Callable) -> Callable:
    """``fn``, charging the CPU time of each call (on the thread that runs it) to ``component``."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        with charged(component):
            return fn(*args, **kwargs)

    return call


class MeteredCalls(BoundedCalls):
    """``BoundedCalls`` whose calls charge their thread's CPU to ``component``."""

    def __init__(self, name: str, component: str):
        super().__init__(name)
        self.component = component

    def call(self, key, fn, timeout_s: float):
        return super().call(key, metered(self.component, fn), timeout_s)
