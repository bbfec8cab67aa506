"""Turns on the machine for tests run by several pytest-xdist workers at once.

Most tests share the machine; a test marked ``alone`` measures time on it (a latency, a
budget, a slowdown it plants and must see) and runs with no other test beside it. Every
test takes a lock on one file before it runs: shared for the others, exclusive for an
``alone`` test. A turnstile (a second lock, held only while the first is being taken)
keeps an ``alone`` test that waits from being overtaken by a stream of shared ones.

The lock files lie in the folder above the workers' temporary folders, which the whole
run shares and no other run uses. Without xdist (``pytest`` alone) nothing is locked.
"""

from __future__ import annotations

import fcntl
from contextlib import contextmanager
from pathlib import Path

import pytest


def _lock_folder(config) -> Path | None:
    """The run's shared temporary folder, in an xdist worker; ``None`` otherwise."""
    if not hasattr(config, "workerinput") or not config.option.basetemp:
        return None
    return Path(config.option.basetemp).parent


@contextmanager
def _flock(path: Path, mode: int):
    with open(path, "a") as file:
        fcntl.flock(file, mode)
        try:
            yield
        finally:
            fcntl.flock(file, fcntl.LOCK_UN)


@contextmanager
def machine_turn(folder: Path, alone: bool):
    """Holds the machine, shared or (``alone``) exclusive, for the body's duration."""
    machine = open(folder / "tfdiag-machine.lock", "a")
    try:
        with _flock(folder / "tfdiag-turnstile.lock", fcntl.LOCK_EX):
            fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        yield
    finally:
        fcntl.flock(machine, fcntl.LOCK_UN)
        machine.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    folder = _lock_folder(item.config)
    if folder is None:
        yield
        return
    with machine_turn(folder, alone=item.get_closest_marker("alone") is not None):
        yield
