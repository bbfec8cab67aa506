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


def add_system(run, task: str, count: int = 30) -> None:
    """One host sampler's records on ``run`` (a ``RunBuilder``): 10 a second, 4 MB/s of traffic."""
    from tests.analysis.conftest import MS, START_NS

    for i in range(count):
        moved = int(2e5 * i)
        run.records.append(("system", dict(host=f"host-{task.replace(':', '-')}", task=task, time_ns=START_NS + i * 100 * MS,
                                           cpu_pct=40.0 + 10 * (i % 4), mem_used_frac=0.35, net_sent_bytes=moved,
                                           net_recv_bytes=moved, disk_read_bytes=0, disk_write_bytes=0)))


def make_full_run(run_dir: Path, worker_names: tuple[str, str] = ("worker:0", "worker:1")) -> Path:
    """A ParameterServerStrategy run with every signal (steps, probes, GPU and host samples,
    shards, placement, faults); the second worker straggles (60 ms steps against 20 ms)."""
    from tests.analysis.conftest import RunBuilder

    fast, slow = worker_names
    run = RunBuilder(run_dir)
    run.steps(fast, step_ms=20, input_ms=2).steps(slow, step_ms=60, input_ms=2)
    for worker in worker_names:
        run.rpc(worker, "ps:0", 0.3).rpc(worker, "ps:1", 0.5)
        run.shard(worker, 3200)
        add_system(run, worker)
    run.rpc("chief:0", fast, 0.2).rpc("chief:0", slow, 0.2)
    run.gpu("host-a", 0, 45.0).gpu("host-a", 1, 70.0)
    run.placement("dense/kernel", "ps:0", 8 << 20).placement("dense/bias", "ps:0", 4 << 10)
    run.placement("embedding/table", "ps:1", 2 << 20)
    run.fault(slow, "failure", 500).fault(slow, "restart", 1500)
    return run.write()
