"""GPU and host utilisation per device, from the system sampler's records."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tfdiag.analysis.groups import TaskGroups, codes_of, mean_of
from tfdiag.analysis.rates import DISK_COUNTERS, NETWORK_COUNTERS
from tfdiag.events import LOOPBACK_HOSTS, parse_task, split_address


def gpu_table(gpu: pd.DataFrame) -> pd.DataFrame:
    """One row per (host, index): utilisation mean and median, memory use, power.

    Columns: ``host``, ``index``, ``samples``, ``util_mean``, ``util_p50``,
    ``mem_used_frac`` (mean), ``mem_used_frac_peak``, ``power_w_mean``.
    """
    columns = ["host", "index", "samples", "util_mean", "util_p50", "mem_used_frac", "mem_used_frac_peak", "power_w_mean"]
    if gpu.empty:
        return pd.DataFrame(columns=columns)
    frame = gpu.assign(mem_frac=gpu["mem_used_bytes"] / gpu["mem_total_bytes"].where(gpu["mem_total_bytes"] > 0))
    grouped = frame.groupby(["host", "index"], observed=True)
    table = pd.DataFrame({
        "samples": grouped.size(),
        "util_mean": grouped["util_pct"].mean(),
        "util_p50": grouped["util_pct"].median(),
        "mem_used_frac": grouped["mem_frac"].mean(),
        "mem_used_frac_peak": grouped["mem_frac"].max(),
        "power_w_mean": grouped["power_w"].mean(),
    }).reset_index()
    table["host"] = table["host"].astype(str)
    return table[columns]


def host_table(system: pd.DataFrame) -> pd.DataFrame:
    """One row per (host, task) sampler: CPU and memory mean and peak, network and disk rates.

    Columns: ``host``, ``task``, ``cpu_mean``, ``cpu_peak``, ``mem_used_frac_peak``,
    ``net_bytes_per_s`` (sent + received), ``disk_bytes_per_s`` (read + written), as
    ``rates.mean_rate`` (a counter reset's interval left out).
    """
    columns = ["host", "task", "cpu_mean", "cpu_peak", "mem_used_frac_peak", "net_bytes_per_s", "disk_bytes_per_s"]
    if system.empty:
        return pd.DataFrame(columns=columns)
    ordered = system.sort_values("time_ns")
    # Per sampler as numpy slices of one sorted frame, in groupby's order: a frame per
    # sampler costs a millisecond, a second on a 1,024-worker run.
    host_codes, hosts = pd.factorize(ordered["host"], sort=True)
    task_codes, tasks = pd.factorize(ordered["task"], sort=True)
    hosts, tasks = hosts.tolist(), tasks.tolist()  # read by position below, once a sampler
    keep = (host_codes >= 0) & (task_codes >= 0)  # groupby leaves a null key out
    group = np.where(keep, host_codes * max(len(tasks), 1) + task_codes, -1)
    order = np.argsort(group, kind="stable")[int((group < 0).sum()):]
    time = ordered["time_ns"].to_numpy(dtype="int64")[order]
    values = {name: ordered[name].to_numpy(dtype="float64", na_value=np.nan)[order]
              for name in ("cpu_pct", "mem_used_frac", *NETWORK_COUNTERS, *DISK_COUNTERS) if name in ordered}
    grouped = group[order]
    starts = np.flatnonzero(np.r_[True, np.diff(grouped) != 0]) if len(order) else np.array([], "int64")
    rows = []
    for start, stop in zip(starts, [*starts[1:], len(order)]):
        code = int(grouped[start])
        own = slice(start, stop)
        rows.append({
            "host": str(hosts[code // max(len(tasks), 1)]), "task": str(tasks[code % max(len(tasks), 1)]),
            "cpu_mean": _mean(values["cpu_pct"][own]), "cpu_peak": _peak(values["cpu_pct"][own]),
            "mem_used_frac_peak": _peak(values["mem_used_frac"][own]),
            "net_bytes_per_s": _mean_rate(values, NETWORK_COUNTERS, own, time[own]),
            "disk_bytes_per_s": _mean_rate(values, DISK_COUNTERS, own, time[own]),
        })
    return pd.DataFrame(rows, columns=columns)


def _mean(values: np.ndarray) -> float:
    """pandas' ``Series.mean``: NaN left out."""
    known = ~np.isnan(values)
    return float(np.where(known, values, 0.0).sum() / known.sum()) if known.any() else float("nan")


def _peak(values: np.ndarray) -> float:
    return float(np.nanmax(values)) if (~np.isnan(values)).any() else float("nan")


def _mean_rate(values: dict[str, np.ndarray], counters: tuple[str, ...], own: slice, time: np.ndarray) -> float:
    """``rates.mean_rate`` of one sampler's (time-sorted) samples, on numpy slices."""
    total = sum(values[name][own] for name in counters)
    increase = np.diff(total)
    increase[increase < 0] = np.nan
    elapsed_ns = np.diff(time)
    kept = ~np.isnan(increase)
    span_ns = int(elapsed_ns[kept].sum())
    return float(increase[kept].sum()) / (span_ns / 1e9) if span_ns > 0 else float("nan")


# CPU samples needed inside the training window before the shared host's CPU use counts.
MIN_CPU_SAMPLES = 2


@dataclass(frozen=True)
class SharedHost:
    """The one CPU-only host every worker runs on, and its CPU use while they stepped.

    ``job_cpu_pct`` is the job's own part of ``cpu_pct`` (its processes on the host, as a
    share of all cores), None for logs whose samples do not carry it.
    """

    host: str
    cpu_pct: float  # mean of the host's samples between the workers' first and last step
    samples: int
    job_cpu_pct: float | None = None


def job_cpu_on_host(window: pd.DataFrame) -> float | None:
    """The job's mean CPU share of a host from that host's samples, or None without one.

    Each sampler reports its own process (``proc_cpu_pct``, tagged with its ``pid``) and
    the job's processes it found by their cluster ports (``job_cpu_pct``). Both count a
    part of the job, never a foreign process: the larger of the best sampler's mean job
    figure and the processes' own figures added up is taken (a ParameterServerStrategy
    coordinator sees its servers; workers without a cluster spec count only themselves).
    Processes add up over time, not by their means: each process's samples are summed
    (divided among the tasks it samples for, so tasks of one process count once) over
    the samples one task took in the window, so a restarted task's two processes, one
    after the other, count as one.

    >>> window = pd.DataFrame({"task": ["worker:0", "worker:1", "worker:1"], "pid": [7, 8, 9],
    ...                        "proc_cpu_pct": [20.0, 30.0, 30.0], "job_cpu_pct": [20.0, 30.0, 30.0]})
    >>> job_cpu_on_host(window.iloc[:2])
    50.0
    >>> job_cpu_on_host(pd.concat([window.iloc[:1]] * 2 + [window.iloc[1:]]))  # worker:1 restarted
    50.0
    """
    if "job_cpu_pct" not in window or window["job_cpu_pct"].isna().all():
        return None
    per_sampler = window.groupby("task", observed=True)["job_cpu_pct"].mean().max()
    own_rows = window.dropna(subset=["pid", "proc_cpu_pct"])
    own = 0.0
    if not own_rows.empty:
        by_pid = own_rows.groupby("pid")
        sample_sum = (by_pid["proc_cpu_pct"].sum() / by_pid["task"].nunique()).sum()
        own = sample_sum / own_rows.groupby("task", observed=True).size().max()
    return float(max(per_sampler, own))


def _parsed(task: str) -> tuple[str, int]:
    """``events.parse_task`` of a task name read from a log, ``("", -1)`` where it does not parse."""
    try:
        return parse_task(task)
    except ValueError:
        return "", -1


def shared_worker_host(cluster: dict, reference_task: str | None, system: pd.DataFrame, gpu: pd.DataFrame,
                       steps: pd.DataFrame) -> SharedHost | None:
    """The host all workers share (a local cluster, a one-machine job), or None.

    A worker's host comes from its own system samples (the callback and the hook sample
    every task) or, where it runs no tfdiag code (ParameterServerStrategy workers), from
    its cluster address: a loopback address means the reference task's host, a sampled
    host name means that host. None when the workers span hosts or any is unknown, when
    the host has GPUs (the CPU does not bound the step there), or when fewer than
    ``MIN_CPU_SAMPLES`` samples fall between the first and the last timed step. The
    job's own CPU on the host comes from the same samples (``job_cpu_on_host``).
    """
    if system.empty or steps.empty:
        return None
    host_codes, host_names = codes_of(system["host"])
    sampling = TaskGroups(system["task"])
    hosts_of = {task: {str(host_names[code]) for code in np.unique(host_codes[rows]) if code >= 0}
                for task, rows in zip(sampling.names, sampling.rows)}
    sampled = set().union(*hosts_of.values())
    addresses = cluster.get("worker") or []
    hosts = set()
    for worker in TaskGroups(steps["task"]).names:
        own = hosts_of.get(worker)
        if not own:
            job, position = _parsed(worker)
            address = addresses[position] if job == "worker" and 0 <= position < len(addresses) else ""
            name = split_address(address)[0]
            own = hosts_of.get(reference_task, set()) if name in LOOPBACK_HOSTS else {name} & sampled
        hosts |= own
        if len(own) != 1 or len(hosts) != 1:
            return None
    host = hosts.pop()
    if not gpu.empty and host in set(gpu["host"].astype(str)):
        return None
    warmup = steps["warmup"].to_numpy(bool)
    timed = ~warmup if not warmup.all() else warmup  # masks: no copy of the steps
    begin, end = steps["begin_ns"].to_numpy()[timed], steps["end_ns"].to_numpy()[timed]
    start, stop = np.nanmin(begin), np.nanmax(end)
    time = system["time_ns"].to_numpy()
    inside = (system["host"] == host).to_numpy() & (time >= start) & (time <= stop)
    cpu = system["cpu_pct"].to_numpy("float64")[inside]
    cpu = cpu[~np.isnan(cpu)]
    if len(cpu) < MIN_CPU_SAMPLES:
        return None
    return SharedHost(host=host, cpu_pct=mean_of(cpu), samples=int(len(cpu)), job_cpu_pct=job_cpu_on_host(system[inside]))
