"""Run by test_probe.py in its own process: the chief of a 2 ps + 2 worker cluster.

Usage: python probe_job.py LOGDIR SECONDS  (TF_CONFIG names this process chief:0)
Trains a small model for SECONDS with every collector at a fast rate, and on until the
probe has passed PROBE_PASSES times over every link (the 10th pass carries the payload),
then prints JSON.
"""

import json
import sys
import time

import tensorflow as tf

from tfdiag.collectors import instrument_coordinator
from tfdiag.sample_jobs.task import wait_for_cluster

logdir, seconds = sys.argv[1], float(sys.argv[2])
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
wait_for_cluster(resolver.cluster_spec().as_dict(), "chief:0")
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
with strategy.scope():
    kernel = tf.Variable(tf.zeros([64, 32]), name="kernel")  # 8192 bytes
    bias = tf.Variable(tf.zeros([32]), name="bias")  # 128 bytes
started = time.monotonic()
coordinator = instrument_coordinator(tf.distribute.coordinator.ClusterCoordinator(strategy), logdir,
                                     probe_interval_s=0.05, system_interval_s=0.2, variables=[kernel, bias])
instrument_s = time.monotonic() - started  # mostly RpcProber.prepare: every probe function run once


@tf.function
def step():
    kernel.assign_add(tf.ones([64, 32]))
    bias.assign_add(tf.ones([32]))
    return tf.reduce_sum(bias)


PROBE_PASSES = 12
MAX_SECONDS = 60

start = time.monotonic()
steps = 0
prober = coordinator.collectors["rpc"]
while time.monotonic() - start < seconds or (prober.passes < PROBE_PASSES and time.monotonic() - start < MAX_SECONDS):
    for _ in range(10):
        coordinator.schedule(step)
    coordinator.join()
    steps += 10
coordinator.close()
print(json.dumps({"steps": steps, "collectors": sorted(coordinator.collectors),
                  "probes": coordinator.collectors["rpc"].records, "instrument_s": round(instrument_s, 2)}), flush=True)
