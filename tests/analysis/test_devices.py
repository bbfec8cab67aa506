"""Host and GPU tables (tfdiag.analysis.devices)."""

from __future__ import annotations

import pandas as pd

from tfdiag.analysis.devices import host_table


def test_a_counter_reset_gives_the_host_table_no_negative_rate():
    # A restarted sampler's counters start again low: 1000 B/s before and after, never negative.
    counters = [0, 1000, 2000, 500, 1500]
    system = pd.DataFrame({"host": "h", "task": "worker:0", "time_ns": [i * 10**9 for i in range(5)],
                           "cpu_pct": 10.0, "mem_used_frac": 0.5, "net_sent_bytes": counters,
                           "net_recv_bytes": counters, "disk_read_bytes": counters, "disk_write_bytes": 0})
    row = host_table(system).iloc[0]
    assert row["net_bytes_per_s"] == 2000.0 and row["disk_bytes_per_s"] == 1000.0
