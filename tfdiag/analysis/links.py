"""Per-link latency: one row per (src, dst) pair, from the RPC probe or traced transfers.

``link_table`` summarises the RPC probe (round trips and clock offsets). Where no probe
ran (a TF1 session: ``DiagnosticsHook`` traces ``RecvTensor`` transfers instead),
``link_latency_table`` measures the same links from the traced transfers, so the
latency detectors read one table whichever collector fed it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# Fraction of a link's probes (the fastest ones) used for its clock-offset estimate: the
# fastest round trips bound the offset tightest (Cristian's method).
FASTEST_FRACTION = 0.25

# Samples a link needs before it is judged: each link is probed every few seconds (or
# traced every hundredth step), and one or two round trips of a short run on a loaded
# machine say more about that moment than about the link.
MIN_LINK_SAMPLES = 3

COLUMNS = ["src", "dst", "samples", "rtt_min_ns", "rtt_p50_ns", "rtt_p95_ns", "rtt_p99_ns", "offset_ns",
           "offset_uncertainty_ns", "bandwidth_bps"]


def latency_probes(rpc: pd.DataFrame) -> pd.DataFrame:
    """The pure latency probes (no payload) of the ``rpc`` records."""
    if "payload_bytes" not in rpc.columns:
        return rpc
    return rpc[rpc["payload_bytes"].fillna(0) == 0]


def link_table(rpc: pd.DataFrame) -> pd.DataFrame:
    """Round-trip statistics and clock offset per (src, dst).

    Columns: ``src``, ``dst``, ``samples``, ``rtt_min_ns`` (what the path itself costs: load on
    either end only adds to it), ``rtt_p50_ns``, ``rtt_p95_ns``, ``rtt_p99_ns``,
    ``offset_ns`` (dst clock minus src clock: the median over the fastest quarter of the
    probes), ``offset_uncertainty_ns`` (half the slowest round trip among those: each
    probe's offset is within half its own round trip, Cristian's bound, so their median is
    too), and
    ``bandwidth_bps`` (bytes per second from payload probes, NaN without them: the extra
    time a probe carrying N bytes takes over a plain one).
    """
    if rpc.empty:
        return pd.DataFrame(columns=COLUMNS)
    probes = pd.DataFrame({
        "src": rpc["src"].astype(str).astype("category"),
        "dst": rpc["dst"].astype(str).astype("category"),
        "rtt": rpc["recv_ns"] - rpc["send_ns"],
        "offset": rpc["remote_ns"] - (rpc["send_ns"] + rpc["recv_ns"]) // 2,
        "payload": rpc["payload_bytes"].fillna(0) if "payload_bytes" in rpc.columns else 0,
    })
    ping = probes[probes["payload"] == 0]
    if ping.empty:
        return pd.DataFrame(columns=COLUMNS)
    keys = ["src", "dst"]
    grouped = ping.groupby(keys, observed=True)["rtt"]
    table = grouped.quantile([0.5, 0.95, 0.99]).unstack()
    table.columns = ["rtt_p50_ns", "rtt_p95_ns", "rtt_p99_ns"]
    table["samples"] = grouped.size()
    table["rtt_min_ns"] = grouped.min()
    cutoff = grouped.transform("quantile", FASTEST_FRACTION)
    fastest = ping[ping["rtt"] <= cutoff].groupby(keys, observed=True)
    table["offset_ns"] = fastest["offset"].median()
    table["offset_uncertainty_ns"] = fastest["rtt"].max() / 2
    bulk = probes[probes["payload"] > 0].groupby(keys, observed=True)[["rtt", "payload"]].median()
    if bulk.empty:  # no payload probes: no bandwidth (and no reindex on an empty, differently typed index)
        table["bandwidth_bps"] = np.nan
    else:
        extra_s = (bulk["rtt"] - table["rtt_p50_ns"].reindex(bulk.index)) / 1e9
        table["bandwidth_bps"] = (bulk["payload"] / extra_s.where(extra_s > 0)).reindex(table.index)
    table = table.reset_index()
    table["src"] = table["src"].astype(str)
    table["dst"] = table["dst"].astype(str)
    return table[COLUMNS]


LATENCY_COLUMNS = ["src", "dst", "samples", "rtt_min_ns", "rtt_p50_ns", "rtt_p99_ns", "source"]


def transfer_link_table(transfer: pd.DataFrame) -> pd.DataFrame:
    """Latency per (src, dst) link from traced ``transfer`` records (TF1 ``RecvTensor``).

    A ``RecvTensor`` is a call the receiving task makes to the task that holds the
    tensor, so a transfer from ``ps:1`` to ``worker:0`` is a round trip on the link
    ``worker:0 -> ps:1``: its duration is the request, the wait for the tensor, and the
    reply with its bytes. ``rtt_min_ns`` (the quickest transfer, usually the smallest
    tensor) is what the path itself costs, as for a probe.

    Before (as logged)::

        src   dst       bytes  duration_ns
        ps:1  worker:0  8192   13000000
        ps:1  worker:0  256    12800000

    After::

        src       dst   samples  rtt_min_ns  rtt_p50_ns  rtt_p99_ns  source
        worker:0  ps:1  2        12800000    12900000    12998000    transfer

    >>> table = transfer_link_table(pd.DataFrame({"src": ["ps:1", "ps:1"], "dst": ["worker:0", "worker:0"],
    ...                                            "bytes": [8192, 256], "duration_ns": [13_000_000, 12_800_000]}))
    >>> table[["src", "dst", "samples", "rtt_min_ns"]].to_dict("records")
    [{'src': 'worker:0', 'dst': 'ps:1', 'samples': 2, 'rtt_min_ns': 12800000.0}]
    """
    if transfer.empty:
        return pd.DataFrame(columns=LATENCY_COLUMNS)
    calls = pd.DataFrame({
        "src": transfer["dst"].astype(str),  # the caller: the task that received the tensor
        "dst": transfer["src"].astype(str),
        "rtt": transfer["duration_ns"].astype("float64"),
    })
    grouped = calls.groupby(["src", "dst"], sort=True)["rtt"]
    table = grouped.quantile([0.5, 0.99]).unstack()
    table.columns = ["rtt_p50_ns", "rtt_p99_ns"]
    table["samples"] = grouped.size()
    table["rtt_min_ns"] = grouped.min()
    table["source"] = "transfer"
    return table.reset_index()[LATENCY_COLUMNS]


def link_latency_table(probe_links: pd.DataFrame, transfer: pd.DataFrame) -> pd.DataFrame:
    """Latency per (src, dst) link: the RPC probe's when it measured enough, else traced transfers.

    ``probe_links`` is a ``link_table``. The probe is used when at least one of its links
    has ``MIN_LINK_SAMPLES`` round trips; otherwise (no probe ran, or too briefly) the
    ``transfer`` records are (``transfer_link_table``). One source per run: a link is
    compared with its peers, and a probe's round trip carries no tensor while a
    transfer's does. Columns: ``src``, ``dst``, ``samples``, ``rtt_min_ns``,
    ``rtt_p50_ns``, ``rtt_p99_ns``, ``source`` (``rpc`` or ``transfer``).
    """
    if not probe_links.empty and (probe_links["samples"] >= MIN_LINK_SAMPLES).any():
        return probe_links.assign(source="rpc")[LATENCY_COLUMNS]
    return transfer_link_table(transfer)
