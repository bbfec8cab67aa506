"""A TF1 between-graph training script as a user writes it, with tfdiag's hook attached.

Not a sample job: nothing here knows about ``--inject``; faults come from outside
(``benchmarks/userjobs/runner.py`` puts a delaying proxy in front of a ps). Unlike
``src/tfdiag/sample_jobs/tf1_session.py`` (tf.data input, dense MLP, plain SGD) it is a small
wide-and-deep click model: numpy batches fed through placeholders (``feed_dict``), an
embedding table partitioned over the ps tasks (``fixed_size_partitioner``) looked up with
``embedding_lookup_sparse``-style ids, a dense tower, and Adagrad (whose accumulators are
slots on the ps, so every update moves them too).

Every task runs this script with the same arguments; ``TF_CONFIG`` says which task it is.
ps tasks serve until they are stopped; worker 0 is the chief. Worker 0 prints
``tfdiag-sample: steps=N wall_s=S examples_per_s=E`` at the end (the line the runner reads).

    TF_CONFIG=... python benchmarks/userjobs/tf1_mts.py --logdir logs/run --steps 200
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import tensorflow as tf

from tfdiag.collectors import DiagnosticsHook

VOCABULARY = 50_000
EMBEDDING = 32
IDS_PER_EXAMPLE = 8
DENSE_FEATURES = 16
HIDDEN = 256


def batches(batch: int, seed: int, parse_s: float = 0.0):
    """Endless (ids, dense, label) batches of a synthetic click log; each takes ``parse_s``
    more to make (a slow reader or parser in Python)."""
    rng = np.random.default_rng(seed)
    while True:
        time.sleep(parse_s)
        ids = rng.zipf(1.3, size=(batch, IDS_PER_EXAMPLE)) % VOCABULARY
        dense = rng.normal(size=(batch, DENSE_FEATURES)).astype(np.float32)
        label = (dense[:, :1] + 0.1 * (ids[:, :1] % 7) > 0.5).astype(np.float32)
        yield ids.astype(np.int64), dense, label


def build_model(v1, partitions: int):
    """Placeholders, loss, train op and global step, placed by ``replica_device_setter``;
    the embedding table in ``partitions`` shards (1: whole on one ps, a hot ps)."""
    ids = v1.placeholder(tf.int64, [None, IDS_PER_EXAMPLE], name="ids")
    dense = v1.placeholder(tf.float32, [None, DENSE_FEATURES], name="dense")
    label = v1.placeholder(tf.float32, [None, 1], name="label")
    global_step = v1.train.get_or_create_global_step()
    table = v1.get_variable("wide/embeddings", [VOCABULARY, EMBEDDING],
                            partitioner=v1.fixed_size_partitioner(partitions),
                            initializer=v1.truncated_normal_initializer(stddev=0.05))
    wide = tf.reduce_mean(tf.nn.embedding_lookup(table, ids), axis=1)
    tower = tf.concat([wide, dense], axis=1)
    for layer in range(2):
        kernel = v1.get_variable(f"deep/kernel{layer}", [tower.shape[1], HIDDEN],
                                 initializer=v1.glorot_uniform_initializer())
        bias = v1.get_variable(f"deep/bias{layer}", [HIDDEN], initializer=v1.zeros_initializer())
        tower = tf.nn.relu(tf.matmul(tower, kernel) + bias)
    logits = tf.matmul(tower, v1.get_variable("head/kernel", [HIDDEN, 1]))
    loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=label, logits=logits))
    train_op = v1.train.AdagradOptimizer(0.05).minimize(loss, global_step=global_step)
    return (ids, dense, label), loss, train_op, global_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--steps", type=int, default=200, help="updates of all workers together")
    parser.add_argument("--batch", type=int, default=512, help="examples per worker update")
    parser.add_argument("--parse-ms", type=float, default=0.0, help="extra time to make each batch (ms)")
    parser.add_argument("--slow-parse-worker", type=int, default=None,
                        help="only this worker's batches take --parse-ms more (default: every worker's)")
    parser.add_argument("--embedding-partitions", type=int, default=None,
                        help="shards of the embedding table (default: one per ps; 1 puts it whole on one ps)")
    args, _ = parser.parse_known_args()  # a launcher may append options of its own

    tf_config = json.loads(os.environ["TF_CONFIG"])
    cluster = tf.train.ClusterSpec(tf_config["cluster"])
    job, index = tf_config["task"]["type"], int(tf_config["task"]["index"])
    v1 = tf.compat.v1
    v1.disable_eager_execution()
    server = v1.train.Server(cluster, job_name=job, task_index=index)
    if job == "ps":
        server.join()
        return

    with v1.device(v1.train.replica_device_setter(worker_device=f"/job:worker/task:{index}", cluster=cluster)):
        (ids, dense, label), loss, train_op, global_step = build_model(v1, args.embedding_partitions or cluster.num_tasks("ps"))
    hooks = [v1.train.StopAtStepHook(last_step=args.steps),
             DiagnosticsHook(args.logdir, examples_per_step=args.batch)]
    session_config = v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"])
    slow = args.slow_parse_worker is None or args.slow_parse_worker == index
    data = batches(args.batch, seed=index, parse_s=args.parse_ms / 1e3 if slow else 0.0)
    with v1.train.MonitoredTrainingSession(master=server.target, is_chief=index == 0, hooks=hooks,
                                           config=session_config, save_checkpoint_secs=None,
                                           save_summaries_steps=None, save_summaries_secs=None,
                                           log_step_count_steps=None) as session:
        start = time.perf_counter()
        while not session.should_stop():
            feed_ids, feed_dense, feed_label = next(data)
            session.run(train_op, feed_dict={ids: feed_ids, dense: feed_dense, label: feed_label})
        wall_s = time.perf_counter() - start
    if index == 0:  # the chief reports the whole job's updates
        rate = args.steps * args.batch / wall_s
        print(f"tfdiag-sample: steps={args.steps} wall_s={wall_s:.3f} examples_per_s={rate:.1f}", flush=True)


if __name__ == "__main__":
    main()
