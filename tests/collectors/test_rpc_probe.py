"""RPC prober logic without a cluster: records, payload rounds, dead targets, backoff."""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tfdiag.collectors import rpc_probe
from tfdiag.collectors.rpc_probe import RpcProber

from .fakes import FakeWriter


def fake_probe(calls, down=(), stuck=None):
    """A stand-in for ``RpcProber.probe``: records each call's leg; a leg to a task in ``down``
    fails; one to a task in ``stuck`` (a dict of task -> threading.Event) waits for its event."""

    def probe(leg, payload=False):
        calls.append(leg)
        relay, target = leg
        if target in down or relay in down:
            raise RuntimeError("UnavailableError: failed to connect to all addresses")
        if stuck and target in stuck:
            stuck[target].wait()
        return 1.0, 1.0005, 1.001

    return probe


def test_one_call_per_leg_and_a_record_each(monkeypatch):
    writer = FakeWriter("chief:0")
    prober = RpcProber(writer, "chief:0", ["worker:0", "ps:0"], interval_s=0.01, payload_every=0,
                       relays=[("worker:0", "ps:0")], legs_per_round=3)
    calls = []
    monkeypatch.setattr(prober, "probe", fake_probe(calls))
    prober._probe_once()
    assert calls == [(None, "worker:0"), (None, "ps:0"), ("worker:0", "ps:0")]
    assert [(r["src"], r["dst"]) for r in writer.records["rpc"]] == [
        ("chief:0", "worker:0"), ("chief:0", "ps:0"), ("worker:0", "ps:0")]
    assert writer.records["rpc"][0]["send_ns"] == 1_000_000_000 and writer.records["rpc"][0]["recv_ns"] == 1_001_000_000


def test_first_rounds_probe_every_link_then_rounds_take_them_in_turn(monkeypatch):
    monkeypatch.setattr(rpc_probe, "FULL_PASSES", 1)
    writer = FakeWriter("chief:0")
    prober = RpcProber(writer, "chief:0", ["worker:0", "ps:0", "ps:1"], interval_s=0.01, payload_every=2,
                       relays=[("worker:0", "ps:0"), ("worker:0", "ps:1")], legs_per_round=2)
    calls = []
    monkeypatch.setattr(prober, "probe", fake_probe(calls))
    for _ in range(7):
        prober._probe_once()
    direct = [(None, "worker:0"), (None, "ps:0"), (None, "ps:1")]
    relayed = [("worker:0", "ps:0"), ("worker:0", "ps:1")]
    rounds = [direct + relayed] + [direct[:2], [direct[2], relayed[0]], [relayed[1]]] * 2
    assert calls == [leg for legs in rounds for leg in legs]
    assert prober.passes == 3
    payloads = [r["payload_bytes"] for r in writer.records["rpc"]]
    assert payloads == [0] * 5 + [1 << 20] * 5 + [0] * 5  # every other pass moves the payload on every link


def test_dead_target_is_found_noted_once_backed_off_and_others_still_probed(monkeypatch):
    writer = FakeWriter("chief:0")
    prober = RpcProber(writer, "chief:0", ["chief:0", "ps:0", "ps:1"], interval_s=1.0, payload_every=3,
                       legs_per_round=2)
    calls = []
    monkeypatch.setattr(prober, "probe", fake_probe(calls, down={"ps:1"}))
    for _ in range(6):
        prober._probe_once()
        prober.probes += 1
    assert prober.targets == ["ps:0", "ps:1"]  # never itself
    # Round 1 finds ps:1 down; later rounds leave it out (backoff).
    assert calls[:2] == [(None, "ps:0"), (None, "ps:1")]
    assert calls[2:] == [(None, "ps:0")] * 5
    rpc = writer.records["rpc"]
    assert [r["dst"] for r in rpc] == ["ps:0"] * 6
    assert [r["payload_bytes"] for r in rpc] == [0, 0, 1 << 20, 0, 0, 1 << 20]
    assert len(writer.records["note"]) == 1 and "ps:1" in writer.records["note"][0]["message"]
    assert prober.reachable("ps:0") and not prober.reachable("ps:1")


