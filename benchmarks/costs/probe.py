"""What the RPC probe costs: a round by the links it probes, the prober's thread at its
adaptive and at a fixed cadence, the adaptive cadence replayed on recorded runs, and the
closer looks the liveness checks of recorded runs would ask of it."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

from benchmarks.harness.cluster import cpu_s, load_line, ps_ctl_servers, task_pids
from tfdiag.collectors import liveness, rpc_probe
from tfdiag.collectors.budget import LEDGER
from tfdiag.collectors.rpc_probe import DEFAULT_INTERVAL_S, RpcProber
from tfdiag.events import cluster_tasks

ROUND_SIZES = (1, 2, 4, 8)


class _Discard:
    """A writer that keeps nothing (``probe`` writes no records; this is for the prober's init)."""

    task = "chief:0"

    def append(self, kind, **fields):
        pass


def probe_cost_arguments(parser) -> None:
    parser.add_argument("--rounds", type=int, default=50, help="rounds of each size")
    parser.add_argument("--steady", type=float, default=0, metavar="SECONDS",
                        help="then run the prober's thread this long, adaptive and fixed cadence")


def steady(targets, relays, pids, seconds: float) -> list[dict]:
    """The prober's own thread for ``seconds``, adaptive and fixed cadence: records per second
    and CPU (the coordinator's ``probe`` ledger, the tasks') in each window's second half."""
    rows = []
    for cadence, slowdown in (("adaptive", rpc_probe.MAX_SLOWDOWN), ("fixed", 1)):
        saved, rpc_probe.MAX_SLOWDOWN = rpc_probe.MAX_SLOWDOWN, slowdown
        prober = RpcProber(_Discard(), "chief:0", targets, relays=relays)
        prober.prepare()  # as the instrumented coordinator does before training
        prober.start()
        try:
            half = seconds / 2
            time.sleep(half)
            records, own, tasks = prober.records, LEDGER.snapshot()["probe"], cpu_s(pids)
            time.sleep(half)
            rows.append({"cadence": cadence, "records_per_s": (prober.records - records) / half,
                         "coordinator_share": (LEDGER.snapshot()["probe"] - own) / 1e9 / half,
                         "tasks_share": (cpu_s(pids) - tasks) / half})
        finally:
            prober.stop()
            rpc_probe.MAX_SLOWDOWN = saved
    return rows


def probe_cost(args) -> int:
    """What one RPC probe round costs, by the number of links it probes.

    On ps_ctl's idle servers (8 links: the coordinator to each of 4 tasks, each worker to
    each ps), rounds of 1, 2, 4 and 8 links as the prober makes them (one ``probe`` call a
    link), counting the CPU of this process (the coordinator) and of the tasks; at one
    round a second a round's CPU seconds are the share of a core it takes. ``--steady S``
    then runs the prober's own thread for S seconds with its adaptive cadence and with a
    fixed one, and gives the records a second and the CPU in each window's second half.
    """
    load = os.getloadavg()[0]
    with ps_ctl_servers(tempfile.mkdtemp(prefix="tfdiag-probe-cost-")) as (_, _, _, cluster):
        targets = cluster_tasks(cluster.cluster, jobs=("worker", "ps"))
        relays = [(w, ps) for w in cluster_tasks(cluster.cluster, jobs=("worker",))
                  for ps in cluster_tasks(cluster.cluster, jobs=("ps",))]
        prober = RpcProber(_Discard(), "chief:0", targets, relays=relays)
        legs = [(None, target) for target in targets] + relays
        pids = task_pids(cluster)
        rows = []
        for size in ROUND_SIZES:
            row = {"links": size}
            for name, calls in (("first", 1), ("round", args.rounds)):  # the first calls trace the functions
                own, tasks, start = cpu_s([os.getpid()]), cpu_s(pids), time.perf_counter()
                for _ in range(calls):
                    for leg in legs[:size]:
                        prober.probe(leg)
                row.update({f"{name}_wall_ms": (time.perf_counter() - start) / calls * 1e3,
                            f"{name}_coordinator_ms": (cpu_s([os.getpid()]) - own) / calls * 1e3,
                            f"{name}_tasks_ms": (cpu_s(pids) - tasks) / calls * 1e3})
            rows.append(row)
        steady_rows = steady(targets, relays, pids, args.steady) if args.steady else []
    cores = os.cpu_count() or 1
    print(f"| links per round | wall ms per round | coordinator CPU ms | tasks' CPU ms "
          f"| share of {cores} cores at one round per {DEFAULT_INTERVAL_S:g} s "
          f"| first round (tracing): wall ms, coordinator and tasks' CPU ms |\n| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        total_s = (r["round_coordinator_ms"] + r["round_tasks_ms"]) / 1e3
        print(f"| {r['links']} | {r['round_wall_ms']:.1f} | {r['round_coordinator_ms']:.1f} | {r['round_tasks_ms']:.1f} "
              f"| {total_s / DEFAULT_INTERVAL_S / cores:.2%} "
              f"| {r['first_wall_ms']:.0f}, {r['first_coordinator_ms']:.0f}, {r['first_tasks_ms']:.0f} |")
    if steady_rows:
        print("\n| cadence | probe records per s | coordinator's probe CPU, share of a core | tasks' CPU, share of a core |"
              "\n| --- | --- | --- | --- |")
        for r in steady_rows:
            print(f"| {r['cadence']} | {r['records_per_s']:.2f} | {r['coordinator_share']:.3%} | {r['tasks_share']:.3%} |")
    print(f"\n{load_line(load)}")
    return 0


def probe_cadence_arguments(parser) -> None:
    parser.add_argument("runs", nargs="+", help="run directories with rpc records")


def replay_cadence(run_dir: str) -> dict | None:
    """The cadence's slowdowns over ``run_dir``'s round trips; None when it has too few."""
    from tfdiag.analysis.load import load_run

    rpc = load_run(run_dir).frame("rpc")
    if rpc.empty:
        return None
    rpc = rpc[rpc["payload_bytes"] == 0].sort_values("send_ns", kind="stable")
    links = len(set(zip(rpc["src"], rpc["dst"])))
    cadence, slowdowns = rpc_probe._Cadence(1.0), []  # noqa: SLF001 - the rule itself, replayed: it has no public face
    for reading, (src, dst, send_ns, recv_ns) in enumerate(zip(rpc["src"], rpc["dst"], rpc["send_ns"],
                                                               rpc["recv_ns"]), 1):
        cadence.observe((src, dst), (recv_ns - send_ns) / 1e9)
        if reading % links == 0:
            cadence.pass_done()
            slowdowns.append(cadence.slowdown)
    if len(slowdowns) < 2:
        return None
    return {"links": links, "passes": len(slowdowns),
            "at_max": sum(s == rpc_probe.MAX_SLOWDOWN for s in slowdowns) / len(slowdowns),
            "mean_slowdown": statistics.mean(slowdowns)}


def probe_cadence(args) -> int:
    """The RPC probe's adaptive cadence on recorded round trips: how far it slows down.

    Replays each run's probe records (those without payload, in the order they were sent)
    through the prober's cadence rule (``src/tfdiag/collectors/rpc_probe.py``): one pass over the
    run's links every ``links`` readings. Per run: the passes, the share of them at
    ``MAX_SLOWDOWN`` and the mean slowdown (the probe's cost is about its fixed-cadence
    cost divided by it). Any recorded run with probe records replays.
    """
    print("| run | links | passes | at the slowest cadence | mean slowdown |\n| --- | --- | --- | --- | --- |")
    for run in args.runs:
        result = replay_cadence(run)
        if result is None:
            print(f"probe_cadence: {run}: fewer than two passes of probe records", file=sys.stderr)
            continue
        print(f"| {run} | {result['links']} | {result['passes']} | {result['at_max']:.0%} | "
              f"{result['mean_slowdown']:.2f} |")
    return 0


def replay_liveness(run_dir: str, beside_peers: bool) -> tuple[int, float] | None:
    """How often ``run_dir``'s liveness answers of its ps would have asked for a closer look
    (``LivenessProbe._judge``, each round's answers together or each answer alone), and over
    how many minutes; None without answers. Rows sent within ``RECHECK_AFTER_S / 2`` of a
    round's first are that round (a recheck comes ``RECHECK_AFTER_S`` later)."""
    from tfdiag.analysis.load import load_run

    rows = load_run(run_dir).frame("liveness")
    rows = rows[(rows["status"].astype(str) == "OK") & rows["target"].astype(str).str.startswith("ps:")]
    if rows.empty:
        return None
    rows = rows.sort_values("time_ns", kind="stable")
    judge = liveness.LivenessProbe(_Discard(), {})
    calls = []
    judge.on_link_change = calls.append
    rounds, first_ns = [], None
    for task, time_ns, took_ns in zip(rows["target"].astype(str), rows["time_ns"], rows["duration_ns"]):
        if first_ns is None or time_ns - first_ns > liveness.RECHECK_AFTER_S / 2 * 1e9:
            rounds.append({})
            first_ns = time_ns
        rounds[-1][task] = took_ns / 1e9
    for answers in rounds:
        for together in ([answers] if beside_peers else [{task: s} for task, s in answers.items()]):
            judge._judge(together)  # noqa: SLF001 - the rule itself, replayed
    return len(calls), (int(rows["time_ns"].max()) - int(rows["time_ns"].min())) / 60e9


def liveness_calls_arguments(parser) -> None:
    parser.add_argument("runs", nargs="+", help="run directories with liveness records")


def liveness_calls(args) -> int:
    """Closer looks the liveness checks ask of the probe, replayed on recorded runs.

    Replays each run's answered liveness checks of its ps through the checker's rule
    (``src/tfdiag/collectors/liveness.py``): each answer judged beside its peers' in the same
    round (the rule), and each judged alone. Per run: the calls a minute either way (each
    call is a closer look: five probe rounds to every ps). Any recorded run with liveness
    records of two or more ps replays.
    """
    print("| run | minutes | closer looks a minute: beside the peers | judged alone |\n| --- | --- | --- | --- |")
    for run in args.runs:
        beside, alone = replay_liveness(run, True), replay_liveness(run, False)
        if beside is None:
            print(f"liveness_calls: {run}: no answered liveness check of a ps", file=sys.stderr)
            continue
        minutes = beside[1]
        print(f"| {run} | {minutes:.1f} | {beside[0] / minutes:.1f} | {alone[0] / minutes:.1f} |")
    return 0


CASES = {"probe_cost": (probe_cost_arguments, probe_cost), "probe_cadence": (probe_cadence_arguments, probe_cadence),
         "liveness_calls": (liveness_calls_arguments, liveness_calls)}
