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

from tfdiag.lazy_exports import lazy_exports

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


__getattr__, __dir__ = lazy_exports(_LAZY, globals())
