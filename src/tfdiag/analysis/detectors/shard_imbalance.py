"""``shard_imbalance``: some workers consume far more data than others."""

from __future__ import annotations

import numpy as np

from tfdiag.analysis.detectors.evidence import task_list
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.whatif import predicted_speedup

KIND = "shard_imbalance"

# Imbalance is the largest shard over the median of the others. Sharding by DATA gives
# equal shards (to one batch); FILE sharding over files of unequal size gives whatever the
# files hold. 1.5x is well past the rounding of equal shards.
WARNING_IMBALANCE = 1.5
CRITICAL_IMBALANCE = 3.0


def consumption(measured: Measurements) -> np.ndarray:
    """Per worker of the shard table, the examples it consumed that speed does not explain.

    Synchronous training steps every worker in lockstep, so the totals of shard counters
    compare directly. Asynchronous workers each run as fast as they can, and a faster
    worker consumes more without any imbalance; and counts taken from step records may
    stop at different steps in a run still being written: there the share is examples
    per step.
    """
    examples = measured.shards["examples"].astype(float).to_numpy()
    counted = (measured.shards["source"] == "shard counters").all()
    if (measured.synchronous and counted) or measured.workers.empty:
        return examples
    steps = measured.shards["task"].map(dict(zip(measured.workers["task"], measured.workers["steps"])))
    return examples / steps.fillna(1).clip(lower=1).to_numpy(dtype=float)


def _async_speedup(measured: Measurements, task: str) -> float | None:
    """Asynchronous workers each step as fast as they can: balanced, ``task`` would step
    like the median of the others (its larger batches made theirs), and the job's update
    rate is the sum of the workers' rates. None without step records of ``task`` and another.

    ``ps_fit`` with ``shard-skew=1:3``: worker 0's 512-example steps took 19.7 ms, worker
    1's 1536-example steps 32.5 ms, with 30-45 ms between closures on both: balancing
    raises the updates a second by 1.07x where the shares' ratio (max over mean) says
    1.5x. Examples a second would fall: larger batches cost less per example.
    """
    workers = measured.workers.reset_index(drop=True)
    own = workers["task"].astype(str) == task
    if not own.any() or own.all():
        return None
    new_mean = workers["mean_ns"].where(~own, float(workers.loc[~own, "mean_ns"].median()))
    return predicted_speedup(workers, new_mean, synchronous=False)


def detect(measured: Measurements) -> list[Finding]:
    shards = measured.shards
    if len(shards) < 2:
        return []
    share = consumption(measured)
    worst = int(np.argmax(share))
    others = float(np.median(np.delete(share, worst)))
    imbalance = share[worst] / max(others, 1e-9)
    if imbalance < WARNING_IMBALANCE:
        return []
    task = str(shards["task"].iloc[worst])
    examples = shards["examples"].astype(float).to_numpy()
    speedup = _async_speedup(measured, task) if not measured.synchronous else None
    if speedup is None:
        # An epoch ends when the largest shard is done; balanced, every worker finishes at the
        # same time. Throughput over the epoch rises by the largest share over the mean share.
        speedup = float(share.max() / share.mean())
    policy = next((p for p in shards["policy"] if p), None)
    unit = "examples" if measured.synchronous and (shards["source"] == "shard counters").all() else "examples per step"
    return [
        Finding(
            kind="shard_imbalance",
            severity=Severity.CRITICAL if imbalance >= CRITICAL_IMBALANCE else Severity.WARNING,
            title=f"{task} consumed {imbalance:.1f}x the {unit} of the other workers",
            summary=(
                f"Workers {task_list(shards['task'])} consumed {', '.join(str(int(n)) for n in examples)} examples "
                f"({unit}: {', '.join(f'{v:.0f}' for v in share)}); the epoch lasts as long as {task}'s shard "
                "while the others idle or loop."
                + (f" Auto-shard policy: {policy}." if policy else "")
            ),
            tasks=(task,),
            evidence={
                "examples": {row.task: int(row.examples) for row in shards.itertuples()},
                unit.replace(" ", "_"): {str(t): round(float(v), 1) for t, v in zip(shards["task"], share)},
                "imbalance": round(imbalance, 2),
                "auto_shard_policy": policy,
                "files": {row.task: row.files for row in shards.itertuples() if row.files},
            },
            recommendation=Recommendation(
                action="Give every worker an equal share: shard by DATA, or rebalance the input files.",
                change=(
                    "options = tf.data.Options(); options.experimental_distribute.auto_shard_policy = "
                    "tf.data.experimental.AutoShardPolicy.DATA; dataset = dataset.with_options(options)"
                ),
                predicted_speedup=speedup,
            ),
        )
    ]
