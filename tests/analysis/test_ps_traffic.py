"""ps_traffic: bandwidth per ps from traced RecvTensor transfers (TF1 sessions)."""

from __future__ import annotations

import pytest

from tfdiag.analysis import analyze
from tfdiag.analysis.load import load_run
from tfdiag.analysis.measurements import measure
from tfdiag.analysis.ps_traffic import ps_traffic

KERNEL = 256 << 10


def _tf1_session(builder, ps1_large_ms, step_ms=23.0):
    """A clean TF1 session as tf1_session runs it: two 256 KB kernels on ps:1, a few KB on
    ps:0, 0.3 ms round trips; each traced step reads both kernels, in ``ps1_large_ms``."""
    run = builder(strategy=None)
    run.placement("dense1/kernel", "ps:1", KERNEL).placement("dense2/kernel", "ps:1", KERNEL)
    run.placement("dense1/bias", "ps:0", 1024).placement("out/kernel", "ps:0", 2048)
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=step_ms, idle_ms=1)
        run.transfer("ps:0", worker, 0.3, size=1024).transfer("ps:1", worker, 0.3, size=1024)
        for at_ms, duration_ms in zip((0.5, 0.6), ps1_large_ms):
            run.transfer("ps:1", worker, duration_ms, size=KERNEL, tensors=1, at_ms=at_ms)
    return run


def test_a_read_that_waited_for_the_ps_is_not_bandwidth(builder):
    # One kernel read comes in 0.5 ms, the other waited 4 ms for the ps (seen on loopback):
    # the link moves 256 KB in 0.2 ms beyond its round trip.
    path = _tf1_session(builder, ps1_large_ms=(0.5, 4.0)).write()
    traffic = ps_traffic(measure(load_run(path)))
    assert traffic.bandwidth_bps["ps:1"] == pytest.approx(KERNEL / 0.2e-3, rel=0.01)
    # Taken for bandwidth, the wait would make 1.1 MB a step cost 16 ms of a 23 ms step.
    assert analyze(path).findings == []


def test_a_link_that_moves_every_large_tensor_slowly_keeps_its_bandwidth(builder):
    # At 100 Mb/s each 256 KB read takes 21 ms beyond the round trip: every transfer shows it.
    path = _tf1_session(builder, ps1_large_ms=(21.3, 21.3), step_ms=100.0).write()
    traffic = ps_traffic(measure(load_run(path)))
    assert traffic.bandwidth_bps["ps:1"] == pytest.approx(KERNEL / 21e-3, rel=0.01)
    assert "communication_bound" in [finding.kind for finding in analyze(path).findings]


def test_bytes_per_step_are_what_traced_steps_moved_not_what_the_ps_holds(builder):
    # tf1_mts --embedding-partitions 1: a 12.8 MB table on ps:1 read 512 KB of rows a step.
    run = _tf1_session(builder, ps1_large_ms=(0.5, 0.5))
    run.placement("wide/embeddings", "ps:1", 12_800_000)
    for worker in ("worker:0", "worker:1"):
        run.transfer("ps:1", worker, 0.7, size=512 << 10, tensors=1, at_ms=1.0)
        run.transfer(worker, "ps:1", 0.7, size=512 << 10, tensors=1, at_ms=20.0)
    path = run.write()
    traffic = ps_traffic(measure(load_run(path)))
    # Half of what a traced step moved with ps:1: two small tensors, two kernels, the rows both ways.
    assert traffic.bytes_per_ps["ps:1"] == (2 * 1024 + 2 * KERNEL + 2 * (512 << 10)) / 2
    assert "communication_bound" not in [finding.kind for finding in analyze(path).findings]
