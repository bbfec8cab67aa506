"""Checking that a sample run leaves no process behind."""

from __future__ import annotations

import psutil

from tfdiag.sample_jobs.zygote import shared_pids


def child_pids() -> set[int]:
    """The processes this test process has now (e.g. multiprocessing's resource tracker)."""
    return {child.pid for child in psutil.Process().children(recursive=True)}


def assert_no_new_children(before: set[int], timeout_s: float = 5.0) -> None:
    """Every child started since ``before = child_pids()`` has exited within ``timeout_s``,
    but the zygotes kept for the next cluster (whose forked tasks are checked like any child)."""
    kept = before | shared_pids()
    children = [child for child in psutil.Process().children(recursive=True) if child.pid not in kept]
    _, alive = psutil.wait_procs(children, timeout=timeout_s)
    assert not alive, f"orphan processes: {alive}"
