"""The Markdown report (GitHub-flavoured), e.g. for a pull-request comment or a wiki page.

Example:
    >>> from tfdiag.analysis import analyze
    >>> Path("report.md").write_text(render_markdown(analyze("logs/run1")))  # doctest: +SKIP
"""

from __future__ import annotations

import html
import re

from tfdiag.analysis.result import Report
from tfdiag.report import formatting as fmt
from tfdiag.report.safe_text import printable, printable_lines

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]|~])")
_LINE_START_SPECIAL = re.compile(r"^([#+\-=])")
_LINE_START_NUMBER = re.compile(r"^(\d+)\.")


def escape(text: str) -> str:
    """Text safe inside Markdown prose and table cells: HTML and Markdown syntax neutralised.

    >>> escape("worker:<b>|1")
    'worker:&lt;b&gt;\\\\|1'
    """
    one_line = printable(" ".join(str(text).split()))
    escaped = _MARKDOWN_SPECIAL.sub(r"\\\1", html.escape(one_line, quote=False))
    escaped = _LINE_START_SPECIAL.sub(r"\\\1", escaped)
    return _LINE_START_NUMBER.sub(r"\1\\.", escaped)


def code(text: str) -> str:
    """``text`` as an inline code span (a fence longer than any backtick run inside it)."""
    one_line = printable(" ".join(str(text).split()))
    longest = max((len(run) for run in re.findall(r"`+", one_line)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if one_line.startswith("`") or one_line.endswith("`") else ""
    return f"{fence}{pad}{one_line}{pad}{fence}"


def _table(header, rows) -> list[str]:
    lines = ["| " + " | ".join(escape(cell) for cell in header) + " |"]
    lines.append("| " + " | ".join(["---"] + ["---:"] * (len(header) - 1)) + " |")
    lines += ["| " + " | ".join(escape(cell) for cell in row) + " |" for row in rows]
    return lines


def render_markdown(report: Report) -> str:
    """The report as Markdown: summary, per-worker table, ranked findings and recommendations."""
    run, summary = report.run, report.summary
    lines = [f"# tfdiag report: {escape(fmt.run_name(report))}", ""]
    lines.append(f"**{escape(fmt.primary_line(report))}**")
    lines.append("")
    lines += [
        f"- Strategy: {escape(run.get('strategy') or 'unknown (no manifest)')}",
        f"- Tasks: {escape(fmt.tasks_line(report))}",
        f"- Throughput: {escape(fmt.rate(summary.get('examples_per_s')))} examples/s",
        f"- Median step time: {escape(fmt.ms(summary.get('step_time_ms')))} ms over "
        f"{escape(fmt.count(summary.get('steps')))} steps",
        f"- Skipped records: {escape(fmt.count(run.get('skipped_records') or 0))}",
    ]
    warnings = run.get("warnings") or []
    if warnings:
        lines += ["", "## Warnings", ""] + [f"- {escape(warning)}" for warning in warnings]
    lines += ["", "## Workers", ""]
    rows = fmt.worker_rows(report)
    lines += _table(fmt.WORKER_COLUMNS, rows) if rows else ["No step records."]
    for title, header, section_rows in fmt.section_tables(report):
        lines += ["", f"## {escape(title)}", ""] + _table(header, section_rows)
    lines += ["", "## Findings", ""]
    if not report.findings:
        lines.append("No detector found a problem in this run.")
    for number, finding in enumerate(report.findings, 1):
        recommendation = finding.recommendation
        primary = " (primary bottleneck)" if number == 1 else ""
        lines += [
            f"### {number}. {escape(finding.title)}{primary}",
            "",
            f"**{finding.severity.value}** · `{finding.kind}` · predicted speed-up "
            f"**{escape(fmt.speedup(recommendation.predicted_speedup))}**"
            + (f" · tasks: {escape(', '.join(finding.tasks))}" if finding.tasks else ""),
            "",
            escape(finding.summary),
            "",
            "Evidence:",
            "",
        ]
        lines += [f"- {escape(name)}: {escape(value)}" for name, value in fmt.evidence_items(finding)]
        lines += [
            "",
            f"Recommendation: {escape(recommendation.action)}",
            "",
            f"Change: {code(recommendation.change)}",
            "",
        ]
    return printable_lines("\n".join(lines).rstrip() + "\n")
