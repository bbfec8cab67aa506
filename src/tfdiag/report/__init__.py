"""Renderers of a ``Report``: text, JSON, Markdown, HTML, Chrome trace, and plotly figures.

No analysis happens here: every renderer reads one ``tfdiag.analysis.Report``; unit
labels and number formats live in ``tfdiag.report.formatting``.

Example:
    >>> from tfdiag.analysis import analyze
    >>> print(render(analyze("logs/run1"), "text"))  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Callable

from tfdiag.analysis.result import Report
from tfdiag.errors import InvalidOptionError
from tfdiag.report.html import render_html
from tfdiag.report.json_format import render_json
from tfdiag.report.markdown import render_markdown
from tfdiag.report.text import render_text
from tfdiag.report.trace import render_chrome_trace

RENDERERS: dict[str, Callable[[Report], str]] = {
    "text": render_text,
    "json": render_json,
    "markdown": render_markdown,
    "html": render_html,
}
FORMATS = tuple(RENDERERS)


def render(report: Report, fmt: str) -> str:
    """The report in format ``fmt`` (one of ``FORMATS``)."""
    try:
        renderer = RENDERERS[fmt]
    except KeyError:
        raise InvalidOptionError(f"unknown report format {fmt!r}; expected one of {', '.join(FORMATS)}") from None
    return renderer(report)


__all__ = [
    "FORMATS",
    "RENDERERS",
    "render",
    "render_chrome_trace",
    "render_html",
    "render_json",
    "render_markdown",
    "render_text",
]
