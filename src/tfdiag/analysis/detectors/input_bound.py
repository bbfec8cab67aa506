"""``input_bound``: workers wait for their input pipeline for a large part of each step.

Under a synchronous strategy one slow pipeline gates every worker: the others wait for
it inside the all-reduce (their own input wait stays small), so the finding names the
workers whose *own* wait is large, and the prediction removes it from the shared step.
That holds where the element arrives without a collective (under
MultiWorkerMirroredStrategy a dataset that ends in ``repeat()``); one of finite or unknown
cardinality is handed out only after an all-reduce of every worker's "has data"
(TensorFlow 2.21's ``input_lib._enable_get_next_as_optional``, partial-batch handling),
so every worker's element waits for the slowest and every worker reads as input bound.
For the same reason the stall of a worker whose process was stopped
(``sync_steps.stall_share``) can land in every worker's input wait; it is left out of
each worker's wait, so a stopped peer is ``straggler``'s, not input.
Where every worker's step records carry its own compute (``compute_ns``, stamped before
the all-reduce under ``model.fit``), the prediction is made on the workers' own times
(``sync_steps``): the step is the largest own time plus the shared reduction; with a
prefetch it becomes the largest compute plus the shared reduction, or the slowest input
spread over its host's cores, whichever is longer.

The change advised is a parallel map and a prefetch. With ``num_parallel_calls=AUTOTUNE``
tf.data runs at most one map call per thread of its runner pool, by default one per core
of the host; so the input of a step spreads over the worker's host's cores (``cpu_count``
of its system samples, 1 where none was sampled: then only the prefetch's overlap is
predicted). Where the map computes and the host's cores are busy, the advisor's host-CPU
bound holds the prediction to what the job can get.
"""

from __future__ import annotations

import pandas as pd

from tfdiag.analysis.breakdown import WARNING_INPUT_FRACTION
from tfdiag.analysis.detectors.straggler import MIN_STOPPED_SPAN_S, TAIL_SHARES
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.sync_steps import shared_ns, stall_share, waiting_for_slowest_ms
from tfdiag.analysis.whatif import predicted_speedup

KIND = "input_bound"

# A worker is input bound from WARNING_INPUT_FRACTION of its step spent in `next(iterator)`
# (``breakdown``, where ``straggler`` reads it too); above half of the step, input is the
# dominant cost.
CRITICAL_INPUT_FRACTION = 0.50
# A warning asks for a change worth making: a pipeline whose fix is predicted to gain less
# than this is reported at info whatever its share of the step. The tutorial-style PS loop
# (benchmarks/userjobs/ps_tutorial.py, which prefetches) waits 0.6-0.7 ms of its 2.5 ms
# steps for an element already in the buffer, 24-27 %, where parallelism and prefetch can
# gain 7.7 % at most; the matrix's planted input delays predict 1.30-1.70x.
MIN_WARNING_SPEEDUP = 1.1

CHANGE = (
    "dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)"
    ".prefetch(tf.data.AUTOTUNE)"
)


def _stall(measured: Measurements) -> float:
    """The share of a synchronous run's steps that stood still for a stopped worker
    (``sync_steps.stall_share``): over the whole run or, where more, over the last part
    ``straggler`` judges a fault that began mid-run on (``straggler.TAIL_SHARES``) times
    that part's share of the run; 0 for an asynchronous run."""
    if not measured.synchronous:
        return 0.0
    parts = [(1.0, measured)] + [(share, measured.last_part(share)) for share in TAIL_SHARES]
    return max(share * stall_share(part.stopped, MIN_STOPPED_SPAN_S * 1e9) for share, part in parts if part is not None)


