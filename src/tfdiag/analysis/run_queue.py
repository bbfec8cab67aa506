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

import pandas as pd

RUN_QUEUE_COLUMNS = ["task", "run_ms", "runq_wait_ms", "samples", "runq_wait_share"]
HELD_COLUMNS = ["task", "throttled_share", "stopped_share", "held_share"]


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
    parts = [frame[["task", "time_ns", "source", "run_ms", "runq_wait_ms"]].assign(own=own)
             for frame, own in ((system, True), (job_process, False))
             if not frame.empty and "runq_wait_ms" in frame and "source" in frame]
    if not parts or steps.empty:
        return pd.DataFrame(columns=RUN_QUEUE_COLUMNS)
    samples = pd.concat(parts, ignore_index=True)
    samples = samples.assign(task=samples["task"].astype(str), source=samples["source"].astype(str))
    sampled_itself = set(samples.loc[samples["own"] & samples["runq_wait_ms"].notna(), "task"])
    samples = samples[samples["own"] | ~samples["task"].isin(sampled_itself)]  # its own over another's view of it
    # A reading covers the time since the same sampler's previous one of that task (a
    # job_process row without figures dates the first): it counts where that span overlaps
    # the task's stepping, as readings come every few seconds and a run may step for few.
    samples = samples[samples["run_ms"].notna() | ~samples["own"]].sort_values(["source", "task", "time_ns"])
    since = samples.groupby(["source", "task"])["time_ns"].shift().astype("float64")
    samples = samples.assign(since_ns=since.fillna(samples["time_ns"].astype("float64")))
    samples = samples.dropna(subset=["run_ms", "runq_wait_ms"])
    if samples.empty:  # logs from before the columns
        return pd.DataFrame(columns=RUN_QUEUE_COLUMNS)
    task = steps["task"].astype(str)
    first, last = steps["begin_ns"].groupby(task).min(), steps["end_ns"].groupby(task).max()
    begins, ends = samples["task"].map(first).astype(float), samples["task"].map(last).astype(float)
    inside = samples[(samples["time_ns"] > begins) & (samples["since_ns"] < ends)]
    if inside.empty:
        return pd.DataFrame(columns=RUN_QUEUE_COLUMNS)
    counts = inside.groupby(["task", "source"]).size()
    chosen = counts.groupby(level="task").idxmax().tolist()  # (task, source) with the most samples
    inside = inside.set_index(["task", "source"]).loc[chosen].reset_index()
    table = inside.groupby("task").agg(run_ms=("run_ms", "sum"), runq_wait_ms=("runq_wait_ms", "sum"),
                                       samples=("run_ms", "size"))
    demand = table["run_ms"] + table["runq_wait_ms"]
    table["runq_wait_share"] = (table["runq_wait_ms"] / demand.where(demand > 0)).astype(float)
    return table.reset_index()[RUN_QUEUE_COLUMNS]


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
    of a sampler's probes of its state (``job_process``) those that found it stopped;
    ``held_share``, the larger (NaN: neither known). A sampler's own stops are its late
    wake-ups (``sync_steps.stopped_shares``), noisier on a loaded host and judged with
    wider margins (``straggler.STOPPED_EXTRA_SHARE``), so they are not counted here.

    >>> job_process = pd.DataFrame({"task": ["worker:1"] * 3, "source": "chief:0", "time_ns": [0, 10**10, 2 * 10**10],
    ...     "throttled_ms": [float("nan"), 1000.0, 3000.0], "probes": [5, 5, 5], "stopped_probes": [0, 1, 2]})
    >>> steps = pd.DataFrame({"task": ["worker:1"] * 2, "begin_ns": [0, 10**10], "end_ns": [10**10, 2 * 10**10]})
    >>> held_table(pd.DataFrame(), job_process, steps)[HELD_COLUMNS[1:]].values.tolist()
    [[0.2, 0.3, 0.3]]
    """
    parts = []
    for frame, own in ((system, True), (job_process, False)):
        if frame.empty or "throttled_ms" not in frame or "source" not in frame:
            continue
        frame = frame.assign(task=frame["task"].astype(str), source=frame["source"].astype(str))
        frame = frame.sort_values(["source", "task", "time_ns"])
        covered = frame.groupby(["source", "task"])["time_ns"].diff().astype("float64")
        probes, stopped = (None, None) if own else (frame.get("probes"), frame.get("stopped_probes"))
        parts.append(pd.DataFrame({
            "task": frame["task"], "source": frame["source"], "time_ns": frame["time_ns"], "own": own,
            "covered_ns": covered, "throttled_ms": frame["throttled_ms"].astype("float64"),
            "probes": (probes if probes is not None else pd.Series(math.nan, index=frame.index)).astype("float64"),
            "stopped": (stopped if stopped is not None else pd.Series(math.nan, index=frame.index)).astype("float64"),
        }))
    if not parts or steps.empty:
        return pd.DataFrame(columns=HELD_COLUMNS)
    rows = pd.concat(parts, ignore_index=True).dropna(subset=["covered_ns"])
    task = steps["task"].astype(str)
    first, last = steps["begin_ns"].groupby(task).min(), steps["end_ns"].groupby(task).max()
    rows = rows[(rows["time_ns"] > rows["task"].map(first).astype(float))
                & (rows["time_ns"] - rows["covered_ns"] < rows["task"].map(last).astype(float))]
    table = []
    for name, of_task in rows.groupby("task"):
        own = of_task[of_task["own"]]
        throttled = own if own["throttled_ms"].notna().any() else of_task[~of_task["own"]]
        throttled = throttled.dropna(subset=["throttled_ms"])
        throttled_share = (min(float(throttled["throttled_ms"].sum()) * 1e6 / float(throttled["covered_ns"].sum()), 1.0)
                           if len(throttled) and throttled["covered_ns"].sum() > 0 else math.nan)
        probed = of_task.dropna(subset=["probes", "stopped"])
        stopped_share = (float(probed["stopped"].sum()) / float(probed["probes"].sum())
                         if probed["probes"].sum() > 0 else math.nan)
        known = [share for share in (throttled_share, stopped_share) if not math.isnan(share)]
        table.append((name, throttled_share, stopped_share, max(known) if known else math.nan))
    return pd.DataFrame(table, columns=HELD_COLUMNS)
