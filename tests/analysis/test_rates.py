"""Rates from cumulative counters (tfdiag.analysis.rates)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfdiag.analysis.rates import mean_rate, network_rate


def test_network_rate_ignores_counter_resets():
    samples = pd.DataFrame({"time_ns": [0, 10**9, 2 * 10**9, 3 * 10**9], "net_sent_bytes": [0, 100, 20, 120],
                            "net_recv_bytes": [0, 0, 0, 0]})
    rate = network_rate(samples)
    assert np.isnan(rate[0]) and rate[1] == 100 and np.isnan(rate[2]) and rate[3] == 100


def test_network_rate_of_one_sample_or_a_stalled_clock_is_nan():
    assert np.isnan(network_rate(pd.DataFrame({"time_ns": [5], "net_sent_bytes": [1], "net_recv_bytes": [1]}))).all()
    same_time = pd.DataFrame({"time_ns": [7, 7], "net_sent_bytes": [0, 10], "net_recv_bytes": [0, 10]})
    assert np.isnan(network_rate(same_time)).all()


def test_mean_rate_leaves_a_counter_reset_out():
    # 100 bytes in 1 s, a reset (the counter falls to 20), 100 bytes in 1 s: 100 B/s, not negative.
    samples = pd.DataFrame({"time_ns": [0, 10**9, 2 * 10**9, 3 * 10**9], "sent": [0, 100, 20, 120]})
    assert mean_rate(samples, ("sent",)) == 100.0
    assert np.isnan(mean_rate(samples.iloc[:1], ("sent",)))
