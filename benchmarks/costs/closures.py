"""What instrumenting a ``ClusterCoordinator`` closure costs: its extra output, ``schedule()``
on the calling thread, a copy of finished closures' timings, and the in-graph timing ops."""

from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile
import time

from benchmarks.harness.cluster import cpu_s, load_line, ps_ctl_servers, ps_ctl_training, task_pids
from benchmarks.harness.revision import baseline_module
from benchmarks.harness.stats import difference, interval, rotation
from tfdiag.collectors import closure_timing, instrument_coordinator, tf_internals
from tfdiag.collectors.bounded import BoundedCalls


def rounds_arguments(rounds: int, closures: int):
    def add(parser) -> None:
        parser.add_argument("--rounds", type=int, default=rounds, help="phases of each variant (after one of warm-up)")
        parser.add_argument("--closures", type=int, default=closures, help="one-step closures a phase")
    return add


def closure_outputs(args) -> int:
    """The instrumented closure's cost to the coordinator, and how much of it is its extra output.

    ``closure_timing.instrument`` returns the user's outputs and a stats vector: one more
    remote tensor handle a closure. On ps_ctl's servers, phases of one-step closures (their
    results dropped) rotate the plain step, the step also returning ``tf.timestamp()`` (one
    more output, no timing) and the instrumented step; per variant the coordinator's and the
    tasks' CPU per closure and the closures a second, then each against plain, phase by
    phase (mean ± 95 %). The tasks' CPU follows their busy-waiting threads and resolves far
    less than the coordinator's.
    """
    load = os.getloadavg()[0]
    with ps_ctl_servers(tempfile.mkdtemp(prefix="tfdiag-closure-outputs-")) as (tf, config, strategy, cluster):
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        _, train, iterator = ps_ctl_training(tf, config, strategy, coordinator, 1)
        step = train.python_function
        functions = {"plain": train, "extra_output": tf.function(lambda iterator: (step(iterator), tf.timestamp())),
                     "instrumented": closure_timing.instrument(train)}
        pids = task_pids(cluster)
        phases = {name: {"coordinator": [], "tasks": [], "rate": []} for name in functions}
        for round_ in range(args.rounds + 1):
            for name in rotation(functions, round_):
                tasks, process, start = cpu_s(pids), time.process_time(), time.perf_counter()
                for _ in range(args.closures):
                    coordinator.schedule(functions[name], args=(iterator,))
                coordinator.join()
                wall = time.perf_counter() - start
                if round_:  # the first round traces and warms every variant
                    phases[name]["coordinator"].append((time.process_time() - process) / args.closures * 1e6)
                    phases[name]["tasks"].append((cpu_s(pids) - tasks) / args.closures * 1e6)
                    phases[name]["rate"].append(args.closures / wall)
            print(f"  round {round_} done", file=sys.stderr, flush=True)
    plain = phases["plain"]
    print("| variant | coordinator's CPU µs per closure (vs plain) | tasks' CPU µs per closure (vs plain) "
          "| closures a second (vs plain) |\n| --- | --- | --- | --- |")
    for name, measured in phases.items():
        cells = [f"{statistics.fmean(measured[key]):.0f}" for key in ("coordinator", "tasks")]
        rate = f"{statistics.fmean(measured['rate']):.1f}"
        if name != "plain":
            cells = [f"{cell} ({difference(plain[key], measured[key])})" for cell, key in zip(cells, ("coordinator", "tasks"))]
            rate += f" (x{math.exp(statistics.fmean(math.log(b / a) for a, b in zip(plain['rate'], measured['rate']))):.3f})"
        print(f"| {name} | {cells[0]} | {cells[1]} | {rate} |")
    print(f"\n{args.rounds} rounds of {args.closures} closures; {load_line(load)}")
    return 0


def schedule_cost(args) -> int:
    """What ``schedule()`` costs the calling thread, plain and instrumented.

    On ps_ctl's servers, phases of one-step closures scheduled through the plain
    ``ClusterCoordinator`` and through ``instrument_coordinator``'s wrapper (which schedules
    the concrete function once the same arguments come twice in a row), by turns; per
    phase the calling thread's CPU per call (``time.thread_time``: the schedule loop only,
    not the join nor TensorFlow's threads), then instrumented against plain (mean ± 95 %).
    """
    load = os.getloadavg()[0]
    logdir = tempfile.mkdtemp(prefix="tfdiag-schedule-cost-")
    with ps_ctl_servers(logdir) as (tf, config, strategy, _):
        plain = tf.distribute.coordinator.ClusterCoordinator(strategy)
        instrumented = instrument_coordinator(plain, logdir, probe_interval_s=None, system_interval_s=None,
                                              live_interval_s=0)
        _, train, iterator = ps_ctl_training(tf, config, strategy, plain, 1)
        schedulers = {"plain": plain.schedule, "instrumented": instrumented.schedule}
        cpu_us = {name: [] for name in schedulers}
        for round_ in range(args.rounds + 1):
            for name in rotation(schedulers, round_):
                schedule, start = schedulers[name], time.thread_time()
                for _ in range(args.closures):
                    schedule(train, args=(iterator,))
                spent = time.thread_time() - start
                plain.join()
                if round_:  # the first round traces and warms both paths
                    cpu_us[name].append(spent / args.closures * 1e6)
        instrumented.close()
    print("| variant | calling thread's CPU µs per schedule (median) | vs plain (mean ± 95 %) |\n| --- | --- | --- |")
    for name, values in cpu_us.items():
        versus = "–" if name == "plain" else difference(cpu_us["plain"], values)
        print(f"| {name} | {statistics.median(values):.0f} | {versus} |")
    print(f"\n{args.rounds} rounds of {args.closures} closures; {load_line(load)}")
    return 0


