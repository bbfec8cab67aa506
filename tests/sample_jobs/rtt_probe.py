"""Times remote ``tf.timestamp()`` calls on each ps from outside tfdiag (a plain TF client).

``python -m tests.sample_jobs.rtt_probe`` with ``TF_CONFIG`` naming this process's task
(e.g. the chief's) prints one JSON line: ``{"ps:0": median_ms, "ps:1": median_ms}``.
"""

import json
import statistics
import sys
import time

import tensorflow as tf

SAMPLES = 15


def main() -> int:
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    # This process is the task TF_CONFIG names (the chief), not an extra "localhost" job.
    tf.config.experimental_connect_to_cluster(resolver, job_name=resolver.task_type, task_index=resolver.task_id)
    medians = {}
    for index in range(resolver.cluster_spec().num_tasks("ps")):
        with tf.device(f"/job:ps/replica:0/task:{index}/device:CPU:0"):
            stamp = tf.function(lambda: tf.timestamp())
            stamp().numpy()  # connect and trace
            times = []
            for _ in range(SAMPLES):
                start = time.perf_counter()
                stamp().numpy()
                times.append((time.perf_counter() - start) * 1000)
        medians[f"ps:{index}"] = statistics.median(times)
    print(json.dumps(medians))
    return 0


if __name__ == "__main__":
    sys.exit(main())
