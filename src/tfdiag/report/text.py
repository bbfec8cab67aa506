"""The terminal report: plain text, at most ``WIDTH`` columns, with nothing that drives a terminal.

Names and messages from the run are shown with their control characters escaped
(``tfdiag.report.safe_text``), so an ANSI sequence in a task name prints as ``\\x1b[...``.

Example:
    >>> from tfdiag.analysis import analyze
    >>> print(render_text(analyze("logs/run1")))  # doctest: +SKIP
"""

from __future__ import annotations

import textwrap

import pandas as pd

from tfdiag.analysis.findings import Finding
from tfdiag.analysis.result import Report
from tfdiag.report import formatting as fmt
from tfdiag.report.safe_text import printable_lines

WIDTH = 100
# Task names longer than this are cut in the worker table (the full name is in the JSON).
MAX_TASK_COLUMN = 32
INDENT = "    "


def render_text(report: Report) -> str:
    """The report as a terminal summary: run, throughput, workers, ranked findings, and the
    findings announced while the job ran."""
    sections = [_header(report), _throughput(report), _workers(report), _sections(report), _findings(report),
                _during_run(report)]
    return printable_lines("\n\n".join(section for section in sections if section) + "\n")


def _wrap(text: str, initial: str = "", subsequent: str | None = None) -> list[str]:
    return textwrap.wrap(
        text,
        width=WIDTH,
        initial_indent=initial,
        subsequent_indent=INDENT if subsequent is None else subsequent,
        break_long_words=True,
        break_on_hyphens=False,
    ) or [initial.rstrip()]


def _field(label: str, value: str) -> list[str]:
    prefix = f"  {label:<10} "
    return _wrap(value, prefix, " " * len(prefix))


def _header(report: Report) -> str:
    run = report.run
    lines = [_cut(f"tfdiag report: {fmt.run_name(report)}", WIDTH), "=" * min(WIDTH, 60)]
    lines += _field("strategy", str(run.get("strategy") or "unknown (no manifest)"))
    lines += _field("tasks", fmt.tasks_line(report))
    skipped = run.get("skipped_records") or 0
    lines += _field("skipped", f"{fmt.count(skipped)} unreadable records" if skipped else "none")
    for warning in run.get("warnings") or []:
        lines += _field("warning", str(warning))
    for worker in report.workers:
        if worker.get("chief_wait_s") is not None:
            lines += _field("chief wait", f"{worker['task']} waited {worker['chief_wait_s']:.1f} s for the chief "
                                          "to initialise the model")
    return "\n".join(lines)


def _throughput(report: Report) -> str:
    summary = report.summary
    lines = ["Throughput"]
    lines += _field("examples/s", fmt.rate(summary.get("examples_per_s")))
    lines += _field("step time", f"{fmt.ms(summary.get('step_time_ms'))} ms (median over all workers)")
    lines += _field("steps", fmt.count(summary.get("steps")))
    if summary.get("stalled"):
        lines += _field("STALLED", f"{summary['stalled']} (the job is hung now: see the stalled finding)")
    lines += _wrap(fmt.primary_line(report), "  ", INDENT)
    return "\n".join(lines)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def table(title: str, header, rows, first_width: int = MAX_TASK_COLUMN) -> str:
    """A titled plain-text table, first column left-aligned, the others right-aligned.

    Cells are cut (ending in ``~``) so that every line fits in ``WIDTH`` columns: the first
    column at ``first_width``, then the widest column as much as needed.
    """
    widths = [max(len(str(column)), *(len(row[i]) for row in rows)) for i, column in enumerate(header)]
    widths[0] = min(widths[0], max(first_width, len(header[0])))
    while 2 + sum(widths) + 2 * (len(widths) - 1) > WIDTH:
        widest = max(range(len(widths)), key=widths.__getitem__)
        if widths[widest] <= 8:
            break
        widths[widest] -= 1

    def line(cells) -> str:
        parts = [_cut(cells[0], widths[0]).ljust(widths[0])]
        parts += [_cut(cell, width).rjust(width) for cell, width in zip(cells[1:], widths[1:])]
        return ("  " + "  ".join(parts)).rstrip()

    return "\n".join([title, line(header), line(["-" * width for width in widths])] + [line(row) for row in rows])


def _workers(report: Report) -> str:
    rows = fmt.worker_rows(report)
    if not rows:
        return "Workers\n  no step records"
    return table("Workers", fmt.WORKER_COLUMNS, rows)


def _sections(report: Report) -> str:
    return "\n\n".join(table(title, header, rows, first_width=24) for title, header, rows in fmt.section_tables(report))


def _findings(report: Report) -> str:
    if not report.findings:
        return "Findings\n  none: no detector found a problem in this run."
    lines = [f"Findings ({len(report.findings)}, largest predicted speed-up first)"]
    for number, finding in enumerate(report.findings, 1):
        lines.append("")
        lines += _finding(number, finding, primary=number == 1)
    return "\n".join(lines)


def _finding(number: int, finding: Finding, primary: bool) -> list[str]:
    recommendation = finding.recommendation
    marker = "  <- primary bottleneck" if primary else ""
    head = f"{number:>2}. [{finding.severity.value.upper()}] {finding.kind}: {finding.title}{marker}"
    lines = _wrap(head, "", INDENT)
    if finding.tasks:
        lines += _wrap(f"tasks: {', '.join(finding.tasks)}", INDENT, INDENT + "  ")
    lines += _wrap(finding.summary, INDENT, INDENT)
    for name, value in fmt.evidence_items(finding):
        lines += _wrap(f"- {name}: {value}", INDENT + "  ", INDENT + "    ")
    lines += _wrap(f"predicted speed-up: {fmt.speedup(recommendation.predicted_speedup)}", INDENT, INDENT)
    lines += _wrap(f"action: {recommendation.action}", INDENT, INDENT + "  ")
    lines += _wrap(f"change: {recommendation.change}", INDENT, INDENT + "  ")
    return lines


def _during_run(report: Report) -> str:
    """The findings announced while the job ran (``live_finding`` records), in the order they
    began, with when each began and cleared, in seconds since the first step."""
    windows = report.timelines.get("live_findings") if report.timelines else None
    if windows is None or windows.empty:
        return ""
    steps = report.steps
    origin = int(steps["begin_ns"].min()) if not steps.empty and "begin_ns" in steps else int(windows["began_ns"].min())
    since = "since the first step" if not steps.empty and "begin_ns" in steps else "since the first announcement"
    lines = [f"Findings during the run ({len(windows)}, seconds {since})"]
    for window in windows.sort_values("began_ns").itertuples():
        began = (int(window.began_ns) - origin) / 1e9
        ended = "still on at the end" if pd.isna(window.ended_ns) else f"{(int(window.ended_ns) - origin) / 1e9:.1f} s"
        who = f" ({window.tasks})" if window.tasks else ""
        lines += _wrap(f"{began:.1f} s to {ended}: [{str(window.severity).upper()}] {window.kind}{who}", "  ", INDENT)
        lines += _wrap(str(window.message), INDENT, INDENT)
    return "\n".join(lines)
