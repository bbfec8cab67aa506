"""The RPC probe's adaptive cadence on recorded round trips: how far it slows down.

Replays each run's ``rpc`` records (those without payload, in the order they were sent)
through the prober's cadence rule (``collectors/rpc_probe.py``, ``_Cadence``): one pass
over the run's links every ``links`` readings, as the prober's rounds take them in turn.
Prints, per run, the passes, the share of them at ``MAX_SLOWDOWN`` and the mean slowdown
(the probe's cost is about its fixed-cadence cost divided by it). Any recorded run with
probe records replays: a kept ``overhead_ab.py`` run (``--logdir``), a sample job's.

    .venv/bin/python benchmarks/probe_cadence.py /tmp/ab-run /tmp/ps_ctl-run
"""

from __future__ import annotations

import argparse
import statistics
import sys

from tfdiag.analysis.load import load_run
from tfdiag.collectors import rpc_probe


def replay(run_dir: str) -> dict | None:
    """The cadence's slowdowns over ``run_dir``'s round trips; None when it has too few."""
    rpc = load_run(run_dir).frame("rpc")
    if rpc.empty:
        return None
    rpc = rpc[rpc["payload_bytes"] == 0].sort_values("send_ns", kind="stable")
    links = len(set(zip(rpc["src"], rpc["dst"])))
    cadence, slowdowns = rpc_probe._Cadence(1.0), []  # noqa: SLF001 - the rule itself, replayed
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run directories with rpc records")
    args = parser.parse_args(argv)
    print("| run | links | passes | at the slowest cadence | mean slowdown |\n| --- | --- | --- | --- | --- |")
    for run in args.runs:
        result = replay(run)
        if result is None:
            print(f"probe_cadence: {run}: fewer than two passes of probe records", file=sys.stderr)
            continue
        print(f"| {run} | {result['links']} | {result['passes']} | {result['at_max']:.0%} | "
              f"{result['mean_slowdown']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
