"""The live-findings benchmark's replay: a recorded run evaluated as it grew, its cost and transitions."""

from __future__ import annotations

from benchmarks.live_latency import replay
from tests.analysis.test_live import growing_run, run_until
from tfdiag.analysis import live_verdict
from tfdiag.analysis.detectors import DETECTORS, straggler
from tfdiag.analysis.measurements import Measurements


def test_the_replay_reports_the_cost_the_parts_and_the_transitions_of_a_recorded_run(tmp_path):
    run = growing_run(tmp_path / "run")
    for second in range(5, 100, 5):  # worker:1 twice as slow from 30 s to 55 s
        run_until(run, second, {"worker:0": 20.0, "worker:1": 45.0 if 30 < second <= 55 else 20.0})
    text = replay(run.path, 5.0)
    assert " screens: median " in text and " verdicts: median " in text
    assert " confirmations (the first, reading the whole task files, left out)" in text
    transitions = [line for line in text.splitlines() if line.startswith("- ") and " s: tfdiag: " in line]
    assert len(transitions) == 2 and "worker:1 straggler since step" in transitions[0]
    assert transitions[1].endswith(") cleared") and "worker:1 straggler" in transitions[1]
    began_s, cleared_s = (int(line[2:].split(" s:")[0]) for line in transitions)
    # Announced while it lasted, cleared after it ended (the replay counts from its first frame, at 5 s).
    assert 30 - 5 < began_s <= 55 - 5 < cleared_s
    for part in ("reading", "tables", "detectors", "advisor"):
        assert f"| {part} |" in text
    # The parts are timed only during the replay.
    assert DETECTORS["straggler"] is straggler.detect and not hasattr(Measurements.steps.func, "__wrapped__")
    assert not hasattr(live_verdict.window_run, "__wrapped__")
