"""Rates derived from cumulative counters (host samplers' network bytes), for the charts.

The host-utilisation chart (``tfdiag.report.figures.host_utilization``) plots the rate
over time; the Report's ``hosts`` section holds each sampler's mean rate
(``tfdiag.analysis.devices``). Computing belongs here; the figure only converts units.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def network_rate(samples: pd.DataFrame) -> np.ndarray:
    """Bytes per second sent plus received, from one sampler's cumulative counters (time-sorted).

    The first sample has no rate (NaN); a counter that went backwards (a restart) gives NaN.

    >>> samples = pd.DataFrame({"time_ns": [0, 10**9, 2 * 10**9], "net_sent_bytes": [0, 300, 100],
    ...                         "net_recv_bytes": [0, 100, 0]})
    >>> network_rate(samples).tolist()
    [nan, 400.0, nan]
    """
    moved = (samples["net_sent_bytes"].astype("float64") + samples["net_recv_bytes"].astype("float64")).to_numpy()
    times_ns = samples["time_ns"].to_numpy(dtype="int64")
    rate = np.full(len(moved), np.nan)
    if len(moved) > 1:
        delta, elapsed = np.diff(moved), np.diff(times_ns) / 1e9  # differences first: ns since 1970 overflow float precision
        with np.errstate(divide="ignore", invalid="ignore"):
            rate[1:] = np.where((elapsed > 0) & (delta >= 0), delta / elapsed, np.nan)
    return rate


__all__ = ["network_rate"]
