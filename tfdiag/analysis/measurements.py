"""The measured run: loaded records, clocks aligned, every signal summarised once."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from tfdiag.analysis.align import clock_offsets, to_reference_clock
from tfdiag.analysis.breakdown import step_table, worker_table
from tfdiag.analysis.devices import SharedHost, gpu_table, host_table, shared_worker_host
from tfdiag.analysis.faults import fault_table
from tfdiag.analysis.links import link_latency_table, link_table
from tfdiag.analysis.load import LoadedRun
from tfdiag.analysis.placement import ps_load_table
from tfdiag.analysis.restarts import restart_faults
from tfdiag.analysis.shards import shard_table, shards_from_steps
from tfdiag.analysis.whatif import is_synchronous
from tfdiag.events import cluster_tasks


@dataclass
class Measurements:
    """What every detector reads. Built once per analysis by ``measure``."""

    run: LoadedRun
    strategy: str | None
    synchronous: bool
    reference_task: str | None
    offsets: dict[str, int]
    steps: pd.DataFrame  # breakdown.step_table
    workers: pd.DataFrame  # breakdown.worker_table
    links: pd.DataFrame  # links.link_table
    link_latency: pd.DataFrame  # links.link_latency_table: the probe's links, else traced transfers
    shards: pd.DataFrame  # shards.shard_table
    gpus: pd.DataFrame  # devices.gpu_table
    hosts: pd.DataFrame  # devices.host_table
    faults: pd.DataFrame  # faults.fault_table
    ps_load: pd.DataFrame  # placement.ps_load_table
    shared_host: SharedHost | None  # devices.shared_worker_host
    heartbeats: pd.DataFrame = None  # heartbeat_table: liveness rows on the reference clock
    closures: pd.DataFrame = None  # the closure records, result_ns on the reference clock
    session_waits: dict = None  # TF1 task -> seconds from DiagnosticsHook.begin() to its session being ready

    @property
    def ps_tasks(self) -> list[str]:
        cluster = (self.run.manifest or {}).get("cluster") or {}
        return cluster_tasks(cluster, jobs=("ps",))


def measure(run: LoadedRun) -> Measurements:
    """Aligns clocks and computes every table of a loaded run."""
    strategy = (run.manifest or {}).get("strategy")
    reference = _reference_task(run)
    links = link_table(run.frame("rpc"))
    offsets = clock_offsets(links, reference)
    steps = step_table(run.frame("step"), offsets)
    workers = worker_table(steps, run.step_counters, offsets)
    shards = shard_table(run.frame("shard"))
    if shards.empty and not workers.empty and workers["examples"].sum() > 0:
        shards = shards_from_steps(workers)
    system, gpu = run.frame("system"), run.frame("gpu")
    cluster = (run.manifest or {}).get("cluster") or {}
    return Measurements(
        run=run,
        strategy=strategy,
        synchronous=is_synchronous(strategy),
        reference_task=reference,
        offsets=offsets,
        steps=steps,
        workers=workers,
        links=links,
        link_latency=link_latency_table(links, run.frame("transfer")),
        shards=shards,
        gpus=gpu_table(gpu),
        hosts=host_table(system),
        faults=fault_table(_faults_with_restarts(run)),
        ps_load=ps_load_table(run.frame("placement"), run.frame("transfer")),
        shared_host=shared_worker_host(cluster, reference, system, gpu, steps),
        heartbeats=heartbeat_table(run.frame("heartbeat"), offsets),
        closures=_on_reference_clock(run.frame("closure"), ["dispatch_ns", "result_ns"], offsets, "source"),
        session_waits=session_waits(run.frame("session")),
    )


def _faults_with_restarts(run: LoadedRun) -> pd.DataFrame:
    """The run's fault records plus the TF1 restarts its session and heartbeat records show."""
    faults = run.frame("fault")
    restarts = restart_faults(run.frame("session"), run.frame("heartbeat"), run.frame("step"))
    if restarts.empty:
        return faults
    return pd.concat([faults[restarts.columns] if not faults.empty else None, restarts], ignore_index=True)


def session_waits(sessions: pd.DataFrame) -> dict[str, float]:
    """Seconds each TF1 task's session took to be ready (its last session: a restart makes a new one).

    On a non-chief this is its wait for the chief to initialise the model.
    """
    if sessions.empty:
        return {}
    last = sessions.sort_values("ready_ns").groupby("task").tail(1)
    return {str(row.task): max(row.ready_ns - row.begin_ns, 0) / 1e9 for row in last.itertuples()}


def heartbeat_table(heartbeats: pd.DataFrame, offsets: dict[str, int]) -> pd.DataFrame:
    """The ``heartbeat`` rows with ``time_ns`` and ``oldest_in_flight_ns`` on the reference clock."""
    return _on_reference_clock(heartbeats, ["time_ns", "oldest_in_flight_ns"], offsets, "task")


def _on_reference_clock(frame: pd.DataFrame, columns: list[str], offsets: dict[str, int], clock: str) -> pd.DataFrame:
    if frame.empty or clock not in frame:
        return frame
    moved = {name: to_reference_clock(frame[name], frame[clock], offsets) for name in columns}
    return frame.assign(**moved)


def _reference_task(run: LoadedRun) -> str | None:
    """The clock everything is aligned to: the manifest's writer, else the chief, else the first task."""
    if run.manifest and run.manifest.get("task"):
        return run.manifest["task"]
    for candidate in ("chief:0", "coordinator:0", "worker:0"):
        if candidate in run.sources:
            return candidate
    return run.sources[0] if run.sources else None