def test_relayed_probes_skip_a_dead_relay(monkeypatch):
    writer = FakeWriter("chief:0")
    # A second's interval: its back-off outlasts the test's two rounds, however loaded the host.
    prober = RpcProber(writer, "chief:0", ["worker:0", "worker:1", "ps:0"], interval_s=1.0, payload_every=0,
                       relays=[("worker:0", "ps:0"), ("worker:1", "ps:0")], legs_per_round=5)
    calls = []
    monkeypatch.setattr(prober, "probe", fake_probe(calls, down={"worker:1"}))
    prober._probe_once()
    # The relay through worker:1 is skipped once worker:1 is found down.
    assert calls == [(None, "worker:0"), (None, "worker:1"), (None, "ps:0"), ("worker:0", "ps:0")]
    assert [(r["src"], r["dst"]) for r in writer.records["rpc"]] == [
        ("chief:0", "worker:0"), ("chief:0", "ps:0"), ("worker:0", "ps:0")]
    calls.clear()
    prober._probe_once()  # worker:1 is backing off: neither it nor its relay is probed
    assert calls == [(None, "worker:0"), (None, "ps:0"), ("worker:0", "ps:0")]


def test_thread_survives_errors_and_stops(monkeypatch):
    monkeypatch.setattr(rpc_probe, "MAX_BACKOFF_S", 0.01)
    writer = FakeWriter()
    prober = RpcProber(writer, "chief:0", ["ps:0"], interval_s=0.01)
    monkeypatch.setattr(prober, "_probe_once", lambda: 1 / 0)
    prober.start()
    time.sleep(0.1)
    prober.stop()
    assert not prober._thread.is_alive() and len(writer.records["note"]) == 1


def test_invalid_interval_and_legs_per_round():
    with pytest.raises(ValueError, match="probe_interval_s"):
        RpcProber(FakeWriter(), "chief:0", [], interval_s=0)
    with pytest.raises(ValueError, match="legs_per_round"):
        RpcProber(FakeWriter(), "chief:0", [], legs_per_round=0)


def test_a_stuck_probe_is_abandoned_noted_once_and_not_piled_up(monkeypatch):
    monkeypatch.setattr(rpc_probe, "PROBE_TIMEOUT_S", 0.05)
    monkeypatch.setattr(rpc_probe, "MAX_BACKOFF_S", 0.0)  # retry the stuck link every round
    writer = FakeWriter("chief:0")
    prober = RpcProber(writer, "chief:0", ["ps:0", "ps:1"], interval_s=0.01, payload_every=0, legs_per_round=2)
    calls, release = [], threading.Event()
    monkeypatch.setattr(prober, "probe", fake_probe(calls, stuck={"ps:1": release}))
    try:
        started = time.monotonic()
        for _ in range(4):
            prober._probe_once()
        assert time.monotonic() - started < 1.0  # four rounds, none waited for ps:1 beyond its timeout
        assert calls.count((None, "ps:1")) == 1  # later rounds skipped it: its first call still runs
        assert [r["dst"] for r in writer.records["rpc"]] == ["ps:0"] * 4
        assert len(writer.records["note"]) == 1 and "ps:1" in writer.records["note"][0]["message"]
        assert not prober.reachable("ps:1") and prober._calls.abandoned == 1
    finally:
        release.set()
    time.sleep(0.05)  # the abandoned call returns; the link is probed again
    prober._probe_once()
    assert calls.count((None, "ps:1")) == 2 and writer.records["rpc"][-1]["dst"] == "ps:1"


def test_prepare_runs_every_probe_function_once_and_drops_links_that_fail(monkeypatch):
    writer = FakeWriter("chief:0")
    prober = RpcProber(writer, "chief:0", ["worker:0", "ps:0", "ps:1"], interval_s=0.01, payload_every=10,
                       relays=[("worker:0", "ps:0"), ("worker:0", "ps:1")])
    calls, release = [], threading.Event()
    monkeypatch.setattr(prober, "probe", fake_probe(calls, down={"ps:1"}))
    assert prober.prepare(timeout_s=1.0) == 3
    # Both variants (with and without the payload) of each link that works; one try of each that fails.
    assert calls == [(None, "worker:0")] * 2 + [(None, "ps:0")] * 2 + [(None, "ps:1")] + [("worker:0", "ps:0")] * 2 + [
        ("worker:0", "ps:1")]
    assert prober.targets == ["worker:0", "ps:0"] and prober.relays == [("worker:0", "ps:0")]
    # Every run that worked is a sample, with and without the payload.
    assert [(r["src"], r["dst"], r["payload_bytes"] > 0) for r in writer.records["rpc"]] == [
        ("chief:0", "worker:0", False), ("chief:0", "worker:0", True), ("chief:0", "ps:0", False),
        ("chief:0", "ps:0", True), ("worker:0", "ps:0", False), ("worker:0", "ps:0", True)]
    assert len(writer.records["note"]) == 2
    release.set()


