"""Faults: failures, retries and recoveries per task, with the time each failure cost."""

from __future__ import annotations

import pandas as pd

FAILURE_KINDS = ("failure",)
RECOVERY_KINDS = ("recovery", "restart")


def fault_table(fault: pd.DataFrame, offsets: dict[str, int] | None = None) -> pd.DataFrame:
    """One row per fault record, with ``recovered_after_s`` on failures.

    Columns: ``task``, ``kind``, ``time_ns``, ``message``, ``recovered_after_s`` — for a
    failure, the time until the next recovery or restart of the same task (NaN if it
    never recovered); NaN for other kinds. Fault times are on the recording task's clock
    (the coordinator's, usually), which is the reference clock.
    """
    columns = ["task", "kind", "time_ns", "message", "recovered_after_s"]
    if fault.empty:
        return pd.DataFrame(columns=columns)
    table = fault[["task", "kind", "time_ns", "message"]].astype({"task": str, "kind": str, "message": str})
    table = table.sort_values("time_ns").reset_index(drop=True)
    recovered = []
    for row in table.itertuples():
        if row.kind not in FAILURE_KINDS:
            recovered.append(float("nan"))
            continue
        later = table[(table["task"] == row.task) & table["kind"].isin(RECOVERY_KINDS) & (table["time_ns"] >= row.time_ns)]
        recovered.append((later["time_ns"].iloc[0] - row.time_ns) / 1e9 if not later.empty else float("nan"))
    table["recovered_after_s"] = recovered
    return table[columns]


def time_away(faults: pd.DataFrame) -> pd.DataFrame:
    """Each failure of ``fault_table`` that was followed by a recovery or restart: ``task``,
    ``from_ns`` (the failure), ``to_ns`` (the recovery or restart)."""
    back = faults[(faults["kind"] == "failure") & faults["recovered_after_s"].notna()] if not faults.empty else faults
    if back.empty:
        return pd.DataFrame(columns=["task", "from_ns", "to_ns"])
    start = back["time_ns"].astype(float)
    return pd.DataFrame({"task": back["task"].astype(str), "from_ns": start,
                         "to_ns": start + back["recovered_after_s"].astype(float) * 1e9})


def downtime_ns(faults: pd.DataFrame) -> dict[str, float]:
    """Per task, the time from each of its failures (``fault_table``) to its recovery or restart, summed (ns)."""
    if faults.empty:
        return {}
    away = time_away(faults)
    return (away["to_ns"] - away["from_ns"]).groupby(away["task"]).sum().to_dict()
