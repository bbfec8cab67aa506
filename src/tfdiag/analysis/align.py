"""Clock alignment: every task's timestamps moved onto one reference clock.

The RPC probe measures each link's clock offset (``links.link_table``: Cristian's method
over the fastest probes). Offsets are chained outward from the reference task, so a task
reached only through another (worker → ps when the reference is the chief) still aligns:
offset(ps) = offset(worker) + offset of ps seen from the worker.
"""

from __future__ import annotations

import pandas as pd

from tfdiag.analysis.groups import value_of_group


def clock_offsets(links: pd.DataFrame, reference: str | None) -> dict[str, int]:
    """Offset in ns to subtract from each task's clock to get the reference clock.

    >>> links = pd.DataFrame({"src": ["chief:0", "worker:0"], "dst": ["worker:0", "ps:0"],
    ...                       "offset_ns": [1000.0, -300.0]})
    >>> clock_offsets(links, "chief:0")
    {'chief:0': 0, 'worker:0': 1000, 'ps:0': 700}
    """
    offsets: dict[str, int] = {} if reference is None else {reference: 0}
    if links.empty or reference is None:
        return offsets
    pair_offsets = {(row.src, row.dst): int(row.offset_ns) for row in links.itertuples()}
    frontier = [reference]
    while frontier:
        src = frontier.pop(0)
        for (pair_src, dst), offset in pair_offsets.items():
            if pair_src == src and dst not in offsets:
                offsets[dst] = offsets[src] + offset
                frontier.append(dst)
    return offsets


def to_reference_clock(times_ns: pd.Series, clock_tasks: pd.Series, offsets: dict[str, int]) -> pd.Series:
    """Moves each time onto the reference clock (tasks with no known offset stay as they are)."""
    if not any(offsets.values()):
        return times_ns
    return times_ns - value_of_group(clock_tasks, offsets)  # one lookup per task, not per row