def timing_copy_arguments(parser) -> None:
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 5, 10, 40], help="closures per copy")
    parser.add_argument("--rounds", type=int, default=2)


def timing_copy(args) -> int:
    """What one copy of finished closures' timings costs, by how many it carries.

    On ps_ctl's servers, ``N`` timed closures run (their outputs left on the workers, as
    when the caller drops them), then one ``closure_timing.fetch_stats`` of all ``N`` is
    timed: the calling thread's and the process's CPU (TensorFlow's threads included) per
    closure, for each size in turn, interleaved. ``src/tfdiag/collectors/closure_recorder.py`` sizes
    ``FETCH_EVERY_S`` by it: a copy costs nearly the same whatever it carries.
    """
    load = os.getloadavg()[0]
    with ps_ctl_servers(tempfile.mkdtemp(prefix="tfdiag-timing-copy-")) as (tf, config, strategy, _):
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        _, train, iterator = ps_ctl_training(tf, config, strategy, coordinator, 1)
        timed = closure_timing.instrument(train)
        calls = BoundedCalls("tfdiag-timing-copy")

        def finished(count: int) -> list:
            remotes = []
            for _ in range(count):
                remote = coordinator.schedule(timed, args=(iterator,))
                tf_internals.on_result(remote, lambda: False)  # outputs stay on the workers
                remotes.append(remote)
            coordinator.join()
            return [closure_timing.timing_of(remote) for remote in remotes]

        closure_timing.fetch_stats(finished(8), calls, 30.0)  # warm-up
        print("| closures per copy | round | thread CPU µs per closure | process CPU µs per closure |\n"
              "| --- | --- | --- | --- |")
        for round_ in range(args.rounds):
            for size in args.sizes:
                timings = finished(size)
                process, thread = time.process_time(), time.thread_time()
                rows = closure_timing.fetch_stats(timings, calls, 30.0)
                thread, process = time.thread_time() - thread, time.process_time() - process
                assert all(row is not None for row in rows)
                print(f"| {size} | {round_ + 1} | {thread / size * 1e6:.0f} | {process / size * 1e6:.0f} |", flush=True)
    print(f"\n{load_line(load)}", file=sys.stderr)
    return 0


def timing_ops_arguments(parser) -> None:
    parser.add_argument("--blocks", type=int, default=40, help="blocks of each function (rounds)")
    parser.add_argument("--calls", type=int, default=100, help="calls per block")
    parser.add_argument("--steps", type=int, default=10, help="training steps per call (ps_ctl's per closure)")
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow's inter- and intra-op threads")
    parser.add_argument("--model-size", type=int, default=16, help="hidden width")
    parser.add_argument("--batch", type=int, default=16, help="examples per step")
    parser.add_argument("--baseline", help="git revision whose src/tfdiag/collectors/closure_timing.py to compare too")


def timing_ops(args) -> int:
    """What the in-graph closure timing costs the task that runs a closure: process CPU, timed against plain.

    The task's side of ``closure_timing.instrument`` (two ``tf.timestamp()`` a ``next()``,
    one at each end of the closure, the stats vector), in one process: ps_ctl's train
    function on a local model and input, plain and instrumented (and ``--baseline``'s), in
    rotating blocks, with TensorFlow's pools at ``--threads`` threads (1: no thread spins,
    so the process CPU is the ops' own work). The result is the mean of the rounds'
    differences with its 95 % interval; a small model keeps a few µs out of the step's noise.
    """
    if args.blocks < 2:
        raise SystemExit("--blocks: at least 2")
    import tensorflow as tf

    from tfdiag.sample_jobs import ps_ctl
    from tfdiag.sample_jobs.jobs import JobConfig

    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    config = JobConfig("ps_ctl", "", ps=1, workers=1, model_size=args.model_size, batch=args.batch)
    strategy = tf.distribute.get_strategy()
    model = ps_ctl.MLP(tf, strategy, config.hidden)
    plain = ps_ctl.make_train_steps(tf, strategy, model, ps_ctl.slow_workers(config, 0), args.steps)
    functions = {"plain": plain, "instrumented": closure_timing.instrument(plain)}
    if args.baseline:
        functions["baseline"] = baseline_module(args.baseline, "src/tfdiag/collectors/closure_timing.py").instrument(plain)
    iterator = iter(ps_ctl.make_dataset_fn(tf, config)())
    for function in functions.values():  # traced and warm
        function(iterator)
    load = os.getloadavg()[0]
    cpu_us = {name: [] for name in functions}
    for round_ in range(args.blocks):
        for name in rotation(functions, round_):
            start = time.process_time()
            for _ in range(args.calls):
                outputs = functions[name](iterator)
            tf.nest.map_structure(lambda tensor: tensor.numpy(), outputs)  # the last call done
            cpu_us[name].append((time.process_time() - start) / args.calls * 1e6)
    print(f"| function | CPU µs a {args.steps}-step call (median) | − plain (mean ± 95 %) |\n| --- | --- | --- |")
    for name, values in cpu_us.items():
        mean, half = interval([b - a for a, b in zip(cpu_us["plain"], values)])
        print(f"| {name} | {statistics.median(values):.0f} | {'–' if name == 'plain' else f'{mean:+.1f} ± {half:.1f}'} |")
    print(f"\n{args.blocks} rounds of {args.calls} calls, {args.threads} thread(s); {load_line(load)}")
    return 0


CASES = {
    "closure_outputs": (rounds_arguments(6, 1000), closure_outputs),
    "schedule_cost": (rounds_arguments(10, 200), schedule_cost),
    "timing_copy": (timing_copy_arguments, timing_copy),
    "timing_ops": (timing_ops_arguments, timing_ops),
}
