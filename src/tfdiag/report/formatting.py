"""Unit labels and number formats shared by every renderer.

The Report holds numbers in the units of the JSON contract (ms, fractions, ratios);
this module turns them into the strings a person reads. Renderers escape the results
for their own medium (HTML, Markdown); nothing here escapes.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from tfdiag.analysis.findings import Finding
from tfdiag.analysis.result import Report

MISSING = "-"

# Columns of the per-worker table, shared by the text, Markdown and HTML renderers.
WORKER_COLUMNS = ("task", "steps", "p50 ms", "p95 ms", "mean ms", "input wait", "examples")


def is_number(value: Any) -> bool:
    """True for a finite int or float (bool excluded)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def ms(value: Any) -> str:
    """A duration in ms: ``ms(20.0) == "20.0"``; values under 10 ms get two decimals."""
    if not is_number(value):
        return MISSING
    return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}"


def percent(fraction: Any) -> str:
    """A fraction as a percentage: ``percent(0.4) == "40.0 %"``."""
    if not is_number(fraction):
        return MISSING
    return f"{fraction * 100:.1f} %"


def count(value: Any) -> str:
    """An integer count with thousands separators: ``count(3200) == "3,200"``."""
    if not is_number(value):
        return MISSING
    return f"{int(value):,}"


def rate(value: Any) -> str:
    """A throughput: ``rate(1049.18) == "1,049.2"``."""
    if not is_number(value):
        return MISSING
    return f"{value:,.1f}"


def speedup(ratio: Any) -> str:
    """A predicted throughput ratio as a change: ``speedup(1.35) == "+35 %"``.

    Changes under 10 % keep one decimal so that a small gain does not read as ``+0 %``.
    """
    if not is_number(ratio):
        return "unknown"
    change = (ratio - 1.0) * 100
    return f"{change:+.1f} %" if abs(change) < 10 else f"{change:+.0f} %"


def change(base: Any, new: Any) -> tuple[float | None, float | None]:
    """(ratio new/base, percent change) of two numbers, Nones where undefined."""
    if not is_number(base) or not is_number(new) or base == 0:
        return None, None
    ratio = new / base
    return ratio, (ratio - 1.0) * 100


def signed_percent(value: Any) -> str:
    """A percent change: ``signed_percent(-12.34) == "-12.3 %"``."""
    if not is_number(value):
        return MISSING
    return f"{value:+.1f} %"


def scalar(value: Any) -> str:
    """A compact form of one evidence value."""
    if isinstance(value, bool) or value is None:
        return str(value).lower() if value is not None else "null"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    return str(value)


