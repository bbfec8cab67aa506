"""Per-link RPC latency: one row per (src, dst) pair of the RPC probe."""

from __future__ import annotations

import pandas as pd

# Fraction of a link's probes (the fastest ones) used for its clock-offset estimate: the
# fastest round trips bound the offset tightest (Cristian's method).
FASTEST_FRACTION = 0.25

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
    extra_s = (bulk["rtt"] - table["rtt_p50_ns"].reindex(bulk.index)) / 1e9
    table["bandwidth_bps"] = (bulk["payload"] / extra_s.where(extra_s > 0)).reindex(table.index)
    table = table.reset_index()
    table["src"] = table["src"].astype(str)
    table["dst"] = table["dst"].astype(str)
    return table[COLUMNS]
