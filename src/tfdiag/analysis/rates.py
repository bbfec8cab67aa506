"""Rates from cumulative counters (a host sampler's network and disk bytes): one rule for all.

The rule: a counter's increase between two samples over the time between them; where the
counters' sum went down (a counter reset: a restarted process or host, a device gone) that
interval has no rate, and a mean over a span leaves its bytes and its time out. The
host-utilisation chart (``tfdiag.report.figures``) plots ``network_rate`` over time; the
Report's ``hosts`` section holds each sampler's ``mean_rate`` (``tfdiag.analysis.devices``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

NETWORK_COUNTERS = ("net_sent_bytes", "net_recv_bytes")
DISK_COUNTERS = ("disk_read_bytes", "disk_write_bytes")


def counter_deltas(samples: pd.DataFrame, counters: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Per interval between consecutive samples (time-sorted): the increase of the counters'
    sum (NaN where it went down) and the elapsed ns."""
    total = sum(samples[name].astype("float64") for name in counters).to_numpy()
    increase = np.diff(total)
    increase[increase < 0] = np.nan
    # Differences of the int64 times: ns since 1970 overflow float precision.
    return increase, np.diff(samples["time_ns"].to_numpy(dtype="int64"))


def counter_rate(samples: pd.DataFrame, counters: tuple[str, ...]) -> np.ndarray:
    """Per sample, the counters' increase per second since the previous sample; the first
    sample, a reset and a stalled clock give NaN."""
    increase, elapsed_ns = counter_deltas(samples, counters)
    rate = np.full(len(samples), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate[1:] = np.where(elapsed_ns > 0, increase / (elapsed_ns / 1e9), np.nan)
    return rate


def mean_rate(samples: pd.DataFrame, counters: tuple[str, ...]) -> float:
    """The counters' increase per second over the samples' span, intervals with a reset left
    out (their bytes and their time); NaN without time to divide by.

    >>> samples = pd.DataFrame({"time_ns": [0, 10**9, 2 * 10**9, 3 * 10**9], "sent": [0, 300, 100, 200]})
    >>> mean_rate(samples, ("sent",))  # 300 bytes, then a reset, then 100 bytes: over 2 s
    200.0
    """
    increase, elapsed_ns = counter_deltas(samples, counters)
    kept = ~np.isnan(increase)
    span_ns = int(elapsed_ns[kept].sum())
    return float(increase[kept].sum()) / (span_ns / 1e9) if span_ns > 0 else float("nan")


def network_rate(samples: pd.DataFrame) -> np.ndarray:
    """Bytes per second sent plus received, per sample of one sampler (time-sorted).

    >>> samples = pd.DataFrame({"time_ns": [0, 10**9, 2 * 10**9], "net_sent_bytes": [0, 300, 100],
    ...                         "net_recv_bytes": [0, 100, 0]})
    >>> network_rate(samples).tolist()
    [nan, 400.0, nan]
    """
    return counter_rate(samples, NETWORK_COUNTERS)


__all__ = ["DISK_COUNTERS", "NETWORK_COUNTERS", "counter_deltas", "counter_rate", "mean_rate", "network_rate"]