def evidence_value(value: Any) -> str:
    """A compact form of an evidence entry: mappings as ``a=1, b=2``, lists comma-separated."""
    if isinstance(value, Mapping):
        return ", ".join(f"{key}={evidence_value(item)}" for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(evidence_value(item) for item in value)
    return scalar(value)


def evidence_items(finding: Finding) -> list[tuple[str, str]]:
    """The finding's evidence as (name, compact value) pairs, in the detector's order."""
    return [(str(name), evidence_value(value)) for name, value in dict(finding.evidence).items()]


def worker_rows(report: Report) -> list[tuple[str, ...]]:
    """One row of ``WORKER_COLUMNS`` strings per worker of the report."""
    rows = []
    for worker in report.workers:
        step_ms = worker.get("step_time_ms") or {}
        rows.append(
            (
                str(worker.get("task", MISSING)),
                count(worker.get("steps")),
                ms(step_ms.get("p50")),
                ms(step_ms.get("p95")),
                ms(step_ms.get("mean")),
                percent(worker.get("input_wait_frac")),
                count(worker.get("examples")),
            )
        )
    return rows


def primary_line(report: Report) -> str:
    """One sentence naming the primary bottleneck and its predicted speed-up."""
    primary = report.primary
    if primary is None:
        return "No bottleneck found."
    return (
        f"Primary bottleneck: {primary.kind} - {primary.title} "
        f"(predicted {speedup(primary.recommendation.predicted_speedup)} throughput)"
    )


def run_name(report: Report) -> str:
    return str(report.run.get("path") or "run")


def tasks_line(report: Report) -> str:
    tasks = [str(task) for task in report.run.get("tasks") or []]
    return f"{len(tasks)}: {', '.join(tasks)}" if tasks else "none found"


def number(value: Any, digits: int = 1) -> str:
    """A plain number: ``number(12.345) == "12.3"``."""
    if not is_number(value):
        return MISSING
    return f"{value:,.{digits}f}"


def megabytes(value: Any) -> str:
    """Bytes as MB: ``megabytes(2_500_000) == "2.5"``."""
    return number(value / 1e6, 1) if is_number(value) else MISSING


def _get(entry: Mapping[str, Any], *path: str) -> Any:
    value: Any = entry
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _text(value: Any) -> str:
    return MISSING if value is None or value == "" else str(value)


# The secondary sections of a report, shown as tables when the run has them:
# (title, Report attribute, ((column label, function of one entry -> string), ...)).
SECTION_TABLES: tuple[tuple[str, str, tuple[tuple[str, Any], ...]], ...] = (
    (
        "RPC latency",
        "rpc",
        (
            ("src", lambda e: _text(_get(e, "src"))),
            ("dst", lambda e: _text(_get(e, "dst"))),
            ("samples", lambda e: count(_get(e, "samples"))),
            ("rtt p50 ms", lambda e: ms(_get(e, "rtt_ms", "p50"))),
            ("rtt p95 ms", lambda e: ms(_get(e, "rtt_ms", "p95"))),
            ("rtt p99 ms", lambda e: ms(_get(e, "rtt_ms", "p99"))),
            ("clock offset ms", lambda e: ms(_get(e, "clock_offset_ms"))),
        ),
    ),
    (
        "Parameter servers",
        "ps",
        (
            ("task", lambda e: _text(_get(e, "task"))),
            ("variables", lambda e: count(_get(e, "variables"))),
            ("MB", lambda e: megabytes(_get(e, "bytes"))),
            ("share", lambda e: percent(_get(e, "bytes_share"))),
            ("largest variable", lambda e: _text(_get(e, "largest"))),
        ),
    ),
    (
        "Data shards",
        "shards",
        (
            ("task", lambda e: _text(_get(e, "task"))),
            ("examples", lambda e: count(_get(e, "examples"))),
            ("policy", lambda e: _text(_get(e, "policy"))),
        ),
    ),
    (
        "GPUs",
        "gpus",
        (
            ("host", lambda e: _text(_get(e, "host"))),
            ("index", lambda e: _text(_get(e, "index"))),
            ("util mean %", lambda e: number(_get(e, "util_pct", "mean"))),
            ("util p50 %", lambda e: number(_get(e, "util_pct", "p50"))),
            ("memory used", lambda e: percent(_get(e, "mem_used_frac"))),
        ),
    ),
    (
        "Hosts",
        "hosts",
        (
            ("host", lambda e: _text(_get(e, "host"))),
            ("task", lambda e: _text(_get(e, "task"))),
            ("cpu mean %", lambda e: number(_get(e, "cpu_pct", "mean"))),
            ("cpu peak %", lambda e: number(_get(e, "cpu_pct", "peak"))),
            ("memory peak", lambda e: percent(_get(e, "mem_used_frac_peak"))),
            ("net MB/s", lambda e: number(_get(e, "net_mb_s"), 2)),
            ("disk MB/s", lambda e: number(_get(e, "disk_mb_s"), 2)),
        ),
    ),
    (
        "Faults",
        "faults",
        (
            ("task", lambda e: _text(_get(e, "task"))),
            ("kind", lambda e: _text(_get(e, "kind"))),
            ("time s", lambda e: number(_get(e, "time"), 1)),
            ("recovered after s", lambda e: number(_get(e, "recovered_after_s"), 1)),
            ("message", lambda e: " ".join(_text(_get(e, "message")).split())),
        ),
    ),
)


def section_tables(report: Report) -> list[tuple[str, tuple[str, ...], list[tuple[str, ...]]]]:
    """(title, header, rows) of every secondary section the report has entries in."""
    tables = []
    for title, attribute, columns in SECTION_TABLES:
        entries = getattr(report, attribute, None) or []
        if entries:
            header = tuple(label for label, _ in columns)
            rows = [tuple(cell(entry) for _, cell in columns) for entry in entries if isinstance(entry, Mapping)]
            tables.append((title, header, rows))
    return tables
