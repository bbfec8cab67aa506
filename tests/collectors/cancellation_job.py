"""Run by test_rpc_probe.py in its own process (two logical CPUs): does a probe reach, or
get reached by, the cancellation manager of a ``ClusterCoordinator`` closure being
dispatched on another thread?

Usage: python cancellation_job.py   Prints JSON.

A dispatch thread holds ``CancellationManagerContext`` (what ClusterCoordinator's worker
threads do around each closure); meanwhile this thread runs probe functions between
CPU:0 and CPU:1 plainly and through ``RpcProber.probe``, one that works and one that
fails (as a probe of a worker that just died does).
"""

import json
import threading

import tensorflow as tf
from tensorflow.python.eager import cancellation

from tfdiag.collectors.probe_function import traced_probe
from tfdiag.collectors.rpc_probe import RpcProber

tf.config.set_logical_device_configuration(tf.config.list_physical_devices("CPU")[0],
                                           [tf.config.LogicalDeviceConfiguration()] * 2)


@tf.function
def failing_probe():
    with tf.device("/device:CPU:0"):
        send = tf.timestamp()
    with tf.device("/device:CPU:1"):
        tf.debugging.assert_less(send, tf.constant(0.0, tf.float64), message="the remote task is gone")
        remote = tf.timestamp()
    return tf.stack([send, remote, remote])


class Writer:
    def append(self, kind, /, **values):
        pass


def dispatching(manager, body):
    """Runs ``body()`` while another thread holds ``manager`` as ClusterCoordinator does."""
    inside, leave = threading.Event(), threading.Event()

    def dispatch():
        with cancellation.CancellationManagerContext(manager):
            inside.set()
            leave.wait()

    thread = threading.Thread(target=dispatch)
    thread.start()
    inside.wait()
    try:
        return body()
    finally:
        leave.set()
        thread.join()


def outcome(call):
    try:
        call()
        return "ok"
    except Exception as error:  # noqa: BLE001 - reported
        return type(error).__name__


prober = RpcProber(Writer(), "chief:0", [])
working, failing = (None, "cpu:1"), (None, "gone")
prober._functions[(working, False)] = traced_probe(None, "/device:CPU:1", 16)
prober._functions[(failing, False)] = failing_probe.get_concrete_function()
prober.prepared.set()
facts = {}
for how, call in (("plain", lambda leg: prober._functions[(leg, False)]()), ("probe", prober.probe)):
    manager = cancellation.CancellationManager()
    facts[f"{how}_failing"] = dispatching(manager, lambda: outcome(lambda: call(failing)))
    facts[f"{how}_cancelled_the_closures"] = manager.is_cancelled
    facts[f"{how}_under_a_cancelled_manager"] = dispatching(manager, lambda: outcome(lambda: call(working)))
facts["unprepared"] = outcome(lambda: prober.probe((None, "ps:7")))
print(json.dumps(facts), flush=True)
