"""Run by test_faults.py in its own process: the chief of a 1 ps + 2 worker cluster, with
every collector on, while worker:1 dies (``kill``) or stops answering (``stop``).

Usage: python faults_job.py LOGDIR kill|stop [PROBE_INTERVAL_S]  (TF_CONFIG names this process chief:0;
       a PROBE_INTERVAL_S of 0 turns the RPC probe off; default 0.05)

``kill``: 10 steps, SIGKILL to worker:1, 20 more steps (the coordinator moves them to
worker:0), close. ``stop``: 20 steps, SIGSTOP to worker:1 before the result thread has
read its closures' timings, close. Prints JSON: steps run, the variable they added to, how long
``close()`` took, the collectors' state.
"""

import json
import os
import signal
import sys
import time

import psutil
import tensorflow as tf

from tfdiag.collectors import coordinator as coordinator_module
from tfdiag.collectors import instrument_coordinator
from tfdiag.sample_jobs.task import wait_for_cluster

logdir, mode = sys.argv[1], sys.argv[2]
probe_interval_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
coordinator_module.FETCH_EVERY_S = 60.0  # after the first round: timings are read at close only
coordinator_module.FETCH_TIMEOUT_S = 3.0
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
cluster = resolver.cluster_spec().as_dict()
wait_for_cluster(cluster, "chief:0")
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
coordinator = instrument_coordinator(tf.distribute.coordinator.ClusterCoordinator(strategy), logdir,
                                     probe_interval_s=probe_interval_s or None, system_interval_s=0.5)
with strategy.scope():
    total = tf.Variable(0.0)


@tf.function
def step():
    total.assign_add(1.0)
    return total.read_value()


def worker_process(index: int) -> psutil.Process:
    port = int(cluster["worker"][index].rpartition(":")[2])
    for connection in psutil.net_connections(kind="tcp"):
        if connection.laddr and connection.laddr.port == port and connection.status == psutil.CONN_LISTEN:
            return psutil.Process(connection.pid)
    raise RuntimeError(f"no process listens on {port}")


def run(steps: int) -> int:
    for _ in range(steps):
        coordinator.schedule(step)  # results dropped: their timings stay on the workers until read
    coordinator.join()
    return steps


victim = worker_process(1)
done = 0
if mode == "stop":
    # The probe registers its functions with every task once the first closure is back:
    # the worker is stopped only after that (see rpc_probe), and right after the last
    # closures, before the result thread's next fetch of their timings.
    done += run(1)
    coordinator.collectors["rpc"].prepared.wait(60)
done += run(10 if mode == "kill" else 20 - done)
if mode == "kill":
    victim.send_signal(signal.SIGKILL)
    done += run(20)
# Read before a SIGSTOP: with worker:1 stopped, this process's later eager ops on the ps
# can block (they did when closure outputs were left on the workers, tfdiag or not).
outcome = {"steps": done, "total": float(total.numpy())}
if mode == "stop":
    victim.send_signal(signal.SIGSTOP)
started = time.monotonic()
coordinator.close()
outcome.update(close_s=time.monotonic() - started, closures_recorded=coordinator.closures_recorded,
               abandoned_fetches=coordinator.abandoned_fetches)
print(json.dumps(outcome), flush=True)
os._exit(0)  # a stopped worker can hold TensorFlow's own shutdown; the test stops the cluster
