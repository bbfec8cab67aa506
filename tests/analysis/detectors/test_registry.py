"""The detector registry: every detector module registered, each reporting only its declared kind."""

import importlib
from pathlib import Path

import pytest

from tfdiag.analysis import detectors
from tfdiag.analysis.detectors import DETECTORS, FINDING_KINDS, detect_all, input_bound
from tfdiag.analysis.load import load_run
from tfdiag.analysis.measurements import measure


def test_every_detector_module_is_registered_under_its_kind():
    # A module left out of the registry would never run, and its kind would be missing from the contract.
    folder = Path(detectors.__file__).parent
    names = {path.stem for path in folder.glob("*.py")} - {"__init__", "evidence"}
    modules = [importlib.import_module(f"tfdiag.analysis.detectors.{name}") for name in sorted(names)]
    assert {module.KIND: module.detect for module in modules} == DETECTORS
    assert sorted(FINDING_KINDS) == sorted(module.KIND for module in modules)


def test_a_detector_reporting_another_kind_is_refused(builder):
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=30, input_ms=20)
    measured = measure(load_run(run.write()))
    assert [f.kind for f in detect_all(measured)] == ["input_bound"]
    with pytest.raises(ValueError, match="the 'straggler' detector reported a finding of kind 'input_bound'"):
        detect_all(measured, {"straggler": input_bound.detect})
