"""The Report: everything one analysis concluded, serialisable to the JSON contract."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tfdiag.analysis.findings import Finding
from tfdiag.events import SCHEMA_VERSION


@dataclass
class Report:
    """One analysed run. Renderers (``tfdiag.report``) and the TensorBoard plugin read it.

    The list fields are already in their JSON form (``docs/architecture.md``, "Public
    surface": the contract's keys, extended by ``ps``, load per parameter server, and
    ``hosts``, CPU/memory/network per sampler);
    ``findings`` are ranked, largest predicted speed-up first. ``steps`` (the aligned
    ``breakdown.step_table``) and ``timelines`` (``timelines.build_timelines``: probes,
    samples, closures) feed figures and traces and are not part of the JSON.
    """

    run: dict[str, Any]
    summary: dict[str, Any]
    workers: list[dict[str, Any]]
    rpc: list[dict[str, Any]]
    shards: list[dict[str, Any]]
    gpus: list[dict[str, Any]]
    faults: list[dict[str, Any]]
    findings: list[Finding]
    ps: list[dict[str, Any]] = field(default_factory=list)
    hosts: list[dict[str, Any]] = field(default_factory=list)
    steps: pd.DataFrame = field(repr=False, default_factory=pd.DataFrame)
    timelines: dict[str, pd.DataFrame] = field(repr=False, default_factory=dict)

    @property
    def primary(self) -> Finding | None:
        return self.findings[0] if self.findings else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "run": self.run,
            "summary": self.summary,
            "workers": self.workers,
            "rpc": self.rpc,
            "shards": self.shards,
            "gpus": self.gpus,
            "faults": self.faults,
            "ps": self.ps,
            "hosts": self.hosts,
            "findings": [finding.to_dict() for finding in self.findings],
        }
