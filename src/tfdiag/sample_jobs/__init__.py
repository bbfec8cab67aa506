"""Bundled sample jobs, a local-cluster launcher, and bottleneck/fault injection.

``run_sample`` runs a job and returns a ``SampleResult``; ``add_arguments`` and ``run``
wire the ``tfdiag sample`` subcommand. Nothing here imports TensorFlow until a task
starts.
"""

from tfdiag.sample_jobs.cli import SampleResult, add_arguments, run, run_sample

__all__ = ["SampleResult", "add_arguments", "run", "run_sample"]
