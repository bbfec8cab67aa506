"""The one NaN/inf -> null conversion (tfdiag.analysis.json_values), used by every JSON surface."""

from __future__ import annotations

import enum
import json

import numpy as np

from tfdiag.analysis.json_values import jsonable, rounded


class Colour(enum.Enum):
    RED = "red"


def test_jsonable_replaces_non_finite_numbers_and_numpy_scalars():
    data = {"a": float("nan"), "b": [float("inf"), 1.5, np.float64(2.0), np.int64(3)], "c": ("x", None),
            "d": np.array([1.0, np.nan]), 4: Colour.RED, "e": {1, 1}, "f": np.float32("-inf")}
    assert jsonable(data) == {"a": None, "b": [None, 1.5, 2.0, 3], "c": ["x", None], "d": [1.0, None],
                              "4": "red", "e": [1], "f": None}
    json.dumps(jsonable(data), allow_nan=False)  # strict JSON


def test_jsonable_keeps_int64_extremes_exact():
    extremes = [np.int64(np.iinfo(np.int64).max), np.int64(np.iinfo(np.int64).min), np.uint64(2**64 - 1)]
    assert jsonable(extremes) == [2**63 - 1, -(2**63), 2**64 - 1]


def test_rounded():
    assert rounded(np.float64(1 / 3), 2) == 0.33
    assert rounded(np.int64(7)) == 7
    assert rounded(float("-inf")) is None and rounded(None) is None and rounded(np.nan) is None
