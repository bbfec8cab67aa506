"""Every detector on a run that plants its cause, and on a clean run that must stay quiet."""

import pytest

from tests.runs import MS, START_NS, scheduled_ahead
from tfdiag.analysis import analyze


def _clean(builder, **kwargs):
    run = builder(**kwargs)
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=20, input_ms=1, closures=True)
    return run


def _kinds(report):
    return [finding.kind for finding in report.findings]


def test_clean_run_has_no_findings(builder):
    run = _clean(builder).rpc("worker:0", "ps:0", 0.3).rpc("worker:0", "ps:1", 0.35)
    run.placement("dense/kernel", "ps:0", 2 << 20).placement("dense_1/kernel", "ps:1", 2 << 20)
    run.shard("worker:0", 3200).shard("worker:1", 3300)
    report = analyze(run.write())
    assert report.findings == []
    assert report.summary["primary_bottleneck"] is None


def test_input_bound(builder):
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=30, input_ms=20)
    report = analyze(run.write())
    finding = report.primary
    assert finding.kind == "input_bound"
    assert finding.tasks == ("worker:0", "worker:1")
    # Prefetching overlaps 20 ms of input with 10 ms of compute: period 31 ms -> 21 ms.
    assert finding.recommendation.predicted_speedup == pytest.approx(31 / 21, rel=0.01)
    assert "prefetch" in finding.recommendation.change


def test_straggler_in_async_training(builder):
    run = builder()
    run.steps("worker:0", step_ms=20).steps("worker:1", step_ms=60)
    finding = analyze(run.write()).primary
    assert finding.kind == "straggler" and finding.tasks == ("worker:1",)
    assert finding.severity.value == "critical"
    # Each worker's 100 steps: worker:1's over its 6.1 s at worker:0's 21-ms period (the rates
    # added, 1/21 + 1/61 becoming 2/21, would have worker:0 step the whole 6.1 s, not 2.1).
    assert finding.recommendation.predicted_speedup == pytest.approx((100 + 100 * 61 / 21) / 200, rel=0.01)


def test_straggler_in_sync_training_uses_the_slowest_worker(builder):
    run = builder(strategy="MultiWorkerMirroredStrategy", ps=0)
    run.steps("worker:0", step_ms=20).steps("worker:1", step_ms=30).steps("worker:2", step_ms=20)
    run.cluster["worker"] = ["h"] * 3
    finding = analyze(run.write()).primary
    assert finding.kind == "straggler" and finding.tasks == ("worker:1",)
    assert finding.recommendation.predicted_speedup == pytest.approx(31 / 21, rel=0.01)


def test_shard_imbalance(builder):
    # Synchronous: an epoch lasts as long as the largest shard.
    run = builder(strategy="MultiWorkerMirroredStrategy", ps=0)
    run.steps("worker:0", step_ms=20).steps("worker:1", step_ms=20)
    run.shard("worker:0", 1000).shard("worker:1", 3000)
    finding = analyze(run.write()).primary
    assert finding.kind == "shard_imbalance" and finding.tasks == ("worker:1",)
    assert finding.recommendation.predicted_speedup == pytest.approx(3000 / 2000)


def test_shard_imbalance_in_async_training_predicts_the_update_rate(builder):
    # worker:1's batches are 3x larger and its steps 40 ms against 20: balanced, it would
    # step like worker:0, and the rates 1/21 + 1/41 become 2/21.
    run = builder()
    run.steps("worker:0", count=120, step_ms=20, examples=512).steps("worker:1", count=60, step_ms=40, examples=1536)
    finding = analyze(run.write()).primary
    assert finding.kind == "shard_imbalance" and finding.tasks == ("worker:1",)
    assert finding.recommendation.predicted_speedup == pytest.approx((2 / 21) / (1 / 21 + 1 / 41), rel=0.02)


def test_ps_hotspot_predicts_the_gain_of_partitioning(builder):
    run = _clean(builder)
    run.placement("embedding", "ps:0", 16_000_000).placement("bias", "ps:1", 1_000)
    for ps in ("ps:0", "ps:1"):
        run.rpc("worker:0", ps, 0.5).rpc("worker:0", ps, 0.5 + 1.0, payload_bytes=1_000_000)  # ~1 GB/s
    finding = next(f for f in analyze(run.write()).findings if f.kind == "ps_hotspot")
    assert finding.tasks == ("ps:0",)
    assert finding.severity.value == "critical"
    assert "MinSizePartitioner" in finding.recommendation.change
    assert finding.recommendation.predicted_speedup >= 1.1


