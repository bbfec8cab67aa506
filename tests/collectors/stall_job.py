"""Run by test_heartbeat.py in its own process: the chief of a 1 ps + 2 worker cluster that keeps scheduling.

Usage: python stall_job.py LOGDIR STOP_FILE  (TF_CONFIG names this process chief:0)
Schedules one small closure every ``PACE_S`` without joining (a frozen worker's closure
would block ``join``) and holds every result, writes LOGDIR/ready once the RPC probe has prepared its functions
and closures have come back from both workers, and stops when STOP_FILE appears (or after
``MAX_SECONDS``); then closes the coordinator and prints JSON.

When LOGDIR/copy_timings appears (the test writes a worker's name there once it has
frozen it), the job copies the timings of one of that worker's finished closures from
it (``closure_timing.fetch_stats``, abandoned after ``COPY_TIMEOUT_S``): what the result
thread does when it records a closure of a worker frozen before TensorFlow copied the
closure's outputs here, a race the freeze hits only now and then. Such a copy once
stopped worker:0's closures too (``tf_internals.own_executor``).
"""

import json
import sys
import time
from pathlib import Path

import tensorflow as tf

from tfdiag.collectors import closure_timing, instrument_coordinator, tf_internals
from tfdiag.collectors.bounded import BoundedCalls
from tfdiag.events import task_of_device
from tfdiag.sample_jobs.task import wait_for_cluster

PACE_S = 0.2
MAX_SECONDS = 240
COPY_TIMEOUT_S = 1.0

logdir, stop_file = Path(sys.argv[1]), Path(sys.argv[2])
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
wait_for_cluster(resolver.cluster_spec().as_dict(), "chief:0")
strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
with strategy.scope():
    total = tf.Variable(0.0, name="total")
coordinator = instrument_coordinator(tf.distribute.coordinator.ClusterCoordinator(strategy), logdir,
                                     probe_interval_s=0.2, system_interval_s=1.0)


@tf.function
def step():
    total.assign_add(1.0)
    return total.read_value()


def copy_timings_of(worker: str) -> None:
    """Copies the timings of ``worker``'s latest finished closure from it, as the result thread would."""
    remotes = [view._remote for view in reversed(results)]  # noqa: SLF001 - the RemoteValue the view wraps
    # Copied here already: the handle is ready, reading its device waits for nothing.
    handles = [closure_timing.stats_handle(remote) for remote in remotes
               if tf_internals.closure_finished(remote) and tf_internals.local_outputs(remote) is not None]
    handle = next((h for h in handles if task_of_device(h.device) == worker), None)
    if handle is None:
        sys.exit(f"stall_job: no finished closure of {worker} to copy timings from")
    closure_timing.fetch_stats([handle], BoundedCalls("stall-job-copy"), COPY_TIMEOUT_S)


start = time.monotonic()
prober = coordinator.collectors["rpc"]
ready = False
results = []  # held, so TensorFlow copies every closure's output to the coordinator as it comes in
copied = False
while not stop_file.exists() and time.monotonic() - start < MAX_SECONDS:
    results.append(coordinator.schedule(step))
    time.sleep(PACE_S)
    if not copied and (logdir / "copy_timings").exists():
        copy_timings_of((logdir / "copy_timings").read_text())
        copied = True
    if not ready and prober.prepared.is_set() and coordinator.closures_recorded >= 20:
        (logdir / "ready").write_text("ready")
        ready = True
closing = time.monotonic()
coordinator.close(timeout_s=20)
print(json.dumps({"closures": coordinator.closures_recorded, "close_s": round(time.monotonic() - closing, 1)}),
      flush=True)
