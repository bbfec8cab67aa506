"""Parameter-server traffic model inputs, measured on the run: bytes, latency, bandwidth per ps.

Bytes per ps come from the traced ``RecvTensor`` transfers where a TF1 session traced
them, else from the variable placement; ``traced_link_cost`` measures how
long a traced step waited on one ps's transfers, ``traced_ps_wait`` that wait per ps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tfdiag.analysis.align import to_reference_clock
from tfdiag.analysis.groups import codes_of, median_of
from tfdiag.analysis.measurements import Measurements
from tfdiag.analysis.whatif import ps_communication_ns

# A traced transfer smaller than this says nothing of bandwidth: 64 KB at 1 Gb/s take
# 0.5 ms, about what one RecvTensor round trip costs on loopback, so a smaller tensor's
# time is its round trip.
MIN_BANDWIDTH_BYTES = 64 << 10


@dataclass(frozen=True)
class PsTraffic:
    """Per-ps inputs of ``whatif.ps_communication_ns``, medians over the workers' links."""

    bytes_per_ps: dict[str, float]  # variable bytes held: read and updated every step
    rtt_ns: dict[str, float]  # worker → ps round trip, median over workers of each link's p50
    bandwidth_bps: dict[str, float]  # worker → ps bytes per second
    workers: int  # workers sharing each ps

    def communication_ns(self, bytes_per_ps: dict[str, float] | None = None, rtt_ns: dict[str, float] | None = None) -> float:
        """Per-step communication time, optionally with other bytes or latencies (what-if)."""
        return ps_communication_ns(
            bytes_per_ps or self.bytes_per_ps, rtt_ns or self.rtt_ns, self.bandwidth_bps, self.workers
        )


def ps_traffic(measured: Measurements, load: pd.DataFrame | None = None) -> PsTraffic | None:
    """The run's ps traffic inputs, or None when placement or bandwidth was not captured.

    ``load`` (a ``placement.ps_load_table`` or ``traced_ps_load``) defaults to the bytes
    each ps moved per traced step where the run traced transfers (a TF1 session): a step
    moves what it reads, a few rows of an embedding table rather than the table its ps
    holds. Else to the variable placement.
    """
    if load is None:
        traced = traced_ps_load(measured)
        load = measured.ps_load if traced.empty else traced
    if load.empty:
        return None
    ps_tasks = list(load["task"])
    links = measured.links
    src, dst = links["src"].astype(str).to_numpy(), links["dst"].astype(str).to_numpy()
    chosen = np.array([name.startswith("worker:") for name in src], bool) & np.isin(dst, ps_tasks)
    rtt = _median_per(dst[chosen], links["rtt_p50_ns"].to_numpy("float64")[chosen])
    if not rtt:
        # No probe: the quickest traced transfer per link is its latency (its p50 would
        # count the bytes twice, once more through the bandwidth).
        traced = measured.link_latency
        traced = traced[traced["src"].str.startswith("worker:") & traced["dst"].isin(ps_tasks)]
        rtt = traced.groupby("dst")["rtt_min_ns"].median().to_dict()
    measured_bandwidth = links["bandwidth_bps"].to_numpy("float64")[chosen]
    known = ~np.isnan(measured_bandwidth)
    bandwidth = _median_per(dst[chosen][known], measured_bandwidth[known])
    bandwidth.update(_transfer_bandwidth(measured, ps_tasks))
    if not bandwidth:
        return None
    fallback = float(np.median(list(bandwidth.values())))
    return PsTraffic(
        bytes_per_ps={row.task: float(row.bytes) for row in load.itertuples()},
        rtt_ns={ps: float(rtt.get(ps, 0.0)) for ps in ps_tasks},
        bandwidth_bps={ps: float(bandwidth.get(ps, fallback)) for ps in ps_tasks},
        workers=max(len(measured.workers), 1),
    )


def _median_per(keys: np.ndarray, values: np.ndarray) -> dict[str, float]:
    """The median of ``values`` per key (NaN left out), as a ``groupby(keys).median()``."""
    return {str(key): median_of(values[keys == key]) for key in sorted(set(keys))}


