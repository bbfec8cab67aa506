"""One detector per module: a pure function from ``Measurements`` to a list of findings.

The metric each detector computes is kept apart from its decision, and every threshold is
a named constant in the detector's module; ``docs/findings.md`` documents each one.
"""

from tfdiag.analysis.detectors import (
    communication_bound,
    compute_bound,
    coordinator_bound,
    gpu_underutilized,
    input_bound,
    ps_hotspot,
    shard_imbalance,
    slow_link,
    straggler,
    task_failure,
)

DETECTORS = (
    input_bound.detect,
    straggler.detect,
    shard_imbalance.detect,
    ps_hotspot.detect,
    slow_link.detect,
    communication_bound.detect,
    gpu_underutilized.detect,
    compute_bound.detect,
    coordinator_bound.detect,
    task_failure.detect,
)

__all__ = ["DETECTORS"]
