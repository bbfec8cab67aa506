"""What the ``model.fit`` step stamps cost per step: process CPU, stamped against plain."""

from __future__ import annotations

import os
import statistics
import tempfile
import time

from benchmarks.harness.cluster import load_line
from benchmarks.harness.stats import interval


def stamp_cost_arguments(parser) -> None:
    parser.add_argument("--blocks", type=int, default=200, help="blocks of each train function (rounds of two)")
    parser.add_argument("--steps", type=int, default=50, help="steps per block")
    parser.add_argument("--model-size", type=int, default=0, help="hidden width (default: the job's)")
    parser.add_argument("--batch", type=int, default=0, help="examples per step (default: the job's)")


def stamp_cost(args) -> int:
    """What the ``model.fit`` step stamps cost per step: process CPU, stamped against plain.

    One process, ``mwms_fit``'s model and input (tf-keras, no strategy), two train
    functions of the same model: plain and stamped (``src/tfdiag/collectors/step_input.py``:
    ``tf.timestamp()`` at the function's start, at the element's arrival and once the
    gradients exist, and one ``FIFOQueue`` enqueue, drained once a block as the callback
    drains it about once a second), in short alternating blocks (plain first in even
    rounds). Each block's cost is this process's CPU per step (TensorFlow's pool threads,
    which run the ops, included); the result is the mean of the rounds' differences with
    its 95 % interval, and the median CPU of a drain. ``--model-size`` and ``--batch``
    shrink the step, so that a few µs are not lost in its noise.
    """
    if args.blocks < 2:
        raise SystemExit("--blocks: at least 2")
    from tfdiag.collectors.batch_size import examples_in
    from tfdiag.collectors.step_input import StepStamps, stamp_train_step
    from tfdiag.sample_jobs import click_model
    from tfdiag.sample_jobs.fit_common import import_tf_keras
    from tfdiag.sample_jobs.jobs import JobConfig

    tf, keras = import_tf_keras()
    config = JobConfig("mwms_fit", tempfile.mkdtemp(prefix="tfdiag-stamp-cost-"), model_size=args.model_size,
                       batch=args.batch)
    dataset = click_model.make_dataset(tf, click_model.write_data(config.logdir), config.batch_size, config.plan)
    model = click_model.build_model(keras, config.hidden)
    click_model.compile_model(keras, model)
    model.fit(dataset, steps_per_epoch=2, verbose=0)  # builds the optimizer and the model's state
    iterator = iter(dataset)

    def traced(function):  # tf-keras looks train_step up when it traces: trace (and warm) it now
        for _ in range(50):
            function(iterator)
        return function

    functions = {"plain": traced(model.make_train_function(force=True))}
    stamps = StepStamps()
    stamp_train_step(model, stamps, examples_in)
    functions["stamped"] = traced(model.train_function)
    stamps.take()
    cpu = {name: [] for name in functions}
    drains = []
    load = os.getloadavg()[0]
    for round_ in range(args.blocks):
        for name in sorted(functions, reverse=round_ % 2 == 1):  # plain first in even rounds
            start = time.process_time()
            for _ in range(args.steps):
                functions[name](iterator)
            cpu[name].append((time.process_time() - start) / args.steps)
            if name == "stamped":
                start = time.process_time()
                taken = stamps.take()[0]
                drains.append(time.process_time() - start)
                assert len(taken) == args.steps, len(taken)
    plain = statistics.fmean(cpu["plain"])
    mean, half = interval([s - p for p, s in zip(cpu["plain"], cpu["stamped"])])
    print("| train function | CPU µs per step (mean of blocks) |\n| --- | --- |")
    for name, values in cpu.items():
        print(f"| {name} | {statistics.fmean(values) * 1e6:.1f} |")
    print(f"\nstamped − plain: {mean * 1e6:+.1f} ± {half * 1e6:.1f} µs a step (95 %, {args.blocks} rounds of "
          f"{args.steps} steps; {mean / plain:+.2%} of the plain step's CPU)")
    print(f"one drain of {args.steps} stamps: {statistics.median(drains) * 1e6:.0f} µs of CPU (median)")
    print(load_line(load))
    return 0


CASES = {"stamp_cost": (stamp_cost_arguments, stamp_cost)}
