"""The onsets of slower closures, per worker, from their dispatch and result times."""

from __future__ import annotations

from tfdiag.collectors import closure_pace
from tfdiag.collectors.closure_pace import ClosurePace

MS = 1_000_000


class Worker:
    """Closures of one worker run back to back, ``busy_ms`` each, batched as the recorder batches them."""

    def __init__(self, name: str, now_ns: int = 0):
        self.name = name
        self.now_ns = now_ns

    def batch(self, busy_ms: float, count: int = 10, queued: bool = False) -> list[tuple[str, int, int]]:
        closures = []
        dispatched = self.now_ns
        for _ in range(count):
            start = self.now_ns
            self.now_ns += int(busy_ms * MS)
            closures.append((self.name, dispatched if queued else start, self.now_ns))
        return closures


def settled(pace: ClosurePace, *workers: Worker, busy_ms: float = 10.0) -> None:
    for _ in range(closure_pace.USUAL_BATCHES):
        assert pace.slowed([c for worker in workers for c in worker.batch(busy_ms)]) == set()


def test_an_onset_is_handed_on_once_and_only_for_the_worker_that_slowed():
    pace, w0, w1 = ClosurePace(), Worker("worker:0"), Worker("worker:1")
    settled(pace, w0, w1)
    assert pace.slowed(w0.batch(10) + w1.batch(25)) == {"worker:1"}
    assert pace.slowed(w0.batch(10) + w1.batch(25)) == set()  # still slow: no new onset
    assert pace.slowed(w0.batch(10) + w1.batch(10)) == set()  # recovered
    assert pace.slowed(w0.batch(30) + w1.batch(30)) == {"worker:0", "worker:1"}  # a ps-side slowdown: every worker


def test_jitter_under_the_rise_and_thin_batches_are_no_onset():
    pace, worker = ClosurePace(), Worker("worker:0")
    settled(pace, worker)
    assert pace.slowed(worker.batch(10 * closure_pace.RISE * 0.9)) == set()
    assert pace.slowed(worker.batch(100, count=closure_pace.MIN_CLOSURES - 1)) == set()


def test_nothing_is_judged_before_the_usual_pace_is_known():
    pace, worker = ClosurePace(), Worker("worker:0")
    for busy_ms in (10, 50, 10, 50):
        assert pace.slowed(worker.batch(busy_ms)) == set()


def test_closures_queued_behind_each_other_are_timed_from_the_previous_result():
    """A loop schedules ahead: a closure waits in the queue, which is not the worker being slow."""
    pace, worker = ClosurePace(), Worker("worker:0")
    for _ in range(closure_pace.USUAL_BATCHES + 3):
        assert pace.slowed(worker.batch(10, queued=True)) == set()


def test_a_lasting_slowdown_becomes_the_usual_pace_and_a_later_one_is_an_onset_again():
    pace, worker = ClosurePace(), Worker("worker:0")
    settled(pace, worker)
    assert pace.slowed(worker.batch(40)) == {"worker:0"}
    for _ in range(closure_pace.MOVED_AFTER + 2):
        assert pace.slowed(worker.batch(40)) == set()
    assert pace.slowed(worker.batch(100)) == {"worker:0"}  # 2.5x the new usual
