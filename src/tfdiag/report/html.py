"""The self-contained HTML report: one file, plotly.js inlined, opens with no network.

Every string that comes from the run (paths, task names, finding text) goes through
``escape``: HTML-escaped, control characters and undecodable bytes written as visible
escapes (``tfdiag.report.safe_text``); figure data goes through plotly's JSON encoder,
which escapes ``<``.

Example:
    >>> from tfdiag.analysis import analyze
    >>> Path("report.html").write_text(render_html(analyze("logs/run1")))  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import html

from tfdiag.analysis.findings import Finding
from tfdiag.analysis.result import Report
from tfdiag.report import figures
from tfdiag.report import formatting as fmt
from tfdiag.report.safe_text import printable_lines

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 1100px; padding: 1.5rem; color: #1f2933; }
h1 { font-size: 1.5rem; word-break: break-all; }
h2 { margin-top: 2rem; border-bottom: 1px solid #d9dee3; padding-bottom: .3rem; }
.cards { display: flex; flex-wrap: wrap; gap: 1rem; }
.card { border: 1px solid #d9dee3; border-radius: 6px; padding: .7rem 1rem; min-width: 10rem; }
.card .label { color: #616e7c; font-size: .85rem; }
.card .value { font-size: 1.3rem; font-weight: 600; }
.primary { background: #fff8e1; border: 1px solid #f0c36d; border-radius: 6px; padding: .8rem 1rem; }
.finding { border: 1px solid #d9dee3; border-left-width: 6px; border-radius: 6px;
           padding: .5rem 1rem; margin: 1rem 0; }
.finding.critical { border-left-color: #d64545; }
.finding.warning { border-left-color: #f0b429; }
.finding.info { border-left-color: #2680c2; }
.severity { text-transform: uppercase; font-size: .8rem; font-weight: 700; }
.speedup { font-weight: 700; color: #207227; }
table { border-collapse: collapse; }
th, td { padding: .3rem .7rem; border-bottom: 1px solid #e4e7eb; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { background: #f5f7fa; border-radius: 4px; padding: .1rem .3rem; white-space: pre-wrap; }
.warnings li { color: #8d2b0b; }
dl.evidence { display: grid; grid-template-columns: max-content auto; gap: .2rem 1rem; }
dl.evidence dt { color: #616e7c; }
dl.evidence dd { margin: 0; }
"""


def escape(text: object) -> str:
    """``text`` safe inside an element or a quoted attribute: ``escape("<b>") == "&lt;b&gt;"``."""
    return html.escape(printable_lines(str(text)))


