"""The JSON report (``Report.to_dict``, described field by field in src/tfdiag/tb_plugin/http_api.md): strict JSON.

Non-finite numbers become ``null`` in ``tfdiag.analysis.json_values.jsonable``, the one
function every JSON surface uses. Output is ASCII: control characters and undecodable
bytes in names are ``\\u`` escapes, never raw.
"""

from __future__ import annotations

import json
from typing import Any

from tfdiag.analysis.json_values import jsonable
from tfdiag.analysis.result import Report


def dumps(value: Any, indent: int | None = 2) -> str:
    """Strict JSON text of ``value`` (see ``jsonable``).

    >>> dumps({"x": float("nan")}, indent=None)
    '{"x": null}'
    """
    return json.dumps(jsonable(value), indent=indent, allow_nan=False, ensure_ascii=True)


def render_json(report: Report) -> str:
    """``report.to_dict()`` as strict, indented JSON."""
    return dumps(report.to_dict()) + "\n"


__all__ = ["dumps", "jsonable", "render_json"]
