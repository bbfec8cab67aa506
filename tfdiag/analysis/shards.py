"""Data-shard balance: how many examples each worker consumed, in total and per file."""

from __future__ import annotations

import pandas as pd


def shard_table(shard: pd.DataFrame) -> pd.DataFrame:
    """One row per worker: ``task``, ``examples``, ``files`` ({file: examples}), ``policy``,
    ``source`` (``"shard counters"``).

    Shard records are cumulative counters, so the last value of each (task, file) counts.
    A row with ``file == ""`` is the worker's total; without one, the files are summed.
    """
    columns = ["task", "examples", "files", "policy", "source"]
    if shard.empty:
        return pd.DataFrame(columns=columns)
    latest = shard.sort_values("time_ns").groupby(["task", "file"], observed=True).last().reset_index()
    rows = []
    for task, counters in latest.groupby("task", observed=True):
        per_file = counters[counters["file"] != ""]
        total = counters[counters["file"] == ""]
        examples = int(total["examples"].iloc[0]) if not total.empty else int(per_file["examples"].astype("float64").sum())  # float: cannot wrap
        policies = [str(p) for p in counters["policy"].dropna().unique() if str(p)]
        rows.append({
            "task": str(task),
            "examples": examples,
            "files": {str(row.file): int(row.examples) for row in per_file.itertuples()},
            "policy": policies[0] if policies else None,
            "source": "shard counters",
        })
    return pd.DataFrame(rows, columns=columns).sort_values("task").reset_index(drop=True)


def shards_from_steps(workers: pd.DataFrame) -> pd.DataFrame:
    """A ``shard_table`` from the step records' examples, for runs without shard counters
    (Keras callbacks know each worker's batch, not what its pipeline read)."""
    table = pd.DataFrame({"task": workers["task"], "examples": workers["examples"]})
    return table.assign(files=[{} for _ in range(len(table))], policy=None, source="step records")
