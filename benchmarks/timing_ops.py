"""What the in-graph closure timing costs the task that runs a closure: process CPU, timed against plain.

The training tasks' side of ``closure_timing.instrument`` (two ``tf.timestamp()`` a
``next()``, one at each end of the closure, the stats vector) runs on the worker, where
``overhead_ab.py`` sees it only in the throughput ratio and in the tasks' CPU, which
follows their busy-waiting threads. Here it runs in one process: ``ps_ctl``'s train
function of ``--steps`` steps on a local model and input, plain and instrumented, in
alternating blocks of ``--calls`` calls (plain first in even rounds), with TensorFlow's
thread pools at ``--threads`` threads (1: no thread spins, so the process CPU is the
ops' own work). Each block's cost is the process CPU per call; the result is the mean of
the rounds' differences with its 95 % interval. ``--model-size`` and ``--batch`` shrink the
step so that a few µs are not lost in its noise (the timing ops do not depend on them).
``--baseline REV`` adds the instrumentation of ``collectors/closure_timing.py`` at a git
revision, rotated with the other two.

    python benchmarks/timing_ops.py --blocks 40 --calls 100
    python benchmarks/timing_ops.py --blocks 40 --calls 100 --threads 2 --baseline d3f160a
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

try:
    from collector_cost import baseline_module  # run as a script: benchmarks/ is sys.path[0]
    from stamp_cost import interval
except ImportError:
    from benchmarks.collector_cost import baseline_module
    from benchmarks.stamp_cost import interval


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=40, help="blocks of each function (rounds of two)")
    parser.add_argument("--calls", type=int, default=100, help="calls per block")
    parser.add_argument("--steps", type=int, default=10, help="training steps per call (ps_ctl's per closure)")
    parser.add_argument("--threads", type=int, default=1, help="TensorFlow's inter- and intra-op threads")
    parser.add_argument("--model-size", type=int, default=16, help="hidden width")
    parser.add_argument("--batch", type=int, default=16, help="examples per step")
    parser.add_argument("--baseline", help="git revision whose closure_timing.py to compare too (default: none)")
    args = parser.parse_args(argv)
    if args.blocks < 2:
        parser.error("--blocks: at least 2")

    import tensorflow as tf

    from tfdiag.collectors import closure_timing
    from tfdiag.sample_jobs import ps_ctl
    from tfdiag.sample_jobs.jobs import JobConfig

    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    config = JobConfig("ps_ctl", "", ps=1, workers=1, model_size=args.model_size, batch=args.batch)
    strategy = tf.distribute.get_strategy()
    model = ps_ctl.MLP(tf, strategy, config.hidden)
    plain = ps_ctl.make_train_steps(tf, strategy, model, config, args.steps)
    functions = {"plain": plain, "instrumented": closure_timing.instrument(plain)}
    if args.baseline:
        functions["baseline"] = baseline_module(args.baseline, "collectors/closure_timing.py").instrument(plain)
    iterator = iter(ps_ctl.make_dataset_fn(tf, config)())
    for function in functions.values():  # traced and warm
        function(iterator)
    load = os.getloadavg()[0]
    cpu_us = {name: [] for name in functions}
    names = list(functions)
    for round_ in range(args.blocks):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            start = time.process_time()
            for _ in range(args.calls):
                outputs = functions[name](iterator)
            tf.nest.map_structure(lambda tensor: tensor.numpy(), outputs)  # the last call done
            cpu_us[name].append((time.process_time() - start) / args.calls * 1e6)
    print(f"| function | CPU µs a {args.steps}-step call (median) | − plain (mean ± 95 %) |")
    print("| --- | --- | --- |")
    for name in names:
        mean, half = interval([b - a for a, b in zip(cpu_us["plain"], cpu_us[name])])
        versus = "–" if name == "plain" else f"{mean:+.1f} ± {half:.1f}"
        print(f"| {name} | {statistics.median(cpu_us[name]):.0f} | {versus} |")
    print(f"\n{args.blocks} rounds of {args.calls} calls, {args.threads} thread(s); load average (1 min) {load:.1f} at "
          f"the start, {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
