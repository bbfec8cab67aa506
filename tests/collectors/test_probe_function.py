"""The probe's tf.function (src/tfdiag/collectors/probe_function.py): its three timestamps, in order."""

from __future__ import annotations

import pytest

from tfdiag.collectors.probe_function import probe_times, traced_probe


def test_probe_orders_the_timestamps():
    tf = pytest.importorskip("tensorflow")
    for local in (None, "/device:CPU:0"):  # from this task, and relayed through another device
        times = tf.function(lambda: probe_times(tf, local, "/device:CPU:0", 16))().numpy()
        assert len(times) == 3 and (times[1:] >= times[:-1]).all()


def test_a_traced_probe_is_a_concrete_function_of_the_three_timestamps():
    pytest.importorskip("tensorflow")
    assert len(traced_probe(None, "/device:CPU:0", 0)().numpy()) == 3
