"""The --tune options that apply each recommendation to a sample job."""

from __future__ import annotations

import doctest
import importlib

import pytest

from tfdiag.analysis.detectors import FINDING_KINDS
from tfdiag.sample_jobs.advice import TUNE_FOR_FINDING, tune_options, tune_options_for
from tfdiag.sample_jobs.jobs import JOBS, JobConfig


@pytest.mark.parametrize("kind, job, expected", [
    ("input_bound", "ps_ctl", ("prefetch=on", "map_parallel=on")),
    ("ps_hotspot", "ps_ctl", ("partitioner=3",)),
    ("shard_imbalance", "mwms_fit", ("autoshard=data",)),
    ("shard_imbalance", "ps_ctl", ()),  # ps_ctl has no auto-shard policy to set
    ("compute_bound", "mirrored", ("mixed_precision=on",)),
    ("gpu_underutilized", "mirrored", ("batch=2048",)),
    ("straggler", "ps_ctl", ()),  # repair the host: no tuning
    ("task_failure", "ps_ctl", ()),
    (None, "ps_ctl", ()),
])
def test_tune_options(kind, job, expected):
    assert tune_options(kind, JobConfig(job, "/tmp/run", ps=3)) == expected


def test_coordinator_bound_takes_its_parameter_from_the_evidence():
    config = JobConfig("ps_ctl", "/tmp/run")
    assert tune_options_for({"kind": "coordinator_bound", "evidence": {"steps_per_closure": 10}}, config) == (
        "steps_per_closure=10",
    )
    assert tune_options_for({"kind": "coordinator_bound", "evidence": {}}, config) == ()


def test_communication_bound_depends_on_what_the_evidence_measured():
    ps_fit, mwms = JobConfig("ps_fit", "/tmp/run"), JobConfig("mwms_fit", "/tmp/run", batch=256)
    assert tune_options_for({"kind": "communication_bound", "evidence": {"variable_mb": 4.0}}, ps_fit) == ("strategy=mwms",)
    assert tune_options_for({"kind": "communication_bound", "evidence": {"allreduce_ms_p50": 3.0}}, mwms) == ("batch=512",)


def test_every_option_is_one_the_job_accepts():
    for kind in FINDING_KINDS:
        for job in JOBS:
            config = JobConfig(job, "/tmp/run")
            for evidence in ({}, {"allreduce_ms_p50": 1.0}):
                options = tune_options(kind, config, evidence)
                assert JobConfig(job, "/tmp/run", tune=options).plan.specs["tune"] == list(options)
    assert set(TUNE_FOR_FINDING) <= set(FINDING_KINDS)


@pytest.mark.parametrize("module", ["tfdiag.sample_jobs.advice", "tfdiag.sample_jobs.inject"])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
