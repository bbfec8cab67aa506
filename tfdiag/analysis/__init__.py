"""Analysis of a run's logs. Never imports TensorFlow.

>>> from tfdiag.analysis import analyze
>>> report = analyze("logs/run1")  # doctest: +SKIP
"""

from tfdiag.analysis.detectors import FINDING_KINDS
from tfdiag.analysis.engine import analyze
from tfdiag.analysis.findings import Finding, Recommendation, Severity
from tfdiag.analysis.load import LoadedRun, RunLoader, load_run
from tfdiag.analysis.result import Report

__all__ = [
    "FINDING_KINDS",
    "Finding",
    "LoadedRun",
    "Recommendation",
    "Report",
    "RunLoader",
    "Severity",
    "analyze",
    "load_run",
]
