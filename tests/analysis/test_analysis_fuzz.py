"""The mutation fuzzer (benchmarks/fuzz.py) with a small fixed budget: damaged runs through
load, analysis and every renderer, each case in a worker process (a crash or hang is seen)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CASES = 24  # two of each mutation class; benchmarks/fuzz.py --cases N runs longer


def test_damaged_runs_never_crash_hang_or_raise_and_good_frames_count():
    result = subprocess.run(
        [sys.executable, "benchmarks/fuzz.py", "--cases", str(CASES), "--seed", "11", "--timeout", "60"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )

    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    assert f"{CASES} cases" in result.stdout
    assert "crash 0, hang 0, internal-error 0, wrong 0" in result.stdout
