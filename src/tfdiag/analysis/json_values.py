"""Values as JSON holds them: the one place where NaN and infinities become null.

The Report's sections (``tfdiag.analysis.sections``), the JSON report
(``tfdiag.report.json_format``) and the TensorBoard tab's answers
(``tfdiag.tb_plugin.responses``) all go through ``jsonable``, so every surface writes
strict JSON (no ``NaN``/``Infinity``, which JSON lacks) and writes it the same way.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np


def jsonable(value: Any) -> Any:
    """``value`` with numpy scalars made Python, NaN and infinities made None, tuples made lists.

    Mapping keys become strings; enums become their value; anything else JSON cannot
    hold becomes its ``str``.

    >>> jsonable({"a": float("nan"), "b": (np.int64(3), float("inf"))})
    {'a': None, 'b': [3, None]}
    """
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, Mapping):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(item) for item in value]
    if isinstance(value, np.ndarray):
        return [jsonable(item) for item in value.tolist()]
    if hasattr(value, "value") and isinstance(getattr(value, "value"), str):  # enums
        return value.value
    return str(value)


def rounded(value: Any, digits: int = 3) -> float | None:
    """A number for a JSON section: rounded to ``digits``, None when missing, NaN or infinite.

    >>> rounded(2 / 3), rounded(float("nan")), rounded(None)
    (0.667, None, None)
    """
    number = jsonable(None if value is None else float(value))
    return None if number is None else round(number, digits)


__all__ = ["jsonable", "rounded"]