@functools.lru_cache(maxsize=1)
def plotly_js() -> str:
    """The plotly.js bundle of the installed ``plotly`` package (about 4.5 MB)."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def render_html(report: Report, *, include_plotlyjs: bool = True) -> str:
    """The report as one HTML page: summary, findings, worker table and figures.

    ``include_plotlyjs=False`` leaves the bundle out (for embedding in a page that has it).
    """
    title = f"tfdiag report: {fmt.run_name(report)}"
    script = f"<script>{plotly_js()}</script>" if include_plotlyjs else ""
    body = "\n".join([_summary(report), _findings(report), _workers(report), _figures(report)])
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n{script}\n</head>\n<body>\n"
        f"<h1>{escape(title)}</h1>\n{body}\n</body>\n</html>\n"
    )


def _card(label: str, value: str) -> str:
    return f'<div class="card"><div class="label">{escape(label)}</div><div class="value">{escape(value)}</div></div>'


def _summary(report: Report) -> str:
    run, summary = report.run, report.summary
    primary = report.primary
    cards = [
        _card("throughput", f"{fmt.rate(summary.get('examples_per_s'))} examples/s"),
        _card("median step time", f"{fmt.ms(summary.get('step_time_ms'))} ms"),
        _card("steps", fmt.count(summary.get("steps"))),
        _card("primary bottleneck", primary.kind if primary else "none"),
    ]
    if primary is not None:
        cards.append(_card("predicted speed-up", fmt.speedup(primary.recommendation.predicted_speedup)))
    parts = [f'<div class="primary">{escape(fmt.primary_line(report))}</div>', f'<div class="cards">{"".join(cards)}</div>']
    parts.append(
        '<dl class="evidence">'
        f"<dt>strategy</dt><dd>{escape(str(run.get('strategy') or 'unknown (no manifest)'))}</dd>"
        f"<dt>tasks</dt><dd>{escape(fmt.tasks_line(report))}</dd>"
        f"<dt>skipped records</dt><dd>{escape(fmt.count(run.get('skipped_records') or 0))}</dd>"
        f"<dt>TensorFlow</dt><dd>{escape(str(run.get('tensorflow_version') or 'unknown'))}</dd>"
        "</dl>"
    )
    warnings = run.get("warnings") or []
    if warnings:
        items = "".join(f"<li>{escape(str(warning))}</li>" for warning in warnings)
        parts.append(f'<h2>Warnings</h2><ul class="warnings">{items}</ul>')
    return "<section>\n<h2>Summary</h2>\n" + "\n".join(parts) + "\n</section>"


def _finding(number: int, finding: Finding) -> str:
    recommendation = finding.recommendation
    severity = finding.severity.value
    evidence = "".join(f"<dt>{escape(name)}</dt><dd>{escape(value)}</dd>" for name, value in fmt.evidence_items(finding))
    tasks = f"<p>Tasks: {escape(', '.join(finding.tasks))}</p>" if finding.tasks else ""
    return (
        f'<div class="finding {escape(severity)}" id="finding-{number}">'
        f'<h3>{number}. {escape(finding.title)}</h3>'
        f'<p><span class="severity">{escape(severity)}</span> · <code>{escape(finding.kind)}</code> · '
        f'predicted speed-up <span class="speedup">{escape(fmt.speedup(recommendation.predicted_speedup))}</span></p>'
        f"{tasks}<p>{escape(finding.summary)}</p>"
        f'<dl class="evidence">{evidence}</dl>'
        f"<p><strong>Recommendation:</strong> {escape(recommendation.action)}</p>"
        f"<pre><code>{escape(recommendation.change)}</code></pre>"
        "</div>"
    )


def _findings(report: Report) -> str:
    if not report.findings:
        inner = "<p>No detector found a problem in this run.</p>"
    else:
        inner = "\n".join(_finding(number, finding) for number, finding in enumerate(report.findings, 1))
    return f"<section>\n<h2>Findings and recommendations</h2>\n{inner}\n</section>"


def _table(header, rows) -> str:
    def cell(tag: str, index: int, text: str) -> str:
        align = "" if index == 0 else ' class="num"'
        return f"<{tag}{align}>{escape(text)}</{tag}>"

    head = "".join(cell("th", index, column) for index, column in enumerate(header))
    body = "".join("<tr>" + "".join(cell("td", index, text) for index, text in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _workers(report: Report) -> str:
    rows = fmt.worker_rows(report)
    inner = _table(fmt.WORKER_COLUMNS, rows) if rows else "<p>No step records.</p>"
    sections = "".join(
        f"\n<h2>{escape(title)}</h2>\n{_table(header, section_rows)}" for title, header, section_rows in fmt.section_tables(report)
    )
    return f"<section>\n<h2>Workers</h2>\n{inner}{sections}\n</section>"


def _figures(report: Report) -> str:
    """The figures of ``figures.FIGURES`` that have data (the TensorBoard tab shows the same ones)."""
    divs = []
    for name, make in figures.FIGURES.items():
        figure = make(report)
        if not figures.is_empty(figure):
            divs.append(figure.to_html(full_html=False, include_plotlyjs=False, div_id=f"tfdiag-figure-{name}"))
    inner = "\n".join(divs) if divs else "<p>No figures: the run has no step, probe or sampler records yet.</p>"
    return "<section>\n<h2>Figures</h2>\n" + inner + "\n</section>"
