"""Reading finished closures' timings: one stacked copy per worker device, failures contained."""

from __future__ import annotations

import types

import pytest

from tfdiag.collectors import coordinator


def finished_closure(tf, stats, device="/job:localhost/replica:0/task:0/device:CPU:0"):
    """A stand-in for a finished RemoteValueImpl: ``(fn's outputs, stats)`` on ``device``."""
    with tf.device(device):
        values = (tf.constant(0.5), tf.constant(stats, tf.float64))
    return types.SimpleNamespace(_values=values)


def test_one_stacked_copy_per_device_keeps_the_order():
    tf = pytest.importorskip("tensorflow")
    remotes = [finished_closure(tf, [float(i), i + 1.0, 0.0, 32.0, 10.0]) for i in range(3)]
    assert coordinator._fetch_stats(remotes) == [[float(i), i + 1.0, 0.0, 32.0, 10.0] for i in range(3)]


def test_an_unreadable_device_loses_only_its_timings(caplog):
    tf = pytest.importorskip("tensorflow")
    good = finished_closure(tf, [1.0, 2.0, 0.0, 32.0, 10.0])
    gone = types.SimpleNamespace(_values=(None, types.SimpleNamespace(device="/job:worker/replica:0/task:7/device:CPU:0")))
    assert coordinator._fetch_stats([gone, good]) == [None, [1.0, 2.0, 0.0, 32.0, 10.0]]
    assert "task:7" in caplog.text
