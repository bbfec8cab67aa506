"""Shared test helpers: small real runs written through the real store writer."""

from __future__ import annotations

import multiprocessing
import os
import traceback
from pathlib import Path

import pytest

from tfdiag.store import TaskWriter, write_manifest

BASE_STEP_MS = 20.0
IDLE_MS = 1.0
EXAMPLES_PER_STEP = 32
START_NS = 1_700_000_000_000_000_000


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
    """Writes a run of ``workers`` workers x ``steps`` steps with the real ``TaskWriter``.

    Every worker steps ``step_ms`` (plus ``slow_ms`` for ``slow_worker``), of which
    ``input_wait_ms`` is spent waiting for input, with ``IDLE_MS`` between steps.
    ``worker_names`` overrides the task names (to test escaping). Returns the run path.
    """
    run = Path(path)
    names = worker_names or [f"worker:{index}" for index in range(workers)]
    if manifest:
        write_manifest(
            run,
            strategy=strategy,
            cluster={
                "chief": ["127.0.0.1:2220"],
                "worker": [f"127.0.0.1:{2230 + i}" for i in range(len(names))],
                "ps": [f"127.0.0.1:{2240 + i}" for i in range(ps)],
            },
            tensorflow_version="2.21.0",
            task="chief:0",
        )
    for index, task in enumerate(names):
        duration_ns = int((step_ms + (slow_ms if index == slow_worker else 0.0)) * 1e6)
        wait_ns = int(input_wait_ms * 1e6)
        writer = TaskWriter(run, task, flush_interval_s=3600)
        begin = START_NS + index * 1_000_000
        for step in range(1, steps + 1):
            writer.append(
                "step",
                task=task,
                step=step,
                begin_ns=begin,
                end_ns=begin + duration_ns,
                input_wait_ns=wait_ns,
                examples=EXAMPLES_PER_STEP,
                clock_task=task,
            )
            begin += duration_ns + int(IDLE_MS * 1e6)
            if step % 25 == 0:  # several frames per file, like a real writer
                writer.flush()
        writer.close()
    return run


@pytest.fixture
def synthetic_run(tmp_path):
    """A factory: ``synthetic_run(name, **kwargs)`` writes ``tmp_path/name`` and returns it."""

    def make(name: str = "run", **kwargs) -> Path:
        return write_synthetic_run(tmp_path / name, **kwargs)

    return make


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
