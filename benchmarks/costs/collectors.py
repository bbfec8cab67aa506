"""What the background collectors' fixed work costs: a system sample, a timed wake-up, a flush's encoding."""

from __future__ import annotations

import cProfile
import os
import pstats
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.harness.revision import baseline_module
from tfdiag.collectors import system, tf_internals
from tfdiag.events import KINDS
from tfdiag.store import writer

LISTENER = ("import socket, time; s = socket.create_server(('127.0.0.1', 0)); "
            "print(s.getsockname()[1], flush=True); time.sleep(3600)")
# A TensorFlow server that prints its address once it listens (a ps of a TF1 job: no collector).
TF_SERVER = ("import socket, sys, tensorflow as tf; s = socket.socket(); s.bind(('127.0.0.1', 0)); "
             "address = f'127.0.0.1:{s.getsockname()[1]}'; s.close(); "
             "server = tf.distribute.Server(tf.train.ClusterSpec({'ps': [address]}), job_name='ps', task_index=0); "
             "print(address, flush=True); server.join()")
# One coordinator second of a 2-worker ps_ctl run (docs/benchmarks.md): its record kinds and rows.
COORDINATOR_SECOND = {"system": 1, "heartbeat": 3, "closure": 10, "step": 10, "rpc": 1}
# The pause before each of the samples taken as the sampler takes them, apart.
PAUSE_S = 0.5


class NullWriter:
    """Takes records and keeps none (the writer's cost is measured apart)."""

    def append(self, kind, /, **values) -> None:
        pass


def per_call_us(fn, calls: int) -> float:
    """CPU µs a call of ``fn``, over ``calls`` calls after one (a first call's one-time work)."""
    fn()
    start = time.thread_time_ns()
    for _ in range(calls):
        fn()
    return (time.thread_time_ns() - start) / calls / 1e3


def after_pause_us(fn, calls: int, pause_s: float) -> float:
    """Median CPU µs of a call of ``fn`` made ``pause_s`` after the previous one, as a thread
    that wakes once a second makes it (its caches cold), over ``calls`` calls."""
    fn()
    spent = []
    for _ in range(calls):
        time.sleep(pause_s)
        start = time.thread_time_ns()
        fn()
        spent.append(time.thread_time_ns() - start)
    return statistics.median(spent) / 1e3


def interleaved(versions: dict, blocks: int, measure) -> dict[str, list[float]]:
    """``measure(version)`` for each version in turn, ``blocks`` times: each version's readings."""
    readings = {name: [] for name in versions}
    for _ in range(blocks):
        for name, version in versions.items():
            readings[name].append(measure(version))
    return readings


def show(title: str, readings: dict[str, list[float]], unit: str) -> None:
    print(f"{title}: " + "; ".join(f"{name} {statistics.median(values):.1f} {unit} "
                                   f"(blocks {', '.join(f'{v:.1f}' for v in values)})"
                                   for name, values in readings.items()), flush=True)


def listeners(count: int):
    children = [subprocess.Popen([sys.executable, "-c", LISTENER], stdout=subprocess.PIPE, text=True)
                for _ in range(count)]
    return children, [int(child.stdout.readline()) for child in children]


class BusyThread:
    """A thread that runs Python code (and so holds the GIL) until ``stop``."""

    def __init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            sum(range(1000))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def measure_sample(modules: dict, args) -> None:
    children, ports = listeners(args.tasks)
    own = socket.create_server(("127.0.0.1", 0))
    try:
        half = len(ports) // 2
        cluster = {"chief": [f"127.0.0.1:{own.getsockname()[1]}"], "ps": [f"127.0.0.1:{p}" for p in ports[:half]],
                   "worker": [f"127.0.0.1:{p}" for p in ports[half:]]}
        samplers = {name: module.SystemSampler(NullWriter(), "chief:0", gpus=False, cluster=cluster)
                    for name, module in modules.items()}
        for sampler in samplers.values():
            sampler.sample()
        counted = {name: len(s._job._others) for name, s in samplers.items()}  # noqa: SLF001
        assert all(n == len(ports) for n in counted.values()), f"not every listener found: {counted}"
        show("one sample (CPU)",
             interleaved(samplers, args.blocks, lambda s: per_call_us(s.sample, args.samples)), "µs")
        show(f"one sample {PAUSE_S:g} s after the last (CPU; the sampler takes one a second)",
             interleaved(samplers, args.blocks, lambda s: after_pause_us(s.sample, args.paused, PAUSE_S)), "µs")
        busy = BusyThread()
        try:
            show("one sample while another thread runs Python (CPU)",
                 interleaved(samplers, args.blocks, lambda s: per_call_us(s.sample, args.samples)), "µs")
        finally:
            busy.stop()
        job = samplers["current"]._job  # noqa: SLF001 - its search, once more
        start = time.thread_time_ns()
        job._scan(time.monotonic())  # noqa: SLF001 - the search alone
        print(f"  the search for the cluster's processes: {(time.thread_time_ns() - start) / 1e3:.0f} µs of CPU "
              f"(at the first sample, and when a counted process ends)")
        profile = cProfile.Profile()
        profile.runcall(lambda: [samplers["current"].sample() for _ in range(args.samples)])
        print("  the current sample's CPU by call (cProfile, whose own overhead inflates deep calls):")
        calls = [(cumulative / count * 1e6, count, f"{Path(path).name}:{function}")
                 for (path, _, function), (_, count, _, cumulative, _) in pstats.Stats(profile).stats.items()
                 if path.endswith(("system.py", "psutil/__init__.py"))]
        for us, count, name in sorted(calls, reverse=True)[:12]:
            print(f"    {us:8.1f} µs  {count // args.samples} a sample  {name}")
    finally:
        own.close()
        for child in children:
            child.kill()
            child.wait()


