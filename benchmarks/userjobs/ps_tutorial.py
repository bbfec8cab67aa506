"""A ParameterServerStrategy custom loop written the way the TensorFlow tutorial writes it.

One training step per ``coordinator.schedule`` (``--steps-per-closure`` to change it), a
per-worker dataset of dict elements ``{"features": ..., "label": ...}``, a ``tf.Module``
model, and nothing of tfdiag but the public ``instrument_coordinator``. Its structure
differs from ``src/tfdiag/sample_jobs/ps_ctl.py`` on purpose: this is what a user's job looks like.

It runs as the tasks of a local cluster (``LocalCluster(task_command=...)``): the chief
runs the loop, ps and workers run servers. Faults come from outside the job
(``benchmarks/harness/faults.py``): ``--cpu-quota I:ON:OFF`` on worker I (by ``SIGSTOP``/``SIGCONT``,
or with ``--quota-by cgroup`` the kernel's CFS quota on a cgroup of its own), ``--slow-ps I:MS``;
and ``--slow-input I:MS``, worker I's pipeline MS slower per batch (only while the file
``$TFDIAG_INPUT_DELAY_SWITCH`` exists, where that is set: ``benchmarks/live_latency.py``).

Example:
    .venv/bin/python -m benchmarks.userjobs.ps_tutorial --workers 2 --ps 2 --steps 300 \\
        --logdir /tmp/tut --cpu-quota 1:20:30
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from benchmarks.harness import faults
from benchmarks.userjobs.runner import UserRun, chief_trains, run_user_job
from tfdiag.sample_jobs.common import sleep_us
from tfdiag.sample_jobs.jobs import JobConfig, JobSummary
from tfdiag.sample_jobs.step_clock import StepClock

FEATURES, HIDDEN, BATCH, EXAMPLES = 32, 128, 128, 4096
# What every task runs (the launcher appends ``--config JSON``).
TASK_COMMAND = [sys.executable, "-u", "-m", "benchmarks.userjobs.ps_tutorial", "--task"]
# With this set to a path, the slow worker's input is slow only while that file exists.
INPUT_SWITCH_ENV_VAR = "TFDIAG_INPUT_DELAY_SWITCH"


def slowed_input(tf, worker: int, input_ms: float):
    """A map that holds each batch ``input_ms`` on worker ``worker`` (while the switch file exists).

    The dataset function runs on the workers, so the fault is in-graph: the switch
    (``MatchingFiles`` on its path) is read per batch where the batch is made, on a pattern
    that depends on the batch (on the path alone, the workers' graph optimiser folded it to
    the file's absence when the dataset was made: under live_latency.py at 3ae4aea, worker
    1's steps were 4.2 ms with the switch on and off). Call it in
    the dataset function: the worker's index is a value of that function's call (read
    inside the map function, it slowed no worker: live_latency.py's input run at 9df81b0
    had worker 1's steps at 3.8 ms with the delay on and off; read here, ``--slow-input
    1:30`` makes them 19.7 ms against worker 0's 3.3).
    """
    switch = os.environ.get(INPUT_SWITCH_ENV_VAR)
    slow_worker = tf.equal(tf.distribute.coordinator.experimental_get_current_worker_index(), worker)

    def slow(batch):
        on = slow_worker
        if switch:  # the pattern made of the batch: MatchingFiles is stateless, a constant one is folded once
            suffix = tf.strings.substr(tf.strings.as_string(tf.reduce_sum(batch["label"])), 0, 0)
            on = tf.logical_and(on, tf.size(tf.io.matching_files(tf.strings.join([switch, suffix]))) > 0)
        pause_us = tf.where(on, tf.constant(int(input_ms * 1e3), tf.int64), tf.constant(0, tf.int64))
        return {**batch, "label": sleep_us(tf, pause_us, batch["label"])}

    return slow


def train(config: JobConfig) -> str:
    """The chief's loop, tutorial style; returns the summary line."""
    import tensorflow as tf

    from tfdiag.collectors import instrument_coordinator

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    slow_worker, input_ms = config.extra.get("slow_worker"), float(config.extra.get("input_ms") or 0.0)
    slow_input = (int(slow_worker), input_ms) if slow_worker is not None and input_ms > 0 else None
    with strategy.scope():
        model = tf.Module()
        model.w1 = tf.Variable(tf.random.normal([FEATURES, HIDDEN], stddev=0.1))
        model.b1 = tf.Variable(tf.zeros([HIDDEN]))
        model.w2 = tf.Variable(tf.random.normal([HIDDEN, 1], stddev=0.1))
        model.b2 = tf.Variable(tf.zeros([1]))

    def dataset_fn(context):
        features = tf.random.stateless_normal([EXAMPLES, FEATURES], seed=[1, 2])
        label = tf.cast(tf.reduce_sum(features, axis=1) > 0, tf.float32)
        dataset = tf.data.Dataset.from_tensor_slices({"features": features, "label": label})
        dataset = dataset.shuffle(EXAMPLES).batch(BATCH).repeat()
        if slow_input is not None:
            dataset = dataset.map(slowed_input(tf, *slow_input))
        return dataset.prefetch(2)

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(dataset_fn)

    coordinator = instrument_coordinator(tf.distribute.coordinator.ClusterCoordinator(strategy), config.logdir,
                                         variables=model)
    per_worker_iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))
    steps_per_closure = int(config.extra.get("steps_per_closure", 1))

    def replica_fn(batch):
        with tf.GradientTape() as tape:
            hidden = tf.nn.relu(batch["features"] @ model.w1 + model.b1)
            logits = tf.squeeze(hidden @ model.w2 + model.b2, axis=1)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(batch["label"], logits))
        variables = [model.w1, model.b1, model.w2, model.b2]
        for variable, gradient in zip(variables, tape.gradient(loss, variables)):
            variable.assign_sub(0.05 * gradient)
        return loss

    @tf.function
    def train_step(iterator):
        for _ in range(steps_per_closure):
            loss = strategy.run(replica_fn, args=(next(iterator),))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)

    closures = max(1, config.steps // steps_per_closure)
    steps = closures * steps_per_closure
    started = time.monotonic()
    clock = StepClock(steps)  # the job's own clock of its steps (its steady rate)
    for closure in range(closures):
        coordinator.schedule(train_step, args=(per_worker_iterator,))
        clock.tick((closure + 1) * steps_per_closure)
    coordinator.join()
    wall_s = time.monotonic() - started
    clock.tick(steps)
    coordinator.close()
    return JobSummary(steps, wall_s, steps * BATCH, steady=clock.steady).line()


def run_task(config: JobConfig) -> int:
    """This process's part, as ``TF_CONFIG`` names it: the chief trains, the rest serve."""
    return chief_trains(train, config)


def run_job(logdir: str, *, workers: int = 2, ps: int = 2, steps: int = 300, steps_per_closure: int = 1,
            cpu_quota: tuple[int, float, float] | None = None, quota_by: str = "signals",
            slow_ps: tuple[int, float] | None = None, slow_input: tuple[int, float] | None = None,
            while_running=None, finished: bool = True, timeout_s: float = 600.0) -> UserRun:
    """Runs the job once on a local cluster and analyses it (``runner.run_user_job``).

    ``cpu_quota=(I, ON_MS, OFF_MS)`` holds worker I to ON out of every ON+OFF ms (``quota_by``:
    ``"signals"``, ``faults.cpu_quota``, or ``"cgroup"``, ``faults.cgroup_quota``);
    ``slow_ps=(I, RTT_MS)`` puts a delaying proxy in front of ps I; ``slow_input=(I, MS)``
    makes worker I's input MS slower per batch; ``while_running``
    is any other outside fault (``runner.run_user_job``), ``finished=False`` when it
    ends the job itself.
    """
    if cpu_quota:
        if while_running:
            raise ValueError("run_job takes cpu_quota or while_running, not both")
        worker, on_ms, off_ms = cpu_quota
        while_running = faults.worker_quota(worker, on_ms, off_ms, quota_by)
    extra = {"steps_per_closure": steps_per_closure}
    if slow_input:
        extra.update(slow_worker=slow_input[0], input_ms=slow_input[1])
    return run_user_job(TASK_COMMAND, logdir, shape="ps_ctl", steps=steps, workers=workers, ps=ps,
                        inject=(faults.slow_ps(*slow_ps),) if slow_ps else (),
                        extra=extra, while_running=while_running,
                        timeout_s=timeout_s, finished=finished)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--steps-per-closure", type=int, default=1)
    parser.add_argument("--logdir", default=None, help="the run directory (default: a temp dir)")
    parser.add_argument("--cpu-quota", metavar="I:ON_MS:OFF_MS", help="hold worker I to ON of every ON+OFF ms")
    parser.add_argument("--quota-by", choices=("signals", "cgroup"), default="signals",
                        help="how --cpu-quota holds the worker: SIGSTOP/SIGCONT, or a cgroup's CFS quota")
    parser.add_argument("--slow-ps", metavar="I:RTT_MS", help="a delaying proxy in front of ps I")
    parser.add_argument("--slow-input", metavar="I:MS", help="worker I's input MS slower per batch")
    parser.add_argument("--task", action="store_true", help=argparse.SUPPRESS)  # run as a cluster task
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.task:
        return run_task(JobConfig.from_json(args.config))
    slow = tuple(float(x) for x in args.slow_ps.split(":")) if args.slow_ps else None
    slow_input = tuple(float(x) for x in args.slow_input.split(":")) if args.slow_input else None
    logdir = args.logdir or tempfile.mkdtemp(prefix="tfdiag-ps-tutorial-")
    run = run_job(logdir, workers=args.workers, ps=args.ps, steps=args.steps, steps_per_closure=args.steps_per_closure,
                  cpu_quota=faults.parse_quota(args.cpu_quota), quota_by=args.quota_by,
                  slow_ps=(int(slow[0]), slow[1]) if slow else None,
                  slow_input=(int(slow_input[0]), slow_input[1]) if slow_input else None)
    primary = run.primary
    print(json.dumps({"logdir": logdir, "examples_per_s": run.examples_per_s,
                      "primary": primary and {k: primary[k] for k in ("kind", "tasks", "severity")}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
