"""Synchronous steps from each worker's own time: who holds the all-reduce up, and by how much.

Under a synchronous strategy (MultiWorkerMirroredStrategy) every worker's step lasts as
long as the slowest worker's: the cross-worker reduction of the gradients waits for the
last worker to produce its own. The step records of ``model.fit`` carry, per worker and
step, ``input_wait_ns`` (from the train function's start to its input element) and
``compute_ns`` (from the element to this worker's own gradients, stamped in-graph before
the reduction: ``src/tfdiag/collectors/step_input.py``). A worker's *own time* is their sum; the rest
of its step is the reduction, the update and the step's overhead, plus, on every worker
but the slowest, the wait for the slowest. So, in the mean::

    step = max over workers of own time + shared

where ``shared`` is the step less the own time of the worker that gates it (the largest).
A change that alters some workers' own times gives the step ``shared`` plus the new
largest own time. Measured on ``mwms_fit`` (2 workers, 200 steps, load average 2.5)
with an in-graph sleep of 40 ms on worker 1: own times 4.8 and 45.1 ms, steps of
64.4 ms on both; worker 0 spent the remaining 59.7 ms waiting for worker 1 and in the
shared part, worker 1 the remaining 19.3 ms in the shared part alone (predicted without
the sleep: 19.3 + 5.3 ms, a step 2.6x shorter); the clean run's steps took 25.9 ms (own
5.3 and 5.5 ms, shared 20.4 ms; 2.5x shorter).

Means, not medians, make the prediction: throughput is total time over steps. Only the
records with a ``compute_ns`` count (the first step of a ``fit``, and every step of a
collector without the stamp, have none).

A worker's process that is *stopped* — a container CPU quota's throttling, ``SIGSTOP`` —
stalls every step it is stopped in, mostly while it waits in the all-reduce, where its
peers wait too: its compute stamps barely change (``mwms_fit`` with worker 1 stopped 40 ms
of every 100 ms: mean compute 9.0 against 5.8 ms, medians about equal) and no step time
singles it out. Its system sampler does (``src/tfdiag/collectors/system.py``): the share of its timed
wake-ups that came ``events.LATE_WAKE_S`` or more late estimates the share of time the process could not
run, and the cgroup's throttled time (v2 ``throttled_usec``, v1 ``throttled_time``) counts a
quota's throttling directly
(``stopped_shares``). A host under load delays every process alike, so a worker is
judged against the others of the same run, and the prediction takes away only its
excess: while it is stopped every synchronous step stands still, so the job would run
with the mean step scaled by ``1 - (its share - the typical other worker's)``
(``step_if_running_as_peers``). Stops that fall wholly inside a wait the worker would have
made anyway cost nothing, and the share misses the first 10 ms of each stop: the two
errors pull opposite ways.

Example:
    >>> import pandas as pd
    >>> steps = pd.DataFrame({"task": ["worker:0", "worker:1"] * 2, "begin_ns": [0, 0, 70, 70],
    ...                       "end_ns": [64, 64, 134, 134], "input_wait_ns": [1, 1, 1, 1],
    ...                       "compute_ns": [4, 44, 4, 44], "examples": [8] * 4})
    >>> own = own_times(steps)
    >>> own[["task", "own_ns", "step_ns"]].values.tolist()
    [['worker:0', 5.0, 64.0], ['worker:1', 45.0, 64.0]]
    >>> step_with_own(own, pd.Series([5.0, 5.0], index=own.index))
    24.0
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfdiag.analysis.groups import TaskGroups, mean_of, median_of, stepping_spans

STOPPED_COLUMNS = ["task", "wakes", "late_wakes", "late_ms", "throttled_ms", "span_ns", "stopped_share"]
# An excess stopped share this many standard errors past zero is a stall, not sampling noise
# (one-sided, about 2 % of clean pairs of workers cross it by chance).
STALL_NOISE_SE = 2.0
OWN_COLUMNS = ["task", "records", "step_ns", "input_ns", "compute_ns", "own_ns", "compute_p50_ns",
               "examples_per_step"]


def own_times(steps: pd.DataFrame) -> pd.DataFrame:
    """Per worker, over its step records with a ``compute_ns`` (``step`` records as logged).

    Columns: ``task``, ``records``, the means ``step_ns`` (duration), ``input_ns``,
    ``compute_ns`` and ``own_ns`` (their sum), ``compute_p50_ns`` (median compute) and
    ``examples_per_step``. Empty when no record has a ``compute_ns``.
    """
    if steps.empty or "compute_ns" not in steps:
        return pd.DataFrame(columns=OWN_COLUMNS)
    stamped = steps[steps["compute_ns"].notna()]
    if stamped.empty:
        return pd.DataFrame(columns=OWN_COLUMNS)
    step = (stamped["end_ns"] - stamped["begin_ns"]).to_numpy("float64")
    waited = stamped["input_wait_ns"].fillna(0).to_numpy("float64")
    compute = stamped["compute_ns"].to_numpy("float64")
    examples = stamped["examples"].fillna(0).to_numpy("float64")
    groups = TaskGroups(stamped["task"].astype(str))  # by name, as a sorting groupby of the names
    table = pd.DataFrame([(name, len(rows), mean_of(step[rows]), mean_of(waited[rows]), mean_of(compute[rows]),
                           median_of(compute[rows]), mean_of(examples[rows]))
                          for name, rows in zip(groups.names, groups.rows)],
                         columns=["task", "records", "step_ns", "input_ns", "compute_ns", "compute_p50_ns",
                                  "examples_per_step"])
    table["own_ns"] = table["input_ns"] + table["compute_ns"]
    return table[OWN_COLUMNS]


def shared_ns(own: pd.DataFrame) -> float:
    """The part of the mean synchronous step that is no worker's own time: the step less the
    largest own time (the reduction, the update and the step's overhead)."""
    return max(float(own["step_ns"].max() - own["own_ns"].max()), 0.0)


def step_with_own(own: pd.DataFrame, new_own_ns: pd.Series) -> float:
    """The mean synchronous step when each worker's own time becomes ``new_own_ns`` (indexed
    like ``own``): the shared part plus the largest new own time."""
    return shared_ns(own) + float(new_own_ns.max())


def speedup_with_own(own: pd.DataFrame, new_own_ns: pd.Series) -> float:
    """Throughput ratio of the synchronous job when each worker's own time becomes ``new_own_ns``."""
    return float(own["step_ns"].max()) / max(step_with_own(own, new_own_ns), 1.0)


def waiting_for_slowest_ms(own: pd.DataFrame, named: set[str]) -> dict[str, float]:
    """Per worker not in ``named``, its mean wait in the all-reduce for the slowest own time (ms a step).

    Each worker's input wait ends at its element stamp and its compute at its gradients
    stamp, both before the cross-worker reduction, so a wait for a slower peer falls after
    its own gradients, in neither stamp: the step is the largest own time plus the shared
    part, and each worker waits the largest own time less its own.

    >>> own = pd.DataFrame({"task": ["worker:0", "worker:1"], "own_ns": [5e6, 45e6]})
    >>> waiting_for_slowest_ms(own, {"worker:1"})
    {'worker:0': 40.0}
    """
    largest = float(own["own_ns"].max())
    return {str(row.task): round((largest - float(row.own_ns)) / 1e6, 2)
            for row in own.itertuples() if str(row.task) not in named}


def stopped_shares(system: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per task, how much of its stepping its process could not run, from its ``system``
    records (as logged) whose span overlaps its stepping: a sample counts the wake-ups since
    the previous one, so the first after its last step's end (the sampler's last, at its
    stop) holds the last steps' wake-ups.

    Columns: ``task``, the sums ``wakes``, ``late_wakes``, ``late_ms`` and ``throttled_ms``
    (NaN without a cgroup v2 ``cpu.stat``), ``span_ns`` (the time those samples cover) and
    ``stopped_share``: the larger of the late wake-ups' share and the throttled time's share
    of the span. Empty when the records have no wake-up counts (logs from before them).

    >>> system = pd.DataFrame({"task": ["worker:1"] * 3, "time_ns": [0, 10**9, 2 * 10**9],
    ...                        "wakes": [20, 20, 20], "late_wakes": [0, 6, 8], "late_ms": [0.0, 120.0, 160.0],
    ...                        "throttled_ms": [float("nan")] * 3})
    >>> steps = pd.DataFrame({"task": ["worker:1"] * 2, "begin_ns": [0, 10**9], "end_ns": [10**9, 2 * 10**9]})
    >>> stopped_shares(system, steps)["stopped_share"].tolist()
    [0.35]
    """
    if system.empty or "late_wakes" not in system or steps.empty:
        return pd.DataFrame(columns=STOPPED_COLUMNS)
    first, last = stepping_spans(steps)
    samples = system.assign(task=system["task"].astype(str)).sort_values(["task", "time_ns"])
    # The time each sample covers: since the task's previous sample.
    samples["covered_ns"] = samples.groupby("task")["time_ns"].diff().astype("float64")
    samples = samples.dropna(subset=["wakes", "late_wakes", "covered_ns"])
    if samples.empty:
        return pd.DataFrame(columns=STOPPED_COLUMNS)
    since_ns = samples["time_ns"] - samples["covered_ns"]
    inside = samples[(samples["time_ns"] > samples["task"].map(first)) & (since_ns < samples["task"].map(last))]
    if inside.empty:
        return pd.DataFrame(columns=STOPPED_COLUMNS)
    grouped = inside.groupby("task", sort=True)
    table = grouped[["wakes", "late_wakes", "late_ms"]].sum()
    table["throttled_ms"] = grouped["throttled_ms"].sum(min_count=1) if "throttled_ms" in inside else math.nan
    table["span_ns"] = grouped["covered_ns"].sum()
    late_share = table["late_wakes"] / table["wakes"].clip(lower=1)
    throttled_share = (table["throttled_ms"] * 1e6 / table["span_ns"].where(table["span_ns"] > 0)).fillna(0.0).clip(upper=1.0)
    table["stopped_share"] = pd.concat([late_share, throttled_share], axis=1).max(axis=1)
    return table.reset_index()[STOPPED_COLUMNS]


def with_probed_shares(stopped: pd.DataFrame, held: pd.DataFrame) -> pd.DataFrame:
    """``stopped`` (``stopped_shares``) with each worker's ``stopped_share`` the larger of its
    own (late wake-ups, cgroup throttling) and the share of the other workers' probes of its
    state that found it stopped (``run_queue.held_table``), where they probed it at least as
    often as it woke (logs from before the probes at each wake-up have a probe a sample), and
    ``count``, the wake-ups or probes that share is of (``by_probes``: the probes'). A probe
    at a random time finds a process stopped for the share of the time it was; a wake-up is
    late only where a stop outlasts its deadline by 10 ms, so late wake-ups miss short stops
    (a gen_fit worker stopped 39 % of the time by 16 ms stops woke late 25 % of the time, its
    peer's probes found it stopped 37 % of theirs). A quota throttles without stopping: only
    the process's own cgroup figures see it.

    >>> stopped = pd.DataFrame({"task": ["worker:0", "worker:1"], "wakes": [60, 50], "stopped_share": [0.0, 0.2]})
    >>> held = pd.DataFrame({"task": ["worker:0", "worker:1"], "stopped_share": [0.0, 0.4], "probes": [50, 60]})
    >>> with_probed_shares(stopped, held)[["stopped_share", "count", "by_probes"]].values.tolist()
    [[0.0, 60.0, False], [0.4, 60.0, True]]
    """
    tasks = stopped["task"].astype(str)
    probed = held.dropna(subset=["stopped_share"])
    probed = probed[probed["probes"] > 0]
    share, probes = (tasks.map(dict(zip(probed["task"].astype(str), probed[column]))).astype("float64")
                     for column in ("stopped_share", "probes"))
    by_probes = (share > stopped["stopped_share"]) & (probes >= stopped["wakes"])
    return stopped.assign(stopped_share=stopped["stopped_share"].where(~by_probes, share),
                          count=stopped["wakes"].astype("float64").where(~by_probes, probes), by_probes=by_probes)


def step_if_running_as_peers(step_ns: float, share: float, typical_share: float) -> float:
    """The mean synchronous step had a worker stopped for ``share`` of the time been stopped
    only for the ``typical_share`` of its peers: every step stands still while it is stopped.

    >>> step_if_running_as_peers(60.0, 0.5, 0.25)
    45.0
    """
    return step_ns * (1.0 - max(share - typical_share, 0.0))


def stall_share(stopped: pd.DataFrame, min_span_ns: float) -> float:
    """The share of the synchronous steps that stood still because one worker's process was
    stopped more than its peers' (``with_probed_shares`` rows sampled over ``min_span_ns`` or
    more): the largest stopped share less the median of the other workers', where that
    excess is past its sampling noise (``past_noise``); else 0, as with fewer than two
    workers. While a worker is stopped every step waits for it, wherever in the step its
    peers wait: in the all-reduce, or for their element where the element itself waits on
    a collective.

    >>> stopped = pd.DataFrame({"task": ["worker:0", "worker:1", "worker:2"], "count": [99, 99, 99],
    ...                         "span_ns": [10**10] * 3, "stopped_share": [0.02, 0.5, 0.04]})
    >>> round(stall_share(stopped, 5e9), 3), stall_share(stopped.assign(stopped_share=[0.02, 0.06, 0.04]), 5e9)
    (0.47, 0.0)
    """
    rows = stopped[stopped["span_ns"] >= min_span_ns].reset_index(drop=True)
    if len(rows) < 2:
        return 0.0
    worst = int(rows["stopped_share"].astype("float64").idxmax())
    others = rows.drop(index=worst)
    share, n = float(rows.loc[worst, "stopped_share"]), float(rows.loc[worst, "count"])
    typical, typical_n = float(others["stopped_share"].median()), float(others["count"].median())
    return share - typical if past_noise(share, n, typical, typical_n) else 0.0


def past_noise(share, wakes, typical, typical_wakes):
    """Whether a stopped ``share`` from ``wakes`` wake-ups exceeds the ``typical`` share (from
    ``typical_wakes``) by more than ``STALL_NOISE_SE`` standard errors of their difference (a
    share p from n wake-ups varies by sqrt(p(1 - p) / n)); elementwise on arrays.

    >>> bool(past_noise(0.3, 25, 0.02, 60)), bool(past_noise(0.12, 25, 0.05, 60))
    (True, False)
    """
    noise = np.sqrt(share * (1 - share) / np.maximum(wakes, 1)
                    + typical * (1 - typical) / np.maximum(typical_wakes, 1))
    return share - typical > STALL_NOISE_SE * noise