def _transfer_bandwidth(measured: Measurements, ps_tasks: list[str]) -> dict[str, float]:
    """Bytes per second of traced RecvTensor transfers from each ps (TF1 RunMetadata).

    As with the probe's payload: a transfer of at least ``MIN_BANDWIDTH_BYTES`` takes its
    link's round trip (the quickest smaller transfer on the link) plus the time its bytes
    take, plus any wait for the ps to send it: a read queued behind the ps's other work
    (a 256 KB kernel read in 4 ms where its peer took 0.5 ms, on loopback). A wait only
    lengthens a transfer, so each ps's fastest large transfer is its estimate. A ps
    without a large transfer on a link that also carried a smaller one has none.

    >>> from types import SimpleNamespace
    >>> transfer = pd.DataFrame({"src": ["ps:0"] * 3, "dst": ["worker:0"] * 3, "bytes": [64, 1 << 20, 1 << 20],
    ...                          "duration_ns": [500_000, 1_500_000, 9_500_000]})
    >>> measured = SimpleNamespace(run=SimpleNamespace(frame=lambda kind: transfer))
    >>> _transfer_bandwidth(measured, ["ps:0", "ps:1"])  # 1 MiB in 1 ms; the 9 ms read waited
    {'ps:0': 1048576000.0}
    """
    transfer = measured.run.frame("transfer")
    if transfer.empty:
        return {}
    src, dst = transfer["src"].astype(str), transfer["dst"].astype(str)
    duration, size = transfer["duration_ns"].to_numpy("float64"), transfer["bytes"].to_numpy("float64")
    from_ps = (src.isin(ps_tasks) & dst.notna()).to_numpy() & (duration > 0)
    link = pd.factorize(src + "\n" + dst)[0]  # one code per (src, dst)
    round_trip = np.full(link.max() + 1, np.inf)  # the quickest small transfer per link
    small = from_ps & (size < MIN_BANDWIDTH_BYTES)
    np.minimum.at(round_trip, link[small], duration[small])
    large = np.flatnonzero(from_ps & (size >= MIN_BANDWIDTH_BYTES))
    large = large[duration[large] > round_trip[link[large]]]  # a link without a small one has none
    rate = size[large] / ((duration[large] - round_trip[link[large]]) / 1e9)
    senders = src.to_numpy()[large]
    return {ps: float(rate[senders == ps].max()) for ps in sorted(set(senders))}


def traced_ps_load(measured: Measurements) -> pd.DataFrame:
    """Bytes each ps moves per traced step, from ``transfer`` records, shaped like ``ps_load_table``.

    A step reads each variable from its ps and sends back a gradient of the same size,
    so half the bytes a ps moves per traced worker step stand for the variable bytes it
    holds. ``variables`` counts the distinct tensors moved, ``largest`` names the largest.
    Empty without transfers between workers and ps tasks.
    """
    traced = _transfers_in_steps(measured, measured.run.frame("transfer"))
    if traced.empty:
        return pd.DataFrame(columns=["task", "variables", "bytes", "bytes_share", "largest", "largest_bytes",
                                     "transfer_bytes"])
    traced_steps = len(set(zip(traced["worker"], traced["step"])))
    ps, size, tensor = traced["ps"].to_numpy(), traced["bytes"].to_numpy(), traced["tensor"]
    rows = []
    for task in sorted(set(ps)):
        own = np.flatnonzero(ps == task)
        largest = own[np.argmax(size[own])]  # the first of the largest, as idxmax
        rows.append({"task": task, "variables": tensor.iloc[own].nunique(),
                     "bytes": float(size[own].sum()) / 2 / traced_steps,
                     "largest": str(tensor.iloc[largest]), "largest_bytes": int(size[largest]),
                     "transfer_bytes": int(size[own].sum())})
    table = pd.DataFrame(rows)
    table["bytes_share"] = table["bytes"] / max(float(table["bytes"].sum()), 1.0)
    return table


def traced_link_cost(measured: Measurements, ps: str, faster_by_ns: float) -> pd.DataFrame:
    """How long each worker's traced steps waited on the link to ``ps``, and would on a faster one.

    Per traced step, the time at least one transfer between the worker and ``ps`` (either
    way: variable reads, gradient pushes) was in flight (``wait_ns``: overlapping
    transfers count once, as the step waits for them together), and how much of it goes
    when each transfer takes ``faster_by_ns`` less (``saving_ns``): ``faster_by_ns``
    times the number of successive round trips the step makes on the link. One row per
    worker: the means over its traced steps. Empty without such transfers.
    """
    columns = ["worker", "traced_steps", "wait_ns", "saving_ns"]
    traced = _transfers_in_steps(measured, measured.run.frame("transfer"))
    traced = traced[traced["ps"] == ps]
    if traced.empty:
        return pd.DataFrame(columns=columns)
    faster_end = traced["begin"] + (traced["end"] - traced["begin"] - faster_by_ns).clip(lower=0)
    traced = traced.assign(faster_end=faster_end)
    per_step = traced.groupby(["worker", "step"], sort=True).apply(
        lambda step: pd.Series({"wait_ns": _covered_ns(step["begin"], step["end"]),
                                "faster_ns": _covered_ns(step["begin"], step["faster_end"])}),
        include_groups=False,
    )
    per_step["saving_ns"] = per_step["wait_ns"] - per_step["faster_ns"]
    per_worker = per_step.groupby("worker").agg(traced_steps=("wait_ns", "size"), wait_ns=("wait_ns", "mean"),
                                               saving_ns=("saving_ns", "mean"))
    return per_worker.reset_index()[columns]


