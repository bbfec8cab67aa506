"""Whether the workers got the CPU they asked for: run-queue wait shares and busy neighbours.

From the samplers' schedstat readings (``src/tfdiag/collectors/run_queue.py``): a sampling process's
own in its ``system`` records (``run_ms``, ``runq_wait_ms``), the job's other processes'
in ``job_process`` records (a ParameterServerStrategy coordinator's workers and ps). Per
task, over the samples taken while it stepped (a sample covers the time since the
sampler's previous one), its *wait share*: the time its threads waited on a run queue
over the time they wanted a CPU (ran + waited). A process starved by its neighbours waits
for a larger share than its peers; a stopped one (``SIGSTOP``, a CPU quota) does not, as a
stopped thread is not runnable. And per host, the neighbours: the CPU of the processes
outside the job (the host's less the job's) and the busiest of them by name. And per
task, its *held share* (``held_table``): the share of its stepping something outside it
held it (its cgroup's quota throttled it, a signal stopped it), which tells a worker
held from outside (a straggler: the fault is the holder) from one its neighbours starve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tfdiag.analysis.groups import stepping_spans

RUN_QUEUE_COLUMNS = ["task", "run_ms", "runq_wait_ms", "samples", "runq_wait_share"]
HELD_COLUMNS = ["task", "throttled_share", "stopped_share", "held_share", "probes"]


def run_queue_table(system: pd.DataFrame, job_process: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per task, its threads' run and run-queue wait summed over the readings whose span
    overlaps its stepping (ending after its first step's start, beginning before its last
    step's end, on the sampler's clock as logged), and ``runq_wait_share`` = wait / (run + wait). A task's own samples
    (``system``) are preferred; else one sampler's ``job_process`` rows (the one with the
    most: on a local multi-worker cluster each worker's sampler sees the others).

    >>> system = pd.DataFrame({"task": ["worker:0"] * 3, "time_ns": [0, 10**9, 2 * 10**9], "source": "worker:0",
    ...                        "run_ms": [float("nan"), 600.0, 600.0], "runq_wait_ms": [float("nan"), 200.0, 200.0]})
    >>> steps = pd.DataFrame({"task": ["worker:0"] * 2, "begin_ns": [0, 10**9], "end_ns": [10**9, 2 * 10**9]})
    >>> run_queue_table(system, pd.DataFrame(), steps)["runq_wait_share"].tolist()
    [0.25]
    """
    readings = _Readings.of(system, job_process, ("run_ms", "runq_wait_ms"))
    if readings is None or steps.empty:
        return pd.DataFrame(columns=RUN_QUEUE_COLUMNS)
    run, wait = readings.values["run_ms"], readings.values["runq_wait_ms"]
    own_task = set(readings.task[readings.own & ~np.isnan(wait)])
    # Its own readings over another's view of it; an own reading without figures dates nothing.
    # (Hashed: np.isin compares object arrays pair by pair, 7 s for 400 k readings of 1,024 tasks.)
    sampled_itself = pd.Series(readings.task).isin(own_task).to_numpy()
    readings = readings.where((readings.own | ~sampled_itself) & (~np.isnan(run) | ~readings.own))
    # A reading covers the time since the same sampler's previous one of that task (a
    # job_process row without figures dates the first): it counts where that span overlaps
    # the task's stepping, as readings come every few seconds and a run may step for few.
    previous = readings.previous_ns()
    since = np.where(np.isnan(previous), readings.time_ns, previous)
    run, wait = readings.values["run_ms"], readings.values["runq_wait_ms"]
    inside = ~np.isnan(run) & ~np.isnan(wait) & readings.while_stepping(steps, since)
    if not inside.any():
        return pd.DataFrame(columns=RUN_QUEUE_COLUMNS)
    tasks, task_of = np.unique(readings.task[inside], return_inverse=True)
    sources, source_of = np.unique(readings.source[inside], return_inverse=True)
    # Per task, the sampler with the most readings (the first by name among equals).
    pairs, pair_of, counts = np.unique(task_of * len(sources) + source_of, return_inverse=True, return_counts=True)
    order = np.lexsort((pairs % len(sources), -counts, pairs // len(sources)))
    best = order[np.r_[True, np.diff(pairs[order] // len(sources)) != 0]]
    chosen = np.isin(pair_of, best)
    run_ms = np.bincount(task_of[chosen], weights=run[inside][chosen], minlength=len(tasks))
    wait_ms = np.bincount(task_of[chosen], weights=wait[inside][chosen], minlength=len(tasks))
    demand = run_ms + wait_ms
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(demand > 0, wait_ms / demand, math.nan)
    return pd.DataFrame({"task": tasks.astype(str), "run_ms": run_ms, "runq_wait_ms": wait_ms,
                         "samples": np.bincount(task_of[chosen], minlength=len(tasks)), "runq_wait_share": share},
                        columns=RUN_QUEUE_COLUMNS)


@dataclass(frozen=True)
class _Readings:
    """The samplers' readings of the tasks (their own ``system`` rows and the ``job_process``
    rows of the processes a sampler counts) as numpy columns: who was read, by whom, when,
    whether by itself, and the figures asked for."""

    task: np.ndarray
    source: np.ndarray
    time_ns: np.ndarray
    own: np.ndarray
    values: dict[str, np.ndarray]

    @classmethod
    def of(cls, system: pd.DataFrame, job_process: pd.DataFrame, figures: tuple[str, ...],
           own_figures: tuple[str, ...] = ()) -> _Readings | None:
        """The readings of the frames holding ``figures[-1]`` and a ``source``; a figure a frame
        lacks (or, for its own rows, one outside ``own_figures`` where given) reads NaN."""
        parts = []
        for frame, own in ((system, True), (job_process, False)):
            if frame.empty or figures[-1] not in frame or "source" not in frame:
                continue
            nan = np.full(len(frame), math.nan)
            parts.append((frame["task"].astype(str).to_numpy(object), frame["source"].astype(str).to_numpy(object),
                          frame["time_ns"].to_numpy(np.int64), np.full(len(frame), own),
                          {name: frame[name].to_numpy(np.float64) if name in frame
                           and not (own and own_figures and name not in own_figures) else nan
                           for name in figures}))
        if not parts:
            return None
        return cls(*(np.concatenate([part[i] for part in parts]) for i in range(4)),
                   {name: np.concatenate([part[4][name] for part in parts]) for name in figures})

    def where(self, keep: np.ndarray) -> _Readings:
        return _Readings(self.task[keep], self.source[keep], self.time_ns[keep], self.own[keep],
                         {name: values[keep] for name, values in self.values.items()})

    def previous_ns(self) -> np.ndarray:
        """Each reading's previous one by the same sampler of the same task (NaN: its first)."""
        order = np.lexsort((self.time_ns, self.task, self.source))
        task, source, time_ns = self.task[order], self.source[order], self.time_ns[order]
        previous = np.full(len(order), math.nan)
        same = (task[1:] == task[:-1]) & (source[1:] == source[:-1])
        previous[1:][same] = time_ns[:-1][same]
        unsorted = np.empty_like(previous)
        unsorted[order] = previous
        return unsorted

    def while_stepping(self, steps: pd.DataFrame, since_ns: np.ndarray) -> np.ndarray:
        """Readings whose span (``since_ns`` to its time) overlaps its task's stepping: ending
        after its first step's start, beginning before its last step's end."""
        first, last = stepping_spans(steps)
        begins = np.array([first.get(t, math.nan) for t in self.task], dtype=np.float64)
        ends = np.array([last.get(t, math.nan) for t in self.task], dtype=np.float64)
        return (self.time_ns > begins) & (since_ns < ends)


@dataclass(frozen=True)
class Neighbours:
    """The CPU used on a host by processes outside the job while the workers stepped.

    ``others_cores``: the host's CPU less the job's (``cpu_pct - job_cpu_pct``), in cores;
    ``busiest``: the busiest such process seen (its name and pid, ``"name (pid N)"``) and
    ``busiest_cores`` its mean CPU over the samples that named it; None where no sample did.
    """

    host: str
    others_cores: float
    busiest: str | None
    busiest_cores: float | None


def neighbours(system: pd.DataFrame, steps: pd.DataFrame, host: str | None) -> Neighbours | None:
    """``Neighbours`` of ``host`` (the shared host, ``devices.shared_worker_host``) from the
    samples taken between the workers' first step start and last step end, read from the
    sampler that counts the most job processes; None without job CPU figures there.

    >>> system = pd.DataFrame({"host": "vm", "task": "chief:0", "time_ns": [1, 2, 3], "cpu_count": 2,
    ...     "cpu_pct": [100.0] * 3, "job_cpu_pct": [40.0] * 3, "job_processes": 5, "hog_pid": [None, 7, 7],
    ...     "hog_name": [None, "python3", "python3"], "hog_cpu_pct": [float("nan"), 50.0, 40.0]})
    >>> steps = pd.DataFrame({"begin_ns": [0], "end_ns": [9]})
    >>> neighbours(system, steps, "vm")
    Neighbours(host='vm', others_cores=1.2, busiest='python3 (pid 7)', busiest_cores=0.9)
    """
    if host is None or system.empty or steps.empty or "job_cpu_pct" not in system:
        return None
    first, last = steps["begin_ns"].min(), steps["end_ns"].max()
    window = system[(system["host"].astype(str) == host) & (system["time_ns"] > first) & (system["time_ns"] <= last)]
    window = window.dropna(subset=["cpu_pct", "job_cpu_pct"])
    if window.empty:
        return None
    window = window.dropna(subset=["cpu_count"])
    if window.empty:
        return None
    sampler = window.groupby(window["task"].astype(str))["job_processes"].max().fillna(0).idxmax()
    window = window[window["task"].astype(str) == sampler]
    cores = float(window["cpu_count"].max())
    others = float((window["cpu_pct"] - window["job_cpu_pct"]).clip(lower=0).mean()) * cores / 100.0
    busiest = busiest_cores = None
    if "hog_pid" in window and window["hog_pid"].notna().any():
        named = window.dropna(subset=["hog_pid", "hog_cpu_pct"])
        by_pid = named.groupby("hog_pid")["hog_cpu_pct"]
        pid = by_pid.sum().idxmax()
        name = named.loc[named["hog_pid"] == pid, "hog_name"].iloc[-1]
        busiest, busiest_cores = f"{name} (pid {int(pid)})", round(float(by_pid.mean()[pid]) * cores / 100.0, 2)
    return Neighbours(host, round(others, 2) if not math.isnan(others) else 0.0, busiest, busiest_cores)


def held_table(system: pd.DataFrame, job_process: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Per task, the share of its stepping it was held from outside, over the readings whose
    span overlaps it (as ``run_queue_table``; a reading covers the time since the same
    sampler's previous one of that task): ``throttled_share``, its cgroup's throttled time over that
    span (its own ``system`` rows', else a sampler's ``job_process`` rows'); ``stopped_share``,
    of a sampler's probes of its state (``job_process``) those that found it stopped
    (``probes``: how many; each probe at a random time, so the share estimates the time
    it was stopped); ``held_share``, the larger (NaN: neither known). A sampler's own stops are its late
    wake-ups (``sync_steps.stopped_shares``), noisier on a loaded host and judged with
    wider margins (``straggler.STOPPED_EXTRA_SHARE``), so they are not counted here.

    >>> job_process = pd.DataFrame({"task": ["worker:1"] * 3, "source": "chief:0", "time_ns": [0, 10**10, 2 * 10**10],
    ...     "throttled_ms": [float("nan"), 1000.0, 3000.0], "probes": [5, 5, 5], "stopped_probes": [0, 1, 2]})
    >>> steps = pd.DataFrame({"task": ["worker:1"] * 2, "begin_ns": [0, 10**10], "end_ns": [10**10, 2 * 10**10]})
    >>> held_table(pd.DataFrame(), job_process, steps)[HELD_COLUMNS[1:]].values.tolist()
    [[0.2, 0.3, 0.3, 10.0]]
    """
    readings = _Readings.of(system, job_process, ("probes", "stopped_probes", "throttled_ms"),
                            own_figures=("throttled_ms",))
    if readings is None or steps.empty:
        return pd.DataFrame(columns=HELD_COLUMNS)
    previous = readings.previous_ns()
    readings = readings.where(~np.isnan(previous))
    covered = readings.time_ns - previous[~np.isnan(previous)]
    inside = readings.while_stepping(steps, readings.time_ns - covered)
    throttled, probes, stopped = (readings.values[name][inside]
                                  for name in ("throttled_ms", "probes", "stopped_probes"))
    tasks, task_of = np.unique(readings.task[inside], return_inverse=True)
    own, covered = readings.own[inside], covered[inside].astype(np.float64)

    def per_task(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return np.bincount(task_of[rows], weights=values[rows], minlength=len(tasks))

    # Its cgroup's throttled time from its own readings where they have it, else another sampler's.
    measured = ~np.isnan(throttled)
    own_known = per_task(np.ones(len(own)), own & measured) > 0
    of_throttled = measured & (own == own_known[task_of])
    span_ns = per_task(covered, of_throttled)
    probed = ~np.isnan(probes) & ~np.isnan(stopped)
    probed_count = per_task(probes, probed)
    with np.errstate(invalid="ignore", divide="ignore"):
        throttled_share = np.where(span_ns > 0, np.minimum(per_task(throttled, of_throttled) * 1e6 / span_ns, 1.0),
                                   math.nan)
        stopped_share = np.where(probed_count > 0, per_task(stopped, probed) / probed_count, math.nan)
    return pd.DataFrame({"task": tasks.astype(str), "throttled_share": throttled_share,
                         "stopped_share": stopped_share, "held_share": np.fmax(throttled_share, stopped_share),
                         "probes": probed_count}, columns=HELD_COLUMNS)
