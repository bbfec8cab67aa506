"""The what-if model: predicted throughput of the run after a change to step durations.

A worker's step *period* (time between its step starts) is its step duration plus the
idle time around it (dispatch, waiting for the coordinator). A change that shortens a
step by d shortens the period by d; the idle time stays.

- Asynchronous training (ParameterServerStrategy, TF1 between-graph replication):
  workers do not wait for each other, so run throughput is the sum of worker rates.
- Synchronous training (MultiWorkerMirroredStrategy, MirroredStrategy): every step waits
  for the slowest worker, so run throughput follows the largest period.
"""

from __future__ import annotations

import pandas as pd

SYNCHRONOUS_STRATEGIES = ("MultiWorkerMirroredStrategy", "MirroredStrategy", "CollectiveAllReduceStrategy")


def is_synchronous(strategy: str | None) -> bool:
    return bool(strategy) and any(name in strategy for name in SYNCHRONOUS_STRATEGIES)


def predicted_speedup(workers: pd.DataFrame, new_duration_ns: pd.Series, synchronous: bool) -> float:
    """Throughput ratio when each worker's mean step duration becomes ``new_duration_ns``.

    ``workers`` is a ``worker_table``; ``new_duration_ns`` is indexed like it.

    >>> workers = pd.DataFrame({"mean_ns": [10.0, 20.0], "period_ns": [12.0, 22.0]})
    >>> round(predicted_speedup(workers, pd.Series([10.0, 10.0]), synchronous=True), 3)
    1.833
    """
    old_period = workers["period_ns"].astype(float)
    new_period = (old_period - (workers["mean_ns"] - new_duration_ns)).clip(lower=1.0)
    if synchronous:
        return float(old_period.max() / new_period.max())
    return float((1.0 / new_period).sum() / (1.0 / old_period).sum())
