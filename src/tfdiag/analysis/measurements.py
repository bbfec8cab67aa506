"""The measured run: loaded records, clocks aligned, every signal summarised once, when first read."""

from __future__ import annotations

from functools import cached_property

import pandas as pd

from tfdiag.analysis.align import clock_offsets
from tfdiag.analysis.breakdown import step_table, worker_table
from tfdiag.analysis.closure_gaps import JobPace, closure_gaps, job_pace
from tfdiag.analysis.devices import SharedHost, gpu_table, host_table, shared_worker_host
from tfdiag.analysis.fair_comparison import judged_workers, with_wait_shares
from tfdiag.analysis.faults import fault_table
from tfdiag.analysis.groups import value_of_group
from tfdiag.analysis.last_words import JobEnd, job_end
from tfdiag.analysis.links import link_latency_table, link_table, round_trips
from tfdiag.analysis.load import LoadedRun
from tfdiag.analysis.placement import ps_load_table
from tfdiag.analysis.processes import ProcessEnd, ended_processes
from tfdiag.analysis.restarts import restart_faults
from tfdiag.analysis.run_queue import Neighbours, held_table, neighbours, run_queue_table
from tfdiag.analysis.shards import shard_table, shards_from_steps
from tfdiag.analysis.sync_steps import own_times, stopped_shares, with_probed_shares
from tfdiag.analysis.whatif import is_synchronous
from tfdiag.analysis.window_load import window_of
from tfdiag.events import cluster_tasks


# Tables a live window may take from the previous one, with the kinds of records they read.
REUSABLE = {"ps_load": ("placement", "transfer")}


