"""Per-link round trips and clock offsets from RPC probe records, and latency from traced transfers."""

import numpy as np
import pandas as pd
import pytest

from tfdiag.analysis.links import FASTEST_FRACTION, MIN_LINK_SAMPLES, link_latency_table, link_table


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


@pytest.mark.parametrize("seed", range(6))
def test_every_link_of_one_sort_reads_as_its_own_probes_alone(seed):
    # Many links at once (a 1,024-worker run has 4,096): each link's figures are those of
    # its probes alone, quantiles as pandas takes them, with tied and missing round trips.
    rng = np.random.default_rng(seed)
    count = 400
    send = rng.integers(0, 10**9, count)
    rtt = rng.choice([100_000, 120_000, 150_000, 400_000], count) + rng.integers(0, 3, count) * 1_000
    rpc = pd.DataFrame({"src": rng.choice(["chief:0", "worker:0", "worker:1"], count),
                        "dst": rng.choice(["ps:0", "ps:1", "worker:2"], count), "send_ns": send,
                        "remote_ns": send + rng.integers(-50_000, 50_000, count) + rtt // 2, "recv_ns": send + rtt,
                        "payload_bytes": np.where(rng.random(count) < 0.1, 4096, 0)})
    if seed % 2:  # records whose receive time is missing
        rpc["recv_ns"] = rpc["recv_ns"].astype("float64").where(rng.random(count) > 0.1)
    table = link_table(rpc).set_index(["src", "dst"])
    pings = rpc[rpc["payload_bytes"] == 0]
    assert len(table) == pings.groupby(["src", "dst"]).ngroups
    for (src, dst), own in pings.groupby(["src", "dst"]):
        link, own_rtt = table.loc[(src, dst)], own["recv_ns"] - own["send_ns"]
        offset = own["remote_ns"] - (own["send_ns"] + own["recv_ns"]) // 2
        fastest = own_rtt <= own_rtt.quantile(FASTEST_FRACTION)
        assert link["samples"] == len(own) and link["rtt_min_ns"] == own_rtt.min()
        assert [link["rtt_p50_ns"], link["rtt_p95_ns"], link["rtt_p99_ns"]] == \
            [own_rtt.quantile(q) for q in (0.5, 0.95, 0.99)]
        assert link["offset_ns"] == offset[fastest].median()
        assert link["offset_uncertainty_ns"] == own_rtt[fastest].max() / 2


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
