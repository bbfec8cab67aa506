"""The ``builder`` fixture of the analysis tests (``tests/runs.py`` holds the builder), and
``sleeper``: a real process for the process table to be asked about."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.runs import RunBuilder


@pytest.fixture
def builder(tmp_path):
    """``builder(strategy=..., workers=..., ps=...)`` returns a RunBuilder over a fresh directory."""
    count = iter(range(1000))
    return lambda **kwargs: RunBuilder(tmp_path / f"run{next(count)}", **kwargs)


@pytest.fixture
def sleeper():
    """A real process that sleeps a minute (killed and reaped at the end of the test)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()
