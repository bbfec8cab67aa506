"""``shard_imbalance``: some workers consume far more data than others."""

from __future__ import annotations

import numpy as np

from tfdiag.analysis.detectors.evidence import task_list
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.measurements import Measurements

# Imbalance is the largest shard over the median of the others. Sharding by DATA gives
# equal shards (to one batch); FILE sharding over files of unequal size gives whatever the
# files hold. 1.5x is well past the rounding of equal shards.
WARNING_IMBALANCE = 1.5
CRITICAL_IMBALANCE = 3.0


def detect(measured: Measurements) -> list[Finding]:
    shards = measured.shards
    if len(shards) < 2:
        return []
    examples = shards["examples"].astype(float).to_numpy()
    findings = []
    worst = int(np.argmax(examples))
    others = float(np.median(np.delete(examples, worst)))
    imbalance = examples[worst] / max(others, 1.0)
    if imbalance < WARNING_IMBALANCE:
        return findings
    task = str(shards["task"].iloc[worst])
    # An epoch ends when the largest shard is done; balanced, every worker finishes at the
    # same time. Throughput over the epoch rises by the largest share over the mean share.
    speedup = float(examples.max() / examples.mean())
    policy = next((p for p in shards["policy"] if p), None)
    return [
        Finding(
            kind="shard_imbalance",
            severity=Severity.CRITICAL if imbalance >= CRITICAL_IMBALANCE else Severity.WARNING,
            title=f"{task} consumed {imbalance:.1f}x the examples of the other workers",
            summary=(
                f"Workers {task_list(shards['task'])} consumed {', '.join(str(int(n)) for n in examples)} examples; "
                f"the epoch lasts as long as {task}'s shard while the others idle or loop."
                + (f" Auto-shard policy: {policy}." if policy else "")
            ),
            tasks=(task,),
            evidence={
                "examples": {row.task: int(row.examples) for row in shards.itertuples()},
                "imbalance": round(imbalance, 2),
                "auto_shard_policy": policy,
                "files": {row.task: row.files for row in shards.itertuples() if row.files},
            },
            recommendation=Recommendation(
                action="Give every worker an equal share: shard by DATA, or rebalance the input files.",
                change=(
                    "options = tf.data.Options(); options.experimental_distribute.auto_shard_policy = "
                    "tf.data.experimental.AutoShardPolicy.DATA; dataset = dataset.with_options(options)"
                    "  # sample jobs: --tune autoshard=data"
                ),
                predicted_speedup=speedup,
            ),
        )
    ]
