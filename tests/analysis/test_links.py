"""Per-link round trips and clock offsets from RPC probe records."""

import pandas as pd

from tfdiag.analysis.links import link_table


def test_the_offset_lies_within_its_reported_uncertainty():
    # One clock (true offset 0). Queueing on the way back puts each remote read late in
    # its round trip: each probe's offset is then nearly half its round trip, and the
    # median over the fastest probes exceeds half the single fastest one.
    rtts = [100_000, 110_000, 120_000, 130_000, 400_000, 500_000, 600_000, 700_000]
    rows = [{"src": "chief:0", "dst": "ps:0", "send_ns": i * 1_000_000,
             "remote_ns": i * 1_000_000 + rtt - 1_000, "recv_ns": i * 1_000_000 + rtt}
            for i, rtt in enumerate(rtts)]
    [link] = link_table(pd.DataFrame(rows)).to_dict("records")
    assert link["samples"] == 8 and link["rtt_min_ns"] == 100_000
    assert link["offset_ns"] > link["rtt_min_ns"] / 2  # what a bound of half the fastest would miss
    assert abs(link["offset_ns"]) <= link["offset_uncertainty_ns"] == 55_000
