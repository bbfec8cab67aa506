"""The advisor: holds each prediction to what the workers' host allows, then ranks findings.

The detectors predict from step times alone, as if every worker had a machine of its
own. When all workers share one CPU-only host, the CPU the job can get there bounds
every change that keeps the work per example (repairing a straggler, restoring a
worker, prefetching, partitioning, a faster link): throughput can grow by at most what
the job could get over what it uses. A prediction above that bound is lowered to it,
with ``host_cpu_limit`` in the finding's evidence.

What the job uses is its own CPU on the host (``SharedHost.job_cpu_pct``: its processes,
from the system samples, ``devices.job_cpu_on_host``); what it could get adds the idle
CPU and half of what other programs use (the scheduler shares a busy core among whoever
is runnable; the half is an assumption). The host's CPU read whole counts those other
programs too: on a host they keep busy it held predictions to 1.00-1.08x where the
fixes measured 1.07-3.1x (the scenario matrix, docs/benchmarks.md), so it is used
(``100 / cpu_pct``) only for logs written before the job's CPU was sampled.
A host read whole (a log without the job's CPU) says nothing of the job when its
workers spend most of their step period *between* steps (waiting on a link, the
coordinator, or stopped by a CPU quota): the workers' steps are not what fills it — its
neighbours are, and the scheduler shares the cores among runnable threads, so a job that
waits less takes a larger share. That reading then bounds nothing (the tutorial PS job
behind a 25 ms link, on a host at 92 % CPU from other jobs, was held to 1.09x and
measured 2.68x once the delay was removed). Under ParameterServerStrategy that idle
share leaves out pauses (``closure_gaps``: ``model.fit``'s epoch ends, where the
coordinator works and the workers wait for it). The job's own CPU bounds whatever the
workers do between steps: the neighbours are in the others' share, and a job freed of a
wait needs CPU for every example it adds (the tutorial loop behind a 25 ms proxy used
18 % of the host and ran 5.66x the examples without the delay, the clean job using 88 %:
8.75x predicted unbounded, 5.60x held).

A change that takes work off every example is not bounded: ``CHANGES_LESS_WORK``.
docs/findings.md, "The advisor", has the measurements.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tfdiag.analysis.devices import SharedHost
from tfdiag.analysis.findings import Finding, Severity
from tfdiag.analysis.measurements import Measurements


# Workers idle this share of their step period or more are waiting, not computing
# (coordinator_bound's warning threshold).
WAITING_IDLE_FRACTION = 0.4
# Finding kinds whose change takes work off every example, which the host's CPU does not
# bound: more steps per closure pays each closure's dispatch, calls and result (CPU on
# the coordinator, the worker and the ps) once per several steps. The tutorial-style loop
# with worker 1 under a CPU quota ran 2.30x the examples with ten steps per closure while
# the job used 75-77 % of the host either way (docs/findings.md, "The advisor").
CHANGES_LESS_WORK = frozenset({"coordinator_bound"})


def cpu_speedup_limit(host: SharedHost | None) -> float:
    """The largest throughput gain the shared host's CPU allows the job (inf when unbounded).

    Without the job's own CPU (a log from before it was sampled): the host's idle share,
    ``100 / cpu_pct``. With it (``job`` of the host's ``cpu`` %): ``(job + idle + others
    / 2) / job``, where ``idle = 100 - cpu`` and ``others = cpu - job``.

    >>> cpu_speedup_limit(SharedHost("vm", cpu_pct=80.0, samples=10))
    1.25
    >>> cpu_speedup_limit(SharedHost("vm", cpu_pct=100.0, samples=10, job_cpu_pct=40.0))
    1.75
    >>> cpu_speedup_limit(None)
    inf
    """
    if host is None:
        return float("inf")
    cpu = min(max(host.cpu_pct, 1.0), 100.0)
    if host.job_cpu_pct is None or not np.isfinite(host.job_cpu_pct):
        return 100.0 / cpu
    job = min(max(host.job_cpu_pct, 1.0), cpu)
    return (job + (100.0 - cpu) + (cpu - job) / 2) / job


def advise(findings: list[Finding], measured: Measurements) -> list[Finding]:
    """Findings with predictions held to the host's CPU, largest predicted speed-up first.

    A critical finding with no prediction (a stalled job: no speed-up to predict, the
    job is not progressing at all) comes before every prediction. Ties (two changes held
    to the same limit) go to the larger prediction before the limit, then to the more
    severe finding. Findings of ``CHANGES_LESS_WORK`` keep their prediction.
    """
    host = measured.shared_host
    if host is not None and _whole_host_only(host) and _workers_wait(measured):
        host = None
    limit = cpu_speedup_limit(host)

    def held(finding: Finding) -> float:
        return finding.predicted_speedup if finding.kind in CHANGES_LESS_WORK else min(finding.predicted_speedup, limit)

    ranked = sorted(findings, key=lambda f: (_blocks_progress(f), held(f), f.predicted_speedup, f.severity.rank),
                    reverse=True)
    return [finding if finding.kind in CHANGES_LESS_WORK else _held_to(finding, limit, host) for finding in ranked]


def _whole_host_only(host: SharedHost) -> bool:
    """Whether the host's reading lacks the job's own CPU (a log from before it was sampled)."""
    return host.job_cpu_pct is None or not np.isfinite(host.job_cpu_pct)


def _blocks_progress(finding: Finding) -> bool:
    return finding.severity is Severity.CRITICAL and finding.recommendation.predicted_speedup is None


def _workers_wait(measured: Measurements) -> bool:
    """Whether the workers spend most of their step period between steps (median idle share;
    under ParameterServerStrategy with closure records, pauses left out: ``closure_gaps``)."""
    workers = measured.workers
    if workers.empty:
        return False
    gaps = measured.gaps if not measured.synchronous else None
    if gaps is not None and not gaps.empty:
        idle = gaps["idle_ns"] / (gaps["run_ns"] + gaps["idle_ns"]).clip(lower=1.0)
    else:
        idle = (1 - workers["mean_ns"] / workers["period_ns"]).clip(lower=0)
    return float(np.median(idle)) >= WAITING_IDLE_FRACTION


def _held_to(finding: Finding, limit: float, host: SharedHost | None) -> Finding:
    predicted = finding.recommendation.predicted_speedup
    if host is None or predicted is None or predicted <= limit:
        return finding
    evidence = dict(finding.evidence, host_cpu_limit={
        "host": host.host, "cpu_pct": round(host.cpu_pct, 1),
        **({"job_cpu_pct": round(host.job_cpu_pct, 1)} if host.job_cpu_pct is not None else {}),
        "max_speedup": round(limit, 3),
        "unlimited_speedup": round(predicted, 3),
    })
    recommendation = dataclasses.replace(finding.recommendation, predicted_speedup=limit)
    return dataclasses.replace(finding, evidence=evidence, recommendation=recommendation)
