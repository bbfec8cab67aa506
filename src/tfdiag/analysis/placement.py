"""Parameter-server load: variables and bytes held by each ps task."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfdiag.analysis.groups import codes_of


def ps_load_table(placement: pd.DataFrame, transfer: pd.DataFrame) -> pd.DataFrame:
    """One row per ps task: ``task``, ``variables``, ``bytes``, ``bytes_share``, ``largest``
    (name of its largest variable), ``largest_bytes``, and ``transfer_bytes`` (bytes moved
    to or from it in traced steps, from ``transfer`` records; 0 without them).
    """
    columns = ["task", "variables", "bytes", "bytes_share", "largest", "largest_bytes", "transfer_bytes"]
    held = placement[placement["task"].astype(str).str.startswith("ps:")] if not placement.empty else placement
    if held.empty:
        return pd.DataFrame(columns=columns)
    # A variable is recorded once per collector that saw it; count it once. Names alone
    # are not unique: tf-keras layers built outside a call name their kernels "kernel:0".
    held = held.drop_duplicates(subset=["variable", "task", "shape"])
    moved = {}
    if not transfer.empty:
        size = np.nan_to_num(transfer["bytes"].to_numpy("float64"))  # a sum leaves NaN out
        for column in ("src", "dst"):
            codes, tasks = codes_of(transfer[column])
            totals = np.bincount(codes[codes >= 0], weights=size[codes >= 0], minlength=len(tasks))
            for code in np.unique(codes[codes >= 0]):
                moved[str(tasks[code])] = moved.get(str(tasks[code]), 0) + int(totals[code])
    rows = []
    for task, variables in held.groupby("task", observed=True):
        largest = variables.loc[variables["bytes"].idxmax()]
        rows.append({
            "task": str(task), "variables": len(variables), "bytes": int(variables["bytes"].sum()),
            "largest": str(largest["variable"]), "largest_bytes": int(largest["bytes"]),
            "transfer_bytes": moved.get(str(task), 0),
        })
    table = pd.DataFrame(rows, columns=columns)
    table["bytes_share"] = table["bytes"] / max(int(table["bytes"].sum()), 1)
    return table.sort_values("task").reset_index(drop=True)
