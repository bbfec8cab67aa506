"""Analysis of a run's logs. Never imports TensorFlow.

The public names are imported on first use (PEP 562), so that a pandas-free module of the
package (``live_screen``, ``live_monitor``: the live findings' cheap path in a training
process) does not import pandas and the whole analysis with it.

>>> from tfdiag.analysis import analyze
>>> report = analyze("logs/run1")  # doctest: +SKIP
"""

from __future__ import annotations

from tfdiag.lazy_exports import lazy_exports

# Public name -> the module that holds it.
_LAZY = {
    "FINDING_KINDS": "tfdiag.analysis.detectors",
    "analyze": "tfdiag.analysis.engine",
    "Finding": "tfdiag.analysis.findings",
    "Recommendation": "tfdiag.analysis.findings",
    "Severity": "tfdiag.analysis.findings",
    "LoadedRun": "tfdiag.analysis.load",
    "RunLoader": "tfdiag.analysis.load",
    "load_run": "tfdiag.analysis.load",
    "Report": "tfdiag.analysis.result",
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(_LAZY, globals())
