"""What a closure's instrumentation costs per closure, and how much of it is the extra output.

``closure_timing.instrument`` returns the user's outputs and a stats vector: one more
output per closure, a remote tensor handle TensorFlow creates on the coordinator, fills
from the worker's reply and deletes when dropped. This benchmark starts ``ps_ctl``'s
servers (2 ps, 2 workers), plays the coordinator, and runs phases of ``--closures``
one-step closures (their results dropped, as the instrumented coordinator's caller
drops them), rotating three functions:

* ``plain``: ``ps_ctl``'s train step;
* ``extra_output``: the same step also returning ``tf.timestamp()`` (one more output, no
  timing);
* ``instrumented``: ``closure_timing.instrument`` of the step (the in-graph timing and
  its stats vector).

Per variant and phase: the coordinator process's CPU per closure (its threads,
TensorFlow's included), the training tasks' CPU per closure, and the closures a second;
then each variant against ``plain``, phase by phase (mean difference ± 95 %). One-step
closures make the per-closure part large against the step; the tasks' CPU follows their
busy-waiting threads and the wall time, so it resolves far less than the coordinator's.

    python benchmarks/closure_outputs.py --rounds 6 --closures 1000   # under tools/loopback-only
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time

from tfdiag.collectors import closure_timing

try:
    from overhead_ab import Z95, cpu_s, ps_ctl_servers, ps_ctl_training  # run as a script: benchmarks/ is sys.path[0]
except ImportError:
    from benchmarks.overhead_ab import Z95, cpu_s, ps_ctl_servers, ps_ctl_training

VARIANTS = ("plain", "extra_output", "instrumented")


def variants(tf, train) -> dict:
    """The scheduled function of each variant."""
    step = train.python_function

    @tf.function
    def extra_output(iterator):
        return step(iterator), tf.timestamp()

    return {"plain": train, "extra_output": extra_output, "instrumented": closure_timing.instrument(train)}


def difference(plain: list[float], other: list[float]) -> str:
    """``other - plain``, phase by phase: mean ± 95 % half-width."""
    deltas = [b - a for a, b in zip(plain, other)]
    return f"{statistics.fmean(deltas):+.0f} ± {Z95 * statistics.stdev(deltas) / math.sqrt(len(deltas)):.0f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="phases of each variant (after one of warm-up)")
    parser.add_argument("--closures", type=int, default=1000, help="one-step closures a phase")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    with ps_ctl_servers(tempfile.mkdtemp(prefix="tfdiag-closure-outputs-")) as (tf, config, strategy, cluster):
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        _, train, iterator = ps_ctl_training(tf, config, strategy, coordinator, 1)
        functions = variants(tf, train)
        task_pids = [task.process.pid for task in cluster.tasks.values()]
        phases = {name: {"coordinator": [], "tasks": [], "rate": []} for name in VARIANTS}
        for round_ in range(args.rounds + 1):
            for name in VARIANTS[round_ % len(VARIANTS):] + VARIANTS[:round_ % len(VARIANTS)]:
                tasks, process, start = cpu_s(task_pids), time.process_time(), time.perf_counter()
                for _ in range(args.closures):
                    coordinator.schedule(functions[name], args=(iterator,))
                coordinator.join()
                wall = time.perf_counter() - start
                if round_:  # the first round traces and warms every variant
                    phases[name]["coordinator"].append((time.process_time() - process) / args.closures * 1e6)
                    phases[name]["tasks"].append((cpu_s(task_pids) - tasks) / args.closures * 1e6)
                    phases[name]["rate"].append(args.closures / wall)
            print(f"  round {round_} done", file=sys.stderr, flush=True)
    plain = phases["plain"]
    print("| variant | coordinator's CPU µs per closure (vs plain) | tasks' CPU µs per closure (vs plain) "
          "| closures a second (vs plain) |")
    print("| --- | --- | --- | --- |")
    for name in VARIANTS:
        measured = phases[name]
        cells = [f"{statistics.fmean(measured[key]):.0f}" for key in ("coordinator", "tasks")]
        rate = f"{statistics.fmean(measured['rate']):.1f}"
        if name != "plain":
            cells = [f"{cell} ({difference(plain[key], measured[key])})"
                     for cell, key in zip(cells, ("coordinator", "tasks"))]
            ratio = statistics.fmean(math.log(b / a) for a, b in zip(plain["rate"], measured["rate"]))
            rate += f" (x{math.exp(ratio):.3f})"
        print(f"| {name} | {cells[0]} | {cells[1]} | {rate} |")
    print(f"\n{args.rounds} rounds of {args.closures} closures; load average (1 min) {load:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
