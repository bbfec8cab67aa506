"""Where a run's tfdiag files live, and how runs are found under a logdir."""

from __future__ import annotations

import os
from pathlib import Path

PLUGIN_DIR = os.path.join("plugins", "tfdiag")
LOG_SUFFIX = ".tfdiag"


def log_dir(run_dir: str | os.PathLike) -> Path:
    """The directory that holds a run's tfdiag files: ``RUN/plugins/tfdiag``."""
    return Path(run_dir) / PLUGIN_DIR


def find_runs(logdir: str | os.PathLike) -> list[Path]:
    """Every run directory under ``logdir`` (``logdir`` itself included), sorted.

    A run is a directory that contains ``plugins/tfdiag``; event files beside it are
    neither needed nor looked at.

    >>> find_runs("logs")  # doctest: +SKIP
    [PosixPath('logs/run1'), PosixPath('logs/sweep/run2')]
    """
    root = Path(logdir)
    runs = []
    for dirpath, dirnames, _ in os.walk(root):
        if os.path.basename(dirpath) == "tfdiag" and os.path.basename(os.path.dirname(dirpath)) == "plugins":
            runs.append(Path(dirpath).parent.parent)
            dirnames.clear()
    return sorted(runs)
