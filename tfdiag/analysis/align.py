"""Clock alignment: every task's timestamps moved onto one reference clock.

The RPC probe records, for a pair (src, dst), src's send and receive times and dst's
clock read in between. Cristian's method estimates dst's offset from src as
``remote - (send + recv) / 2`` with an uncertainty of half the round trip; the samples
with the smallest round trips give the tightest estimate, so each pair uses the median
over its fastest quartile.
"""

from __future__ import annotations

import pandas as pd

# Fraction of a pair's probes (the fastest ones) used for its offset estimate.
FASTEST_FRACTION = 0.25


def clock_offsets(rpc: pd.DataFrame, reference: str | None) -> dict[str, int]:
    """Offset in ns to subtract from each task's clock to get the reference clock.

    >>> rpc = pd.DataFrame({"src": ["chief:0"] * 2, "dst": ["worker:0"] * 2,
    ...                     "send_ns": [0, 100], "remote_ns": [1_050, 1_160], "recv_ns": [100, 220]})
    >>> clock_offsets(rpc, "chief:0")
    {'chief:0': 0, 'worker:0': 1000}

    Tasks only reachable through another task (worker → ps when the reference is the
    chief) are chained: offset(ps) = offset(worker) + offset of ps seen from worker.
    """
    offsets: dict[str, int] = {} if reference is None else {reference: 0}
    if rpc.empty or reference is None:
        return offsets
    pair_offsets = {}
    for (src, dst), probes in rpc.groupby(["src", "dst"], observed=True):
        rtt = probes["recv_ns"] - probes["send_ns"]
        fastest = probes[rtt <= rtt.quantile(FASTEST_FRACTION)]
        estimate = fastest["remote_ns"] - (fastest["send_ns"] + fastest["recv_ns"]) // 2
        pair_offsets[(str(src), str(dst))] = int(estimate.median())
    frontier = [reference]
    while frontier:
        src = frontier.pop()
        for (pair_src, dst), offset in pair_offsets.items():
            if pair_src == src and dst not in offsets:
                offsets[dst] = offsets[src] + offset
                frontier.append(dst)
    return offsets


def to_reference_clock(times_ns: pd.Series, clock_tasks: pd.Series, offsets: dict[str, int]) -> pd.Series:
    """Moves each time onto the reference clock (tasks with no known offset stay as they are)."""
    shift = clock_tasks.astype(str).map(offsets).fillna(0).astype("int64")
    return times_ns - shift.to_numpy()
