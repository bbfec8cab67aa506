"""Run by test_hook.py in its own process: a TF1 between-graph worker with DiagnosticsHook.

Usage: python tf1_job.py LOGDIR STEPS  (TF_CONFIG names this process chief:0; the ps
runs as a plain server). Prints JSON: variable bytes per ps and the hook's counters.
"""

import json
import sys

import tensorflow as tf

from tfdiag.collectors import DiagnosticsHook, record_placement
from tfdiag.sample_jobs.task import wait_for_cluster

logdir, steps = sys.argv[1], int(sys.argv[2])
tf.compat.v1.disable_eager_execution()
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
cluster = resolver.cluster_spec()
wait_for_cluster(cluster.as_dict(), "chief:0")
server = tf.distribute.Server(cluster, job_name="chief", task_index=0, protocol="grpc")

with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(worker_device="/job:chief/task:0", cluster=cluster)):
    x = tf.random.normal([16, 64])
    # w1 is 128 KiB: its trace label rounds the size ("[0.1MB]"), the others' give bytes.
    w1 = tf.compat.v1.get_variable("w1", [64, 512])  # ps:0 (round robin)
    b1 = tf.compat.v1.get_variable("b1", [512])  # ps:1
    w2 = tf.compat.v1.get_variable("w2", [512, 8])  # ps:0
    loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2)))
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss)

variables = [w1, b1, w2]
rows = record_placement(variables, logdir, task="chief:0")
hook = DiagnosticsHook(logdir, task="chief:0", examples_per_step=16, trace_every=5, system_interval_s=None)
with tf.compat.v1.train.MonitoredTrainingSession(master=server.target, is_chief=True, hooks=[hook]) as session:
    for _ in range(steps):
        session.run(train_op)
per_ps = {}
for row in rows:
    per_ps[row["task"]] = per_ps.get(row["task"], 0) + row["bytes"]
print(json.dumps({"variable_bytes": per_ps, "steps": hook.steps_recorded, "traces": hook.traces_parsed,
                  "transfers": hook.transfers_recorded}), flush=True)
