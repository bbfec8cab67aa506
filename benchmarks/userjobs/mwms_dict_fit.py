"""A user-style synchronous job: a two-input functional model fed by a dict dataset.

Each task runs ``model.fit`` with ``DiagnosticsCallback`` attached (no ``examples_per_step``:
the callback counts the examples of the dict elements itself) under
MultiWorkerMirroredStrategy and tf-keras, or, with ``--keras 3``, under MirroredStrategy with
Keras 3 in one worker (Keras 3 ``fit`` under MultiWorkerMirroredStrategy fails as shipped with
TensorFlow 2.21). ``--slow-input-worker I --input-ms MS`` makes worker I's pipeline sleep MS
per batch (a slow host-side parse); the other workers' pipelines stay fast.

The harness runs the job clean and with the slow input, interleaved (clean, slow, clean,
slow, ...), as tasks of the sample-job launcher (``LocalCluster(task_command=...)``),
analyses every run with ``tfdiag analyze --format json`` and prints a markdown table: the
primary finding and the tasks it names, its predicted speed-up, the measured speed-up
(clean examples/s over slow examples/s, from the step records) and the load average.

Example:
    python benchmarks/userjobs/mwms_dict_fit.py --pairs 2 --steps 60 --slow-input-worker 1 --input-ms 40
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tfdiag.sample_jobs.jobs import JobConfig
from tfdiag.sample_jobs.launcher import LocalCluster

FEATURES_A, FEATURES_B = 32, 8
GLOBAL_BATCH = 64


def dict_dataset(tf, worker: int, slow_worker: int | None, input_ms: float):
    """Endless ``({"clicks": [B, 32], "context": [B, 8]}, label)`` batches; worker ``slow_worker`` sleeps."""
    examples = GLOBAL_BATCH * 16
    features = {"clicks": tf.random.stateless_normal([examples, FEATURES_A], seed=(1, worker)),
                "context": tf.random.stateless_normal([examples, FEATURES_B], seed=(2, worker))}
    labels = tf.cast(tf.reduce_sum(features["clicks"], axis=1, keepdims=True) > 0, tf.float32)
    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).repeat().batch(GLOBAL_BATCH, drop_remainder=True)
    if worker == slow_worker and input_ms > 0:
        def parse(x, y):  # a slow host-side parse of every batch
            pause = tf.py_function(lambda: time.sleep(input_ms / 1e3) or 0.0, [], tf.float32)
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
    model.fit(dataset, epochs=1, steps_per_epoch=config.steps, verbose=0,
              callbacks=[DiagnosticsCallback(config.logdir)])


def run_once(logdir: Path, args, slow: bool) -> dict:
    """Runs the job once and returns what ``tfdiag analyze`` found, with the load average."""
    extra = {"keras": args.keras, "slow_worker": args.slow_input_worker if slow else None, "input_ms": args.input_ms}
    workers = 1 if args.keras == "3" else args.workers
    config = JobConfig("mwms_fit", str(logdir), steps=args.steps, workers=workers, extra=extra)
    cluster = LocalCluster(config, task_command=[sys.executable, "-u", __file__, "--worker"])
    with cluster:
        if cluster.wait(timeout_s=args.timeout) != 0:
            raise SystemExit(f"mwms_dict_fit failed; see {logdir}/tasks/")
    load = os.getloadavg()[0]
    tfdiag = Path(sys.executable).with_name("tfdiag")  # the console script beside this Python
    analysed = subprocess.run([str(tfdiag), "analyze", str(logdir), "--format", "json"],
                              capture_output=True, text=True)
    if analysed.returncode != 0:
        raise SystemExit(f"tfdiag analyze {logdir} failed: {analysed.stderr}")
    return {"report": json.loads(analysed.stdout), "load": load}


def summary(result: dict) -> dict:
    """Primary finding, the tasks it names, its prediction, and the run's examples/s."""
    report = result["report"]
    findings = [f for f in report.get("findings", []) if f.get("severity") in ("warning", "critical")]
    primary = findings[0] if findings else None
    rate = report["summary"]["examples_per_s"] or 0.0
    return {"primary": primary["kind"] if primary else "-", "tasks": ",".join(primary["tasks"]) if primary else "-",
            "predicted": (primary.get("recommendation") or {}).get("predicted_speedup") if primary else None,
            "rate": rate, "load": result["load"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2, help="interleaved (clean, slow) pairs")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keras", choices=("tf_keras", "3"), default="tf_keras")
    parser.add_argument("--slow-input-worker", type=int, default=1)
    parser.add_argument("--input-ms", type=float, default=40.0)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--logdir", default=None)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        run_worker(JobConfig.from_json(args.config))
        return 0
    root = Path(args.logdir or tempfile.mkdtemp(prefix="tfdiag-mwms-dict-"))
    runs = {"clean": [], "slow": []}
    for pair in range(args.pairs):
        for kind in ("clean", "slow"):
            runs[kind].append(summary(run_once(root / f"{kind}-{pair}", args, slow=kind == "slow")))
    print("| run | primary finding | tasks | predicted speed-up | examples/s | load avg (1 min) |")
    print("|---|---|---|---|---|---|")
    for pair in range(args.pairs):
        for kind in ("clean", "slow"):
            r = runs[kind][pair]
            predicted = f"{r['predicted']:.2f}" if r["predicted"] else "-"
            print(f"| {kind} {pair} | {r['primary']} | {r['tasks']} | {predicted} | {r['rate']:.0f} | {r['load']:.2f} |")
    measured = statistics.median(c["rate"] / s["rate"] for c, s in zip(runs["clean"], runs["slow"]) if s["rate"])
    print(f"\nmeasured speed-up without the slow input (median over pairs): {measured:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