class Measurements:
    """What every detector reads, each table computed on its first use and kept.

    An analysis builds only the tables something reads: a live window's detectors never
    ask for ``hosts`` (the report's), and a detector that returns early never pays for
    the tables after its test. Every table is a pure function of ``run``, so the order
    they are built in changes nothing.

    One table reads the present as well as the logs: ``process_ends``, from this host's
    process table as the loader found it just before it read the files (``run.processes``).

    ``previous``: the measurements of the same run's previous live window. A table of
    ``REUSABLE`` whose frames are the very frames that window's was built from
    (``WindowLoader`` keeps a kind's frame while none of its records came or aged out)
    is taken from it.
    """

    def __init__(self, run: LoadedRun, previous: Measurements | None = None):
        self.run = run
        # table -> (the run it was built from, the table): not ``previous`` itself, whose own
        # previous would chain every window of the run.
        self._earlier = {name: (previous.run, vars(previous)[name]) for name in REUSABLE
                         if previous is not None and name in vars(previous)}
        self._parts: dict[float, Measurements | None] = {}  # ``last_part``'s, by share

    def _reused(self, name: str) -> pd.DataFrame | None:
        """The previous window's table ``name`` if its frames did not change since, else None."""
        run, table = self._earlier.get(name, (None, None))
        if run is None or any(self.run.frames.get(kind) is not run.frames.get(kind) for kind in REUSABLE[name]):
            return None
        return table

    @cached_property
    def strategy(self) -> str | None:
        return (self.run.manifest or {}).get("strategy")

    @cached_property
    def synchronous(self) -> bool:
        return is_synchronous(self.strategy)

    @cached_property
    def reference_task(self) -> str | None:
        return _reference_task(self.run)

    @cached_property
    def offsets(self) -> dict[str, int]:
        return clock_offsets(self.links, self.reference_task)

    @cached_property
    def steps(self) -> pd.DataFrame:
        """``breakdown.step_table``."""
        return step_table(self.run.frame("step"), self.offsets)

    @cached_property
    def workers(self) -> pd.DataFrame:
        """``breakdown.worker_table``."""
        return worker_table(self.steps, self.run.step_counters, self.offsets)

    @cached_property
    def compared(self) -> pd.DataFrame:
        """``fair_comparison.judged_workers``: the workers compared fairly, for the straggler judgement,
        each with its ``runq_wait_share`` (``run_queue``)."""
        return with_wait_shares(judged_workers(self.steps, self.workers, self.run.step_counters, self.offsets,
                                               self.faults, self.closures), self.run_queue)

    @cached_property
    def run_queue(self) -> pd.DataFrame:
        """``run_queue.run_queue_table``: per task, its threads' run-queue wait while it stepped."""
        return run_queue_table(self.run.frame("system"), self.run.frame("job_process"), self.run.frame("step"))

    @cached_property
    def held(self) -> pd.DataFrame:
        """``run_queue.held_table``: per task, the share of its stepping its cgroup's quota or a signal held it."""
        return held_table(self.run.frame("system"), self.run.frame("job_process"), self.run.frame("step"))

    @cached_property
    def neighbours(self) -> Neighbours | None:
        """``run_queue.neighbours`` of the shared host: the CPU of the processes outside the job there."""
        host = self.shared_host
        return neighbours(self.run.frame("system"), self.run.frame("step"), host.host if host is not None else None)

    @cached_property
    def links(self) -> pd.DataFrame:
        """``links.link_table``."""
        return link_table(self.run.frame("rpc"), self.run.probe_histograms)

    @cached_property
    def link_latency(self) -> pd.DataFrame:
        """``links.link_latency_table``: the probe's links, else traced transfers."""
        return link_latency_table(self.links, self.run.frame("transfer"))

    @cached_property
    def round_trips(self) -> pd.DataFrame:
        """``links.round_trips`` of the source ``link_latency`` reads (the probe's, else transfers)."""
        links = self.link_latency
        source = str(links["source"].iloc[0]) if not links.empty else "rpc"
        return round_trips(self.run.frame("rpc"), self.run.frame("transfer"), source)

    @cached_property
    def shards(self) -> pd.DataFrame:
        """``shards.shard_table``, else the step records' examples."""
        shards = shard_table(self.run.frame("shard"))
        if shards.empty and not self.workers.empty and self.workers["examples"].sum() > 0:
            shards = shards_from_steps(self.workers)
        return shards

    @cached_property
    def gpus(self) -> pd.DataFrame:
        """``devices.gpu_table``."""
        return gpu_table(self.run.frame("gpu"))

    @cached_property
    def hosts(self) -> pd.DataFrame:
        """``devices.host_table``."""
        return host_table(self.run.frame("system"))

    @cached_property
    def faults(self) -> pd.DataFrame:
        """``faults.fault_table`` of the fault records and the restarts the tasks' own records show."""
        return fault_table(_faults_with_restarts(self.run))

    @cached_property
    def ps_load(self) -> pd.DataFrame:
        """``placement.ps_load_table`` (a live window's previous one while both kinds are unchanged)."""
        reused = self._reused("ps_load")
        return reused if reused is not None else ps_load_table(self.run.frame("placement"), self.run.frame("transfer"))

    @cached_property
    def shared_host(self) -> SharedHost | None:
        """``devices.shared_worker_host``."""
        cluster = (self.run.manifest or {}).get("cluster") or {}
        return shared_worker_host(cluster, self.reference_task, self.run.frame("system"), self.run.frame("gpu"),
                                  self.steps)

    @cached_property
    def heartbeats(self) -> pd.DataFrame:
        """``heartbeat_table``: liveness rows on the reference clock."""
        return heartbeat_table(self.run.frame("heartbeat"), self.offsets)

    @cached_property
    def job_end(self) -> JobEnd | None:
        """``last_words.job_end``: the root and the victims of the tasks that ended on an error."""
        exits = _on_reference_clock(self.run.frame("exit"), ["time_ns"], self.offsets, "task")
        return job_end(exits, self.heartbeats, self.process_ends)

    @cached_property
    def process_ends(self) -> dict[str, ProcessEnd]:
        """``processes.ended_processes``: the tasks without last words or a clean close whose
        process on this host the process table taken before the read found gone or stopped
        (none where the run was not read with one)."""
        if self.run.processes is None:
            return {}
        exits = self.run.frame("exit")
        return ended_processes(self.run.frame("system"), set(exits["task"]) if not exits.empty else set(),
                               self.closed_tasks, self.run.processes)

    @cached_property
    def closed_tasks(self) -> set[str]:
        """The tasks whose last heartbeat is their clean-close marker."""
        beats = self.run.frame("heartbeat")
        if beats.empty:
            return set()
        last = beats.sort_values("time_ns").groupby(beats["task"].astype(str), observed=True).tail(1)
        return set(last["task"][last["closed"].fillna(False).astype(bool)].astype(str))

    @cached_property
    def closures(self) -> pd.DataFrame:
        """The closure records, ``dispatch_ns`` and ``result_ns`` on the reference clock."""
        return _on_reference_clock(self.run.frame("closure"), ["dispatch_ns", "result_ns"], self.offsets, "source")

    @cached_property
    def gaps(self) -> pd.DataFrame:
        """``closure_gaps.closure_gaps`` of the steps and closures (ParameterServerStrategy's time between closures)."""
        return closure_gaps(self.steps, self.closures)

    @cached_property
    def pace(self) -> JobPace | None:
        """``closure_gaps.job_pace``: the run's steps as the workers' paces and the coordinator's loop."""
        return job_pace(self)

    @cached_property
    def own_times(self) -> pd.DataFrame:
        """``sync_steps.own_times`` of the step records: each synchronous worker's own compute and input."""
        return own_times(self.run.frame("step"))

    @cached_property
    def stopped(self) -> pd.DataFrame:
        """``sync_steps.stopped_shares``: per task, the share of its stepping its process could not
        run, or the share its peers' probes found it stopped where larger (``sync_steps.with_probed_shares``)."""
        return with_probed_shares(stopped_shares(self.run.frame("system"), self.run.frame("step")), self.held)

    @cached_property
    def session_waits(self) -> dict[str, float]:
        """TF1 task -> seconds from ``DiagnosticsHook.begin()`` to its session being ready."""
        return session_waits(self.run.frame("session"))

    @property
    def ps_tasks(self) -> list[str]:
        cluster = (self.run.manifest or {}).get("cluster") or {}
        return cluster_tasks(cluster, jobs=("ps",))

    @cached_property
    def stepping(self) -> tuple[int, int] | None:
        """The run's stepping, from its first step record's start to its last one's end (each
        on its task's clock), or None without step records."""
        steps = self.run.frame("step")
        return None if steps.empty else (int(steps["begin_ns"].min()), int(steps["end_ns"].max()))

    def part_start_ns(self, share: float) -> int | None:
        """Where the run's last ``share`` of its ``stepping`` begins."""
        return None if self.stepping is None else int(self.stepping[1] - share * (self.stepping[1] - self.stepping[0]))

    def last_part(self, share: float) -> Measurements | None:
        """The measurements of the run's last ``share`` of its ``stepping``
        (``window_load.window_of``), or None without step records, where they are a sample
        (a long run's rows do not hold every step of a part of it) or where the run is a
        live window already (no ``step_counters``: its records are the recent ones)."""
        if share not in self._parts:
            counters = self.run.step_counters
            if self.stepping is None or counters is None or bool(counters["sampled"].any()):
                self._parts[share] = None
            else:
                first, last = self.stepping
                self._parts[share] = Measurements(window_of(self.run, last, share * (last - first) / 1e9))
        return self._parts[share]