def wake_up_cpu_us(module, seconds: float, cluster: dict) -> float:
    """A sampler thread's CPU µs per timed wake-up over ``seconds`` with no sample due, as
    ``worker:0`` of ``cluster``: each wake-up probes the cluster's other workers' states."""
    sampler = module.SystemSampler(NullWriter(), "worker:0", interval_s=3600, gpus=False, cluster=cluster,
                                   wake_s=system.WAKE_S).start()
    time.sleep(0.5)  # past the first sample
    clock = time.pthread_getcpuclockid(sampler._thread.ident)  # noqa: SLF001
    timer = sampler._wakes  # noqa: SLF001 - counts the wake-ups until the next sample
    start_cpu, start_wakes = time.clock_gettime_ns(clock), timer._wakes  # noqa: SLF001
    time.sleep(seconds)
    cpu, wakes = time.clock_gettime_ns(clock) - start_cpu, timer._wakes - start_wakes  # noqa: SLF001
    sampler.stop()
    return cpu / 1e3 / max(wakes, 1)


def measure_wake(modules: dict, args) -> None:
    children, ports = listeners(args.tasks)
    own = socket.create_server(("127.0.0.1", 0))
    try:
        cluster = {"worker": [f"127.0.0.1:{port}" for port in [own.getsockname()[1], *ports]]}
        show(f"one timed wake-up of the sampler's thread, probing {len(ports)} workers (CPU)",
             interleaved(modules, args.blocks, lambda module: wake_up_cpu_us(module, args.seconds, cluster)), "µs")
    finally:
        own.close()
        for child in children:
            child.kill()
            child.wait()


def measure_liveness(args) -> None:
    """CPU of one status check (``collectors/liveness.py``) of ``--tasks`` local TensorFlow
    servers: the checking thread's, and this process's (gRPC's own threads included)."""
    children = [subprocess.Popen([sys.executable, "-c", TF_SERVER], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True) for _ in range(args.tasks)]
    try:
        checks = [tf_internals.server_status(child.stdout.readline().strip()) for child in children]
        for check in checks:
            assert check(10.0) == "OK", "a server did not answer"
        for block in range(args.blocks):
            thread_start, process_start = time.thread_time_ns(), time.process_time_ns()
            for _ in range(args.samples):
                for check in checks:
                    check(2.0)
            made = args.samples * len(checks)
            print(f"one status check (block {block + 1}, {made} checks): "
                  f"{(time.thread_time_ns() - thread_start) / made / 1e3:.0f} µs of the checking thread's CPU, "
                  f"{(time.process_time_ns() - process_start) / made / 1e3:.0f} µs of the process's", flush=True)
    finally:
        for child in children:
            child.kill()
            child.wait()


def rows_of(kind: str, count: int) -> list[dict]:
    values = {"int64": 1_700_000_000_000_000_000, "float64": 1.5, "string": "worker:0", "bool": True}
    return [{name: values[type_] for name, type_ in KINDS[kind].columns} for _ in range(count)]


