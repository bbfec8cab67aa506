"""The hypothesis properties of reader_properties.py, run in a child pytest (a crash fails, not kills)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_reader_and_loader_properties_hold_in_a_child_process():
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/store/reader_properties.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )

    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "4 passed" in result.stdout