def traced_ps_wait(measured: Measurements, ps_tasks: list[str]) -> dict[str, float]:
    """Per ps, how long a traced worker step waited on its transfers (ns; the mean over the
    workers of ``traced_link_cost``'s ``wait_ns``): what the ps costs a step, whatever makes
    it slow — the bytes it serves, its own work before it answers, its link. Only the ps
    tasks with traced transfers; empty without any.
    """
    waits = {}
    for ps in ps_tasks:
        cost = traced_link_cost(measured, ps, 0.0)
        if not cost.empty:
            waits[ps] = float(cost["wait_ns"].mean())
    return waits


def _transfers_in_steps(measured: Measurements, transfer: pd.DataFrame) -> pd.DataFrame:
    """Transfers between a worker and a ps, each with the worker's step it happened in.

    Columns: ``worker``, ``ps``, ``step``, ``begin`` and ``end`` (ns, reference clock),
    ``bytes``, ``tensor``. A transfer's time is on its receiver's clock; those outside
    every step of the worker are left out.
    """
    if transfer.empty or measured.steps.empty:
        return pd.DataFrame(columns=["worker", "ps", "step", "begin", "end", "bytes", "tensor"])
    src, dst = transfer["src"].astype(str), transfer["dst"].astype(str)
    to_worker = dst.str.startswith("worker:") & src.str.startswith("ps:")
    to_ps = src.str.startswith("worker:") & dst.str.startswith("ps:")
    transfer = transfer[to_worker | to_ps]
    if transfer.empty:
        return pd.DataFrame(columns=["worker", "ps", "step", "begin", "end", "bytes", "tensor"])
    src, dst, to_worker = src[transfer.index], dst[transfer.index], to_worker[transfer.index]
    begin = to_reference_clock(transfer["time_ns"].astype("int64"), dst, measured.offsets)
    moved = pd.DataFrame({
        "worker": dst.where(to_worker, src), "ps": src.where(to_worker, dst),
        "begin": begin.astype("int64"), "end": (begin + transfer["duration_ns"]).astype("int64"),
        "bytes": transfer["bytes"].astype("int64"), "tensor": transfer["tensor"].astype(str),
    }).sort_values("begin")
    # Each transfer's step: its worker's latest step to begin at or before it (an as-of join
    # by worker, the steps by begin as sort_values orders them), if it had not ended.
    steps = measured.steps
    step_begin, step_end = steps["begin_ns"].to_numpy("int64"), steps["end_ns"].to_numpy("int64")
    by_begin = np.argsort(step_begin, kind="quicksort")
    codes, tasks = codes_of(steps["task"])
    begin, worker = moved["begin"].to_numpy(), moved["worker"].to_numpy()
    step_row = np.full(len(moved), -1)
    for code, task in enumerate(tasks):
        own_steps = by_begin[codes[by_begin] == code]
        own_moves = np.flatnonzero(worker == str(task))
        latest = np.searchsorted(step_begin[own_steps], begin[own_moves], side="right") - 1
        step_row[own_moves] = np.where(latest >= 0, own_steps[latest.clip(min=0)], -1)
    matched = step_row >= 0
    numbered = ~np.isnan(steps["step"].to_numpy("float64")[step_row])
    inside = np.flatnonzero(matched & numbered & (begin <= step_end[step_row]))
    placed = moved.iloc[inside].set_axis(inside)
    step = steps["step"].to_numpy()[step_row[inside]]
    placed.insert(2, "step", step if matched.all() else step.astype("float64"))
    return placed


def _covered_ns(begin: pd.Series, end: pd.Series) -> float:
    """Length of the union of the intervals ``[begin, end]``.

    >>> _covered_ns(pd.Series([0, 5, 30]), pd.Series([10, 12, 40]))
    22.0
    """
    order = np.argsort(begin.to_numpy(), kind="stable")
    starts, ends = begin.to_numpy(dtype="float64")[order], end.to_numpy(dtype="float64")[order]
    reach = np.maximum.accumulate(ends)
    previous = np.concatenate(([-np.inf], reach[:-1]))
    return float(np.clip(ends - np.maximum(starts, previous), 0, None).sum())