def measure_flush(modules: dict, args, logdir: str) -> None:
    writers = {name: module.TaskWriter(logdir, f"worker:{i}", flush_interval_s=3600)
               for i, (name, module) in enumerate(modules.items())}
    try:
        cases = {f"{kind} ({args.rows} rows)": {kind: rows_of(kind, args.rows)} for kind in KINDS}
        cases["a coordinator's second (" + ", ".join(f"{k} {n}" for k, n in COORDINATOR_SECOND.items()) + ")"] = {
            kind: rows_of(kind, rows) for kind, rows in COORDINATOR_SECOND.items()}
        for case, pending in cases.items():
            encode = lambda w: per_call_us(lambda: w._encode(pending), args.flushes)  # noqa: E731, SLF001
            show(f"encoding a flush of {case}", interleaved(writers, args.blocks, encode), "µs")
    finally:
        for w in writers.values():
            w.close()


def collector_cost_arguments(parser) -> None:
    parser.add_argument("--baseline", help="git revision to compare with (default: none)")
    parser.add_argument("--only", choices=("sample", "wake", "flush", "liveness"), action="append")
    parser.add_argument("--tasks", type=int, default=4, help="listening processes of the cluster (default 4)")
    parser.add_argument("--samples", type=int, default=200, help="samples a block (default 200)")
    parser.add_argument("--paused", type=int, default=10,
                        help=f"samples a block taken {PAUSE_S:g} s apart (default 10)")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds a wake-up block (default 5)")
    parser.add_argument("--rows", type=int, default=1, help="rows per kind in the per-kind flushes (default 1)")
    parser.add_argument("--flushes", type=int, default=200, help="flushes a block (default 200)")
    parser.add_argument("--blocks", type=int, default=4, help="blocks per version (default 4)")
    parser.add_argument("--logdir", default=None, help="where the writers' files go (default: a temp dir)")


def collector_cost(args) -> int:
    """The CPU of the background collectors' fixed work: a system sample, a timed wake-up, a flush.

    Each figure is measured for the code of this checkout and, side by side in the same run,
    for the same module at ``--baseline`` (a git revision; its ``src/tfdiag/collectors/system.py``,
    ``job_processes.py`` and ``src/tfdiag/store/writer.py`` are loaded from git), in alternating
    blocks (A, B, A, B, ...) so that both see the same load. CPU is the measuring thread's own
    (``time.thread_time_ns``), or the sampler thread's (its CPU clock).

    * ``sample``: ``SystemSampler.sample()`` in a loop, as a ParameterServerStrategy
      coordinator takes it: a cluster spec with ``--tasks`` listening processes on this host
      (children of this script) and the coordinator's own port (this process listens on it,
      as the coordinator's in-process server does); alone, ``--paused`` of them each
      ``PAUSE_S`` after the last (as the sampler's thread wakes for them: its caches cold),
      and while another thread of this process runs Python code (holding the GIL, as a
      coordinator's scheduling thread does: every file the sample reads releases the GIL
      and waits to take it back). Then the
      search for the cluster's processes (``psutil.net_connections``) once, and a profile of
      the current sample's CPU by function.
    * ``wake``: a running sampler thread's CPU per timed wake-up (10 a second), over
      ``--seconds`` a block in which no sample is due, as a worker of a synchronous job
      whose ``--tasks`` other workers (children of this script) each wake-up probes.
    * ``liveness``: one status check of a TensorFlow server (``--tasks`` of them, children
      of this script), ``--samples`` rounds a block: the checking thread's CPU and the
      process's (gRPC's threads); this checkout's code only.
    * ``flush``: ``TaskWriter``'s encoding of a flush (what the flush thread does but the
      file write), per record kind with ``--rows`` rows, and for a coordinator's typical
      second (system, heartbeat, closure, step and rpc records).
    """
    print(f"load average {os.getloadavg()[0]:.1f} at the start", flush=True)
    samplers, writers = {"current": system}, {"current": writer}
    if args.baseline:
        baseline_system = baseline_module(args.baseline, "src/tfdiag/collectors/system.py")
        baseline_jobs = baseline_module(args.baseline, "src/tfdiag/collectors/job_processes.py")
        baseline_system.JobProcesses = baseline_jobs.JobProcesses  # its probes, not today's
        samplers = {"baseline": baseline_system} | samplers
        writers = {"baseline": baseline_module(args.baseline, "src/tfdiag/store/writer.py")} | writers
    chosen = args.only or ["sample", "wake", "flush", "liveness"]
    if "sample" in chosen:
        measure_sample(samplers, args)
    if "wake" in chosen:
        measure_wake(samplers, args)
    if "flush" in chosen:
        measure_flush(writers, args, args.logdir or tempfile.mkdtemp(prefix="tfdiag-collector-cost-"))
    if "liveness" in chosen:
        measure_liveness(args)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


CASES = {"collector_cost": (collector_cost_arguments, collector_cost)}
