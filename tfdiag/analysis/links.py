"""Per-link RPC latency: one row per (src, dst) pair of the RPC probe."""

from __future__ import annotations

import pandas as pd

# Fraction of a link's probes (the fastest ones) used for its clock-offset estimate: the
# fastest round trips bound the offset tightest (Cristian's method).
FASTEST_FRACTION = 0.25


def latency_probes(rpc: pd.DataFrame) -> pd.DataFrame:
    """The pure latency probes (no payload) of the ``rpc`` records."""
    if "payload_bytes" not in rpc.columns:
        return rpc
    return rpc[rpc["payload_bytes"].fillna(0) == 0]


def link_table(rpc: pd.DataFrame) -> pd.DataFrame:
    """Round-trip statistics and clock offset per (src, dst).

    Columns: ``src``, ``dst``, ``samples``, ``rtt_p50_ns``, ``rtt_p95_ns``, ``rtt_p99_ns``,
    ``offset_ns`` (dst clock minus src clock, from the fastest probes),
    ``offset_uncertainty_ns`` (half the fastest round trip: Cristian's bound), and
    ``bandwidth_bps`` (bytes per second from payload probes, NaN without them).
    """
    columns = ["src", "dst", "samples", "rtt_p50_ns", "rtt_p95_ns", "rtt_p99_ns", "offset_ns",
               "offset_uncertainty_ns", "bandwidth_bps"]
    if rpc.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    payload = rpc["payload_bytes"].fillna(0) if "payload_bytes" in rpc.columns else pd.Series(0, index=rpc.index)
    for (src, dst), probes in rpc.groupby(["src", "dst"], observed=True):
        ping = probes[payload[probes.index] == 0]
        bulk = probes[payload[probes.index] > 0]
        if ping.empty:
            continue
        rtt = ping["recv_ns"] - ping["send_ns"]
        fastest = ping[rtt <= rtt.quantile(FASTEST_FRACTION)]
        offset = (fastest["remote_ns"] - (fastest["send_ns"] + fastest["recv_ns"]) // 2).median()
        bandwidth = float("nan")
        if not bulk.empty:
            extra_s = ((bulk["recv_ns"] - bulk["send_ns"]).median() - rtt.median()) / 1e9
            if extra_s > 0:
                bandwidth = float(bulk["payload_bytes"].median()) / extra_s
        rows.append({
            "src": str(src), "dst": str(dst), "samples": len(ping),
            "rtt_p50_ns": float(rtt.quantile(0.5)), "rtt_p95_ns": float(rtt.quantile(0.95)),
            "rtt_p99_ns": float(rtt.quantile(0.99)), "offset_ns": float(offset),
            "offset_uncertainty_ns": float(rtt.min()) / 2, "bandwidth_bps": bandwidth,
        })
    return pd.DataFrame(rows, columns=columns)
