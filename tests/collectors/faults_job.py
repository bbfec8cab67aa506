"""Run by test_fault_log.py in its own process: the chief of a 1 ps + 2 worker cluster, with
every collector on, while worker:1 dies (SIGKILL) or stops answering (SIGSTOP).

Usage: python faults_job.py LOGDIR MODE [PROBE_INTERVAL_S]  (TF_CONFIG names this process chief:0;
       a PROBE_INTERVAL_S of 0 turns the RPC probe off; default 0.05)

MODE:

* ``kill``: 10 steps, SIGKILL to worker:1, 20 more steps (the coordinator moves them to
  worker:0), close.
* ``stop``: 20 steps, SIGSTOP to worker:1 right after its last closures, before the result
  thread has read their timings, close.
* ``kill-preparing``, ``stop-preparing``: the signal reaches worker:1 while
  ``instrument_coordinator`` prepares the probe (at its first probe of worker:1); a stopped
  worker is let go (SIGCONT) ``RESUME_AFTER_S`` later; then 20 steps, close.
* ``stop-dropped-cont``, ``stop-dropped-kill``: 20 steps whose results are dropped, the
  list of functions this process has registered, SIGSTOP to worker:1, ``FROZEN_S``
  seconds, a first read of the ps variable on its own thread, SIGCONT (or SIGKILL), 10
  more steps, close.

Steps drop their results (their timings stay on the workers until read). Prints JSON:
steps run, the variable they added to, how long ``instrument_coordinator`` and ``close()``
took, the collectors' state, and for ``stop-dropped-*`` how long the read took, whether
it returned while worker:1 was stopped, and the functions registered while it trained.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import tensorflow as tf
from tensorflow.python.eager import context

from tfdiag.collectors import closure_recorder
from tfdiag.collectors import instrument_coordinator
from tfdiag.collectors.rpc_probe import RpcProber
from tfdiag.sample_jobs.task import wait_for_cluster

RESUME_AFTER_S = 12  # over the probe's PROBE_TIMEOUT_S (5 s)
FROZEN_S = 4.0

logdir, mode = sys.argv[1], sys.argv[2]
probe_interval_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
if mode in ("kill", "stop"):
    closure_recorder.FETCH_EVERY_S = 60.0  # timings are read at close only
if mode.startswith("stop-dropped"):
    closure_recorder.FETCH_EVERY_S = 1.0  # the closures' timings are copied within the sleep below
closure_recorder.FETCH_TIMEOUT_S = 3.0
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
cluster = resolver.cluster_spec().as_dict()
wait_for_cluster(cluster, "chief:0")


def worker_process(index: int) -> psutil.Process:
    port = int(cluster["worker"][index].rpartition(":")[2])
    for connection in psutil.net_connections(kind="tcp"):
        if connection.laddr and connection.laddr.port == port and connection.status == psutil.CONN_LISTEN:
            return psutil.Process(connection.pid)
    raise RuntimeError(f"no process listens on {port}")


victim = worker_process(1)
if mode.endswith("-preparing"):
    real_probe, signalled = RpcProber.probe, threading.Event()

    def probe_signalling_first(self, leg, payload=False):
        if "worker:1" in leg and not signalled.is_set():
            signalled.set()
            if mode == "kill-preparing":
                victim.send_signal(signal.SIGKILL)
            else:  # let go from outside: this process may not run Python while the worker is stopped
                victim.send_signal(signal.SIGSTOP)
                subprocess.Popen(["sh", "-c", f"sleep {RESUME_AFTER_S}; kill -CONT {victim.pid}"])
        return real_probe(self, leg, payload)

    RpcProber.probe = probe_signalling_first

strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
started = time.monotonic()
coordinator = instrument_coordinator(tf.distribute.coordinator.ClusterCoordinator(strategy), logdir,
                                     probe_interval_s=probe_interval_s or None, system_interval_s=0.5)
outcome = {"instrument_s": time.monotonic() - started}
with strategy.scope():
    total = tf.Variable(0.0)


@tf.function
def step():
    total.assign_add(1.0)
    return total.read_value()


def run(steps: int) -> int:
    for _ in range(steps):
        coordinator.schedule(step)  # results dropped: their timings stay on the workers until read
    coordinator.join()
    return steps


done = 0
if mode == "stop":
    done += run(1)
done += run(10 if mode == "kill" else 20 - done)
if mode == "kill":
    victim.send_signal(signal.SIGKILL)
    done += run(20)
if mode.startswith("stop-dropped"):
    time.sleep(2 * closure_recorder.FETCH_EVERY_S)  # probe rounds and timing copies of the closures above
    registered = set(context.context().list_function_names())
    victim.send_signal(signal.SIGSTOP)
    time.sleep(FROZEN_S)  # the result thread tries to copy the timings; the probe tries worker:1
    outcome["registered_while_training"] = sorted(set(context.context().list_function_names()) - registered)
    read = {}
    reader = threading.Thread(target=lambda: read.update(total=float(total.numpy()), at=time.monotonic()), daemon=True)
    asked = time.monotonic()
    reader.start()
    reader.join(FROZEN_S)
    outcome["read_while_stopped"] = not reader.is_alive()
    victim.send_signal(signal.SIGCONT if mode == "stop-dropped-cont" else signal.SIGKILL)
    reader.join(60)
    outcome["read_s"] = read["at"] - asked if read else None
    done += run(10)
# Read before a SIGSTOP (see stop-dropped-*: a first eager read of the ps waits for the stopped worker).
outcome.update(steps=done, total=float(total.numpy()))
if mode == "stop":
    victim.send_signal(signal.SIGSTOP)
started = time.monotonic()
coordinator.close()
outcome.update(close_s=time.monotonic() - started, closures_recorded=coordinator.closures_recorded,
               abandoned_fetches=coordinator.abandoned_fetches)
if "rpc" in coordinator.collectors:
    prober = coordinator.collectors["rpc"]
    outcome["probe_links"] = len(prober.targets) + len(prober.relays)
print(json.dumps(outcome), flush=True)
os._exit(0)  # a stopped worker can hold TensorFlow's own shutdown; the test stops the cluster
