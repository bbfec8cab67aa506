"""Run by test_tf_internals.py in its own process: reads each private attribute the
collectors rely on from real TensorFlow objects and prints what it found as JSON.

Usage: python internals_job.py LOGDIR ps    (TF_CONFIG: chief:0 of a 1 ps + 1 worker cluster)
       python internals_job.py LOGDIR mwms  (no TF_CONFIG: a single-worker MultiWorkerMirroredStrategy)
"""

import json
import sys
import threading

import tensorflow as tf

from tfdiag.collectors import tf_internals
from tfdiag.events import task_of_device
from tfdiag.sample_jobs.task import wait_for_cluster

mode = sys.argv[2]
facts = {"version_supported": tf_internals.tf_version_supported(tf.__version__)}
if mode == "mwms":
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    facts["workers"] = tf_internals.strategy_worker_count(strategy)
    facts["resolver"] = type(tf_internals.strategy_resolver(strategy)).__name__
    print(json.dumps(facts), flush=True)
    sys.exit(0)

# A resolver that is not TF_CONFIG's: the collectors must find the cluster through the strategy.
resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
    tf.distribute.cluster_resolver.TFConfigClusterResolver().cluster_spec(), task_type="chief", task_id=0, rpc_layer="grpc")

wait_for_cluster(resolver.cluster_spec().as_dict(), "chief:0")
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
facts["resolver_task"] = [tf_internals.strategy_resolver(strategy).task_type,
                          tf_internals.strategy_resolver(strategy).task_id]
facts["coordinator_found"] = tf_internals.cluster_coordinator_of(None, strategy) is coordinator
stand_in = object()
tf_internals.replace_cluster_coordinator(None, strategy, stand_in)
facts["coordinator_replaced"] = tf_internals.cluster_coordinator_of(None, strategy) is stand_in
tf_internals.replace_cluster_coordinator(None, strategy, coordinator)

release = tf.Variable(False)  # on the ps: the first closure waits until it is set


@tf.function
def held():
    tf.while_loop(lambda: tf.logical_not(release.read_value()), lambda: (), [], parallel_iterations=1)
    return tf.constant(1.0), tf.constant([2.0, 3.0], tf.float64)


@tf.function
def step(fail):
    tf.debugging.Assert(tf.logical_not(fail), ["asked to fail"])
    return tf.constant(1.0), tf.constant([2.0, 3.0], tf.float64)


def observe(remote, copy):
    """Hooks the result of ``remote``: records in which thread it came in and whether its copy was asked for."""
    seen = {}

    def came_in():
        seen["thread"] = threading.current_thread().name
        return copy

    tf_internals.on_result(remote, came_in)
    return seen


waiting = coordinator.schedule(held)
facts["state_present"] = tf_internals.has_remote_value_state(waiting)
facts["finished_while_running"] = tf_internals.closure_finished(waiting)
seen_waiting = observe(waiting, copy=False)
release.assign(True)
coordinator.join()
facts["finished_after_join"] = tf_internals.closure_finished(waiting)
facts["error_of_success"] = repr(tf_internals.closure_error(waiting))
facts["hook_thread"] = seen_waiting.get("thread", "")
facts["outputs_device"] = task_of_device(tf_internals.worker_outputs(waiting)[1].device)
facts["not_copied"] = tf_internals.local_outputs(waiting) is None
with tf.device(tf_internals.worker_outputs(waiting)[1].device):
    facts["read_on_worker"] = tf.identity(tf_internals.worker_outputs(waiting)[1]).numpy().tolist()

good = tf.constant(False)
kept = coordinator.schedule(step, args=(good,))
observe(kept, copy=True)
coordinator.join()
traces = step.experimental_get_tracing_count()
concrete = tf_internals.traced_concrete_function(step, (good,), None, strategy)
facts["concrete_of_scheduled"] = type(concrete).__name__
facts["lookup_traced"] = step.experimental_get_tracing_count() - traces
facts["concrete_runs"] = coordinator.schedule(concrete, args=(good,)).fetch()[1].tolist()
local = tf_internals.local_outputs(kept)
facts["copied"] = local is not None and local[1].numpy().tolist()

failed = coordinator.schedule(step, args=(tf.constant(True),))
try:
    coordinator.join()
except tf.errors.InvalidArgumentError:
    pass
facts["finished_failure"] = tf_internals.closure_finished(failed)
facts["error_of_failure"] = type(tf_internals.closure_error(failed)).__name__
print(json.dumps(facts), flush=True)