def test_prepare_stops_at_the_first_late_probe(monkeypatch):
    # A task that does not answer holds up every function's registration: nothing after it is tried.
    writer = FakeWriter("chief:0")
    prober = RpcProber(writer, "chief:0", ["ps:0", "ps:1", "ps:2"], interval_s=0.01, payload_every=0)
    calls, release = [], threading.Event()
    monkeypatch.setattr(prober, "probe", fake_probe(calls, stuck={"ps:1": release}))
    try:
        started = time.monotonic()
        assert prober.prepare(timeout_s=0.2, budget_s=10.0) == 1
        assert time.monotonic() - started < 1.0
        assert calls == [(None, "ps:0"), (None, "ps:1")] and prober.targets == ["ps:0"]
        notes = [n["message"] for n in writer.records["note"]]
        assert len(notes) == 1 and "probes chief:0 -> ps:1, chief:0 -> ps:2 are off" in notes[0], notes
        assert prober.prepared.is_set()
    finally:
        release.set()


@pytest.mark.alone
def test_prepare_stays_within_its_budget(monkeypatch):
    writer = FakeWriter("chief:0")
    prober = RpcProber(writer, "chief:0", ["ps:0", "ps:1", "ps:2", "ps:3"], interval_s=0.01, payload_every=0)
    slow = threading.Event()  # never set: each probe takes 0.1 s

    def probe(leg, payload=False):
        slow.wait(0.1)
        return 1.0, 1.0005, 1.001

    monkeypatch.setattr(prober, "probe", probe)
    started = time.monotonic()
    ready = prober.prepare(timeout_s=10.0, budget_s=0.25)
    assert time.monotonic() - started < 0.5
    assert ready == 2 and prober.targets == ["ps:0", "ps:1"]
    notes = [n["message"] for n in writer.records["note"]]
    assert len(notes) == 1 and "chief:0 -> ps:2, chief:0 -> ps:3 are off" in notes[0], notes


