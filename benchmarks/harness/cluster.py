"""A ``ps_ctl`` cluster whose coordinator is the benchmark's own process, and the CPU of its tasks."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import psutil

from tfdiag.sample_jobs.jobs import JobConfig
from tfdiag.sample_jobs.launcher import LocalCluster


def cpu_s(pids) -> float:
    """CPU seconds so far of the processes ``pids`` (gone ones count nothing)."""
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


@contextlib.contextmanager
def ps_ctl_servers(logdir: str):
    """The servers of a ps_ctl cluster (2 ps, 2 workers) with this process as its chief:
    yields ``(tf, config, strategy, cluster)``; the servers stop on exit."""
    config = JobConfig("ps_ctl", logdir, ps=2, workers=2)
    cluster = LocalCluster(config)
    try:
        cluster.start(job_tasks=False)
        os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster.cluster, "task": {"type": "chief", "index": 0}})
        import tensorflow as tf

        from tfdiag.sample_jobs import ps_ctl
        from tfdiag.sample_jobs.task import wait_for_cluster

        _, strategy = ps_ctl.make_strategy(tf, config)
        wait_for_cluster(cluster.cluster, "chief:0")
        yield tf, config, strategy, cluster
    finally:
        cluster.stop()


def ps_ctl_training(tf, config, strategy, coordinator, steps: int):
    """``ps_ctl``'s model under ``strategy``, its train function of ``steps`` steps a closure,
    and a per-worker iterator of its input made by ``coordinator``: ``(model, train, iterator)``."""
    from tfdiag.sample_jobs import ps_ctl

    with strategy.scope():
        model = ps_ctl.MLP(tf, strategy, config.hidden)
    train = ps_ctl.make_train_steps(tf, strategy, model, ps_ctl.slow_workers(config, 0), steps)
    dataset_fn = ps_ctl.make_dataset_fn(tf, config)
    iterator = iter(coordinator.create_per_worker_dataset(tf.function(lambda: dataset_fn())))
    return model, train, iterator


def task_pids(cluster) -> list[int]:
    """The process ids of a started cluster's tasks."""
    return [task.process.pid for task in cluster.tasks.values()]


def load_line(load_before: float) -> str:
    """The load average (1 min) at a benchmark's start and now, on this host's cores: how busy the figures' host was."""
    return (f"load average (1 min) {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
            f"on {os.cpu_count()} cores")


def training_started(logdir: Path, timeout_s: float = 180.0) -> bool:
    """Waits until a task file under ``logdir`` holds records (the collectors are writing);
    False when none did within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.stat().st_size > 0 for p in (Path(logdir) / "plugins" / "tfdiag").glob("*.tfdiag")):
            return True
        time.sleep(0.2)
    return False
