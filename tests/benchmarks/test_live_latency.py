"""The live-findings benchmark's replay: a recorded run evaluated as it grew, its cost and transitions."""

from __future__ import annotations

from benchmarks.live_latency import replay
from tests.analysis.test_live import growing_run, run_until
from tfdiag.analysis.detectors import DETECTORS, straggler
from tfdiag.analysis.measurements import Measurements


def test_the_replay_reports_the_cost_the_parts_and_the_transitions_of_a_recorded_run(tmp_path):
    run = growing_run(tmp_path / "run")
    for second in range(5, 70, 5):  # worker:1 twice as slow from 30 s on
        run_until(run, second, {"worker:0": 20.0, "worker:1": 20.0 if second <= 30 else 45.0})
    text = replay(run.path, 5.0)
    assert "thread CPU per evaluation: median" in text and "with its parts timed" in text
    transitions = [line for line in text.splitlines() if line.startswith("- tfdiag: ")]
    assert len(transitions) == 1 and "worker:1 straggler since step" in transitions[0]
    for part in ("reading", "tables", "&nbsp;&nbsp;steps", "detectors", "&nbsp;&nbsp;straggler", "advisor"):
        assert f"| {part} |" in text
    # The parts are timed only during the replay.
    assert DETECTORS["straggler"] is straggler.detect and not hasattr(Measurements.steps.func, "__wrapped__")
