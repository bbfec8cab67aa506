"""What the ``model.fit`` input-arrival stamp costs per step, by mechanism.

One process, ``mwms_fit``'s model and input (tf-keras, no strategy), three train
functions of the same model called in interleaved blocks of ``--steps`` steps:
``plain`` (no stamp), ``queue`` (``collectors/step_input.py``: ``tf.timestamp()`` at the
function's start, at the element's arrival and once the gradients exist, in the
optimizer's ``apply_gradients``, and a ``FIFOQueue`` enqueue in-graph, drained once per
block as the callback does about once a second) and ``py_function`` (the earlier
mechanism: a ``tf.py_function`` per replica per step that read the clock in Python).
Prints the median CPU µs per step of each (this process's CPU: TensorFlow's threads
included) and of one drain. ``--model-size`` and ``--batch`` shrink the step, so that a
few µs are not lost in its noise.

    python benchmarks/stamp_cost.py --blocks 10 --steps 500
    python benchmarks/stamp_cost.py --blocks 10 --steps 500 --model-size 16 --batch 16
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def py_function_train_step(tf, model, rows_of):
    """The earlier stamp: a ``tf.py_function`` reading the clock once the element exists."""
    original = model.train_step
    stamps = []

    def stamp(rows, *anchor):
        stamps.append((time.time_ns(), int(rows.numpy())))
        return []

    def train_step(data):
        anchor = [tf.reshape(t, [-1])[:1] for t in tf.nest.flatten(data, expand_composites=True)[:1]]
        tf.py_function(stamp, [rows_of(data), *anchor], [], name="tfdiag_input_ready")
        return original(data)

    return train_step, stamps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=10, help="blocks per mechanism, interleaved")
    parser.add_argument("--steps", type=int, default=500, help="steps per block")
    parser.add_argument("--model-size", type=int, default=0, help="hidden width (default: the job's)")
    parser.add_argument("--batch", type=int, default=0, help="examples per step (default: the job's)")
    args = parser.parse_args(argv)

    from tfdiag.collectors.batch_size import examples_in
    from tfdiag.collectors.step_input import StepStamps, stamp_train_step
    from tfdiag.sample_jobs import click_model
    from tfdiag.sample_jobs.fit_common import import_tf_keras
    from tfdiag.sample_jobs.jobs import JobConfig

    tf, keras = import_tf_keras()
    config = JobConfig("mwms_fit", tempfile.mkdtemp(prefix="tfdiag-stamp-cost-"), model_size=args.model_size,
                       batch=args.batch)
    files = click_model.write_data(config.logdir)
    dataset = click_model.make_dataset(tf, files, config.batch_size, config.plan)
    model = click_model.build_model(keras, config.hidden)
    click_model.compile_model(keras, model)
    model.fit(dataset, steps_per_epoch=2, verbose=0)  # builds the optimizer and the model's state
    iterator = iter(dataset)

    def traced(function):  # tf-keras looks train_step up when it traces: trace (and warm) it now
        for _ in range(20):
            function(iterator)
        return function

    functions = {"plain": traced(model.make_train_function(force=True))}
    stamps = StepStamps()
    stamp_train_step(model, stamps, examples_in)
    functions["queue"] = traced(model.train_function)
    stamp_train_step(model, None, examples_in)
    model.train_step, py_stamps = py_function_train_step(tf, model, examples_in)
    functions["py_function"] = traced(model.make_train_function(force=True))
    stamps.take()
    cpu = {name: [] for name in functions}
    drains = []
    for _ in range(args.blocks):
        for name, function in functions.items():
            start = time.process_time()
            for _ in range(args.steps):
                function(iterator)
            cpu[name].append((time.process_time() - start) / args.steps)
            if name == "queue":
                start = time.process_time()
                taken = stamps.take()[0]
                drains.append(time.process_time() - start)
                assert len(taken) == args.steps, len(taken)
        py_stamps.clear()
    load = os.getloadavg()[0]
    plain = statistics.median(cpu["plain"])
    print("| mechanism | CPU µs per step (median of blocks) | over plain |")
    print("| --- | --- | --- |")
    for name, values in cpu.items():
        value = statistics.median(values)
        print(f"| {name} | {value * 1e6:.1f} | {(value - plain) * 1e6:+.1f} µs ({value / plain - 1:+.1%}) |")
    print(f"\none drain of {args.steps} stamps: {statistics.median(drains) * 1e6:.0f} µs of CPU (median); "
          f"{args.blocks} blocks of {args.steps} steps each; load average (1 min) {load:.1f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