def test_a_hot_ps_with_no_traffic_to_predict_from_is_info(builder):
    # The bytes sit on ps:0, but no probe or traced transfer shows what they cost a step.
    run = _clean(builder).placement("embedding", "ps:0", 16_000_000).placement("bias", "ps:1", 1_000)
    finding = next(f for f in analyze(run.write()).findings if f.kind == "ps_hotspot")
    assert finding.tasks == ("ps:0",) and finding.recommendation.predicted_speedup is None
    assert finding.severity.value == "info"


def test_slow_link_to_one_ps(builder):
    run = _clean(builder)
    for worker in ("worker:0", "worker:1"):
        run.rpc(worker, "ps:0", 0.4).rpc(worker, "ps:1", 25.4)
    finding = analyze(run.write()).primary
    assert finding.kind == "slow_link" and finding.tasks == ("ps:1",)
    assert finding.evidence["peer_rtt_ms_min"] == pytest.approx(0.4, abs=0.01)
    assert finding.evidence["rtt_ms_min"] == {"worker:0->ps:1": 25.4, "worker:1->ps:1": 25.4}
    assert finding.recommendation.predicted_speedup > 1.0


def test_a_loaded_host_is_not_a_slow_link(builder):
    # Most probes to ps:0 wait behind a busy worker (15 ms), but one in four gets through in
    # 0.5 ms, all along the run: the path is fast, the load is elsewhere.
    run = _clean(builder)
    for worker in ("worker:0", "worker:1"):
        for i in range(40):
            send = START_NS + i * 50 * MS
            rtt = int((0.5 if i % 4 == 0 else 15.0) * MS)
            run.record("rpc", src=worker, dst="ps:0", send_ns=send, remote_ns=send + rtt // 2, recv_ns=send + rtt,
                       payload_bytes=0)
        run.rpc(worker, "ps:1", 0.6)
    assert "slow_link" not in [f.kind for f in analyze(run.write()).findings]


def test_communication_bound_ps_recommends_all_reduce(builder):
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=100)
        for ps in ("ps:0", "ps:1"):
            run.rpc(worker, ps, 0.5).rpc(worker, ps, 10.5, payload_bytes=1_000_000)  # 100 MB/s
    run.placement("a", "ps:0", 3_000_000).placement("b", "ps:1", 3_000_000)
    finding = next(f for f in analyze(run.write()).findings if f.kind == "communication_bound")
    assert "MultiWorkerMirroredStrategy" in finding.recommendation.change
    assert finding.recommendation.predicted_speedup > 1.05


def test_communication_bound_all_reduce(builder):
    run = builder(strategy="MultiWorkerMirroredStrategy", ps=0)
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=40).allreduce(worker, duration_ms=30)
    finding = analyze(run.write()).primary
    assert finding.kind == "communication_bound"
    assert finding.recommendation.predicted_speedup == pytest.approx(40 / 25)


def test_gpu_underutilized_and_compute_bound(builder):
    idle = _clean(builder).gpu("host-a", 0, 25.0)
    finding = analyze(idle.write()).primary
    assert finding.kind == "gpu_underutilized" and finding.tasks == ("host-a/GPU:0",)
    assert finding.recommendation.predicted_speedup == pytest.approx(2 / 1.25)
    busy = _clean(builder).gpu("host-a", 0, 95.0)
    finding = analyze(busy.write()).primary
    assert finding.kind == "compute_bound" and finding.severity.value == "info"
    assert "mixed_float16" in finding.recommendation.change


def test_coordinator_bound(builder):
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=4, idle_ms=8, closures=True)
    finding = analyze(scheduled_ahead(run).write()).primary
    assert finding.kind == "coordinator_bound"
    assert finding.evidence["idle_frac"]["worker:0"] == pytest.approx(8 / 12, abs=0.01)
    # The 8 ms between closures paid once per 10 steps: period 12 ms -> 4.8 ms.
    assert finding.recommendation.predicted_speedup == pytest.approx(12 / 4.8, rel=0.01)


def test_task_failure_with_recovery_time(builder):
    run = _clean(builder).fault("worker:1", "failure", 500).fault("worker:1", "recovery", 1500)
    report = analyze(run.write())
    finding = next(f for f in report.findings if f.kind == "task_failure")
    assert finding.tasks == ("worker:1",) and finding.severity.value == "warning"
    [failure] = [fault for fault in report.faults if fault["kind"] == "failure"]
    assert failure["recovered_after_s"] == pytest.approx(1.0)
    assert failure["time"] == pytest.approx(0.5)


def _tf1_session(builder, ps1_ms, ps0_ms=0.3, size=8192):
    """A TF1 between-graph run: steps and traced RecvTensor transfers, no RPC probe, no placement.

    Each traced 40 ms step reads the variables from both ps at its start and pushes the
    gradients 20 ms in, each a round trip on the link to that ps."""
    run = builder(strategy=None)
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=40, idle_ms=1)
        run.transfer("ps:0", worker, ps0_ms, size=size).transfer("ps:1", worker, ps1_ms, size=size)
        run.transfer(worker, "ps:0", ps0_ms, size=size, at_ms=20).transfer(worker, "ps:1", ps1_ms, size=size, at_ms=20)
    return run


