"""The measured run: loaded records, clocks aligned, steps and workers summarised once."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from tfdiag.analysis.align import clock_offsets
from tfdiag.analysis.breakdown import step_table, worker_table
from tfdiag.analysis.load import LoadedRun
from tfdiag.analysis.whatif import is_synchronous


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


def measure(run: LoadedRun) -> Measurements:
    """Aligns clocks and computes the step and worker tables of a loaded run."""
    strategy = (run.manifest or {}).get("strategy")
    reference = _reference_task(run)
    offsets = clock_offsets(run.frame("rpc"), reference)
    steps = step_table(run.frame("step"), offsets)
    return Measurements(run, strategy, is_synchronous(strategy), reference, offsets, steps, worker_table(steps))


def _reference_task(run: LoadedRun) -> str | None:
    """The clock everything is aligned to: the manifest's writer, else the chief, else the first task."""
    if run.manifest and run.manifest.get("task"):
        return run.manifest["task"]
    for candidate in ("chief:0", "coordinator:0", "worker:0"):
        if candidate in run.sources:
            return candidate
    return run.sources[0] if run.sources else None
