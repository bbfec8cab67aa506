"""Writes a large synthetic run through the real store writer, for the scale benchmark.

Every worker gets its own TaskWriter (its own file, as in a real run) and steps around
``--step-ms``; the chief probes every worker and every worker probes every ps once a
second of simulated time, and every task's system sampler reports once a second.

    python benchmarks/synth.py /tmp/big --workers 64 --steps 156250   # 10 million step records
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from tqdm import tqdm

from tfdiag.store import TaskWriter, write_manifest

START_NS = 1_700_000_000_000_000_000
SECOND = 1_000_000_000


def write_worker(run: str, task: str, steps: int, step_ms: float, rng: np.random.Generator, ps: int, progress) -> None:
    writer = TaskWriter(run, task)
    durations = (rng.gamma(16.0, step_ms / 16.0, steps) * 1e6).astype(np.int64)
    waits = (durations * rng.uniform(0.0, 0.1, steps)).astype(np.int64)
    begins = START_NS + np.concatenate(([0], np.cumsum(durations[:-1] + 1_000_000)))
    next_probe = START_NS
    for step in range(steps):
        begin = int(begins[step])
        writer.append("step", task=task, step=step, begin_ns=begin, end_ns=begin + int(durations[step]),
                      input_wait_ns=int(waits[step]), examples=64, clock_task=task)
        if begin >= next_probe:
            for index in range(ps):
                rtt = int(rng.gamma(4.0, 100_000))
                writer.append("rpc", src=task, dst=f"ps:{index}", send_ns=begin, remote_ns=begin + rtt // 2,
                              recv_ns=begin + rtt, payload_bytes=0)
            writer.append("system", host=task.replace(":", "-"), task=task, time_ns=begin,
                          cpu_pct=float(rng.uniform(40, 90)), mem_used_frac=0.4, net_sent_bytes=step * 1000,
                          net_recv_bytes=step * 1000, disk_read_bytes=0, disk_write_bytes=0)
            next_probe += SECOND
        if step % 10_000 == 9_999:
            progress.update(10_000)
    progress.update(steps % 10_000)
    writer.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="run directory to create")
    parser.add_argument("--workers", type=int, default=64)
    parser.add_argument("--steps", type=int, default=156_250, help="steps per worker")
    parser.add_argument("--ps", type=int, default=4)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    write_manifest(args.run, strategy="ParameterServerStrategy", tensorflow_version="synthetic", task="chief:0",
                   cluster={"chief": ["host-c:2222"], "worker": [f"host-{i}:2222" for i in range(args.workers)],
                            "ps": [f"host-ps{i}:2222" for i in range(args.ps)]}, start_time_ns=START_NS)
    rng = np.random.default_rng(args.seed)
    started = time.perf_counter()
    with tqdm(total=args.workers * args.steps, unit="step", file=sys.stderr, mininterval=2) as progress:
        for index in range(args.workers):
            write_worker(args.run, f"worker:{index}", args.steps, args.step_ms, rng, args.ps, progress)
    print(f"wrote {args.workers * args.steps} step records to {args.run} in {time.perf_counter() - started:.0f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
