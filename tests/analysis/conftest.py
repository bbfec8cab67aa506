"""The ``builder`` fixture of the analysis tests (``tests/runs.py`` holds the builder)."""

from __future__ import annotations

import pytest

from tests.runs import RunBuilder


@pytest.fixture
def builder(tmp_path):
    """``builder(strategy=..., workers=..., ps=...)`` returns a RunBuilder over a fresh directory."""
    count = iter(range(1000))
    return lambda **kwargs: RunBuilder(tmp_path / f"run{next(count)}", **kwargs)