def measure(run: LoadedRun, previous: Measurements | None = None) -> Measurements:
    """The measurements of a loaded run: clocks aligned and every table, each computed when
    first read (``previous``: the run's previous live window's, whose unchanged tables are kept).

    Example:
        >>> measured = measure(load_run("logs/run1"))  # doctest: +SKIP
        >>> measured.workers[["task", "p50_ns"]]  # doctest: +SKIP
    """
    return Measurements(run, previous)


def _faults_with_restarts(run: LoadedRun) -> pd.DataFrame:
    """The run's fault records plus the restarts its session, system and heartbeat records show."""
    faults = run.frame("fault")
    restarts = restart_faults(run.frame("session"), run.frame("heartbeat"), run.frame("step"), run.frame("system"))
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
    shift = value_of_group(frame[clock], offsets)  # as align.to_reference_clock moves them, once for every column
    return frame.assign(**{name: frame[name] - shift for name in columns})


def _reference_task(run: LoadedRun) -> str | None:
    """The clock everything is aligned to: the manifest's writer, else the chief, else the first task."""
    if run.manifest and run.manifest.get("task"):
        return run.manifest["task"]
    for candidate in ("chief:0", "coordinator:0", "worker:0"):
        if candidate in run.sources:
            return candidate
    return run.sources[0] if run.sources else None
