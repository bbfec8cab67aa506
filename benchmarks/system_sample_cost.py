"""CPU µs per system sample on a ParameterServerStrategy coordinator's sampler.

Starts stand-ins for a local cluster (2 workers, 2 ps: each a process listening on its
port with ``--threads`` idle threads, as a TensorFlow server runs tens), then takes
``--samples`` samples from a ``SystemSampler`` of task ``chief:0`` over that cluster, one
every ``--every-s``, and prints the sampler thread's CPU per sample (mean, median) and
the share of one core that is at the default 2 s between samples. The host's load decides
whether the busiest-process scan runs (``run_queue.SCAN_OTHERS_CORES``); ``--hogs N``
starts N busy loops so that it does. Run the same command before and after a change:

    python benchmarks/system_sample_cost.py --samples 150 --hogs 2
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import time

CHILD = """
import socket, sys, threading, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); print(s.getsockname()[1], flush=True)
for _ in range(int(sys.argv[1])):
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
sys.stdin.read()
"""


class _NoWriter:
    def append(self, kind, **columns):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=150)
    parser.add_argument("--every-s", type=float, default=0.1)
    parser.add_argument("--threads", type=int, default=40)
    parser.add_argument("--hogs", type=int, default=0)
    parser.add_argument("--read-every", type=int, default=None, help="run_queue.READ_EVERY_SAMPLES instead of its own")
    parser.add_argument("--scan-every", type=int, default=None, help="run_queue.SCAN_EVERY_SAMPLES instead of its own")
    args = parser.parse_args()
    from tfdiag.collectors import run_queue
    from tfdiag.collectors.system import SAMPLE_EVERY_S, SystemSampler

    run_queue.READ_EVERY_SAMPLES = args.read_every or run_queue.READ_EVERY_SAMPLES
    run_queue.SCAN_EVERY_SAMPLES = args.scan_every or run_queue.SCAN_EVERY_SAMPLES

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    tasks = [subprocess.Popen([sys.executable, "-c", CHILD, str(args.threads)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    try:
        ports = [int(task.stdout.readline()) for task in tasks]
        cluster = {"worker": [f"127.0.0.1:{p}" for p in ports[:2]], "ps": [f"127.0.0.1:{p}" for p in ports[2:]]}
        sampler = SystemSampler(_NoWriter(), "chief:0", gpus=False, cluster=cluster)
        sampler._sample()  # primes the counters and finds the job's processes
        costs = []
        for _ in range(args.samples):
            time.sleep(args.every_s)
            before = time.thread_time_ns()
            sampler._sample()
            costs.append((time.thread_time_ns() - before) / 1e3)
        mean = statistics.fmean(costs)
        print(json.dumps({"samples": len(costs), "host": socket.gethostname(), "mean_us": round(mean, 1),
                          "median_us": round(statistics.median(costs), 1), "max_us": round(max(costs), 1),
                          "core_share_pct_at_2s": round(100 * mean / (SAMPLE_EVERY_S * 1e6), 3)}))
    finally:
        for process in tasks + hogs:
            process.kill()


if __name__ == "__main__":
    main()
