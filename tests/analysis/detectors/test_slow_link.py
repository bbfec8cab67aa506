"""``slow_link``: a slow path to a ps delays every source; a busy host delays only some probes."""

import pytest

from tests.runs import MS, START_NS, scheduled_ahead
from tfdiag.analysis import analyze, load_run
from tfdiag.analysis.detectors.slow_link import slow_ps
from tfdiag.analysis.measurements import measure


def _probed(builder, rtt_ms):
    """A PS run with probes from each source in ``rtt_ms`` (source -> (to ps:0, to ps:1))."""
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=25, idle_ms=2, closures=True)
    for src, (ps0, ps1) in rtt_ms.items():
        run.rpc(src, "ps:0", ps0, count=3).rpc(src, "ps:1", ps1, count=3)
    return run


def test_one_sources_delayed_probes_on_a_busy_host_are_no_slow_link(builder):
    # ps_fit's clean run on two saturated cores: worker:1's probes to ps:1 waited for a core.
    run = _probed(builder, {"chief:0": (1.2, 3.8), "worker:0": (0.9, 2.1), "worker:1": (1.0, 11.0)})
    assert "slow_link" not in [f.kind for f in analyze(run.write()).findings]


def test_a_slow_path_to_a_ps_seen_from_every_source_is_slow_link(builder):
    run = _probed(builder, {"chief:0": (1.5, 15.0), "worker:0": (2.7, 15.3), "worker:1": (1.2, 14.2)})
    finding = next(f for f in analyze(run.write()).findings if f.kind == "slow_link")
    assert finding.tasks == ("ps:1",)
    assert finding.evidence["rtt_ms_min"] == {"chief:0->ps:1": 15.0, "worker:0->ps:1": 15.3, "worker:1->ps:1": 14.2}


@pytest.mark.parametrize("fastest_tail_ms, saved_ms", [(36, 36 - 2 * 0.4), (80, 50), (0.5, 0)])
def test_the_tail_saves_its_fastest_closures_time_but_the_peers_round_trips_up_to_two(builder, fastest_tail_ms,
                                                                                      saved_ms):
    # One step per closure behind a 25 ms link: 30 ms steps 60 ms apart, results coming back
    # 10 ms later than the fastest tail in three closures of four (a busy coordinator).
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=30, idle_ms=60, closures=True)
        run.rpc(worker, "ps:0", 0.4).rpc(worker, "ps:1", 25.4)
    run.records = [(kind, dict(r, result_ns=r["result_ns"] - MS + int((fastest_tail_ms + 10 * (r["closure_id"] % 4 > 0)) * MS))
                    if kind == "closure" else r) for kind, r in run.records]
    [finding] = [f for f in analyze(scheduled_ahead(run).write()).findings if f.kind == "slow_link"]
    # 25 ms saved inside the step, ``saved_ms`` in the tail (a link as fast as ps:0's still
    # costs two of its 0.4 ms round trips there): period 90 ms -> 65 - saved.
    assert finding.recommendation.predicted_speedup == pytest.approx(90 / (65 - saved_ms), rel=0.01)


@pytest.mark.parametrize("steps_per_closure, round_trips", [(1, 1.0), (10, 0.55)])
def test_a_step_inside_a_closure_of_several_pays_half_a_round_trip_after_the_first(builder, steps_per_closure,
                                                                                   round_trips):
    # 30 ms steps behind a 25 ms link, 2 ms between closures, their results 1 ms after them.
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, step_ms=30 * steps_per_closure, idle_ms=2, closures=True)
        run.rpc(worker, "ps:0", 0.4).rpc(worker, "ps:1", 25.4)
    run.records = [(kind, dict(r, steps=steps_per_closure) if kind == "step" else r) for kind, r in run.records]
    [finding] = [f for f in analyze(scheduled_ahead(run).write()).findings if f.kind == "slow_link"]
    # Per step: 30 ms and 2 ms between closures; saved: the round trips' 25 ms, and of the
    # 1 ms tail what two round trips to ps:0 leave.
    per_step = 30 + 2 / steps_per_closure
    saved = round_trips * 25 + (1 - 2 * 0.4) / steps_per_closure
    assert finding.recommendation.predicted_speedup == pytest.approx(per_step / (per_step - saved), rel=0.01)


