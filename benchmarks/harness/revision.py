"""A module of this repository as it was at a git revision, to measure beside the current one."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def baseline_module(revision: str, path: str):
    """The module at ``path`` (from the repository root) as it was at ``revision``, loaded under a name of its own."""
    source = subprocess.run(["git", "show", f"{revision}:{path}"], cwd=REPO, check=True, capture_output=True,
                            text=True).stdout
    spec = importlib.util.spec_from_loader(f"baseline_{Path(path).stem}", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    exec(compile(source, f"{revision}:{path}", "exec"), module.__dict__)  # noqa: S102 - this repository's own code
    return module
