"""Analysis of a run's logs. Never imports TensorFlow.

The public names are imported on first use (PEP 562), so that a pandas-free module of the
package (``live_screen``, ``live_monitor``: the live findings' cheap path in a training
process) does not import pandas and the whole analysis with it.

>>> from tfdiag.analysis import analyze
>>> report = analyze("logs/run1")  # doctest: +SKIP
"""

from __future__ import annotations

import importlib

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


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'tfdiag.analysis' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
