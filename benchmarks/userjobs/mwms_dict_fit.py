"""A user-style synchronous job: a two-input functional model fed by a dict dataset.

Each task runs ``model.fit`` with ``DiagnosticsCallback`` attached (no ``examples_per_step``:
the callback counts the examples of the dict elements itself) under
MultiWorkerMirroredStrategy and tf-keras, or, with ``--keras 3``, under MirroredStrategy with
Keras 3 in one worker (Keras 3 ``fit`` under MultiWorkerMirroredStrategy fails as shipped with
TensorFlow 2.21). ``--slow-input-worker I --input-ms MS`` makes worker I's pipeline sleep MS
per batch (a slow host-side parse); the other workers' pipelines stay fast. ``--cpu-quota
I:ON:OFF`` holds worker I's processes to ON of every ON+OFF ms from outside
(``benchmarks/harness/faults.py``; ``--quota-by cgroup`` for the kernel's CFS quota).

It runs as the tasks of a local cluster (``runner.run_user_job``); run alone it runs once
and prints the primary finding. ``benchmarks/userjobs/score.py`` scores it, clean and slow.
Worker 0, the chief, prints the summary line (examples/s of the whole job over ``fit``).

Example:
    .venv/bin/python -m benchmarks.userjobs.mwms_dict_fit --steps 200 --slow-input-worker 1 --input-ms 40
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import faults
from benchmarks.userjobs.runner import UserRun, run_user_job
from tfdiag.sample_jobs.jobs import JobConfig

FEATURES_A, FEATURES_B = 32, 8
GLOBAL_BATCH = 64
# What every task runs (the launcher appends ``--config JSON``).
# With this set to a path, the slow worker's input is slow only while that file exists.
INPUT_SWITCH_ENV_VAR = "TFDIAG_INPUT_DELAY_SWITCH"
TASK_COMMAND = [sys.executable, "-u", "-m", "benchmarks.userjobs.mwms_dict_fit", "--worker"]


def dict_dataset(tf, worker: int, slow_worker: int | None, input_ms: float):
    """Endless ``({"clicks": [B, 32], "context": [B, 8]}, label)`` batches; worker ``slow_worker`` sleeps."""
    examples = GLOBAL_BATCH * 16
    features = {"clicks": tf.random.stateless_normal([examples, FEATURES_A], seed=(1, worker)),
                "context": tf.random.stateless_normal([examples, FEATURES_B], seed=(2, worker))}
    labels = tf.cast(tf.reduce_sum(features["clicks"], axis=1, keepdims=True) > 0, tf.float32)
    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(GLOBAL_BATCH, drop_remainder=True)
    if worker == slow_worker and input_ms > 0:
        switch = os.environ.get(INPUT_SWITCH_ENV_VAR)  # benchmarks/live_latency.py turns the delay on and off

        def pause_once():
            if not switch or os.path.exists(switch):
                time.sleep(input_ms / 1e3)
            return 0.0

        def parse(x, y):  # a slow host-side parse of every batch
            pause = tf.py_function(pause_once, [], tf.float32)
            return x, y + tf.reshape(pause, [])

        dataset = dataset.map(parse)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF  # own data per worker
    return dataset.with_options(options)


def build_model(keras):
    dense = keras.Input((FEATURES_A,), name="clicks")
    extra = keras.Input((FEATURES_B,), name="context")
    hidden = keras.layers.Dense(256, activation="relu")(keras.layers.Concatenate()([dense, extra]))
    hidden = keras.layers.Dense(256, activation="relu")(hidden)
    model = keras.Model({"clicks": dense, "context": extra}, keras.layers.Dense(1, activation="sigmoid")(hidden))
    model.compile(keras.optimizers.SGD(0.01), "binary_crossentropy")
    return model


def run_worker(config: JobConfig) -> None:
    """One task's part: build the strategy first, then the data, the model and ``fit``."""
    extra = config.extra
    if extra["keras"] == "3":
        import keras
        import tensorflow as tf

        strategy = tf.distribute.MirroredStrategy()
        worker = 0
    else:
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
        import tensorflow as tf
        import tf_keras as keras

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        worker = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    from tfdiag.collectors import DiagnosticsCallback

    slow = extra.get("slow_worker") == worker
    print(f"mwms_dict_fit: worker {worker}, keras {extra['keras']}, input +{extra['input_ms'] if slow else 0} ms/batch",
          flush=True)
    dataset = dict_dataset(tf, worker, extra.get("slow_worker"), extra.get("input_ms", 0.0))
    with strategy.scope():
        model = build_model(keras)
    started = time.monotonic()
    model.fit(dataset, epochs=1, steps_per_epoch=config.steps, verbose=0,
              callbacks=[DiagnosticsCallback(config.logdir)])
    wall_s = time.monotonic() - started
    if worker == 0:  # the global batch, split among the workers' replicas
        print(f"tfdiag-sample: steps={config.steps} wall_s={wall_s:.2f} "
              f"examples_per_s={config.steps * GLOBAL_BATCH / wall_s:.1f}", flush=True)


def run_job(logdir: str | Path, *, steps: int = 200, workers: int = 2, keras: str = "tf_keras",
            slow_input_worker: int | None = None, input_ms: float = 40.0, timeout_s: float = 300.0,
            cpu_quota: tuple[int, float, float] | None = None, quota_by: str = "signals") -> UserRun:
    """Runs the job once on a local cluster and analyses it (``runner.run_user_job``);
    worker ``slow_input_worker``'s pipeline sleeps ``input_ms`` per batch (None: no slow input);
    ``cpu_quota=(I, ON_MS, OFF_MS)`` holds worker I to ON of every ON+OFF ms (``faults.worker_quota``)."""
    extra = {"keras": keras, "slow_worker": slow_input_worker, "input_ms": input_ms}
    return run_user_job(TASK_COMMAND, logdir, shape="mwms_fit", steps=steps, workers=1 if keras == "3" else workers,
                        extra=extra, timeout_s=timeout_s,
                        while_running=faults.worker_quota(*cpu_quota, quota_by) if cpu_quota else None)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keras", choices=("tf_keras", "3"), default="tf_keras")
    parser.add_argument("--slow-input-worker", type=int, default=None)
    parser.add_argument("--input-ms", type=float, default=40.0)
    parser.add_argument("--cpu-quota", metavar="I:ON_MS:OFF_MS", help="hold worker I to ON of every ON+OFF ms")
    parser.add_argument("--quota-by", choices=("signals", "cgroup"), default="signals",
                        help="how --cpu-quota holds the worker: SIGSTOP/SIGCONT, or a cgroup's CFS quota")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--logdir", default=None, help="the run directory (default: a temp dir)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # run as a cluster task
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        run_worker(JobConfig.from_json(args.config))
        return 0
    logdir = args.logdir or tempfile.mkdtemp(prefix="tfdiag-mwms-dict-")
    run = run_job(logdir, steps=args.steps, workers=args.workers, keras=args.keras,
                  slow_input_worker=args.slow_input_worker, input_ms=args.input_ms, timeout_s=args.timeout,
                  cpu_quota=faults.parse_quota(args.cpu_quota), quota_by=args.quota_by)
    primary = run.primary
    print(json.dumps({"logdir": logdir, "examples_per_s": run.examples_per_s,
                      "primary": primary and {k: primary[k] for k in ("kind", "tasks", "severity")}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
