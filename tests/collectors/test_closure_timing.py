"""Reading finished closures' timings (one stacked copy per worker device, failures contained),
and the coordinator's hook on each closure's result."""

from __future__ import annotations

import time
import types

import pytest

from tfdiag.collectors import closure_recorder, closure_timing
from tfdiag.collectors.bounded import BoundedCalls


def finished_closure(tf, stats, device="/job:localhost/replica:0/task:0/device:CPU:0", fetched=False):
    """A stand-in for a finished RemoteValueImpl: ``(fn's outputs, stats)`` on ``device``,
    and copied to the coordinator when ``fetched`` (the caller kept the result)."""
    with tf.device(device):
        values = (tf.constant(0.5), tf.constant(stats, tf.float64))
    local = tuple(tf.identity(value) for value in values) if fetched else None
    return types.SimpleNamespace(_values=values, _has_fetched_to_local=fetched, _fetched_tensors=local)


def fetch(remotes, failures=None):
    return closure_timing.fetch_stats([closure_timing.timing_of(r) for r in remotes], BoundedCalls("test"), 10.0,
                                      on_failure=lambda *failure: (failures if failures is not None else []).append(failure))


def test_one_stacked_copy_per_device_keeps_the_order():
    tf = pytest.importorskip("tensorflow")
    remotes = [finished_closure(tf, [float(i), i + 1.0, 0.0, 32.0, 10.0]) for i in range(3)]
    assert fetch(remotes) == [[float(i), i + 1.0, 0.0, 32.0, 10.0] for i in range(3)]


def test_an_unreadable_device_loses_only_its_timings():
    tf = pytest.importorskip("tensorflow")
    good = finished_closure(tf, [1.0, 2.0, 0.0, 32.0, 10.0])
    gone = types.SimpleNamespace(_values=(None, types.SimpleNamespace(device="/job:worker/replica:0/task:7/device:CPU:0")),
                                 _has_fetched_to_local=False)
    failures = []
    assert fetch([gone, good], failures) == [None, [1.0, 2.0, 0.0, 32.0, 10.0]]
    assert [(device, count) for device, count, _ in failures] == [("/job:worker/replica:0/task:7/device:CPU:0", 1)]


def test_handles_handed_back_uncopied_are_fetched_in_the_batch():
    pytest.importorskip("tensorflow")
    unreachable = (None, types.SimpleNamespace(device="/job:worker/replica:0/task:7/device:CPU:0"))
    # What RemoteValueImpl holds after get() when nobody kept the result: the remote handles.
    dropped = types.SimpleNamespace(_values=unreachable, _has_fetched_to_local=True, _fetched_tensors=unreachable)
    failures = []
    assert fetch([dropped], failures) == [None]  # asked of its worker, not read as if copied
    assert len(failures) == 1 and "task:7" in failures[0][0]


def test_timings_the_caller_kept_are_read_where_they_are():
    tf = pytest.importorskip("tensorflow")
    kept = finished_closure(tf, [3.0, 4.0, 0.0, 32.0, 10.0], fetched=True)
    kept._values = (None, types.SimpleNamespace(device="/job:worker/replica:0/task:7/device:CPU:0"))  # unreachable
    assert fetch([kept]) == [[3.0, 4.0, 0.0, 32.0, 10.0]]


class FakeRemoteValue:
    """The part of RemoteValueImpl the copy override touches."""

    def __init__(self):
        self._values = ("loss on the worker", "stats on the worker")
        self.copies = 0

    def _copy_to_local(self):
        self.copies += 1
        return ("loss here", "stats here")

    def get(self):
        return self._copy_to_local()


class View:
    pass


def watched(remote, view):
    pending = closure_recorder._Pending(0, 0, remote)
    closure_recorder._watch_result(remote, view, pending)
    return pending


def test_outputs_are_copied_only_while_the_caller_holds_the_result():
    remote, view = FakeRemoteValue(), View()
    watched(remote, view)
    assert remote.get() == ("loss here", "stats here") and remote.copies == 1
    del view  # the caller dropped its result: nothing is copied for the result thread
    assert remote.get() == ("loss on the worker", "stats on the worker") and remote.copies == 1


def test_the_result_time_is_read_as_the_result_comes_in():
    remote, view = FakeRemoteValue(), View()
    pending = watched(remote, view)
    assert pending.result_ns is None
    before = time.time_ns()
    remote.get()  # what the coordinator's dispatch thread does once the closure succeeded
    assert before <= pending.result_ns <= time.time_ns()


def test_the_copy_override_makes_no_reference_cycle():
    import weakref

    remote, view = FakeRemoteValue(), View()
    watched(remote, view)
    dead = weakref.ref(remote)
    del remote  # freed by reference counting, not left for the cycle collector
    assert dead() is None


def test_each_trace_hands_over_the_variables_the_function_read():
    tf = pytest.importorskip("tensorflow")
    kernel, bias, unused = tf.Variable(tf.ones([2, 2])), tf.Variable(tf.zeros([2])), tf.Variable(1.0)
    inner = tf.function(lambda x: x + bias)  # a nested function's variables are the outer graph's too

    @tf.function
    def step(x):
        return inner(tf.linalg.matvec(kernel, x))

    timed = closure_timing.InstrumentedFunction(step)
    assert not timed.captured
    timed.function(tf.ones([2]))
    assert timed.captured
    assert {id(v) for v in timed.take_captured()} == {id(kernel), id(bias)} and not timed.captured
    timed.function(tf.zeros([2]))  # no new trace: nothing new
    assert not timed.captured and unused is not None
