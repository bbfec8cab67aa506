"""Small helpers that turn measured tables into a finding's JSON evidence."""

from __future__ import annotations

import pandas as pd


def per_task(table: pd.DataFrame, column: str, scale: float = 1.0, digits: int = 2, key: str = "task") -> dict:
    """``{task: value / scale}`` for each row, rounded: the usual shape of evidence.

    >>> per_task(pd.DataFrame({"task": ["worker:0"], "p50_ns": [12_345_678.0]}), "p50_ns", 1e6)
    {'worker:0': 12.35}
    """
    return {str(row[key]): round(float(row[column]) / scale, digits) for _, row in table.iterrows()}


def task_list(tasks) -> str:
    """``"worker:0, worker:1"``."""
    return ", ".join(str(task) for task in tasks)
