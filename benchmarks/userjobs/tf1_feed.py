"""HOLDOUT user job: a TF1 between-graph loop fed through ``feed_dict``, a small CNN.

Written for ``benchmarks/trials.py`` and never used to fit a threshold. Unlike
``tf1_mts.py`` (embeddings, Adagrad): 16x16x3 images made by numpy on the worker and fed
through placeholders, two conv layers and a dense head placed by
``replica_device_setter`` over the ps tasks, momentum SGD, a ``MonitoredTrainingSession``
with ``DiagnosticsHook``. Worker 0 is the chief and prints the summary line.

Options (``JobConfig.extra``, set by the trial): ``slow_worker`` and ``input_ms``: that
worker takes ``input_ms`` more to make each batch (a slow decoder in Python);
``raise_at`` and ``raise_worker``: that worker raises ``ValueError`` at that step.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from tfdiag.sample_jobs.jobs import JobConfig, JobSummary
from tfdiag.sample_jobs.step_clock import StepClock

BATCH, SIZE, CLASSES = 64, 16, 10
TASK_COMMAND = [sys.executable, "-u", "-m", "benchmarks.userjobs.tf1_feed"]


def build(v1, tf):
    images = v1.placeholder(tf.float32, [None, SIZE, SIZE, 3], name="images")
    labels = v1.placeholder(tf.int64, [None], name="labels")
    net = images
    for i, channels in enumerate((16, 32)):
        kernel = v1.get_variable(f"conv{i}/kernel", [3, 3, net.shape[-1], channels])
        net = tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(net, kernel, 1, "SAME")), 2, 2, "SAME")
    net = tf.reshape(net, [-1, 4 * 4 * 32])
    logits = net @ v1.get_variable("head/kernel", [4 * 4 * 32, CLASSES])
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
    step = v1.train.get_or_create_global_step()
    train_op = v1.train.MomentumOptimizer(0.01, 0.9).minimize(loss, global_step=step)
    return images, labels, train_op


def main() -> int:
    config = JobConfig.from_json(sys.argv[sys.argv.index("--config") + 1])
    import tensorflow as tf

    from tfdiag.collectors import DiagnosticsHook

    v1 = tf.compat.v1
    v1.disable_eager_execution()
    tf_config = json.loads(os.environ["TF_CONFIG"])
    cluster = tf.train.ClusterSpec(tf_config["cluster"])
    job, index = tf_config["task"]["type"], int(tf_config["task"]["index"])
    server = v1.train.Server(cluster, job_name=job, task_index=index)
    if job == "ps":
        server.join()
        return 0
    with v1.device(v1.train.replica_device_setter(worker_device=f"/job:worker/task:{index}", cluster=cluster)):
        images, labels, train_op = build(v1, tf)
    extra = config.extra
    parse_s = extra.get("input_ms", 0) / 1e3 if extra.get("slow_worker") == index else 0.0
    raise_at = extra.get("raise_at") if extra.get("raise_worker") == index else None
    rng = np.random.default_rng(index)
    hooks = [v1.train.StopAtStepHook(last_step=config.steps), DiagnosticsHook(config.logdir, examples_per_step=BATCH)]
    session_config = v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"])
    with v1.train.MonitoredTrainingSession(master=server.target, is_chief=index == 0, hooks=hooks, config=session_config,
                                           save_checkpoint_secs=None, save_summaries_steps=None,
                                           save_summaries_secs=None, log_step_count_steps=None) as session:
        started, done = time.perf_counter(), 0
        clock = StepClock(config.steps)  # the job's own clock of its updates, as the global step counts them
        global_step = v1.train.get_global_step()
        while not session.should_stop():
            time.sleep(parse_s)
            if raise_at is not None and done == raise_at:
                raise ValueError(f"tf1_feed: undecodable image in step {done} of worker {index}")
            feed_images = rng.normal(size=(BATCH, SIZE, SIZE, 3)).astype(np.float32)
            feed_labels = rng.integers(0, CLASSES, size=BATCH)
            _, step = session.run([train_op, global_step], feed_dict={images: feed_images, labels: feed_labels})
            clock.tick(int(step))
            done += 1
        wall_s = time.perf_counter() - started
    if index == 0:  # the chief reports the whole job's updates
        print(JobSummary(config.steps, wall_s, config.steps * BATCH, steady=clock.steady).line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