def test_slow_link_from_traced_transfers(builder):
    # The TF1 slow-ps scenario: RecvTensor from ps:1 takes ~13 ms, from ps:0 ~0.3 ms.
    finding = analyze(_tf1_session(builder, ps1_ms=13.0).write()).primary
    assert finding.kind == "slow_link" and finding.tasks == ("ps:1",)
    assert finding.evidence["latency_source"] == "transfer"
    assert finding.evidence["rtt_ms_min"] == {"worker:0->ps:1": 13.0, "worker:1->ps:1": 13.0}
    assert finding.evidence["peer_rtt_ms_min"] == pytest.approx(0.3)
    # Two rounds of two concurrent 13 ms transfers per traced step: the step waits 26 ms, not 52.
    assert finding.evidence["link_wait_ms_per_step"] == {"worker:0": 26.0, "worker:1": 26.0}
    # At the peers' 0.3 ms each round saves 12.7 ms: period 41 ms -> 15.6 ms.
    assert finding.evidence["link_saving_ms_per_step"] == {"worker:0": 25.4, "worker:1": 25.4}
    assert finding.recommendation.predicted_speedup == pytest.approx(41 / 15.6, rel=0.01)


def test_clean_tf1_session_has_no_findings(builder):
    report = analyze(_tf1_session(builder, ps1_ms=0.4).write())
    assert report.findings == []


def test_ps_hotspot_from_traced_transfers(builder):
    run = _tf1_session(builder, ps1_ms=0.3)
    for worker in ("worker:0", "worker:1"):
        run.transfer("ps:0", worker, 4.0, size=4 << 20, tensors=1).transfer(worker, "ps:0", 4.0, size=4 << 20, tensors=1)
    finding = next(f for f in analyze(run.write()).findings if f.kind == "ps_hotspot")
    assert finding.tasks == ("ps:0",) and finding.evidence["bytes_source"] == "transfer"
    assert finding.evidence["bytes_share"]["ps:0"] > 0.99
    assert finding.recommendation.predicted_speedup > 1.0


def test_a_worker_starved_between_closures_is_a_straggler_by_its_period(builder):
    """A CPU quota stops the worker's process between closures: same step time, far fewer steps."""
    run = builder()
    run.steps("worker:0", count=100, step_ms=20).steps("worker:1", count=35, step_ms=22, idle_ms=40)
    finding = analyze(run.write()).primary
    assert finding.kind == "straggler" and finding.tasks == ("worker:1",)
    assert "less often" in finding.title
    assert finding.evidence["step_share"]["worker:1"] == pytest.approx(35 / 135, abs=0.001)
    # worker:1 starts a step every 62 ms; at its peer's 21 ms the rates 1/21 + 1/62 become 2/21.
    assert finding.recommendation.predicted_speedup == pytest.approx((2 / 21) / (1 / 21 + 1 / 62), rel=0.01)


def test_workers_idle_alike_between_closures_name_no_straggler(builder):
    """Every worker waiting as long between closures is not one slow worker."""
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=20, idle_ms=40)
    assert "straggler" not in _kinds(analyze(run.write()))


def test_synchronous_workers_are_not_judged_by_their_period(builder):
    run = builder(strategy="MultiWorkerMirroredStrategy", ps=0)
    run.steps("worker:0", step_ms=20).steps("worker:1", step_ms=20, idle_ms=40)
    run.cluster["worker"] = ["h"] * 2
    assert "straggler" not in _kinds(analyze(run.write()))


def _one_step_closures_behind_a_slow_ps(builder, tail_ms):
    """One step per closure; each closure's result reaches the coordinator ``tail_ms`` after its end."""
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=30, idle_ms=40, closures=True)
        run.rpc(worker, "ps:0", 0.4).rpc(worker, "ps:1", 25.4)
    ends = {(r["task"], r["step"]): r["end_ns"] for kind, r in run.records if kind == "step"}
    run.records = [(kind, dict(r, result_ns=ends[(r["worker"], r["closure_id"])] + int(tail_ms * 1e6)) if kind == "closure" else r)
                   for kind, r in run.records]
    return scheduled_ahead(run)


