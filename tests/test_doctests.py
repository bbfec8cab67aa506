"""The examples in the analysis and store docstrings run as written."""

import doctest
import importlib

import pytest

MODULES = [
    "tfdiag.analysis.align",
    "tfdiag.analysis.whatif",
    "tfdiag.analysis.advisor",
    "tfdiag.analysis.detectors",
    "tfdiag.analysis.detectors.evidence",
    "tfdiag.analysis.detectors.straggler",
    "tfdiag.analysis.devices",
    "tfdiag.analysis.json_values",
    "tfdiag.analysis.links",
    "tfdiag.analysis.liveness",
    "tfdiag.analysis.processes",
    "tfdiag.analysis.ps_traffic",
    "tfdiag.analysis.rates",
    "tfdiag.analysis.sync_steps",
    "tfdiag.events",
    "tfdiag.collectors.allreduce_probe",
    "tfdiag.collectors.arguments",
    "tfdiag.collectors.job_processes",
    "tfdiag.collectors.last_words",
    "tfdiag.collectors.liveness",
    "tfdiag.collectors.onsets",
    "tfdiag.collectors.stopped_processes",
    "tfdiag.collectors.tf_internals",
    "tfdiag.report.charts",
    "tfdiag.report.json_format",
    "tfdiag.report.markdown",
    "tfdiag.report.safe_text",
    "benchmarks.trial_space",
    "benchmarks.trial_judge",
    "benchmarks.trials",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0