def test_a_probe_neither_takes_nor_cancels_the_cancellation_of_closures_dispatched_meanwhile():
    """TensorFlow keeps the cancellation manager of a closure being dispatched in a process-wide
    global: a plain call from another thread runs under it, and, failing, cancels it (every closure
    after fails with ``CancelledError: RemoteExecuteNode::RunAsync`` and the coordinator ends the
    run). The probe's calls do neither (``tf_internals.call_uncancelled``)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("cancellation_job.py"))], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts == {
        # Plain calls: what the probe did before; the pins of TensorFlow's behaviour.
        "plain_failing": "InvalidArgumentError", "plain_cancelled_the_closures": True,
        "plain_under_a_cancelled_manager": "CancelledError",
        # Through RpcProber.probe.
        "probe_failing": "InvalidArgumentError", "probe_cancelled_the_closures": False,
        "probe_under_a_cancelled_manager": "ok",
        # After prepare(), a probe never traces (nor registers on the cluster) a new function.
        "unprepared": "LookupError",
    }


def test_rounds_slow_down_while_links_hold_still_and_speed_up_when_one_moves(monkeypatch):
    monkeypatch.setattr(rpc_probe, "FULL_PASSES", 1)
    writer = FakeWriter("chief:0")
    prober = RpcProber(writer, "chief:0", ["worker:0", "ps:0"], interval_s=0.5, payload_every=0, legs_per_round=1)
    rtt_s = {"worker:0": 0.001, "ps:0": 0.001}
    monkeypatch.setattr(prober, "probe", lambda leg, payload=False: (1.0, 1.0, 1.0 + rtt_s[leg[1]]))

    def pauses(rounds):
        seen = []
        for _ in range(rounds):
            prober._probe_once()
            seen.append(prober._pause_s())
        return seen

    # The first pass probes both links at the base interval; each steady pass (2 rounds) doubles it, up to 4x.
    assert pauses(7) == [0.5, 0.5, 1.0, 1.0, 2.0, 2.0, 2.0]
    rtt_s["ps:0"] = 0.026  # ps:0's link turns slow: fewer than three slow readings in a row may be jitter
    assert pauses(6) == [2.0, 2.0, 2.0, 2.0, 2.0, 0.5]  # (worker:0's turn, then ps:0's first, ..., ps:0's third)
    rtt_s["worker:0"] = 0.0045  # outliers of worker:0, two in a row, are jitter: the pause grows again ...
    assert pauses(4) == [0.5, 0.5, 0.5, 1.0]  # (a pass's end is judged as its last round is chosen)
    rtt_s["worker:0"] = 0.001  # ... and so is any reading within 3x the typical one, or 2 ms
    rtt_s["ps:0"] = 0.060
    steady = pauses(20)
    assert steady[-1] == 2.0 and len(writer.records["rpc"]) == 38  # 2 in the first round, 1 a round after


def _cluster_prober(monkeypatch, calls):
    """A prober over 2 workers and 2 ps, every worker relaying to every ps, past its first
    pass and a steady one (its pause has grown)."""
    monkeypatch.setattr(rpc_probe, "FULL_PASSES", 1)
    workers, ps = ["worker:0", "worker:1"], ["ps:0", "ps:1"]
    prober = RpcProber(FakeWriter("chief:0"), "chief:0", workers + ps, interval_s=1.0, payload_every=0,
                       relays=[(w, p) for w in workers for p in ps], legs_per_round=1)
    monkeypatch.setattr(prober, "probe", fake_probe(calls))
    while prober.passes < 2:
        prober._probe_once()
    return prober


def test_a_closer_look_probes_the_links_from_here_to_the_targets(monkeypatch):
    calls = []
    prober = _cluster_prober(monkeypatch, calls)
    rounds = []
    for _ in range(4):  # one round takes one link in turn until training slows
        calls.clear()
        prober._probe_once()
        rounds.append(list(calls))
    assert all(len(legs) == 1 for legs in rounds) and prober._pause_s() > prober.interval_s
    prober.look_closer({"ps:0", "ps:1"})
    closer, pauses = [], []
    for _ in range(rpc_probe.CLOSER_ROUNDS + 1):
        calls.clear()
        prober._probe_once()
        closer.append(set(calls))
        pauses.append(prober._pause_s())
    wanted = {(None, "ps:0"), (None, "ps:1")}
    # Each of the next CLOSER_ROUNDS rounds: its turn, and the links from here to every ps,
    # CLOSER_PAUSE_S apart; then its turn only.
    assert all(wanted <= legs and len(legs - wanted) <= 1 for legs in closer[:-1]), closer
    assert pauses[:-2] == [rpc_probe.CLOSER_PAUSE_S] * (rpc_probe.CLOSER_ROUNDS - 1)
    assert len(closer[-1]) == 1 and pauses[-1] > prober.interval_s


def test_closer_looks_stop_while_their_credit_is_spent(monkeypatch):
    calls = []
    prober = _cluster_prober(monkeypatch, calls)
    prober.look_closer({"ps:0", "ps:1"})
    prober._spend(rpc_probe.CLOSER_BURST_NS + 1)  # rounds that cost more than the credit held
    calls.clear()
    prober._probe_once()
    assert len(calls) == 1 and prober._pause_s() > prober.interval_s  # its turn only, at the slowed pause
    prober._credit_ns = rpc_probe.CLOSER_BURST_NS  # the credit accrued again: the next slowdown ...
    prober.look_closer({"ps:0", "ps:1"})
    calls.clear()
    prober._probe_once()
    assert len(calls) >= 2 and prober._pause_s() == rpc_probe.CLOSER_PAUSE_S  # ... is looked at closer


def test_closer_looks_are_charged_their_share_of_a_round(monkeypatch):
    calls = []
    prober = _cluster_prober(monkeypatch, calls)
    assert prober._probe_once() == 0.0
    prober.look_closer({"ps:0", "ps:1"})
    assert 1 / 2 <= prober._probe_once() <= 2 / 3  # 2 closer legs beside its turn (or 1, the other its turn)
    prober._credited_at_ns = time.monotonic_ns()
    prober._spend(1_000_000)
    assert prober._credit_ns <= rpc_probe.CLOSER_BURST_NS - 1_000_000 + 100_000


def test_a_slowdown_wakes_the_probe_from_its_pause(monkeypatch):
    calls = []
    prober = RpcProber(FakeWriter("chief:0"), "chief:0", ["ps:0", "ps:1"], interval_s=30.0, payload_every=0)
    monkeypatch.setattr(prober, "probe", fake_probe(calls))
    prober.start()
    try:
        deadline = time.monotonic() + 10
        while len(calls) < 2 and time.monotonic() < deadline:  # the first round, then a 30-s pause
            time.sleep(0.01)
        first = len(calls)
        prober.look_closer({"ps:0"})
        while len(calls) == first and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(calls) > first, "look_closer did not end the pause"
    finally:
        prober.stop()


def _passes(cadence, readings_by_pass):
    """Feeds ``readings_by_pass`` (one ``{leg: rtt_s}`` a pass) to ``cadence``; its slowdown after each pass."""
    slowdowns = []
    for readings in readings_by_pass:
        for leg, rtt_s in readings.items():
            cadence.observe(leg, rtt_s)
        cadence.pass_done()
        slowdowns.append(cadence.slowdown)
    return slowdowns


LEGS = [(None, "worker:0"), (None, "ps:0"), ("worker:0", "ps:0"), ("worker:0", "ps:1")]


def test_a_busy_jobs_jitter_slows_the_probe_down():
    """Round trips of a loaded job (median 3 ms, a long tail: ps_ctl's read 11-24 ms at the
    90th percentile) are no change: the pause grows to its most and stays there."""
    rng = random.Random(7)
    jitter = [{leg: 0.003 * rng.lognormvariate(0, 1.1) for leg in LEGS} for _ in range(200)]
    slowdowns = _passes(rpc_probe._Cadence(1.0), jitter)
    # 3.2 here (recorded ps_ctl runs: 2.0-3.8); the rule of two readings out of ±50 % read 1.4.
    assert statistics.mean(slowdowns) >= 2.5


@pytest.mark.parametrize("before_s, after_s", [(0.003, 0.028), (0.028, 0.003), (0.0008, 0.006)])
def test_a_link_that_turns_slow_or_heals_brings_the_full_rate_back(before_s, after_s):
    cadence = rpc_probe._Cadence(1.0)
    steady = {leg: before_s for leg in LEGS}
    assert _passes(cadence, [steady] * 3)[-1] == rpc_probe.MAX_SLOWDOWN
    for _ in range(rpc_probe.MOVED_AFTER - 1):  # fewer in a row are jitter
        cadence.observe(LEGS[2], after_s)
    assert cadence.slowdown == rpc_probe.MAX_SLOWDOWN
    cadence.observe(LEGS[2], after_s)
    assert cadence.slowdown == 1 and cadence.pause_s() == 1.0
    # That pass keeps the full rate; then the new reading is the link's typical one.
    assert _passes(cadence, [{**steady, LEGS[2]: after_s}] * 3) == [1, 2, 4]


def test_jitter_between_slow_readings_is_no_move():
    cadence = rpc_probe._Cadence(1.0)
    _passes(cadence, [{leg: 0.003 for leg in LEGS}] * 3)
    for rtt_s in [0.028, 0.028, 0.003] * 3 + [0.0]:  # never enough in a row; a reading of 0 says nothing
        cadence.observe(LEGS[0], rtt_s)
    assert cadence.slowdown == rpc_probe.MAX_SLOWDOWN


def test_a_change_under_two_milliseconds_is_not_a_move():
    """An idle loopback link from 0.5 to 1.6 ms (3x, but what no detector would call slow)."""
    cadence = rpc_probe._Cadence(1.0)
    _passes(cadence, [{leg: 0.0005 for leg in LEGS}] * 3)
    assert _passes(cadence, [{leg: 0.0016 for leg in LEGS}] * 3) == [rpc_probe.MAX_SLOWDOWN] * 3