def _turning_slow(builder, slow_ms: float, turns_at_s: float, back_at_s: float = 1e9, every_s: float = 0.5):
    """A 20-s PS run probed every ``every_s`` from each source; from ``turns_at_s`` to
    ``back_at_s`` the path to ps:1 adds ``slow_ms``."""
    run = builder()
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, count=740, step_ms=25, idle_ms=2, closures=True)
    for src in ("chief:0", "worker:0", "worker:1"):
        for i in range(int(20 / every_s)):
            send = START_NS + int(i * every_s * 1000) * MS
            for dst in ("ps:0", "ps:1"):
                slow = slow_ms if dst == "ps:1" and turns_at_s <= i * every_s < back_at_s else 0
                rtt = int((0.5 + 0.1 * (i % 3) + slow) * MS)
                run.record("rpc", src=src, dst=dst, send_ns=send, remote_ns=send + rtt // 2, recv_ns=send + rtt,
                           payload_bytes=0)
    return run


def test_a_path_that_turns_slow_mid_run_is_slow_link_for_the_stretch_it_was_slow(builder):
    path = _turning_slow(builder, slow_ms=12.0, turns_at_s=6.0).write()
    # The run's fastest round trip to ps:1, before it turned, is its peers': only the windows see it.
    assert slow_ps(measure(load_run(path)).link_latency) == {}
    report = analyze(path)
    [finding] = [f for f in report.findings if f.kind == "slow_link"]
    assert finding.tasks == ("ps:1",) and "from 6 s into the run" in finding.title
    assert finding.evidence["slow_share"] == pytest.approx(0.7, abs=0.06)
    assert finding.evidence["rtt_ms_min_while_slow"] == pytest.approx(12.5, abs=0.2)
    whole = analyze(_turning_slow(builder, slow_ms=12.0, turns_at_s=0.0).write())
    [throughout] = [f for f in whole.findings if f.kind == "slow_link"]
    # slow for 70 % of the run: it saves less than a path slow all along
    assert 1.0 < finding.recommendation.predicted_speedup < throughout.recommendation.predicted_speedup


def test_a_path_slow_for_a_fifth_of_the_run_is_no_slow_link(builder):
    run = _turning_slow(builder, slow_ms=12.0, turns_at_s=8.0, back_at_s=12.0)
    assert "slow_link" not in [f.kind for f in analyze(run.write()).findings]


@pytest.mark.parametrize("every_s, turns_at_s", [(1.3, 4.0), (3.0, 8.0)])
def test_a_short_runs_path_that_turns_slow_is_seen_though_its_probes_are_few(builder, every_s, turns_at_s):
    # ps_embed behind a proxy from a fifth of an 18-s run on (each link probed about 15
    # times), and a run probed every 3 s, slow over its last 40 % (ps_fit, trial 2396).
    report = analyze(_turning_slow(builder, slow_ms=17.0, turns_at_s=turns_at_s, every_s=every_s).write())
    [finding] = [f for f in report.findings if f.kind == "slow_link"]
    assert finding.tasks == ("ps:1",)
    assert turns_at_s <= finding.evidence["slow_since_s"] <= turns_at_s + every_s  # its first probe after the turn


def test_one_late_probe_a_window_from_a_different_source_each_time_is_no_slow_link(builder):
    # A loaded host: in every window one source's probe to ps:1 waited for a core.
    run = _turning_slow(builder, slow_ms=0.0, turns_at_s=0.0, every_s=1.3)
    late = {}
    for kind, record in run.records:
        if kind == "rpc" and record["dst"] == "ps:1":
            late.setdefault(record["send_ns"], []).append(record)
    for i, (send, records) in enumerate(sorted(late.items())):
        record = records[i % len(records)]
        record["recv_ns"] += 15 * MS
    assert "slow_link" not in [f.kind for f in analyze(run.write()).findings]