def detect(measured: Measurements) -> list[Finding]:
    workers = measured.workers
    if workers.empty:
        return []
    # A stall only lowers the waits: none at the bar, no stall to measure (nor the run's parts to cut).
    stall = _stall(measured) if (workers["input_wait_frac"] >= WARNING_INPUT_FRACTION).any() else 0.0
    if stall:  # the steps a stopped worker held still are no worker's input wait
        workers = workers.assign(input_wait_frac=(workers["input_wait_frac"] - stall).clip(lower=0.0))
    bound = workers[workers["input_wait_frac"] >= WARNING_INPUT_FRACTION]
    if bound.empty:
        return []
    input_ns = workers["mean_ns"] * workers["input_wait_frac"]
    cores = host_cores(measured)
    own = measured.own_times if measured.synchronous else None
    waiting: dict[str, float] = {}
    if own is not None and len(own) == len(workers):  # every worker's own compute, stamped before the all-reduce
        if stall:
            own = own.assign(input_ns=(own["input_ns"] - stall * own["step_ns"]).clip(lower=0.0))
            own = own.assign(own_ns=own["input_ns"] + own["compute_ns"])
        speedup = _synchronous_speedup(own, dict(zip(workers["task"].astype(str), cores)))
        waiting = waiting_for_slowest_ms(own, set(bound["task"].astype(str)))
    else:
        speedup = predicted_speedup(workers, _new_step_ns(workers, input_ns, cores, measured.synchronous),
                                    measured.synchronous)
    worst = float(bound["input_wait_frac"].max())
    severity = Severity.CRITICAL if worst >= CRITICAL_INPUT_FRACTION else Severity.WARNING
    if speedup is not None and speedup < MIN_WARNING_SPEEDUP:
        severity = Severity.INFO
    tasks = tuple(bound["task"])
    share = f"{bound['input_wait_frac'].median():.0%}"
    if measured.synchronous and len(tasks) < len(workers):
        title = f"Input pipeline of {', '.join(tasks)} gates every synchronous step"
        waits = "".join(f", {task} {ms:.1f} ms a step" for task, ms in waiting.items())
        summary = (f"Workers {', '.join(tasks)} spend a median {share} of each step waiting for the next batch; "
                   f"the other workers wait for them in the all-reduce{waits}.")
    else:
        title = f"Input pipeline stalls {len(tasks)} of {len(workers)} workers"
        summary = (f"Workers {', '.join(tasks)} spend a median {share} of each step waiting for the next batch; "
                   "the accelerator idles while tf.data produces it.")
    return [
        Finding(
            kind="input_bound",
            severity=severity,
            title=title,
            summary=summary,
            tasks=tasks,
            evidence={
                "input_wait_frac": {row.task: round(float(row.input_wait_frac), 3) for row in bound.itertuples()},
                "input_wait_ms_per_step": {
                    row.task: round(float(row.mean_ns * row.input_wait_frac) / 1e6, 2) for row in bound.itertuples()
                },
                "step_time_ms_mean": {row.task: round(float(row.mean_ns) / 1e6, 2) for row in bound.itertuples()},
                "map_parallelism": {str(task): int(cores[index]) for index, task in bound["task"].items()},
                "threshold": WARNING_INPUT_FRACTION,
                **({"waiting_for_peers_ms_per_step": waiting} if waiting else {}),
                **({"stall_share_left_out": round(stall, 3)} if stall else {}),
            },
            recommendation=Recommendation(
                action="Overlap input with compute: parallelise the map and prefetch batches in the tf.data pipeline.",
                change=CHANGE,
                predicted_speedup=speedup,
            ),
        )
    ]


def host_cores(measured: Measurements) -> pd.Series:
    """Per worker (indexed like ``measured.workers``), the cores of its host: its own system
    samples' ``cpu_count``, else the shared host's (workers that sample nothing, as under
    ParameterServerStrategy), else 1."""
    workers = measured.workers["task"].astype(str)
    system = measured.run.frame("system")
    if system.empty or "cpu_count" not in system:
        return pd.Series(1.0, index=workers.index)
    counted = system.dropna(subset=["cpu_count"])
    by_task = counted.groupby(counted["task"].astype(str))["cpu_count"].max()
    by_host = counted.groupby(counted["host"].astype(str))["cpu_count"].max()
    shared = measured.shared_host.host if measured.shared_host is not None else None
    fallback = float(by_host.get(shared, 1.0)) if shared is not None else 1.0
    return workers.map(by_task).astype("float64").fillna(fallback).clip(lower=1.0)


def _new_step_ns(workers, input_ns, cores, synchronous: bool):
    """Each worker's step once a parallel map and a prefetch overlap its input with compute.

    A step then costs max(compute, input / cores). Asynchronously a worker's compute is its
    step less its own input wait. Synchronously the workers that were not waiting for input
    were waiting for the slowest one in the collective, so the shared compute (and
    collective) is the smallest step-less-input of any worker.
    """
    compute_ns = workers["mean_ns"] - input_ns
    if synchronous:
        compute_ns = compute_ns.clip(upper=float(compute_ns.min()))
    return compute_ns.combine(input_ns / cores, max)


def _synchronous_speedup(own: pd.DataFrame, cores: dict[str, float]) -> float:
    """The synchronous step once every worker prefetches its input in parallel
    (``sync_steps``): the workers' own compute with the shared reduction after it, or the
    slowest input spread over its host's cores, whichever is longer (a prefetch fills the
    next element over the whole step). A wait that a prefetch already hides is not in the
    stamps, so nothing is predicted for it."""
    per_core = own["input_ns"] / own["task"].map(cores).fillna(1.0)
    new_step = max(shared_ns(own) + float(own["compute_ns"].max()), float(per_core.max()))
    return float(own["step_ns"].max()) / max(new_step, 1.0)
