"""Run by test_coordinator.py in its own process: the chief of a cluster of servers.

Usage: python coordinator_job.py LOGDIR  (TF_CONFIG names this process chief:0)
Schedules a good closure, a failing one and a good one again, then prints JSON.
"""

import json
import sys

import tensorflow as tf

from tfdiag.collectors import instrument_coordinator
from tfdiag.sample_jobs.task import wait_for_cluster

logdir = sys.argv[1]
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
wait_for_cluster(resolver.cluster_spec().as_dict(), "chief:0")
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
coordinator = instrument_coordinator(tf.distribute.coordinator.ClusterCoordinator(strategy), logdir)
with strategy.scope():
    total = tf.Variable(0.0)


def dataset_fn():
    return tf.data.Dataset.from_tensors((tf.ones([8, 2]), tf.ones([8]))).repeat()


iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))


@tf.function
def step(iterator, fail):
    x, _ = next(iterator)
    tf.debugging.Assert(tf.logical_not(fail), ["closure asked to fail"])
    total.assign_add(tf.reduce_sum(x))
    return tf.reduce_sum(x)


outcome = {}
first = coordinator.schedule(step, args=(iterator, tf.constant(False)))
coordinator.join()
outcome["first"] = float(first.fetch())
coordinator.schedule(step, args=(iterator, tf.constant(True)))
try:
    coordinator.join()
    outcome["error"] = None
except tf.errors.InvalidArgumentError as error:
    outcome["error"] = type(error).__name__
third = coordinator.schedule(step, args=(iterator, tf.constant(False)))
coordinator.join()
outcome["third"] = float(third.get())
outcome["done"] = coordinator.done()
outcome["strategy"] = type(coordinator.strategy).__name__
coordinator.close()
outcome["closures_recorded"] = coordinator.closures_recorded
print(json.dumps(outcome), flush=True)
