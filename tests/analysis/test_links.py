"""Per-link round trips and clock offsets from RPC probe records, and latency from traced transfers."""

import pandas as pd
import pytest

from tfdiag.analysis.links import MIN_LINK_SAMPLES, link_latency_table, link_table


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


def _transfers(src, dst, durations_ms):
    return [{"src": src, "dst": dst, "time_ns": i * 10_000_000, "bytes": 8192, "duration_ns": int(ms * 1e6),
             "tensor": "edge_1_read"} for i, ms in enumerate(durations_ms)]


def test_a_transfer_is_a_round_trip_of_its_receiver():
    # RecvTensor is called by the task that receives the tensor: ps:1 -> worker:0 is the link worker:0 -> ps:1.
    transfer = pd.DataFrame(_transfers("ps:1", "worker:0", [13.0, 12.5, 14.0]))
    [link] = link_latency_table(link_table(pd.DataFrame()), transfer).to_dict("records")
    assert (link["src"], link["dst"], link["source"]) == ("worker:0", "ps:1", "transfer")
    assert link["samples"] == 3 and link["rtt_min_ns"] == 12_500_000 and link["rtt_p50_ns"] == 13_000_000


def _probes(count):
    return pd.DataFrame([{"src": "worker:0", "dst": "ps:1", "send_ns": i * 1_000_000, "remote_ns": i * 1_000_000 + 50_000,
                          "recv_ns": i * 1_000_000 + 100_000, "payload_bytes": 0} for i in range(count)])


@pytest.mark.parametrize("probes, source", [(MIN_LINK_SAMPLES, "rpc"), (MIN_LINK_SAMPLES - 1, "transfer"), (0, "transfer")])
def test_the_probe_is_the_source_when_it_measured_enough(probes, source):
    transfer = pd.DataFrame(_transfers("ps:1", "worker:0", [13.0] * 5))
    table = link_latency_table(link_table(_probes(probes) if probes else pd.DataFrame()), transfer)
    assert list(table["source"]) == [source]
    assert table["rtt_min_ns"].iloc[0] == (100_000 if source == "rpc" else 13_000_000)
