"""Small real runs for the plugin tests (``tests/runs.py`` writes them; imported by the tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.report.live import add_live_findings
from tests.runs import START_NS, RunBuilder

UNHEALTHY = "Graph execution error:\n\nCollective ops is aborted by: The following tasks are unhealthy:\n/job:worker/task:1"


def write_steps(run_dir: Path, task: str, step_ms: float, steps: int = 40, first_step: int = 0,
                start_ns: int = START_NS) -> int:
    """Appends ``steps`` back-to-back steps of about ``step_ms`` each for ``task`` to the run
    in ``run_dir``; returns the end time of the last."""
    run = RunBuilder(run_dir).steps(task, count=steps, step_ms=step_ms, input_ms=0.5, idle_ms=0.0,
                                    first_step=first_step, start_ns=start_ns, jitter_ms=0.05)
    run.grow()
    return run.step_end_ns


def make_run(run_dir: Path, slow_ms: float = 60.0, fast_ms: float = 20.0, steps: int = 40) -> Path:
    """A MultiWorkerMirroredStrategy run of 2 workers; worker:1 is the slow one."""
    run = RunBuilder(run_dir, strategy="MultiWorkerMirroredStrategy", workers=2, ps=0, chief=False)
    run.steps("worker:0", count=steps, step_ms=fast_ms, input_ms=0.5, idle_ms=0.0, jitter_ms=0.05)
    run.steps("worker:1", count=steps, step_ms=slow_ms, input_ms=0.5, idle_ms=0.0, jitter_ms=0.05)
    return run.write(by_task=True)


@pytest.fixture
def logdir(tmp_path: Path) -> Path:
    """A logdir with a straggler run ``slow``, a clean run ``sweep/even`` and a non-run directory."""
    root = tmp_path / "logs"
    make_run(root / "slow")
    make_run(root / "sweep" / "even", slow_ms=20.0)
    (root / "not_a_run" / "plugins" / "scalars").mkdir(parents=True)
    return root


def make_full_run(run_dir: Path, worker_names: tuple[str, str] = ("worker:0", "worker:1")) -> Path:
    """A ParameterServerStrategy run with every signal (steps, probes, GPU and host samples,
    shards, placement, faults, findings announced during the run); the second worker straggles (60 ms steps against 20 ms)."""
    fast, slow = worker_names
    run = RunBuilder(run_dir)
    run.steps(fast, step_ms=20, input_ms=2).steps(slow, step_ms=60, input_ms=2)
    for worker in worker_names:
        run.rpc(worker, "ps:0", 0.3).rpc(worker, "ps:1", 0.5)
        run.shard(worker, 3200)
        run.system(f"host-{worker.replace(':', '-')}", worker, cpu_pct=45.0, count=30, net_bytes_per_s=2e6)
    run.rpc("chief:0", fast, 0.2).rpc("chief:0", slow, 0.2)
    run.gpu("host-a", 0, 45.0).gpu("host-a", 1, 70.0)
    run.placement("dense/kernel", "ps:0", 8 << 20).placement("dense/bias", "ps:0", 4 << 10)
    run.placement("embedding/table", "ps:1", 2 << 20)
    run.fault(slow, "failure", 500).fault(slow, "restart", 1500)
    add_live_findings(run, slow)
    return run.write()


def failed_run(path) -> RunBuilder:
    """worker:1 stops at 2 s without a word, worker:0 ends at 3 s on its error naming worker:1;
    the coordinator saw worker:1 fail and retried once."""
    run = RunBuilder(path, strategy="MultiWorkerMirroredStrategy", workers=2, ps=0, chief=False)
    for worker in ("worker:0", "worker:1"):
        run.steps(worker, count=90, step_ms=20)
        run.heartbeats(worker, until_ms=2_000, every_ms=500, subjects=(worker,))
    run.fault("worker:1", "failure", 2_500).fault("worker:1", "retry", 2_700)
    run.exit("worker:0", 3_000, message=UNHEALTHY, blamed=("worker:1",))
    return run
