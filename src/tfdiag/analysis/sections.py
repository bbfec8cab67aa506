"""The JSON sections of a Report, built from the measured tables (times in ms and s)."""

from __future__ import annotations

from tfdiag.analysis.breakdown import run_throughput
from tfdiag.analysis.components import COMPONENTS, step_components
from tfdiag.analysis.findings import Finding
from tfdiag.analysis.json_values import rounded
from tfdiag.analysis.measurements import Measurements
from tfdiag.events import cluster_tasks


def run_section(measured: Measurements) -> dict:
    run = measured.run
    manifest = run.manifest or {}
    cluster = manifest.get("cluster") or {}
    tasks = sorted(set(run.sources) | set(measured.workers["task"]) | set(cluster_tasks(cluster, jobs=tuple(cluster))))
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


def summary_section(measured: Measurements, findings: list[Finding]) -> dict:
    step_ms, examples_per_s = run_throughput(measured.steps, measured.run.step_counters, measured.offsets)
    return {
        "primary_bottleneck": findings[0].kind if findings else None,
        "step_time_ms": rounded(step_ms),
        "examples_per_s": rounded(examples_per_s, 2),
        "steps": int(measured.workers["steps"].sum()) if not measured.workers.empty else 0,
        "findings": len(findings),
        # The title of the stall when the run is hung now (``stalled`` finding, critical); else None.
        "stalled": next((f.title for f in findings if f.kind == "stalled" and f.severity.value == "critical"), None),
    }


def workers_section(measured: Measurements) -> list[dict]:
    components = step_components(measured)
    values = components[[f"{name}_ns" for name in COMPONENTS]].to_numpy(dtype="float64")
    breakdown = {task: {name: rounded(value / 1e6) for name, value in zip(COMPONENTS, row)}
                 for task, row in zip(components["task"], values)}  # one lookup a worker, not one a component
    chief = (measured.run.manifest or {}).get("task")  # the manifest's writer
    return [
        {
            "task": row.task,
            "steps": int(row.steps),
            "step_time_ms": {"p50": rounded(row.p50_ns / 1e6), "p95": rounded(row.p95_ns / 1e6),
                             "mean": rounded(row.mean_ns / 1e6)},
            "input_wait_frac": rounded(row.input_wait_frac, 4),
            "examples": int(row.examples),
            "breakdown_ms": breakdown[row.task],
            # TF1, a non-chief: from the hook's begin() to its session being ready, the wait for the chief.
            "chief_wait_s": None if row.task == chief else rounded((measured.session_waits or {}).get(row.task)),
        }
        for row in measured.workers.itertuples()
    ]


def rpc_section(measured: Measurements) -> list[dict]:
    return [
        {
            "src": row.src,
            "dst": row.dst,
            "samples": int(row.samples),
            "rtt_ms": {"p50": rounded(row.rtt_p50_ns / 1e6), "p95": rounded(row.rtt_p95_ns / 1e6),
                       "p99": rounded(row.rtt_p99_ns / 1e6)},
            "clock_offset_ms": rounded(row.offset_ns / 1e6),
            "clock_offset_uncertainty_ms": rounded(row.offset_uncertainty_ns / 1e6),
            "bandwidth_mb_s": rounded(row.bandwidth_bps / 1e6, 1),
        }
        for row in measured.links.itertuples()
    ]


def shards_section(measured: Measurements) -> list[dict]:
    return [
        {"task": row.task, "examples": int(row.examples), "files": row.files, "policy": row.policy,
         "source": row.source}
        for row in measured.shards.itertuples()
    ]


def gpus_section(measured: Measurements) -> list[dict]:
    return [
        {
            "host": row.host,
            "index": int(row.index),
            "samples": int(row.samples),
            "util_pct": {"mean": rounded(row.util_mean, 1), "p50": rounded(row.util_p50, 1)},
            "mem_used_frac": rounded(row.mem_used_frac),
            "mem_used_frac_peak": rounded(row.mem_used_frac_peak),
            "power_w": rounded(row.power_w_mean, 1),
        }
        for row in measured.gpus.itertuples()
    ]


def faults_section(measured: Measurements) -> list[dict]:
    start_ns = (measured.run.manifest or {}).get("start_time_ns")
    return [
        {
            "task": row.task,
            "kind": row.kind,
            "time": rounded((row.time_ns - start_ns) / 1e9) if start_ns else None,
            "time_ns": int(row.time_ns),
            "message": row.message,
            "recovered_after_s": rounded(row.recovered_after_s),
        }
        for row in measured.faults.itertuples()
    ]


def ps_section(measured: Measurements) -> list[dict]:
    return [
        {"task": row.task, "variables": int(row.variables), "bytes": int(row.bytes),
         "bytes_share": rounded(row.bytes_share), "largest": row.largest, "largest_bytes": int(row.largest_bytes),
         "transfer_bytes": int(row.transfer_bytes)}
        for row in measured.ps_load.itertuples()
    ]


def hosts_section(measured: Measurements) -> list[dict]:
    return [
        {"host": row.host, "task": row.task, "cpu_pct": {"mean": rounded(row.cpu_mean, 1), "peak": rounded(row.cpu_peak, 1)},
         "mem_used_frac_peak": rounded(row.mem_used_frac_peak), "net_mb_s": rounded(row.net_bytes_per_s / 1e6, 2),
         "disk_mb_s": rounded(row.disk_bytes_per_s / 1e6, 2)}
        for row in measured.hosts.itertuples()
    ]
