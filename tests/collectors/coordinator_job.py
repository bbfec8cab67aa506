"""Run by test_coordinator.py in its own process: the chief of a cluster of servers.

Usage: python coordinator_job.py LOGDIR  (TF_CONFIG names this process chief:0)
Records the placement of one variable; schedules a good closure, a failing one and a good one again, counts the records in its
task file before ``close()`` (timings are copied only at close here); then the same
arguments three times and other ones once, noting what the instrumented coordinator hands
to ``ClusterCoordinator.schedule``; then prints JSON.
"""

import json
import sys
import time

import tensorflow as tf

from tfdiag.collectors import closure_recorder
from tfdiag.collectors import instrument_coordinator
from tfdiag.sample_jobs.task import wait_for_cluster
from tfdiag.store import log_dir, read_task_file
from tfdiag.store.writer import DEFAULT_FLUSH_INTERVAL_S

logdir = sys.argv[1]
closure_recorder.FETCH_EVERY_S = 60.0  # the timings wait for close()
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
wait_for_cluster(resolver.cluster_spec().as_dict(), "chief:0")
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
coordinator = instrument_coordinator(tf.distribute.coordinator.ClusterCoordinator(strategy), logdir)
with strategy.scope():
    total = tf.Variable(0.0)
    scale = tf.Variable(tf.ones([4, 2]), name="scale")  # its placement recorded as the step traces
coordinator.record_placement([total])  # total also read by the step: recorded once


def dataset_fn():
    return tf.data.Dataset.from_tensors((tf.ones([8, 2]), tf.ones([8]))).repeat()


iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))


@tf.function
def step(iterator, fail):
    x, _ = next(iterator)
    x = x * tf.reduce_mean(scale)
    tf.debugging.Assert(tf.logical_not(fail), ["closure asked to fail"])
    total.assign_add(tf.reduce_sum(x))
    return tf.reduce_sum(x)


outcome = {}
first = coordinator.schedule(step, args=(iterator, tf.constant(False)))
coordinator.join()
outcome["first"] = float(first.fetch())
traces = coordinator._instrumented(step).function.experimental_get_tracing_count
traces_after_first = traces()
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
time.sleep(closure_recorder.RECORD_EVERY_S + 2 * DEFAULT_FLUSH_INTERVAL_S)
written = read_task_file(log_dir(logdir) / "chief-0.tfdiag").batches
outcome["before_close"] = {kind: sum(batch.num_rows for batch in written.get(kind, [])) for kind in ("closure", "step")}

# The same arguments again: from the second schedule on, the concrete function traced for them.
inner, handed = coordinator.coordinator, []
plain_schedule = inner.schedule
inner.schedule = lambda fn, args=None, kwargs=None: handed.append(type(fn).__name__) or plain_schedule(fn, args, kwargs)
same = tf.constant(False)
results = [coordinator.schedule(step, args=(iterator, same)) for _ in range(3)]
results.append(coordinator.schedule(step, args=(iterator, tf.constant(False))))  # another tensor: the tf.function
coordinator.join()
inner.schedule = plain_schedule
outcome["repeated"] = {"handed": handed, "values": [float(r.fetch()) for r in results],
                       "traced_again": traces() - traces_after_first}
coordinator.close()
outcome["closures_recorded"] = coordinator.closures_recorded
print(json.dumps(outcome), flush=True)
