"""Shared test helpers: small real runs written through the real store writer."""

from __future__ import annotations

import multiprocessing
import os
import traceback
from pathlib import Path

import pytest

from tests.runs import MS, START_NS, RunBuilder

pytest_plugins = ["tests.turns"]

BASE_STEP_MS = 20.0
IDLE_MS = 1.0


def write_synthetic_run(
    path: str | os.PathLike,
    workers: int = 2,
    steps: int = 100,
    slow_worker: int | None = None,
    input_wait_ms: float = 0.0,
    *,
    slow_ms: float = 40.0,
    step_ms: float = BASE_STEP_MS,
    ps: int = 2,
    strategy: str = "ParameterServerStrategy",
    worker_names: list[str] | None = None,
    manifest: bool = True,
) -> Path:
    """Writes a run of ``workers`` workers x ``steps`` steps, a file per worker.

    Every worker steps ``step_ms`` (plus ``slow_ms`` for ``slow_worker``), of which
    ``input_wait_ms`` is spent waiting for input, with ``IDLE_MS`` between steps; frames
    of 25 records, like a real writer's. ``worker_names`` overrides the task names (to
    test escaping). Returns the run path.
    """
    names = worker_names or [f"worker:{index}" for index in range(workers)]
    run = RunBuilder(path, strategy=strategy, workers=len(names), ps=ps)
    for index, task in enumerate(names):
        run.steps(task, count=steps, step_ms=step_ms + (slow_ms if index == slow_worker else 0.0),
                  input_ms=input_wait_ms, idle_ms=IDLE_MS, first_step=1, start_ns=START_NS + index * MS)
    return run.write(manifest=manifest, by_task=True, frame_records=25)


@pytest.fixture
def synthetic_run(tmp_path):
    """A factory: ``synthetic_run(name, **kwargs)`` writes ``tmp_path/name`` and returns it."""

    def make(name: str = "run", **kwargs) -> Path:
        return write_synthetic_run(tmp_path / name, **kwargs)

    return make


@pytest.fixture(autouse=True)
def private_fold_cache(tmp_path_factory, monkeypatch):
    """Each test its own fold cache (``tfdiag.analysis.fold_cache``), never the user's."""
    monkeypatch.setenv("TFDIAG_CACHE_DIR", str(tmp_path_factory.mktemp("fold-cache")))


def in_child_process(function, *args, timeout_s: float = 60.0):
    """``function(*args)`` run in a fresh process, so a segfault or a hang fails the test
    instead of killing or stalling pytest. ``function`` must be a module-level function
    and its result picklable; an exception in the child fails the test with its traceback.
    """
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_call_and_send, args=(sender, function, args))
    process.start()
    sender.close()
    try:
        if not receiver.poll(timeout_s):
            pytest.fail(f"{function.__name__} did not finish within {timeout_s} s (a hang)")
        ok, value = receiver.recv()
    except EOFError:
        process.join()
        pytest.fail(f"{function.__name__} killed its process (exit code {process.exitcode}: a crash)")
    finally:
        if process.is_alive():
            process.kill()
        process.join()
    if not ok:
        pytest.fail(f"{function.__name__} raised in the child process:\n{value}")
    return value


def _call_and_send(sender, function, args) -> None:
    try:
        sender.send((True, function(*args)))
    except BaseException:  # noqa: BLE001 - everything goes back to the test
        sender.send((False, traceback.format_exc()))
