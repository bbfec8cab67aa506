"""The ``builder`` fixture of the analysis tests (``tests/runs.py`` holds the builder), and
``sleeper``: a real process for the process table to be asked about."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from tests.runs import RunBuilder
from tfdiag.analysis.processes import SAME_START_NS


@pytest.fixture
def builder(tmp_path):
    """``builder(strategy=..., workers=..., ps=...)`` returns a RunBuilder over a fresh directory."""
    count = iter(range(1000))
    return lambda **kwargs: RunBuilder(tmp_path / f"run{next(count)}", **kwargs)


@pytest.fixture
def sleeper():
    """A real process that sleeps a minute (killed and reaped at the end of the test), started
    over a second before the test: a process table that lacks a younger one cannot say it ended."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started_ns = int(psutil.Process(process.pid).create_time() * 1e9)
    time.sleep(max(started_ns + SAME_START_NS - time.time_ns(), 0) / 1e9 + 0.05)
    yield process
    process.kill()
    process.wait()
