"""What one RPC probe round costs, by the number of links it probes.

Starts ps_ctl's servers (2 ps, 2 workers: 8 links, coordinator → each of the 4 tasks
and each worker → each ps) and, with no training running, runs rounds of 1, 2, 4 and 8
links as the prober does (one ``RpcProber.probe`` call per link), counting the CPU
seconds of this process (the coordinator) and of the four tasks. At the default one
round a second, a round's CPU seconds are the share of a core the probe takes; the table
also gives it as a share of all this machine's cores (what a job sharing the machine
loses).

With ``--steady SECONDS`` it then runs the prober itself (its thread, one round a
second, as a run does) on the idle servers for that long twice, with the rounds'
adaptive cadence and with a fixed one (``MAX_SLOWDOWN`` 1), and prints the records per
second and the probe's CPU in the second half of each window (after its first passes).

    python benchmarks/probe_cost.py --rounds 50     # under tools/loopback-only
    python benchmarks/probe_cost.py --rounds 5 --steady 120
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from overhead_ab import cpu_s  # the sibling benchmark (this script's folder is on sys.path)

from tfdiag.collectors import rpc_probe
from tfdiag.collectors.budget import LEDGER
from tfdiag.collectors.rpc_probe import DEFAULT_INTERVAL_S, RpcProber
from tfdiag.events import cluster_tasks
from tfdiag.sample_jobs.jobs import JobConfig
from tfdiag.sample_jobs.launcher import LocalCluster

ROUND_SIZES = (1, 2, 4, 8)


class _Discard:
    """A writer that keeps nothing (``probe`` writes no records; this is for the prober's init)."""

    task = "chief:0"

    def append(self, kind, **fields):
        pass


def steady(targets, relays, task_pids, seconds: float) -> list[dict]:
    """The prober's own thread for ``seconds``, adaptive and fixed cadence: records per second
    and CPU (the coordinator's ``probe`` ledger, the tasks') in each window's second half."""
    rows = []
    for cadence, slowdown in (("adaptive", rpc_probe.MAX_SLOWDOWN), ("fixed", 1)):
        saved, rpc_probe.MAX_SLOWDOWN = rpc_probe.MAX_SLOWDOWN, slowdown
        prober = RpcProber(_Discard(), "chief:0", targets, relays=relays)
        prober.prepare()  # as the instrumented coordinator does before training
        prober.start()
        try:
            time.sleep(seconds / 2)
            records, own, tasks = prober.records, LEDGER.snapshot()["probe"], cpu_s(task_pids)
            time.sleep(seconds / 2)
            half = seconds / 2
            rows.append({"cadence": cadence, "records_per_s": (prober.records - records) / half,
                         "coordinator_share": (LEDGER.snapshot()["probe"] - own) / 1e9 / half,
                         "tasks_share": (cpu_s(task_pids) - tasks) / half, "slowdown": prober._cadence.slowdown})
        finally:
            prober.stop()
            rpc_probe.MAX_SLOWDOWN = saved
        print(f"  {rows[-1]}", file=sys.stderr, flush=True)
    return rows


def measure(rounds: int, logdir: str, steady_s: float = 0) -> tuple[list[dict], list[dict]]:
    """CPU milliseconds and wall time per round, for each round size; and the ``steady`` rows."""
    config = JobConfig("ps_ctl", logdir, ps=2, workers=2)
    cluster = LocalCluster(config)
    try:
        cluster.start(job_tasks=False)
        os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster.cluster, "task": {"type": "chief", "index": 0}})
        import tensorflow as tf

        from tfdiag.sample_jobs import ps_ctl
        from tfdiag.sample_jobs.task import wait_for_cluster

        ps_ctl.make_strategy(tf, config)  # connects this process to the cluster
        wait_for_cluster(cluster.cluster, "chief:0")
        targets = cluster_tasks(cluster.cluster, jobs=("worker", "ps"))
        relays = [(w, ps) for w in cluster_tasks(cluster.cluster, jobs=("worker",))
                  for ps in cluster_tasks(cluster.cluster, jobs=("ps",))]
        prober = RpcProber(_Discard(), "chief:0", targets, relays=relays)
        legs = [(None, target) for target in targets] + relays
        task_pids = [task.process.pid for task in cluster.tasks.values()]
        rows = []
        for size in ROUND_SIZES:
            chunk = legs[:size]
            row = {"links": size}
            for name, calls in (("first", 1), ("round", rounds)):  # the first calls trace the functions
                own, tasks, start = cpu_s([os.getpid()]), cpu_s(task_pids), time.perf_counter()
                for _ in range(calls):
                    for leg in chunk:
                        prober.probe(leg)
                row.update({f"{name}_wall_ms": (time.perf_counter() - start) / calls * 1e3,
                            f"{name}_coordinator_ms": (cpu_s([os.getpid()]) - own) / calls * 1e3,
                            f"{name}_tasks_ms": (cpu_s(task_pids) - tasks) / calls * 1e3})
            rows.append(row)
            print(f"  {size} links: {rows[-1]}", file=sys.stderr, flush=True)
        return rows, (steady(targets, relays, task_pids, steady_s) if steady_s else [])
    finally:
        cluster.stop()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50, help="rounds of each size")
    parser.add_argument("--steady", type=float, default=0, metavar="SECONDS",
                        help="then run the prober's thread this long, adaptive and fixed cadence")
    args = parser.parse_args(argv)
    started_load = os.getloadavg()[0]
    rows, steady_rows = measure(args.rounds, tempfile.mkdtemp(prefix="tfdiag-probe-cost-"), args.steady)
    cores = os.cpu_count() or 1
    print(f"| links per round | wall ms per round | coordinator CPU ms | tasks' CPU ms "
          f"| share of {cores} cores at one round per {DEFAULT_INTERVAL_S:g} s "
          f"| first round (tracing): wall ms, coordinator and tasks' CPU ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        total_s = (r["round_coordinator_ms"] + r["round_tasks_ms"]) / 1e3
        print(f"| {r['links']} | {r['round_wall_ms']:.1f} | {r['round_coordinator_ms']:.1f} | {r['round_tasks_ms']:.1f} "
              f"| {total_s / DEFAULT_INTERVAL_S / cores:.2%} "
              f"| {r['first_wall_ms']:.0f}, {r['first_coordinator_ms']:.0f}, {r['first_tasks_ms']:.0f} |")
    if steady_rows:
        print("\n| cadence | probe records per s | coordinator's probe CPU, share of a core | tasks' CPU, share of a core "
              "| slowdown at the end |")
        print("| --- | --- | --- | --- | --- |")
        for r in steady_rows:
            print(f"| {r['cadence']} | {r['records_per_s']:.2f} | {r['coordinator_share']:.3%} | {r['tasks_share']:.3%} "
                  f"| {r['slowdown']} |")
    print(f"\nload average (1 min) {started_load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
          f"on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
