"""Clock offsets from RPC probes (Cristian's method), chained through intermediate tasks."""

import pandas as pd
import pytest

from tfdiag.analysis.align import clock_offsets, to_reference_clock
from tfdiag.analysis.links import link_table


def _probes(src, dst, true_offset_ns, rtts_ns, start_ns=0):
    rows = []
    for i, rtt in enumerate(rtts_ns):
        send = start_ns + i * 1_000_000
        # The remote clock is read half-way through the round trip.
        rows.append({"src": src, "dst": dst, "send_ns": send, "remote_ns": send + rtt // 2 + true_offset_ns,
                     "recv_ns": send + rtt})
    return rows


def test_offsets_are_recovered_and_chained():
    rpc = pd.DataFrame(
        _probes("chief:0", "worker:0", 5_000_000, [100_000, 120_000, 90_000, 3_000_000])
        + _probes("worker:0", "ps:0", -2_000_000, [80_000, 60_000, 70_000, 900_000])
    )
    offsets = clock_offsets(link_table(rpc), "chief:0")
    assert offsets["chief:0"] == 0
    assert offsets["worker:0"] == pytest.approx(5_000_000, abs=1_000)
    assert offsets["ps:0"] == pytest.approx(3_000_000, abs=1_000)


def test_slow_probes_do_not_bias_the_estimate():
    # An asymmetric slow probe (the reply delayed) would shift a plain average by ~1 ms.
    rows = _probes("chief:0", "worker:0", 0, [100_000] * 8)
    rows.append({"src": "chief:0", "dst": "worker:0", "send_ns": 0, "remote_ns": 50_000, "recv_ns": 2_000_000})
    offsets = clock_offsets(link_table(pd.DataFrame(rows)), "chief:0")
    assert abs(offsets["worker:0"]) <= 1_000


def test_no_probes_means_no_shift():
    empty = pd.DataFrame(columns=["src", "dst", "send_ns", "remote_ns", "recv_ns"])
    assert clock_offsets(link_table(empty), "chief:0") == {"chief:0": 0}
    times = pd.Series([10, 20])
    shifted = to_reference_clock(times, pd.Series(["worker:3", "worker:3"]), {"chief:0": 0})
    assert shifted.tolist() == [10, 20]


def test_to_reference_clock_subtracts_each_tasks_offset():
    shifted = to_reference_clock(pd.Series([1_000, 1_000]), pd.Series(["a", "b"]), {"a": 100, "b": -50})
    assert shifted.tolist() == [900, 1_050]
