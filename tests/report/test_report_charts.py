"""The helpers every figure shares (tfdiag.report.charts)."""

from __future__ import annotations

import numpy as np

from tfdiag.report.charts import downsample, empty_figure, is_empty


def test_downsample_keeps_spikes_and_bounds_points():
    x = np.arange(100_000, dtype=float)
    y = np.ones(100_000)
    y[12_345] = 50.0
    y[99_999] = -3.0
    small_x, small_y = downsample(x, y, 1000)
    assert len(small_x) <= 1000
    assert 50.0 in small_y and -3.0 in small_y
    assert np.all(np.diff(small_x) > 0)
    same_x, same_y = downsample(x[:10], y[:10], 1000)
    assert len(same_x) == 10


def test_an_empty_figure_says_why_and_is_known_as_empty():
    figure = empty_figure("Step time", "no <b>step</b> records")
    assert is_empty(figure) and figure.layout.annotations[0].text == "no &lt;b&gt;step&lt;/b&gt; records"
