"""Comparing two analysed runs: throughput and step-time change, findings resolved and new.

Findings are matched by ``kind``: a kind in the base run and not in the new one is
resolved, one only in the new run is new, one in both persists.

Example:
    >>> from tfdiag.analysis import analyze
    >>> comparison = compare_reports(analyze("logs/before"), analyze("logs/after"))  # doctest: +SKIP
    >>> comparison["findings"]["resolved"]  # doctest: +SKIP
    ['straggler']
"""

from __future__ import annotations

import textwrap
from typing import Any

from tfdiag.analysis.findings import Finding
from tfdiag.analysis.result import Report
from tfdiag.errors import InvalidOptionError
from tfdiag.report import formatting as fmt
from tfdiag.report.json_format import dumps
from tfdiag.report.safe_text import printable_lines

COMPARE_FORMATS = ("text", "json")


def _metric(base: Any, new: Any) -> dict[str, Any]:
    ratio, change_pct = fmt.change(base, new)
    return {
        "base": base,
        "new": new,
        "ratio": None if ratio is None else round(ratio, 4),
        "change_pct": None if change_pct is None else round(change_pct, 2),
    }


def _finding_entry(finding: Finding) -> dict[str, Any]:
    return {
        "kind": finding.kind,
        "severity": finding.severity.value,
        "title": finding.title,
        "tasks": list(finding.tasks),
        "predicted_speedup": finding.recommendation.to_dict()["predicted_speedup"],
    }


def compare_reports(base: Report, new: Report) -> dict[str, Any]:
    """The differences between two reports, as plain data (the ``compare --format json`` output).

    Keys: ``base`` and ``new`` (run paths), ``examples_per_s`` and ``step_time_ms`` (each
    ``base``, ``new``, ``ratio`` new/base, ``change_pct``), ``primary_bottleneck``
    (``base``, ``new``), and ``findings`` with ``resolved``, ``new`` and ``persisting``
    lists (``persisting`` entries hold ``base`` and ``new`` findings of the same kind).
    """
    base_by_kind = {finding.kind: finding for finding in base.findings}
    new_by_kind = {finding.kind: finding for finding in new.findings}
    return {
        "base": base.run.get("path"),
        "new": new.run.get("path"),
        "examples_per_s": _metric(base.summary.get("examples_per_s"), new.summary.get("examples_per_s")),
        "step_time_ms": _metric(base.summary.get("step_time_ms"), new.summary.get("step_time_ms")),
        "primary_bottleneck": {
            "base": base.summary.get("primary_bottleneck"),
            "new": new.summary.get("primary_bottleneck"),
        },
        "findings": {
            "resolved": [_finding_entry(f) for kind, f in base_by_kind.items() if kind not in new_by_kind],
            "new": [_finding_entry(f) for kind, f in new_by_kind.items() if kind not in base_by_kind],
            "persisting": [
                {"kind": kind, "base": _finding_entry(f), "new": _finding_entry(new_by_kind[kind])}
                for kind, f in base_by_kind.items()
                if kind in new_by_kind
            ],
        },
    }


def render_compare_json(comparison: dict[str, Any]) -> str:
    return dumps(comparison) + "\n"


def _metric_line(label: str, metric: dict[str, Any], unit: str, number) -> str:
    ratio = "-" if metric["ratio"] is None else f"x{metric['ratio']:.3f}"
    return (
        f"  {label:<12} {number(metric['base']):>12} -> {number(metric['new']):>12} {unit:<10} "
        f"{fmt.signed_percent(metric['change_pct']):>9}  ({ratio})"
    )


def render_compare_text(comparison: dict[str, Any]) -> str:
    """The comparison as a terminal summary (at most 100 columns)."""
    wrap = lambda text, indent="  ": textwrap.wrap(text, 100, initial_indent=indent, subsequent_indent=indent + "  ")  # noqa: E731
    lines = wrap(f"base: {comparison['base']}", "") + wrap(f"new:  {comparison['new']}", "") + [""]
    lines.append("Throughput and step time (new vs base)")
    lines.append(_metric_line("examples/s", comparison["examples_per_s"], "", fmt.rate))
    lines.append(_metric_line("step time", comparison["step_time_ms"], "ms", fmt.ms))
    primary = comparison["primary_bottleneck"]
    lines.append(f"  primary bottleneck: {primary['base'] or 'none'} -> {primary['new'] or 'none'}")
    findings = comparison["findings"]
    for title, key in (("Resolved findings", "resolved"), ("New findings", "new")):
        lines += ["", f"{title} ({len(findings[key])})"]
        for entry in findings[key]:
            lines += wrap(f"{entry['kind']} [{entry['severity']}]: {entry['title']}")
        if not findings[key]:
            lines.append("  none")
    lines += ["", f"Persisting findings ({len(findings['persisting'])})"]
    for entry in findings["persisting"]:
        before, after = entry["base"], entry["new"]
        lines += wrap(
            f"{entry['kind']}: {before['severity']} -> {after['severity']}, predicted speed-up "
            f"{fmt.speedup(before['predicted_speedup'])} -> {fmt.speedup(after['predicted_speedup'])}; {after['title']}"
        )
    if not findings["persisting"]:
        lines.append("  none")
    return printable_lines("\n".join(lines) + "\n")


def render_comparison(comparison: dict[str, Any], fmt_name: str) -> str:
    """The comparison in ``fmt_name`` (one of ``COMPARE_FORMATS``)."""
    if fmt_name == "json":
        return render_compare_json(comparison)
    if fmt_name == "text":
        return render_compare_text(comparison)
    raise InvalidOptionError(f"unknown compare format {fmt_name!r}; expected one of {', '.join(COMPARE_FORMATS)}")
