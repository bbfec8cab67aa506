"""Measurements: tables built when first read, and a live window's unchanged tables kept."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tfdiag.analysis.load import LoadedRun
from tfdiag.analysis.measurements import measure


def _window(placement: pd.DataFrame, heartbeats: int) -> LoadedRun:
    heartbeat = pd.DataFrame({"task": ["chief:0"] * heartbeats, "time_ns": range(heartbeats)})
    return LoadedRun(Path("run"), None, {"placement": placement, "heartbeat": heartbeat})


def test_a_live_window_keeps_the_previous_windows_ps_load_only_while_its_records_are_the_same_frames():
    placement = pd.DataFrame({"variable": ["kernel:0", "bias:0"], "task": ["ps:0", "ps:0"], "shape": ["[4,4]", "[4]"],
                              "bytes": [64, 16]})
    first = measure(_window(placement, 3))
    assert first.ps_load["bytes"].tolist() == [80]
    kept = measure(_window(placement, 4), first)  # other kinds changed; placement is the same frame
    assert kept.ps_load is first.ps_load
    grown = placement.assign(bytes=[64, 32])  # a new frame (the loader rebuilt the kind)
    rebuilt = measure(_window(grown, 4), kept)
    assert rebuilt.ps_load is not first.ps_load and rebuilt.ps_load["bytes"].tolist() == [96]
    assert measure(_window(placement, 4), measure(_window(placement, 3))).ps_load["bytes"].tolist() == [80]  # never built: built now
