"""The analysis pipeline: load → align → breakdown → detectors → advisor → Report."""

from __future__ import annotations

import os

import pandas as pd

from tfdiag.analysis.detectors import DETECTORS
from tfdiag.analysis.findings import Finding
from tfdiag.analysis.load import LoadedRun, ProgressCallback, load_run
from tfdiag.analysis.measurements import Measurements, measure
from tfdiag.analysis.breakdown import run_throughput
from tfdiag.analysis.result import Report


def analyze(run: str | os.PathLike | LoadedRun, progress: ProgressCallback | None = None) -> Report:
    """Analyses a run directory (or an already loaded run) and returns its Report.

    Example:
        >>> report = analyze("logs/run1")  # doctest: +SKIP
        >>> report.summary["primary_bottleneck"]  # doctest: +SKIP
        'straggler'
    """
    loaded = run if isinstance(run, LoadedRun) else load_run(run, progress)
    measured = measure(loaded)
    findings = rank_findings([finding for detect in DETECTORS for finding in detect(measured)])
    return Report(
        run=_run_section(measured),
        summary=_summary_section(measured, findings),
        workers=_workers_section(measured.workers),
        rpc=[],
        shards=[],
        gpus=[],
        faults=[],
        findings=findings,
        steps=measured.steps,
    )


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Largest predicted speed-up first; severity breaks ties."""
    return sorted(findings, key=lambda f: (f.predicted_speedup, f.severity.rank), reverse=True)


def _run_section(measured: Measurements) -> dict:
    run = measured.run
    manifest = run.manifest or {}
    tasks = sorted(set(run.sources) | set(measured.workers["task"]) | set(_cluster_tasks(manifest)))
    warnings = list(run.warnings)
    if not manifest:
        warnings.append(f"{run.path}: no manifest.json (the chief never started, or it is still starting)")
    return {
        "path": str(run.path),
        "strategy": manifest.get("strategy"),
        "tasks": tasks,
        "start_time_ns": manifest.get("start_time_ns"),
        "tensorflow_version": manifest.get("tensorflow_version"),
        "tfdiag_version": manifest.get("tfdiag_version"),
        "skipped_records": run.skipped_records,
        "warnings": warnings,
    }


def _cluster_tasks(manifest: dict) -> list[str]:
    cluster = manifest.get("cluster") or {}
    return [f"{job}:{index}" for job, addresses in cluster.items() for index in range(len(addresses))]


def _summary_section(measured: Measurements, findings: list[Finding]) -> dict:
    step_ms, examples_per_s = run_throughput(measured.steps)
    return {
        "primary_bottleneck": findings[0].kind if findings else None,
        "step_time_ms": None if step_ms is None else round(step_ms, 3),
        "examples_per_s": None if examples_per_s is None else round(examples_per_s, 2),
        "steps": int(len(measured.steps)),
        "findings": len(findings),
    }


def _workers_section(workers: pd.DataFrame) -> list[dict]:
    return [
        {
            "task": row.task,
            "steps": int(row.steps),
            "step_time_ms": {
                "p50": round(float(row.p50_ns) / 1e6, 3),
                "p95": round(float(row.p95_ns) / 1e6, 3),
                "mean": round(float(row.mean_ns) / 1e6, 3),
            },
            "input_wait_frac": round(float(row.input_wait_frac), 4),
            "examples": int(row.examples),
        }
        for row in workers.itertuples()
    ]
