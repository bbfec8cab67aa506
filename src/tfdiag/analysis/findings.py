"""Findings: what a detector concluded, with its evidence and the recommended change.

The JSON form of a finding is part of the report contract (``docs/architecture.md``,
"Public surface"; ``docs/findings.md`` documents every kind).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping

class Severity(str, Enum):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return ("info", "warning", "critical").index(self.value)


@dataclass(frozen=True)
class Recommendation:
    """What to change: a sentence, the concrete code or configuration change, and its gain.

    ``predicted_speedup`` is the predicted throughput ratio after the change (1.35 means
    35 % more examples per second), or None where the cost model cannot say.
    """

    action: str
    change: str
    predicted_speedup: float | None

    def to_dict(self) -> dict[str, Any]:
        speedup = None if self.predicted_speedup is None else round(self.predicted_speedup, 3)
        return {"action": self.action, "change": self.change, "predicted_speedup": speedup}


@dataclass(frozen=True)
class Finding:
    """One diagnosed problem. Serialises to the ``findings[]`` entries of the JSON report.

    ``kind`` is one of ``tfdiag.analysis.detectors.FINDING_KINDS``: each detector module
    declares the kind it reports, and ``detectors.detect_all`` rejects any other.
    """

    kind: str
    severity: Severity
    title: str
    summary: str
    tasks: tuple[str, ...]
    evidence: Mapping[str, Any]
    recommendation: Recommendation
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def predicted_speedup(self) -> float:
        """The predicted speed-up, 1.0 when unknown: the key findings are ranked by."""
        return self.recommendation.predicted_speedup or 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity.value,
            "title": self.title,
            "summary": self.summary,
            "tasks": list(self.tasks),
            "evidence": dict(self.evidence),
            "recommendation": self.recommendation.to_dict(),
        }
