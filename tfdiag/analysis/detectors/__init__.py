"""One detector per module: a pure function from ``Measurements`` to a list of findings."""

from tfdiag.analysis.detectors import input_bound, straggler

DETECTORS = (input_bound.detect, straggler.detect)

__all__ = ["DETECTORS"]
