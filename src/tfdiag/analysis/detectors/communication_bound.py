"""``communication_bound``: moving variables and gradients takes most of each step."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.groups import TaskGroups
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.ps_traffic import ps_traffic
from tfdiag.analysis.whatif import allreduce_ns, predicted_speedup

KIND = "communication_bound"

# Communication is the bottleneck when it is at least half of the step: then no compute
# or input change can win more than it.
WARNING_COMM_FRACTION = 0.5
CRITICAL_COMM_FRACTION = 0.75
# A strategy switch is only advised when the model predicts at least this gain.
MIN_SWITCH_SPEEDUP = 1.05
# The all-reduce probe's rounds are read at their lower quartile: a busy host stretches
# some rounds, a slow network every one (``last_arrival_allreduce_ns``).
ROUND_QUANTILE = 0.25


def detect(measured: Measurements) -> list[Finding]:
    workers = measured.workers
    if workers.empty:
        return []
    if measured.synchronous:
        return _allreduce_bound(measured)
    return _ps_bound(measured)


def _ps_bound(measured: Measurements) -> list[Finding]:
    traffic = ps_traffic(measured)
    if traffic is None:
        return []
    workers = measured.workers
    step_ns = float(workers["mean_ns"].median())
    # Time a step waits for its input is not network time (input_bound's, if anyone's).
    input_ns = float((workers["mean_ns"] * workers["input_wait_frac"]).median())
    comm_ns = min(traffic.communication_ns(), step_ns - input_ns)
    fraction = comm_ns / step_ns
    if fraction < WARNING_COMM_FRACTION:
        return []
    total_bytes = sum(traffic.bytes_per_ps.values())
    rtt = sorted(traffic.rtt_ns.values())[len(traffic.rtt_ns) // 2]
    bandwidth = sorted(traffic.bandwidth_bps.values())[len(traffic.bandwidth_bps) // 2]
    # After the switch every worker holds the model and all-reduces gradients each step, in lockstep.
    new_step = step_ns - comm_ns + allreduce_ns(total_bytes, len(workers), rtt, bandwidth)
    speedup = predicted_speedup(workers, pd.Series(new_step, index=workers.index), synchronous=False)
    if speedup < MIN_SWITCH_SPEEDUP:
        return []
    return [
        Finding(
            kind="communication_bound",
            severity=Severity.CRITICAL if fraction >= CRITICAL_COMM_FRACTION else Severity.WARNING,
            title=f"Parameter-server traffic takes {fraction:.0%} of each step",
            summary=(
                f"Each step reads and updates {total_bytes / 1e6:.1f} MB of variables on the parameter servers; "
                f"at the measured bandwidth and latency that costs {comm_ns / 1e6:.1f} ms of a "
                f"{step_ns / 1e6:.1f} ms step."
            ),
            tasks=tuple(workers["task"]),
            evidence={
                "communication_ms_per_step": round(comm_ns / 1e6, 2),
                "step_ms_median": round(step_ns / 1e6, 2),
                "variable_mb": round(total_bytes / 1e6, 2),
                "bandwidth_mb_s": {ps: round(bw / 1e6, 1) for ps, bw in traffic.bandwidth_bps.items()},
                "rtt_ms": {ps: round(value / 1e6, 2) for ps, value in traffic.rtt_ns.items()},
            },
            recommendation=Recommendation(
                action="Keep the model on the workers and all-reduce gradients instead of round-tripping every variable.",
                change="ParameterServerStrategy → MultiWorkerMirroredStrategy",
                predicted_speedup=speedup,
            ),
        )
    ]


def _allreduce_bound(measured: Measurements) -> list[Finding]:
    allreduce = measured.run.frame("allreduce")
    workers = measured.workers
    if allreduce.empty:
        return []
    measured_ns = float(allreduce["duration_ns"].median())
    last_arrival_ns, rounds = last_arrival_allreduce_ns(allreduce)
    step_ns = float(workers["mean_ns"].median())
    # Workers whose input came early wait in every collective for the one whose input came
    # late: that wait is the input's (input_bound), not the network's.
    input_ns = workers["mean_ns"] * workers["input_wait_frac"]
    late_input_ns = float(input_ns.max() - input_ns.min())
    reduce_ns = min(max(last_arrival_ns - late_input_ns, 0.0), step_ns)
    fraction = min(reduce_ns / step_ns, 1.0)
    if fraction < WARNING_COMM_FRACTION:
        return []
    # Doubling the per-worker batch halves the number of all-reduces per example.
    speedup = (step_ns) / ((step_ns - reduce_ns) + reduce_ns / 2)
    return [
        Finding(
            kind="communication_bound",
            severity=Severity.CRITICAL if fraction >= CRITICAL_COMM_FRACTION else Severity.WARNING,
            title=f"Gradient all-reduce takes {fraction:.0%} of each step",
            summary=(
                f"A {float(allreduce['bytes'].median()) / 1e6:.1f} MB all-reduce takes {reduce_ns / 1e6:.1f} ms of a "
                f"{step_ns / 1e6:.1f} ms step, even on the worker that joins it last: workers wait on the network "
                "more than they compute."
            ),
            tasks=tuple(workers["task"]),
            evidence={"allreduce_ms_p50": round(measured_ns / 1e6, 2),
                      "last_arrival_allreduce_ms_p25": round(last_arrival_ns / 1e6, 2),
                      "probe_rounds": rounds,
                      "step_ms_median": round(step_ns / 1e6, 2),
                      "late_input_ms_per_step": round(late_input_ns / 1e6, 2)},
            recommendation=Recommendation(
                action="Amortise each all-reduce over more examples: double the per-worker batch (scale the learning rate).",
                change="global_batch_size *= 2",
                predicted_speedup=speedup,
            ),
        )
    ]


def last_arrival_allreduce_ns(allreduce: pd.DataFrame) -> tuple[float, int]:
    """The collective's own time: per probe round, the quickest worker's; the lower quartile over rounds.

    Every worker issues the probe all-reduces in the same order, so each worker's k-th
    ``allreduce`` record is round k. A worker that reaches a round early waits in it for the
    others (a peer still computing, fed late, or not scheduled on a busy host); the worker
    that arrives last waits for no one, so its time is the network's and the reduction's.
    A busy host still stretches some whole rounds (every worker descheduled during the
    collective: on two cores at load 12, a 200-step ``mwms_fit`` run had rounds of 132 and
    2 ms); a slow network slows every round. So the rounds' lower quartile, an observed
    round (the quickest of fewer than four), is taken. Rounds that not every worker
    recorded are left out while complete rounds exist. Returns ``(ns, rounds used)``.

        task      time_ns  duration_ns         round 0: min(33, 2) = 2 ms
        worker:0  100      33 ms               round 1: min(3, 4) = 3 ms
        worker:1  100       2 ms          ->   (2 ms, 2)
        worker:0  200       3 ms
        worker:1  200       4 ms
    """
    ordered = allreduce.sort_values("time_ns", kind="stable")
    groups = TaskGroups(ordered["task"].astype(str))
    if not groups.rows:
        return math.nan, 0
    duration = ordered["duration_ns"].to_numpy("float64")
    # One row per worker, one column per round: the worker's k-th record in column k.
    by_round = np.full((len(groups.rows), max((len(rows) for rows in groups.rows), default=0)), np.nan)
    recorded = np.zeros(by_round.shape, bool)
    for worker, rows in enumerate(groups.rows):
        by_round[worker, :len(rows)], recorded[worker, :len(rows)] = duration[rows], True
    quickest = pd.Series(np.fmin.reduce(by_round, axis=0))  # NaN left out; NaN where every one is
    complete = recorded.all(axis=0)
    if complete.any():
        quickest = quickest[complete]
    return float(quickest.quantile(ROUND_QUANTILE, interpolation="lower")), int(len(quickest))
