"""One detector per module: a pure function from ``Measurements`` to a list of findings.

Each detector module declares the finding kind it reports (``KIND = "straggler"``) and a
``detect(measured)`` function. The metric a detector computes is kept apart from its
decision, and every threshold is a named constant in the detector's module;
``docs/findings.md`` documents each one.

The registry below is the one list of detectors; ``FINDING_KINDS``, the stable ``kind``
values of the JSON report, is derived from it, so a new detector is a new module plus
one line here (``docs/architecture.md``, "Where a new thing goes").

>>> FINDING_KINDS[:2]
('input_bound', 'straggler')
"""

from __future__ import annotations

from typing import Callable

from tfdiag.analysis.detectors import (
    communication_bound,
    compute_bound,
    coordinator_bound,
    gpu_underutilized,
    host_contention,
    input_bound,
    ps_hotspot,
    shard_imbalance,
    slow_link,
    stalled,
    straggler,
    task_failure,
)
from tfdiag.analysis.findings import Finding
from tfdiag.analysis.measurements import Measurements

Detector = Callable[[Measurements], list[Finding]]

# Finding kind -> its detector, in the order the kinds are documented.
DETECTORS: dict[str, Detector] = {
    module.KIND: module.detect
    for module in (
        input_bound,
        straggler,
        host_contention,
        shard_imbalance,
        ps_hotspot,
        slow_link,
        communication_bound,
        gpu_underutilized,
        compute_bound,
        coordinator_bound,
        task_failure,
        stalled,
    )
}

FINDING_KINDS: tuple[str, ...] = tuple(DETECTORS)


def detect_all(measured: Measurements, detectors: dict[str, Detector] = DETECTORS) -> list[Finding]:
    """Every detector's findings, in registry order.

    Raises:
        ValueError: a detector reported a kind other than the one its module declares
            (a programming error: the JSON contract would gain an undocumented kind).
    """
    findings = []
    for kind, detect in detectors.items():
        for finding in detect(measured):
            if finding.kind != kind:
                raise ValueError(f"the {kind!r} detector reported a finding of kind {finding.kind!r}")
            findings.append(finding)
    return findings


__all__ = ["DETECTORS", "FINDING_KINDS", "Detector", "detect_all"]