def test_a_slow_ps_link_between_closures_is_slow_link_not_coordinator_bound(builder):
    # 40 ms idle between closures, of which the tail waits 27 ms: one 25.4 ms round trip to ps:1.
    findings = analyze(_one_step_closures_behind_a_slow_ps(builder, tail_ms=27).write()).findings
    assert [f.kind for f in findings] == ["slow_link"]
    # 25 ms saved inside the step and the fastest tail, 27 ms (under two round trips), but
    # two round trips to ps:0 (0.4 ms): period 70 ms -> 18.8 ms.
    assert findings[0].recommendation.predicted_speedup == pytest.approx(70 / 18.8, rel=0.01)


def test_idle_time_beyond_the_ps_round_trip_is_still_the_coordinators(builder):
    # The same link, but results come back at once: the 40 ms of idle time are the coordinator's.
    findings = analyze(_one_step_closures_behind_a_slow_ps(builder, tail_ms=1).write()).findings
    assert {f.kind for f in findings} == {"slow_link", "coordinator_bound"}
    coordinator = next(f for f in findings if f.kind == "coordinator_bound")
    assert coordinator.evidence["ps_round_trip_ms_per_step"] == {"worker:0": 1.0, "worker:1": 1.0}


def test_a_worker_idle_longer_than_its_peer_adds_nothing_to_coordinator_bound(builder):
    run = builder()
    run.steps("worker:0", step_ms=4, idle_ms=8, closures=True).steps("worker:1", count=40, step_ms=4, idle_ms=30, closures=True)
    findings = analyze(run.write()).findings
    coordinator = next(f for f in findings if f.kind == "coordinator_bound")
    assert coordinator.evidence["idle_frac"]["worker:1"] == pytest.approx(8 / 34, abs=0.01)
    assert next(f for f in findings if f.kind == "straggler").tasks == ("worker:1",)


def test_a_worker_killed_before_its_first_step_still_counts_in_the_capacity_lost(builder):
    # Two workers in the cluster; worker:1 fails at the start of a 2 s run and never steps:
    # half the capacity is gone for the whole run, which would take 1 s with both.
    run = builder().steps("worker:0", count=100, step_ms=19).fault("worker:1", "failure", 0)
    finding = next(f for f in analyze(run.write()).findings if f.kind == "task_failure")
    assert finding.recommendation.predicted_speedup == pytest.approx(2 / 1, rel=0.02)


def test_ps_hotspot_predicts_from_what_each_ps_costs_a_traced_step(builder):
    # TF1: 4 MB on ps:0. Its small tensors come back at once (the link is fine), but its
    # large reads and gradient pushes take 12 ms each of a 40 ms step; ps:1's take 0.3 ms.
    run = _tf1_session(builder, ps1_ms=0.3)
    run.placement("hot/kernel", "ps:0", 4 << 20).placement("dense/kernel", "ps:1", 256 << 10)
    for worker in ("worker:0", "worker:1"):
        run.transfer("ps:0", worker, 12.0, size=60_000, tensors=1, at_ms=1)
        run.transfer(worker, "ps:0", 12.0, size=60_000, tensors=1, at_ms=21)
    report = analyze(run.write())
    assert "slow_link" not in [f.kind for f in report.findings]
    finding = next(f for f in report.findings if f.kind == "ps_hotspot")
    assert finding.tasks == ("ps:0",)
    waits = finding.evidence["traced_wait_ms_per_step"]
    # ps:0: 0.3 ms of small reads, then 12 ms, twice a step; ps:1: 0.3 ms twice.
    assert waits["ps:0"] == pytest.approx(24.6, abs=0.1) and waits["ps:1"] == pytest.approx(0.6, abs=0.1)
    # Spread evenly, each ps waits (24.6 + 0.6) / 2 = 12.6 ms: 12 ms saved of a 41 ms period.
    unlimited = finding.evidence.get("host_cpu_limit", {}).get("unlimited_speedup")
    assert (unlimited or finding.recommendation.predicted_speedup) == pytest.approx(41 / (41 - 12), rel=0.05)


def test_a_hot_ps_that_costs_a_step_less_than_the_others_predicts_no_gain(builder):
    # An embedding table whole on ps:1, read a few rows at a time: ps:1 holds the bytes, but
    # the step waits longer on ps:0 (a TF1 wide-and-deep job, benchmarks/userjobs/tf1_mts.py).
    run = _tf1_session(builder, ps1_ms=0.3, ps0_ms=1.5)
    run.placement("wide/embeddings", "ps:1", 12 << 20).placement("deep/kernel", "ps:0", 600 << 10)
    finding = next(f for f in analyze(run.write()).findings if f.kind == "ps_hotspot")
    assert finding.tasks == ("ps:1",)
    assert finding.evidence["traced_wait_ms_per_step"]["ps:0"] > finding.evidence["traced_wait_ms_per_step"]["ps:1"]
    assert finding.recommendation.predicted_speedup == pytest.approx(1.0)
    assert finding.severity.value == "info"  # spreading the bytes would not pay: no warning
