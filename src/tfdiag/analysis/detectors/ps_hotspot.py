"""``ps_hotspot``: one parameter server holds (and so serves) most of the model.

Bytes per ps come from the variable placement, or, where none was captured (a TF1
session), from the bytes each ps moved in traced steps (``ps_traffic.traced_ps_load``).
The gain of spreading the bytes is predicted from what each ps costs a traced step where
the run traced transfers with every ps (a TF1 session: ``ps_traffic.traced_ps_wait``),
else from the ps traffic model (bytes, round trips and bandwidth from the RPC probe). A
hot ps is a warning only where spreading its bytes is predicted to pay
(``MIN_WARNING_SPEEDUP``), else info.
"""

from __future__ import annotations

from tfdiag.analysis.detectors.evidence import per_task
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.ps_traffic import ps_traffic, traced_ps_load, traced_ps_wait
from tfdiag.analysis.whatif import predicted_speedup

KIND = "ps_hotspot"

# A ps is hot when it holds at least this multiple of its fair share (1 / number of ps)
# of the variable bytes. Round-robin placement of a handful of similar layers stays within
# about 1.3x; one unpartitioned embedding or dense kernel on one ps goes far past 1.5x.
HOT_SHARE_RATIO = 1.5
CRITICAL_SHARE_RATIO = 1.9
# Below this, moving bytes costs too little to matter whoever holds them.
MIN_VARIABLE_BYTES = 1 << 20
# A warning asks for a change worth making. Uneven bytes are not by themselves a bottleneck:
# placement puts whole variables on one ps each (round-robin by creation order, so a few
# large kernels can all land on one), and the step pays for it only where that ps's traffic
# holds the step up. Partitioning adds a round trip and a concat per shard to every step,
# which can take back a small gain, and a prediction under 1.1x is within the error of the
# traffic model; with no prediction (no traffic measured to predict from) nothing shows the
# hot ps costs the step at all. Either way the finding is info.
MIN_WARNING_SPEEDUP = 1.1


def detect(measured: Measurements) -> list[Finding]:
    traced = measured.ps_load.empty
    load = traced_ps_load(measured) if traced else measured.ps_load
    if len(load) < 2 or load["bytes"].sum() < MIN_VARIABLE_BYTES:
        return []
    fair_share = 1.0 / len(load)
    hot = load[load["bytes_share"] >= HOT_SHARE_RATIO * fair_share]
    if hot.empty:
        return []
    ratio = float(hot["bytes_share"].max() / fair_share)
    partitions = len(load)
    speedup = None
    waits = traced_ps_wait(measured, list(load["task"]))
    saving = _saving(measured, load, waits, tuple(hot["task"]))
    if saving is not None and not measured.workers.empty:
        saving = min(saving, float(measured.workers["mean_ns"].min()))
        speedup = predicted_speedup(measured.workers, measured.workers["mean_ns"] - saving, measured.synchronous)
    tasks = tuple(hot["task"])
    largest = hot.iloc[0]
    severity = Severity.CRITICAL if ratio >= CRITICAL_SHARE_RATIO else Severity.WARNING
    if speedup is None or speedup < MIN_WARNING_SPEEDUP:
        severity = Severity.INFO
    return [
        Finding(
            kind=KIND,
            severity=severity,
            title=(f"{tasks[0]} {'moves' if traced else 'holds'} {float(hot['bytes_share'].max()):.0%} of the "
                   f"{'bytes of traced steps' if traced else 'variable bytes'}"),
            summary=(
                f"Every step reads and updates the variables on {', '.join(tasks)}, so "
                f"{'it serves' if len(tasks) == 1 else 'they serve'} most of the traffic while the other "
                f"parameter servers idle. Largest {'tensor moved' if traced else 'variable'}: {largest['largest']} "
                f"({largest['largest_bytes'] / 1e6:.1f} MB)."
            ),
            tasks=tasks,
            evidence={
                "bytes_share": per_task(load, "bytes_share", digits=3),
                "variable_mb": per_task(load, "bytes", 1e6),
                "variables": {row.task: int(row.variables) for row in load.itertuples()},
                "largest_variable": {row.task: row.largest for row in hot.itertuples()},
                "fair_share": round(fair_share, 3),
                "bytes_source": "transfer" if traced else "placement",
                **({"traced_wait_ms_per_step": {ps: round(ns / 1e6, 2) for ps, ns in waits.items()}}
                   if len(waits) == len(load) else {}),
            },
            recommendation=Recommendation(
                action=f"Partition large variables over all {partitions} parameter servers.",
                change=(
                    "strategy = tf.distribute.ParameterServerStrategy(cluster_resolver, "
                    "variable_partitioner=tf.distribute.experimental.partitioners.MinSizePartitioner("
                    f"min_shard_bytes=256 << 10, max_shards={partitions}))"
                ),
                predicted_speedup=speedup,
            ),
        )
    ]


def _saving(measured: Measurements, load, waits: dict[str, float], hot: tuple[str, ...]) -> float | None:
    """Per-step time saved with the bytes spread evenly over every ps (ns), or None.

    From traced transfers where every ps has some: each ps's wait grows with the bytes it
    serves (a RecvTensor's time includes the ps's work before it answers, which grows with
    them too), so spread evenly every ps would cost the mean wait: the hot ps saves what
    it costs above the mean. A hot ps that costs a step less than the mean (its variables
    are read a few rows at a time) saves nothing. Else from the traffic model.
    """
    if len(waits) == len(load):
        return max(max(waits[task] for task in hot) - sum(waits.values()) / len(waits), 0.0)
    traffic = ps_traffic(measured, load)
    if traffic is None:
        return None
    balanced = {ps: float(load["bytes"].sum()) / len(load) for ps in traffic.bytes_per_ps}
    return max(traffic.communication_ns() - traffic.communication_ns(bytes_per_ps=balanced), 0.0)
