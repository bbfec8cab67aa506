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


# Each entry is a ceiling the component is held to, not its average: what
# benchmarks/overhead_ab.py measures for it, rounded up (docs/benchmarks.md, "Collector
# overhead", has the current figures). Work per closure or step is per_step_us; work on a
# cadence is a share of one core, whatever the step rate.
COMPONENTS: dict[str, Budget] = {
    "closure_timing": Budget(per_step_us=150, jobs=("ps",),
                             what="schedule()'s wrapper and the result stamp on the coordinator, in-graph timestamps"),
    # The timings are copied in batches every 5 s: a copy costs nearly the same for 5
    # closures as for 40 (benchmarks/micro.py timing_copy).
    "results": Budget(per_step_us=200, jobs=("ps",),
                      what="result thread: closure records every second, the timing copy every 5 s, step records"),
    "probe": Budget(core_share=0.002, jobs=("ps",), what="RPC probe rounds (coordinator side; the tasks' side A/B)"),
    # A sample costs a few hundred µs (benchmarks/micro.py collector_cost): one every 2 s is
    # about 0.1 % of a core; a synchronous worker's 10 timed wake-ups a second about as much.
    # On a ps_ctl coordinator, with the workers' schedstat every 2nd sample and the host scan
    # every 6th (src/tfdiag/collectors/run_queue.py), 3.1-3.5 ms a sample on a loaded 2-core host:
    # 0.16-0.18 % (benchmarks/system_sample_cost.py). Its two timed wake-ups a second, each
    # probing the workers' states, took it to 0.23 % (overhead_ab, 240 pairs, load 1-7).
    "system": Budget(core_share=0.0025, what="system sampler: a sample every 2 s, and timed wake-ups that probe the "
                                             "job's workers' states (10 a second on sync workers, 2 on a coordinator)"),
    "heartbeat": Budget(core_share=0.0002, what="heartbeat rows every 5 s"),
    # A status request to each task that runs no collector every 5 s: a gRPC call of about
    # 1 ms of client CPU.
    "liveness": Budget(core_share=0.001, what="status checks every 2 s of the tasks that run no collector"),
    # A flush encodes each kind's records as one struct array with a schema made once.
    "writer": Budget(core_share=0.0007, what="flush thread: Arrow frames once a second"),
    # The all-reduce probe runs every 5 s, not every N steps: its cost per step falls as the
    # steps get shorter.
    "hooks": Budget(per_step_us=50, jobs=("fit",),
                    what="callback batch hooks, all-reduce probe every 5 s, the stamps' drain once a second"),
    # Three in-graph stamps a step, drained once a second (benchmarks/micro.py stamp_cost).
    "step_input": Budget(per_step_us=20, jobs=("fit",),
                         what="in-graph input-arrival and gradients stamps, read in batches"),
    # src/tfdiag/collectors/live_thread.py spaces its screens (up to 4 s apart) so that their
    # CPU stays within half this share, and a slow link's confirmations (100-500 ms each)
    # wait for credit (TFDIAG_LIVE_CPU_SHARE gives more). Screens every 2 s at 2-4 ms take
    # 0.1-0.2 %; the rest pays for an onset's verdicts (tens of ms each, a few an onset).
    "live": Budget(core_share=0.003, what="live findings in the chief: a screen every 2 s, the detectors to confirm"),
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

    def charged_ns(self, component: str) -> int:
        """CPU ns charged to ``component`` so far (its ``sources`` left out)."""
        with self._lock:
            return self._ns.get(component, 0)

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
