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


def speedup_over_run(workers: pd.DataFrame, tasks: pd.Series, period_ratio: pd.Series) -> float:
    """Throughput ratio of asynchronous training when each worker of ``tasks`` steps at
    ``period_ratio`` times its step period over the time it stepped: the run's steps
    (``workers``, a ``worker_table``), each worker's taken ``1 / period_ratio`` times as often.

    Where every worker stepped throughout, its steps follow its rate and this is the workers'
    rates added at the new periods; a worker that stepped only the run's last seconds (a TF1
    worker that waited for the chief) adds only those. For a worker that loses time *between*
    its steps (a CPU quota that stops its process, a busy host) as for one whose steps are slow.

    >>> workers = pd.DataFrame({"task": ["worker:0", "worker:1"], "steps": [900, 100]})
    >>> round(speedup_over_run(workers, pd.Series(["worker:0"]), pd.Series([0.5])), 3)
    1.9
    """
    ratio = pd.Series(period_ratio.to_numpy("float64"), index=tasks.astype(str).to_numpy())
    steps = workers["steps"].to_numpy("float64")
    faster = 1.0 / ratio.reindex(workers["task"].astype(str).to_numpy()).fillna(1.0).clip(lower=1e-9).to_numpy()
    return float((steps * faster).sum() / max(steps.sum(), 1.0))


# Round trips per step that a worker waits for on each ps link. A TF2 step is one
# multi-device function: its part on a ps is a single component-function call whose
# request and reply each cross the link once, and the worker's fetch of the variable
# values overlaps that call.
PS_ROUND_TRIPS_PER_STEP = 1


def ps_round_trips_per_step(steps_per_closure: float) -> float:
    """Round trips per step a worker waits for on a ps link when ``steps_per_closure``
    steps run inside one function (a ParameterServerStrategy closure; 1 elsewhere).

    The function's first step pays ``PS_ROUND_TRIPS_PER_STEP``: its calls go out as the
    function starts. Each later step's request for the variables goes out while the ps
    still applies the previous step's update, and the ps answers once it has: only the
    answer crosses the link after, half a round trip on a path as slow both ways. So a
    step of a closure of k pays ``(1 + (k - 1) / 2) / k`` round trips: 0.55 at k = 10, where
    ``ps_ctl`` behind a 25 ms and a 10 ms proxy (docs/benchmarks.md) stepped 0.41 and 0.50
    round trips slower than without it; one round trip a step had predicted 31.9x against
    1.95x measured.

    >>> ps_round_trips_per_step(1), ps_round_trips_per_step(10)
    (1.0, 0.55)
    """
    k = max(float(steps_per_closure), 1.0)
    return PS_ROUND_TRIPS_PER_STEP * (1 + (k - 1) / 2) / k


def ps_communication_ns(
    bytes_per_ps: dict[str, float], rtt_ns: dict[str, float], bandwidth_bps: dict[str, float], workers: int = 1
) -> float:
    """Time a worker spends per step talking to the parameter servers.

    Each step reads every variable and sends back a gradient of the same size. A ps
    serves all ``workers``, so its link carries ``2 * workers * bytes_i`` per round of
    steps: ps ``i`` costs ``PS_ROUND_TRIPS_PER_STEP * rtt_i + 2 * workers * bytes_i /
    bandwidth_i``. The ps tasks serve in parallel, so a step pays for the slowest. (This
    is why ParameterServerStrategy needs about as many ps as workers to match a ring
    all-reduce, whose per-worker traffic does not grow with the number of workers.)

    >>> ps_communication_ns({"ps:0": 1e6, "ps:1": 0.0}, {"ps:0": 1e5, "ps:1": 1e5}, {"ps:0": 1e9, "ps:1": 1e9})
    2100000.0
    """
    costs = [
        PS_ROUND_TRIPS_PER_STEP * rtt_ns.get(ps, 0.0) + 2 * workers * size / bandwidth_bps[ps] * 1e9
        for ps, size in bytes_per_ps.items()
    ]
    return max(costs, default=0.0)


def allreduce_ns(total_bytes: float, workers: int, rtt_ns: float, bandwidth_bps: float) -> float:
    """Ring all-reduce time of ``total_bytes`` of gradients over ``workers`` workers.

    Each worker sends and receives ``2 (n - 1) / n`` of the data in ``2 (n - 1)`` steps,
    each paying one latency (Patarasuk and Yuan, "Bandwidth optimal all-reduce
    algorithms for clusters of workstations", 2009).

    >>> allreduce_ns(4e6, 2, 1e5, 1e9)
    4200000.0
    """
    if workers < 2:
        return 0.0
    share = 2 * (workers - 1) / workers
    return share * total_bytes / bandwidth_bps * 1e9 + 2 * (workers - 1) * rtt_ns
