"""The ``--tune`` options that apply an analysis recommendation to a sample job.

The analysis speaks TensorFlow (``Recommendation.change`` is code a user writes); this
table translates a finding into the sample jobs' own flags, for ``benchmarks/matrix.py --preset scenarios``
and anyone who wants to try the advice on a bundled job. A finding whose fix is to repair
a host or a link (``straggler``, ``slow_link``, ``task_failure``) has no ``--tune``.

Example:
    >>> config = JobConfig("ps_ctl", "/tmp/run", ps=2)
    >>> tune_options("ps_hotspot", config)
    ('partitioner=2',)
    >>> tune_options("input_bound", config)
    ('prefetch=on', 'map_parallel=on')
"""

from __future__ import annotations

from collections.abc import Mapping

from tfdiag.sample_jobs.jobs import JobConfig, job_spec


def _double_batch(config: JobConfig, evidence: Mapping) -> tuple[str, ...]:
    return (f"batch={2 * config.batch_size}",)


def _communication(config: JobConfig, evidence: Mapping) -> tuple[str, ...]:
    # Two findings share the kind: all-reduce time (MultiWorkerMirroredStrategy: bigger
    # batches amortise it) and parameter-server traffic (switch to all-reduce).
    return _double_batch(config, evidence) if "allreduce_ms_p50" in evidence else ("strategy=mwms",)


def _steps_per_closure(config: JobConfig, evidence: Mapping) -> tuple[str, ...]:
    steps = evidence.get("steps_per_closure")
    return (f"steps_per_closure={steps}",) if isinstance(steps, int) else ()


# Finding kind -> the --tune options of its recommendation, given the job's config and
# the finding's evidence (the recommendation's parameters).
TUNE_FOR_FINDING = {
    "input_bound": lambda config, evidence: ("prefetch=on", "map_parallel=on"),
    # MinSizePartitioner(max_shards=number of ps), as the recommendation writes it.
    "ps_hotspot": lambda config, evidence: (f"partitioner={config.ps}",),
    "shard_imbalance": lambda config, evidence: ("autoshard=data",),
    "coordinator_bound": _steps_per_closure,
    "compute_bound": lambda config, evidence: ("mixed_precision=on",),
    "gpu_underutilized": _double_batch,
    "communication_bound": _communication,
}


def tune_options(kind: str | None, config: JobConfig, evidence: Mapping | None = None) -> tuple[str, ...]:
    """The ``--tune`` values that apply the recommendation of a ``kind`` finding to
    ``config``'s job; ``()`` when the fix is not a tuning or the job does not take it."""
    rule = TUNE_FOR_FINDING.get(kind)
    if rule is None:
        return ()
    options = rule(config, evidence or {})
    takes = job_spec(config.job).tunings
    return tuple(option for option in options if option.partition("=")[0] in takes)


def tune_options_for(finding: Mapping, config: JobConfig) -> tuple[str, ...]:
    """``tune_options`` of a finding as the JSON report has it (``findings[]`` entry)."""
    return tune_options(finding.get("kind"), config, finding.get("evidence") or {})
