"""Instrumentation that runs inside training and writes tfdiag records.

Importing this package is cheap: the collectors that need Keras or TensorFlow are
imported on first use of their name.

Example:
    >>> from tfdiag.collectors import DiagnosticsCallback, DiagnosticsHook, instrument_coordinator  # doctest: +SKIP
    >>> model.fit(ds, callbacks=[DiagnosticsCallback("logs/run1")])  # doctest: +SKIP
    >>> coordinator = instrument_coordinator(coordinator, "logs/run1", variables=model)  # doctest: +SKIP
    >>> hooks = [DiagnosticsHook("logs/run1")]  # TF1 MonitoredTrainingSession  # doctest: +SKIP
"""

from __future__ import annotations

import importlib

_LAZY = {
    "DiagnosticsCallback": "tfdiag.collectors.callback",
    "DiagnosticsHook": "tfdiag.collectors.hook",
    "record_placement": "tfdiag.collectors.placement",
    "count_examples": "tfdiag.collectors.shards",
    "SystemSampler": "tfdiag.collectors.system",
    "instrument_coordinator": "tfdiag.collectors.coordinator",
    "InstrumentedCoordinator": "tfdiag.collectors.coordinator",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
