"""The JSON report (DESIGN.md, "Public surface"): strict JSON, no NaN or Infinity."""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

import numpy as np

from tfdiag.analysis.result import Report


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars made Python, NaN and infinities made None, tuples made lists.

    >>> jsonable({"a": float("nan"), "b": (np.int64(3), float("inf"))})
    {'a': None, 'b': [3, None]}
    """
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(item) for item in value]
    if isinstance(value, np.ndarray):
        return [jsonable(item) for item in value.tolist()]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if hasattr(value, "value") and isinstance(getattr(value, "value"), str):  # enums
        return value.value
    return str(value)


def dumps(value: Any, indent: int | None = 2) -> str:
    """Strict JSON text of ``value`` (see ``jsonable``)."""
    return json.dumps(jsonable(value), indent=indent, allow_nan=False)


def render_json(report: Report) -> str:
    """``report.to_dict()`` as strict, indented JSON."""
    return dumps(report.to_dict()) + "\n"
