"""Small real runs for the plugin tests, written through tfdiag.store (imported by the tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfdiag.store import TaskWriter, write_manifest

T0_NS = 1_700_000_000_000_000_000


def write_steps(run_dir: Path, task: str, step_ms: float, steps: int = 40, first_step: int = 0, start_ns: int = T0_NS) -> int:
    """Appends ``steps`` steps of about ``step_ms`` each for ``task``; returns the end time."""
    writer = TaskWriter(run_dir, task, flush_interval_s=3600)
    now = start_ns
    for step in range(first_step, first_step + steps):
        duration = int(step_ms * 1e6) + (step % 4) * 50_000
        writer.append(
            "step",
            task=task,
            step=step,
            begin_ns=now,
            end_ns=now + duration,
            input_wait_ns=500_000,
            examples=32,
            clock_task=task,
        )
        now += duration
    writer.close()
    return now


def make_run(run_dir: Path, slow_ms: float = 60.0, fast_ms: float = 20.0, steps: int = 40) -> Path:
    """A MultiWorkerMirroredStrategy run of 2 workers; worker:1 is the slow one."""
    write_manifest(
        run_dir,
        strategy="MultiWorkerMirroredStrategy",
        cluster={"worker": ["127.0.0.1:20000", "127.0.0.1:20001"]},
        tensorflow_version="2.21.0",
    )
    write_steps(run_dir, "worker:0", fast_ms, steps)
    write_steps(run_dir, "worker:1", slow_ms, steps)
    return run_dir


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """A logdir with a straggler run ``slow``, a clean run ``sweep/even`` and a non-run directory."""
    root = tmp_path / "logs"
    make_run(root / "slow")
    make_run(root / "sweep" / "even", slow_ms=20.0)
    (root / "not_a_run" / "plugins" / "scalars").mkdir(parents=True)
    return root
