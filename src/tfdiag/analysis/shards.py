"""Data-shard balance: how many examples each worker consumed, in total and per file."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfdiag.analysis.groups import codes_of, grouped_rows


def shard_table(shard: pd.DataFrame) -> pd.DataFrame:
    """One row per worker: ``task``, ``examples``, ``files`` ({file: examples}), ``policy``,
    ``source`` (``"shard counters"``).

    Shard records are cumulative counters, so the last value of each (task, file) counts.
    A row with ``file == ""`` is the worker's total; without one, the files are summed.
    """
    columns = ["task", "examples", "files", "policy", "source"]
    if shard.empty:
        return pd.DataFrame(columns=columns)
    order = np.argsort(shard["time_ns"].to_numpy(), kind="stable")  # the last value of each counter: the latest
    task_codes, tasks = codes_of(shard["task"])
    file_codes, files = codes_of(shard["file"])
    pair = np.where((task_codes >= 0) & (file_codes >= 0), task_codes * len(files) + file_codes, -1)[order]
    examples, policy = shard["examples"].to_numpy()[order], shard["policy"].to_numpy(object)[order]
    latest: dict[int, list] = {}  # task code -> [(file, examples, policy)] of its counters, in file order
    for code, rows in zip(*grouped_rows(pair, len(tasks) * len(files))):
        latest.setdefault(code // len(files), []).append(
            (str(files[code % len(files)]), _last_valid(examples[rows]), _last_valid(policy[rows])))
    rows = []
    for task, counters in latest.items():
        total = [count for file, count, _ in counters if file == ""]
        per_file = {file: count for file, count, _ in counters if file != ""}
        examples_sum = sum(float(count) for count in per_file.values() if not pd.isna(count))  # float: cannot wrap
        policies = [str(p) for p in dict.fromkeys(p for _, _, p in counters if not pd.isna(p)) if str(p)]
        rows.append({
            "task": str(tasks[task]),
            "examples": int(total[0]) if total else int(examples_sum),
            "files": {file: int(count) for file, count in per_file.items()},
            "policy": policies[0] if policies else None,
            "source": "shard counters",
        })
    return pd.DataFrame(rows, columns=columns).sort_values("task").reset_index(drop=True)


def _last_valid(values: np.ndarray):
    """The last value that is not null (a ``groupby(...).last()``), else None."""
    return next((value for value in values[::-1] if not pd.isna(value)), None)


def shards_from_steps(workers: pd.DataFrame) -> pd.DataFrame:
    """A ``shard_table`` from the step records' examples, for runs without shard counters
    (Keras callbacks know each worker's batch, not what its pipeline read)."""
    table = pd.DataFrame({"task": workers["task"], "examples": workers["examples"]})
    return table.assign(files=[{} for _ in range(len(table))], policy=None, source="step records")
