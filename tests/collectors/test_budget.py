"""The cost budget: declarations, and the ledger the collectors' threads charge."""

from __future__ import annotations

import time

from tfdiag.collectors import budget, heartbeat, writers
from tfdiag.collectors.budget import COMPONENTS, LEDGER, Budget, MeteredCalls, charged, metered
from tfdiag.collectors.system import SystemSampler

from .fakes import FakeWriter


def burn(seconds: float) -> None:
    """Spends about ``seconds`` of this thread's CPU."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def charged_ns(component, action) -> int:
    before = LEDGER.snapshot().get(component, 0)
    action()
    return LEDGER.snapshot()[component] - before


def test_a_charged_block_counts_its_cpu_not_its_sleep():
    def work():
        with charged("test-cpu"):
            burn(0.02)
            time.sleep(0.05)

    ns = charged_ns("test-cpu", work)
    assert 0.015e9 <= ns < 0.045e9


def test_metered_calls_charge_the_thread_that_runs_them():
    calls = MeteredCalls("tfdiag-test", "test-calls")
    assert charged_ns("test-calls", lambda: calls.call("k", lambda: burn(0.02), timeout_s=5.0)) >= 0.015e9
    assert charged_ns("test-calls", lambda: metered("test-calls", burn)(0.01)) >= 0.008e9


def test_sources_are_added_and_every_declared_component_is_in_a_snapshot():
    ledger = budget.Ledger()
    ledger.charge("writer", 5)
    ledger.add_source("writer", lambda: 7)
    snapshot = ledger.snapshot()
    assert snapshot["writer"] == 12 and set(COMPONENTS) <= set(snapshot)


def test_the_sampler_and_the_heartbeat_charge_their_components(tmp_path, monkeypatch):
    sampler = SystemSampler(FakeWriter("worker:0"), "worker:0", gpus=False)
    assert charged_ns("system", sampler.sample) > 0 and sampler.samples == 1
    monkeypatch.setattr(heartbeat, "HEARTBEAT_EVERY_S", 0.01)
    before = LEDGER.snapshot()["heartbeat"]
    writer = writers.acquire(tmp_path, "worker:0")  # starts (or wakes) the heartbeat thread
    try:
        deadline = time.monotonic() + 10
        while LEDGER.snapshot()["heartbeat"] == before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert LEDGER.snapshot()["heartbeat"] > before
    finally:
        writers.release(writer)


def test_the_writers_flush_threads_are_charged_to_writer(tmp_path):
    writer = writers.acquire(tmp_path, "worker:0")
    before = LEDGER.snapshot()["writer"]
    for step in range(2000):
        writer.append("step", task="worker:0", step=step, begin_ns=step, end_ns=step + 1)
    deadline = time.monotonic() + 10
    while writer.flush_cpu_ns == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    after = LEDGER.snapshot()["writer"]
    writers.release(writer)
    assert after > before
    assert LEDGER.snapshot()["writer"] >= after  # a closed writer's flushes still count


def test_declarations_are_ceilings_with_room_for_live_findings():
    for name, declared in COMPONENTS.items():
        assert isinstance(declared, Budget) and declared.what, name
        assert declared.per_step_us > 0 or declared.core_share > 0, name
        assert set(declared.jobs) <= {"ps", "fit"}, name
    # Live findings are on by default: their screens and confirmations within a third of a per cent.
    assert 0 < COMPONENTS["live"].core_share <= 0.003
    # The background threads of one process, live findings included, stay under 1 % of a core.
    assert sum(declared.core_share for declared in COMPONENTS.values()) < 0.01
