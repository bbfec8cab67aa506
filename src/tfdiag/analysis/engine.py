"""The analysis pipeline: load → measure (align, breakdown) → detectors → advisor → Report."""

from __future__ import annotations

import os

from tfdiag.analysis import sections
from tfdiag.analysis.advisor import advise
from tfdiag.analysis.detectors import detect_all
from tfdiag.analysis.fold_cache import FoldCache
from tfdiag.analysis.load import LoadedRun, ProgressCallback, load_run
from tfdiag.analysis.measurements import measure
from tfdiag.analysis.result import Report
from tfdiag.analysis.timelines import build_timelines


def analyze(run: str | os.PathLike | LoadedRun, progress: ProgressCallback | None = None,
            cache: FoldCache | None = None) -> Report:
    """Analyses a run directory (or an already loaded run) and returns its Report; a
    directory is read through ``cache`` (``fold_cache``; None: every file is read).

    Example:
        >>> report = analyze("logs/run1")  # doctest: +SKIP
        >>> report.summary["primary_bottleneck"]  # doctest: +SKIP
        'straggler'
    """
    loaded = run if isinstance(run, LoadedRun) else load_run(run, progress, cache)
    measured = measure(loaded)
    findings = advise(detect_all(measured), measured)
    return Report(
        run=sections.run_section(measured),
        summary=sections.summary_section(measured, findings),
        workers=sections.workers_section(measured),
        rpc=sections.rpc_section(measured),
        shards=sections.shards_section(measured),
        gpus=sections.gpus_section(measured),
        faults=sections.faults_section(measured),
        findings=findings,
        ps=sections.ps_section(measured),
        hosts=sections.hosts_section(measured),
        steps=measured.steps,
        timelines=build_timelines(measured),
    )
