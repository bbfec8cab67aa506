"""Who am I in the cluster: the task name of this process, and the run manifest.

The task name (``job:index``, e.g. ``worker:0``) comes, in this order, from the cluster
resolver of a ``tf.distribute`` strategy, from the ``TF_CONFIG`` environment variable, or
from a default (``worker:0`` for single-process training, ``chief:0`` for a
``ClusterCoordinator``). Nothing here imports TensorFlow unless a strategy is given
(and then TensorFlow is already loaded by the caller).
"""

from __future__ import annotations

import json
import logging
import os
import sys

from tfdiag import store
from tfdiag.collectors.tf_internals import strategy_resolver
from tfdiag.events import parse_task, task_name

logger = logging.getLogger("tfdiag")

# Jobs whose task 0 writes the manifest; with none of them in the cluster, worker:0 does
# (MultiWorkerMirroredStrategy without a chief makes worker 0 the chief).
CHIEF_JOBS = ("chief", "coordinator", "master")


def tf_config(environ=None) -> dict:
    """``TF_CONFIG`` parsed as a dict; ``{}`` when unset or unreadable (logged)."""
    raw = (os.environ if environ is None else environ).get("TF_CONFIG", "")
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except ValueError as error:
        logger.warning("tfdiag: TF_CONFIG is not JSON (%s); assuming a single task.", error)
        return {}
    return value if isinstance(value, dict) else {}


def resolve_task(strategy=None, *, default: str = "worker:0", environ=None) -> str:
    """The task name of this process.

    Example:
        >>> resolve_task(environ={"TF_CONFIG": '{"task": {"type": "ps", "index": 1}}'})
        'ps:1'
        >>> resolve_task(environ={})
        'worker:0'
    """
    resolver = strategy_resolver(strategy) if strategy is not None else None
    if resolver is not None:
        task_type = getattr(resolver, "task_type", None)
        task_id = getattr(resolver, "task_id", None)
        if task_type:
            return task_name(str(task_type), int(task_id or 0))
    task = tf_config(environ).get("task") or {}
    if task.get("type"):
        return task_name(str(task["type"]), int(task.get("index", 0)))
    return default


def resolve_cluster(strategy=None, *, environ=None) -> dict:
    """The cluster spec as ``{job: [address, ...]}``; ``{}`` for a single process."""
    resolver = strategy_resolver(strategy) if strategy is not None else None
    if resolver is not None:
        try:
            spec = resolver.cluster_spec()
            cluster = spec.as_dict() if spec is not None else {}
            if cluster:
                return {job: list(tasks.values()) if isinstance(tasks, dict) else list(tasks) for job, tasks in cluster.items()}
        except Exception as error:  # noqa: BLE001 - identity must never break training
            logger.info("tfdiag: cannot read the cluster spec from the strategy (%s).", error)
    cluster = tf_config(environ).get("cluster") or {}
    return {str(job): list(tasks) for job, tasks in cluster.items()}


def writes_manifest(task: str, cluster: dict) -> bool:
    """Whether ``task`` is the one task of ``cluster`` that writes the manifest."""
    if not cluster:
        return True
    job, index = parse_task(task)
    if job in CHIEF_JOBS:
        return index == 0
    if any(cluster.get(name) for name in CHIEF_JOBS):
        return False
    return job == "worker" and index == 0


def write_run_manifest(logdir, task: str, strategy=None, **extra) -> bool:
    """Writes the run manifest when ``task`` is the chief, coordinator or only task.

    Returns whether a manifest was written. Never raises: a failure is logged.
    """
    try:
        cluster = resolve_cluster(strategy)
        if not writes_manifest(task, cluster):
            return False
        tf = sys.modules.get("tensorflow")
        version = getattr(tf, "__version__", "") if tf is not None else ""
        strategy_name = type(strategy).__name__ if strategy is not None else "default"
        store.write_manifest(logdir, strategy=strategy_name, cluster=cluster, tensorflow_version=version, task=task, **extra)
        return True
    except Exception as error:  # noqa: BLE001 - a collector never breaks training
        logger.warning("tfdiag: cannot write the run manifest in %s (%s).", logdir, error)
        return False
